"""What the sandbox costs per job: the same jobs with and without it, interleaved, median of N.

    python bench/sandbox_overhead.py                      # cpu: validate, compile sm_90, verify
    python bench/sandbox_overhead.py --device cuda MODULE # cuda: validate, compile, verify (timed)

"without" is KERNELOPT_SANDBOX=none (the launcher and the child, no bubblewrap, no uid
switch, no cgroup); "with" is the default. Each repetition runs the three jobs once per mode,
alternating which mode goes first, so a machine whose load drifts charges both alike. Prints
one JSON object: per job and mode the wall seconds of every repetition and their median, and
the ratio of the summed medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from runner.execute import Executor  # noqa: E402


def one_pass(device: str, target: str, module: str) -> dict[str, float]:
    """validate, compile, verify of `module` in one executor (one run's Triton cache), wall seconds."""
    with tempfile.TemporaryDirectory(prefix="kernelopt-loop-overhead-") as tmp:
        ex = Executor(device, target, cache_dir=Path(tmp) / "triton-cache")
        seconds: dict[str, float] = {}
        for job, call in (
            ("validate", lambda: ex.validate(module)),
            ("compile", lambda: ex.compile(module)),
            ("verify", lambda: ex.verify(module, seeds=(0,))),
        ):
            started = time.perf_counter()
            outcome = call()
            seconds[job] = time.perf_counter() - started
            if not outcome.ok:
                raise SystemExit(f"{job} failed: {outcome.error}")
        return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("module", nargs="?", default=str(ROOT / "tests/modules/correct_add.py"))
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda", "npu"))
    parser.add_argument("--target", default="sm_90")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    module = os.path.abspath(args.module)
    runs: dict[str, dict[str, list[float]]] = {"with": {}, "without": {}}
    for i in range(args.repeat):
        for mode in ("with", "without") if i % 2 == 0 else ("without", "with"):
            os.environ["KERNELOPT_SANDBOX"] = "bwrap" if mode == "with" else "none"
            for job, s in one_pass(args.device, args.target, module).items():
                runs[mode].setdefault(job, []).append(round(s, 3))
    medians = {mode: {job: statistics.median(v) for job, v in jobs.items()} for mode, jobs in runs.items()}
    total = {mode: sum(m.values()) for mode, m in medians.items()}
    print(json.dumps({"device": args.device, "module": module, "repeat": args.repeat, "runs": runs,
                      "medians": medians, "total_median_s": total,
                      "ratio": round(total["with"] / total["without"], 3)}, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
