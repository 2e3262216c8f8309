"""Median CPU seconds per diagnosis tier per kernel (issue: 'cost, measured').

    python bench/tier_costs.py [FILES...]      (default: tests/kernels/*.py)

Tier 0 and tier 1 run in this process (tier 1 on a profile with no device, as on cpu).
Tiers 2 and 3 go through the sandboxed child's compile job for sm_90, as the loop does:
tier 2 = one compile without pass dumps + per-line attribution; tier 3 = one compile with pass
dumps + analysis with counterfactual recompiles (each a further compile job). Every compile
job includes the child's start (python, torch, triton imports); the time the child itself
spent capturing and compiling is reported apart.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from diagnosis.engine.ir import CompileResult  # noqa: E402
from diagnosis.engine.profile import ProfileCase, ProfileResult  # noqa: E402
from diagnosis.engine.tier0 import run_tier0  # noqa: E402
from diagnosis.engine.tier1 import run_tier1  # noqa: E402
from diagnosis.engine.tier2 import run_tier2  # noqa: E402
from diagnosis.engine.tier3 import run_tier3  # noqa: E402
from runner.execute import Executor  # noqa: E402


def main(files: list[Path]) -> None:
    ex = Executor("cpu", "sm_90")
    costs: dict[str, list[float]] = {"tier 0": [], "tier 1": [], "tier 2": [], "tier 3": [], "tier 2, compile inside the child": []}
    for path in files:
        src = path.read_text()
        run_tier0(src)
        t = time.perf_counter()
        run_tier0(src)
        costs["tier 0"].append(time.perf_counter() - t)
        t = time.perf_counter()
        run_tier1(ProfileResult(None, (ProfileCase(0, None, None, 1 << 28, 0),)))
        costs["tier 1"].append(time.perf_counter() - t)

        t = time.perf_counter()
        out = ex.compile(str(path), "sm_90", {"pass_dumps": False})
        if not out.ok:
            print(f"{path.name}: compile failed: {out.error}")
            continue
        run_tier2(out.result, src)
        costs["tier 2"].append(time.perf_counter() - t)
        costs["tier 2, compile inside the child"].append(out.result.total_s)

        def recompile(overrides: dict, path: Path = path) -> CompileResult:
            return ex.compile(str(path), "sm_90", {"overrides": overrides}).result

        t = time.perf_counter()
        dumped = ex.compile(str(path), "sm_90", {"pass_dumps": True})
        run_tier3(dumped.result, src, recompile=recompile)
        costs["tier 3"].append(time.perf_counter() - t)
    print(f"{len(files)} kernels, cpu, target sm_90; median (max) seconds per kernel:")
    for name, xs in costs.items():
        if xs:
            print(f"  {name:34s} {statistics.median(xs):8.4f}  ({max(xs):.4f})")


if __name__ == "__main__":
    main([Path(a) for a in sys.argv[1:]] or sorted((ROOT / "tests" / "kernels").glob("*.py")))
