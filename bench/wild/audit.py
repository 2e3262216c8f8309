"""Run tier 0 and every rules family on other projects' Triton code, and check what they write.

The corpus of `build.py` turns 66 kernels into upload modules and measures them; this audit
reads much more code, as its authors wrote it, and asks only what needs no device: does any
rule crash or hang on it, and is every rewrite one a reviewer would accept. Every `.py` file
with a Triton kernel in sixteen pinned wheels (2450 files, 1043 of them outside the three
libraries the corpus extracts from) gets tier 0 (`strict=True`: a rule that raises is a failure) and
each registered family through `apply_family`, with no findings and no cases, each run under
a 20 s alarm. Reading the diffs it writes found a single-pass rewrite that divided by a
temperature three times (`ea07f0c`) and LAUNCH_CONFIG offering blocks smaller than a tile
that must hold its whole extent (`c6bec08`).

    python bench/wild/audit.py fetch                       # the pinned wheels, about 520 MB
    python bench/wild/audit.py run --out audit.jsonl       # or --dir DIR for any folder of .py files
    python bench/wild/audit.py report audit.jsonl [--against older.jsonl]

`report` counts the runs that did not end cleanly, the rewrites by family, the rewrites that add
something a reviewer would not accept (`tests/engine/rules_cases/review.py`: ruff findings,
repeated statements, copies, constants) and, with `--against`, every rewrite that changed, came
or went. Without cases the rules that need sizes refuse more than they would on an upload: this
measures robustness and the shape of the diffs, not how often a family applies.
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
import re
import signal
import sys
import tempfile
import time
import traceback
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.wild.wheels import PINS, Pin, fetch  # noqa: E402

ALARM_S = 20
KERNEL = re.compile(r"^\s*@(?:\w+\.)*jit\b|triton\.jit\(", re.M)  # with "triton" in the file (`_kernels`)
# wheels built for CPython 3.11 on Linux x86-64, fetched the same from any interpreter
PLATFORM = ["--python-version", "3.11", "--implementation", "cp", "--platform", "manylinux_2_34_x86_64",
            "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_24_x86_64",
            "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64"]  # fmt: skip
AUDIT_PINS: tuple[Pin, ...] = (
    *PINS,
    Pin("sglang", "sglang", "0.5.23", "sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl",
        "00b3cd5b265ac76c64185fbb6b95424f324ddd9f428d0306b77bc9db9d859937", "sglang"),
    Pin("vllm", "vllm", "0.34.0", "vllm-0.34.0-cp38-abi3-manylinux_2_28_x86_64.whl",
        "79ca4b3cd74aec08c4bf476bdf0cb15735b605ae5368526a2faae1e30f044ca2", "vllm"),
    Pin("lmdeploy", "lmdeploy", "0.18.0", "lmdeploy-0.18.0-cp311-cp311-manylinux_2_28_x86_64.whl",
        "e6790a25dcdb0345c160567fdf2ac604fec319389523a8b806834c9d92c8ffe1", "lmdeploy"),
    Pin("unsloth", "unsloth", "2026.10.9", "unsloth-2026.10.9-py3-none-any.whl",
        "feb40b99bc4f8c543a36cbd0fe6e1410d6e4ac16bd4d0c731f607adce3d63bb0", "unsloth"),
    Pin("torchao", "torchao", "0.18.0", "torchao-0.18.0-cp310-abi3-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl",
        "6540b148e40ba81cbd4de86392225a076a1591146e9cebb099b3b234ba9feebe", "torchao"),
    Pin("xformers", "xformers", "0.0.35", "xformers-0.0.35-py39-none-manylinux_2_28_x86_64.whl",
        "ccc73c7db9890224ab05f5fb60e2034f9e6c8672a10be0cf00e95cbbae3eda7c", "xformers"),
    Pin("bitsandbytes", "bitsandbytes", "0.50.2", "bitsandbytes-0.50.2-py3-none-manylinux_2_24_x86_64.whl",
        "55348a9a4a21bfd99cf8c7b32fe67b4030ae5c2a05738e03c1747f65fa6ec283", "bitsandbytes"),
    Pin("axolotl", "axolotl", "0.19.0", "axolotl-0.19.0-py3-none-any.whl",
        "f28eb3ad3709975eec4adfe13307dd980c7e7917cc43cb03f2c6f26c007135cc", "axolotl"),
    Pin("unsloth_zoo", "unsloth-zoo", "2026.10.9", "unsloth_zoo-2026.10.9-py3-none-any.whl",
        "f68e0576b0e9bd2ef85f19bf665132c576b52ee4df923fbb16c81538a3cde676", "unsloth_zoo"),
    Pin("flashinfer", "flashinfer-python", "0.7.4", "flashinfer_python-0.7.4-py3-none-any.whl",
        "a051a62e09a2738e8b0de47a1944fd2f0f3eff01b728b662141ea660cb09dd32", "flashinfer"),
    Pin("sageattention", "sageattention", "1.0.6", "sageattention-1.0.6-py3-none-any.whl",
        "fafc66569bed62a16839e820c2612141b5a20accf55b876d941bab9c0ac5d888", "sageattention"),
    Pin("auto_round", "auto-round", "0.16.1", "auto_round-0.16.1-py3-none-any.whl",
        "4dcdef6a64247ee9585a47052ec2adfaa259a41b3ccbe32435ff8d4a9388998e", "auto_round"),
    Pin("triton_kernels", "triton-kernels", "0.1.0", "triton_kernels-0.1.0-py3-none-any.whl",
        "ab8f697e1504c7b02b130f22054eb32cb36d5607730ddaf94be92dd7d38ebddd", "triton_kernels"),
)  # fmt: skip


class _Alarm(Exception):
    pass


def _on_alarm(*_: object) -> None:
    raise _Alarm


def _kernels(text: str) -> bool:
    """Whether a module may define a Triton kernel (`@triton.jit`, `@jit`, `@tr.jit`, `triton.jit(f)`;
    not `@torch.jit.script` or numba's `@jit` in a file that never names triton)."""
    return "triton" in text and KERNEL.search(text) is not None


def sources_of_wheels(pins: tuple[Pin, ...] = AUDIT_PINS) -> Iterator[tuple[str, str]]:
    """(label, text) of every module of the pinned wheels that defines a Triton kernel."""
    for path, pin in zip(fetch(pins, extra=PLATFORM), pins, strict=True):
        with zipfile.ZipFile(path) as zf:  # every package of the wheel (unsloth's `studio` too)
            for member in sorted(m for m in zf.namelist() if m.endswith(".py")):
                text = zf.read(member).decode("utf-8", errors="replace")
                if _kernels(text):
                    yield f"{pin.lib}:{member}", text


def sources_of_dir(folder: Path) -> Iterator[tuple[str, str]]:
    for path in sorted(folder.rglob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if _kernels(text):
            yield str(path.relative_to(folder)), text


def audit_one(item: tuple[str, str]) -> dict[str, Any]:
    """Tier 0 and every family on one module, each run bounded by ALARM_S."""
    from diagnosis.engine.proposers.rules import RuleInput, apply_family, registered_families
    from diagnosis.engine.tier0 import run_tier0

    label, text = item
    signal.signal(signal.SIGALRM, _on_alarm)
    out: dict[str, Any] = {"file": label, "runs": [], "rewrites": []}

    def run(what: str, fn: Any) -> Any:
        started, status, result = time.perf_counter(), "ok", None
        signal.alarm(ALARM_S)
        try:
            result = fn()
        except _Alarm:
            status = "timeout"
        except Exception as exc:  # noqa: BLE001 - a rule that raises is what the audit reports
            where = traceback.extract_tb(exc.__traceback__)[-1]
            status = f"crash: {type(exc).__name__}: {str(exc)[:200]} at {where.filename}:{where.lineno}"
        finally:
            signal.alarm(0)
        out["runs"].append({"what": what, "status": status, "s": round(time.perf_counter() - started, 2)})
        return result

    run("tier0", lambda: run_tier0(text, strict=True))
    for family in registered_families():
        rw = run(family.value, lambda family=family: apply_family(family, text, RuleInput()))
        if rw is not None:
            out["rewrites"].append({"family": family.value, "transform": rw.transform, "source": rw.source})
    out["source"] = text
    return out


def run(items: list[tuple[str, str]], out: Path, jobs: int) -> None:
    with multiprocessing.Pool(jobs, maxtasksperchild=20) as pool, out.open("w") as fh:
        for i, res in enumerate(pool.imap_unordered(audit_one, items), 1):
            fh.write(json.dumps(res) + "\n")
            bad = [r["status"] for r in res["runs"] if r["status"] != "ok"]
            if bad:
                print(f"{res['file']}: {bad}", flush=True)
            if i % 50 == 0:
                print(f"{i} of {len(items)} files", flush=True)


def _load(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def report(path: Path, against: Path | None = None) -> dict[str, Any]:
    from tests.engine.rules_cases import review

    rows = _load(path)
    runs = [r for row in rows for r in row["runs"]]
    failed = [
        (row["file"], r["what"], r["status"]) for row in rows for r in row["runs"] if r["status"] != "ok"
    ]
    pairs = [
        (f"{row['file']} :: {rw['family']}", row["source"], rw["source"])
        for row in rows
        for rw in row["rewrites"]
    ]
    with tempfile.TemporaryDirectory() as tmp:
        problems = review.added(pairs, Path(tmp))
    result: dict[str, Any] = {
        "files": len(rows),
        "runs": len(runs),
        "failed": failed,
        "rewrites": dict(collections.Counter(rw["family"] for row in rows for rw in row["rewrites"])),
        "review_problems": problems,
    }
    if against is not None:
        old = {
            f"{row['file']} :: {rw['family']}": rw["source"]
            for row in _load(against)
            for rw in row["rewrites"]
        }
        new = {key: after for key, _, after in pairs}
        result["changed"] = sorted(k for k in old.keys() & new.keys() if old[k] != new[k])
        result["new"] = sorted(new.keys() - old.keys())
        result["gone"] = sorted(old.keys() - new.keys())
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("fetch", help="download the pinned wheels")
    p_run = sub.add_parser("run", help="audit every module with a Triton kernel")
    p_run.add_argument("--out", type=Path, required=True)
    p_run.add_argument("--dir", type=Path, help="audit this folder's .py files instead of the wheels")
    p_run.add_argument("--only", default="", help="a regex the file label must match")
    p_run.add_argument("--jobs", type=int, default=2)
    p_report = sub.add_parser("report", help="summarize an audit")
    p_report.add_argument("audit", type=Path)
    p_report.add_argument("--against", type=Path, help="an earlier audit: list the rewrites that changed")
    args = parser.parse_args(argv)
    if args.cmd == "fetch":
        for path in fetch(AUDIT_PINS, extra=PLATFORM):
            print(path)
        return 0
    if args.cmd == "run":
        source = sources_of_dir(args.dir) if args.dir else sources_of_wheels()
        items = [item for item in source if re.search(args.only, item[0])]
        run(items, args.out, args.jobs)
        return 0
    summary = report(args.audit, args.against)
    print(json.dumps(summary, indent=1))
    return 1 if summary["failed"] or summary["review_problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
