"""Fingerprint what the rules proposer writes, so a refactor can show it changed nothing.

For every module of the given directories (default: bench/suite, bench/targeted, bench/demo,
tests/kernels) it records, as the H200 benchmark would propose them:

* every registered family applied alone to the module (`apply_family`, no findings: every kernel);
* every composition of `COMPOSITIONS` and the chains the suite test checks;
* the rules proposer's candidates for the module's own tier-0 findings (source, diff, family,
  rationale, findings addressed);
* with --replay: for each operator of those `bench/run.py` results, the rounds that ran on the
  module as it is here (round 1, and later ones whose parent is still the initial version)
  replayed: the candidates for the findings each recorded on the device (every tier). Rules that
  act only on tier 1-3 evidence (the split loop on T1-FEW-PROGRAMS, a permuted copy read in place
  on tier 3's strided access) are seen there and nowhere else.

    python bench/rules_fingerprint.py --out before.json
    python bench/rules_fingerprint.py --compare before.json     # exit 1 and list what differs
    python bench/rules_fingerprint.py --replay bench/wild/results/*.json --out before.json

The JSON maps "module :: what" to the sha256 of the output (null when nothing applies) and
keeps the texts, so a difference can be read with --show KEY.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from diagnosis.engine import sol  # noqa: E402
from diagnosis.engine.escalation import for_proposer  # noqa: E402
from diagnosis.engine.evidence import Family  # noqa: E402
from diagnosis.engine.proposers.base import CaseShape, ProposalContext  # noqa: E402
from diagnosis.engine.proposers.rules import (  # noqa: E402
    COMPOSITIONS,
    Chain,
    RuleInput,
    RulesProposer,
    apply_chain,
    chain_name,
    registered_families,
)
from diagnosis.engine.serialize import finding_from_json  # noqa: E402
from diagnosis.engine.tier0 import run_tier0  # noqa: E402

DEFAULT_DIRS = ("bench/suite", "bench/targeted", "bench/demo", "tests/kernels")
EXTRA_CHAINS = ((Family.FUSION, Family.FUSION),)
H200 = sol.lookup("NVIDIA H200").spec


def cases_of(path: Path) -> tuple[CaseShape, ...]:
    """The module's timed cases then verify cases, as shapes (meta tensors: nothing allocated)."""
    spec = importlib.util.spec_from_file_location(f"fingerprint_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    import torch

    lists: list[tuple[list, bool]] = []
    with torch.device("meta"):
        if hasattr(module, "get_input_cases"):
            lists += [(c, True) for c in module.get_input_cases()]
        elif hasattr(module, "get_inputs"):
            lists.append((module.get_inputs(), True))
        if hasattr(module, "get_verify_inputs"):
            lists += [(c, False) for c in module.get_verify_inputs()]
    out = []
    for i, (inputs, timed) in enumerate(lists):
        shapes = tuple(tuple(x.shape) if hasattr(x, "shape") else () for x in inputs)
        dtypes = tuple(str(x.dtype).removeprefix("torch.") if hasattr(x, "dtype") else type(x).__name__
                       for x in inputs)  # fmt: skip
        out.append(CaseShape(i, shapes, dtypes, timed))
    return tuple(out)


def shapes_of(path: Path) -> tuple[CaseShape, ...]:
    try:
        return cases_of(path)
    except Exception as exc:  # a module that cannot build its inputs on CPU: rules without shapes
        print(f"{path}: no input shapes ({type(exc).__name__}: {exc})", file=sys.stderr)
        return ()


def candidates(source: str, findings: list, context: ProposalContext, key: str) -> dict[str, str | None]:
    """The rules proposer's candidates, as `key[i]`."""
    out: dict[str, str | None] = {}
    for i, cand in enumerate(RulesProposer(max_candidates=4).propose(source, findings, context)):
        out[f"{key}[{i}]"] = json.dumps(
            [cand.source, cand.diff, str(cand.family), cand.rationale, list(cand.findings_addressed)]
        )
    return out


def fingerprint(path: Path) -> dict[str, str | None]:
    source = path.read_text()
    context = ProposalContext(cases=shapes_of(path), device=H200)
    inp = RuleInput((), context)
    out: dict[str, str | None] = {}
    chains: list[Chain] = [(f,) for f in registered_families()] + [*COMPOSITIONS, *EXTRA_CHAINS]
    for chain in chains:
        out[chain_name(chain)] = apply_chain(chain, source, inp)
    out.update(candidates(source, list(run_tier0(source).findings), context, "proposer"))
    return out


def replayed(results: Path) -> dict[str, str | None]:
    """Every round of every operator in a results JSON that ran on the module as it is here
    (round 1, and each later one whose parent is still the initial version, after rounds without
    a gain): the candidates for that round's recorded findings, ordered as the loop orders them
    (the round's family first, best-scored first), keyed by module, round and results file. The
    earlier rounds' history is not replayed: a later round's candidates are those of its evidence
    alone."""
    data = json.loads(results.read_text())
    folder = data["meta"]["source"]
    out: dict[str, str | None] = {}
    for op in data["operators"]:
        path = ROOT / folder / Path(op["file"]).name
        rounds = [
            r
            for r in op.get("rounds") or []
            if r.get("findings") and (r["index"] == 1 or r.get("parent_sha256") == op.get("initial_sha256"))
        ]
        if not rounds or not path.exists():
            continue
        source = path.read_text()
        if hashlib.sha256(source.encode()).hexdigest() != op.get("initial_sha256"):
            print(f"{path}: not the module {results.name} ran; not replayed", file=sys.stderr)
            continue
        for r in rounds:
            family = (r.get("hypothesis") or {}).get("family")
            family = Family(family) if family in set(Family) else None
            findings = for_proposer([finding_from_json(f) for f in r["findings"]], family)
            context = ProposalContext(
                cases=shapes_of(path),
                device=H200,
                device_kind="cuda",
                round_index=r["index"],
                family=family,
            )
            key = f"{folder}/{path.name} :: round {r['index']} of {results.name}"
            out[f"{key}[0]"] = None  # a round that stops having a candidate shows as a difference
            out.update(candidates(source, findings, context, key))
    return out


def collect(dirs: list[str]) -> dict[str, str | None]:
    texts: dict[str, str | None] = {}
    for d in dirs:
        for path in sorted((ROOT / d).glob("*.py")):
            if path.name.startswith("_"):
                continue
            for what, text in fingerprint(path).items():
                texts[f"{d}/{path.name} :: {what}"] = text
    return texts


def digest(text: str | None) -> str | None:
    return None if text is None else hashlib.sha256(text.encode()).hexdigest()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="*", default=list(DEFAULT_DIRS))
    ap.add_argument("--out", type=Path, help="write the fingerprint here")
    ap.add_argument("--compare", type=Path, help="compare against an earlier fingerprint")
    ap.add_argument("--show", help="with --compare: print both texts of this key")
    ap.add_argument(
        "--replay", type=Path, nargs="+", default=[], help="bench/run.py results JSON: replay its rounds"
    )
    args = ap.parse_args()
    texts = collect(args.dirs)
    for results in args.replay:
        texts.update(replayed(results))
    now = {"digests": {k: digest(v) for k, v in texts.items()}, "texts": texts}
    if args.out:
        args.out.write_text(json.dumps(now, indent=1, sort_keys=True))
    applied = sum(1 for v in texts.values() if v is not None)
    print(f"{len(texts)} outputs over {len({k.split(' :: ')[0] for k in texts})} modules, {applied} applied")
    if not args.compare:
        return 0
    before = json.loads(args.compare.read_text())
    keys = sorted(set(before["digests"]) | set(now["digests"]))
    differ = [k for k in keys if before["digests"].get(k, "absent") != now["digests"].get(k, "absent")]
    if args.show:
        print("--- before\n", before["texts"].get(args.show), "\n--- now\n", texts.get(args.show))
    if differ:
        print(f"{len(differ)} of {len(keys)} outputs differ:")
        for k in differ:
            print("  ", k)
        return 1
    print(f"all {len(keys)} outputs byte-identical")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
