"""Autotune probe: a suite module's LAUNCH_CONFIG rewrite, autotuned and timed outside the harness.

For each timed case: the config the autotuner chose, the autotuner's own median time of every
config, and the forward of the parent and of the rewrite timed with do_bench (three
alternations). The small verify inputs run first, as in the verify job, so a key that cannot
tell them from the timed cases shows up. Compare with the verify job's per-case times and
`autotune_choices` in a bench result to tell the harness's effect from the autotuner's.

    python3 bench/probe_autotune.py 13_ 31_ ...     (on a GPU machine; module name prefixes)

Written to find why autotuned rewrites lost inside the verify job (the launch recorder timed
along with every benchmark launch; fixed in runner/childlib/launches.py).
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from triton.runtime.autotuner import Autotuner  # noqa: E402
from triton.testing import do_bench  # noqa: E402

from diagnosis.engine.evidence import Family  # noqa: E402
from diagnosis.engine.proposers.base import ProposalContext  # noqa: E402
from diagnosis.engine.proposers.rules import RuleInput, apply_family  # noqa: E402
from tests.engine.rules_cases import harness as h  # noqa: E402


def load(path: Path, name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def on_device(inputs: list) -> list:
    return [x.cuda() if torch.is_tensor(x) else x for x in inputs]


def probe(path: Path, out: Path) -> None:
    source = path.read_text()
    rw = apply_family(Family.LAUNCH_CONFIG, source, RuleInput((), ProposalContext(cases=h.cases_of(path))))
    if rw is None:
        print(f"{path.stem}: no LAUNCH_CONFIG rewrite")
        return
    cand_path = out / f"cand_{path.name}"
    cand_path.write_text(rw.source)
    parent, cand = load(path, f"p_{path.stem}"), load(cand_path, f"c_{path.stem}")
    tuners = [v for v in vars(cand).values() if isinstance(v, Autotuner)]
    with torch.device("cuda"):
        torch.manual_seed(0)
        init = parent.get_init_inputs()
        pm = parent.ModelNew(*init).cuda()
        cm = cand.ModelNew(*init).cuda()
        cm.load_state_dict(pm.state_dict())
        torch.manual_seed(0)
        cases = parent.get_input_cases()
        checks = parent.get_verify_inputs() if hasattr(parent, "get_verify_inputs") else []
    with torch.no_grad():
        for inputs in checks:
            inputs = on_device(inputs)
            pm(*inputs)
            cm(*inputs)
        for i, inputs in enumerate(cases):
            inputs = on_device(inputs)
            pm(*inputs)
            cm(*inputs)
            torch.cuda.synchronize()
            shapes = [tuple(x.shape) if torch.is_tensor(x) else x for x in inputs]
            for t in tuners:
                timings = getattr(t, "configs_timings", None) or {}
                print(f"{path.stem} case {i} {shapes}: chose {t.best_config}")
                if timings:
                    print("    autotuner medians (ms):", {str(k): round(v[0], 4) for k, v in timings.items()})
            calls = {"parent": lambda m=pm, x=inputs: m(*x), "rewrite": lambda m=cm, x=inputs: m(*x)}
            times: dict[str, list[float]] = {name: [] for name in calls}
            for _ in range(3):
                for name, fn in calls.items():
                    times[name].append(do_bench(fn, warmup=10, rep=40, return_mode="median"))
            print("    forward (ms):", {k: [round(x, 4) for x in v] for k, v in times.items()})
            del inputs, calls
            torch.cuda.empty_cache()
    for t in tuners:
        print("  key -> config:", {str(k): str(v) for k, v in t.cache.items()})


def main(prefixes: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="probe-autotune-") as tmp:
        for prefix in prefixes:
            for path in sorted((ROOT / "bench" / "suite").glob(f"{prefix}*.py")):
                probe(path, Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
