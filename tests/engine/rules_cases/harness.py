"""Helpers for the rules tests: load case modules, build a ProposalContext, run the
interpreter check (every autotune config) in a subprocess."""

from __future__ import annotations

import ast
import atexit
import functools
import importlib.util
import os
import sys
from pathlib import Path

from diagnosis.engine.evidence import Family, Finding, Severity, Tier, register_code
from diagnosis.engine.proposers.base import CaseShape, ProposalContext
from diagnosis.engine.proposers.rules import RuleInput

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
SUITE = ROOT / "bench" / "suite"
CHECK_SCRIPT = HERE / "interp_check.py"


def code_for(family: Family) -> str:
    """A finding code of `family` for the tests (real runs get theirs from the tiers)."""
    code = f"TEST-RULES-{family.name}"
    register_code(code, Tier.TRIAGE, family, "{kernel}: test finding for " + str(family))
    return code


def source(name: str) -> str:
    return (HERE / name).read_text()


def variant(source: str, *pairs: tuple[str, str]) -> str:
    """`source` with each (old, new) replaced; each old must be there."""
    for old, new in pairs:
        assert old in source, old
        source = source.replace(old, new)
    return source


def parses(text: str) -> bool:
    try:
        ast.parse(text)
    except SyntaxError:
        return False
    return True


def cases_of(path: Path) -> tuple[CaseShape, ...]:
    """The shape cases of a module (timed cases, then verify cases), as the capture job gives them."""
    spec = importlib.util.spec_from_file_location(f"rules_case_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    import torch

    out: list[CaseShape] = []
    with torch.device("meta"):  # shapes only: the big timed cases allocate nothing
        lists = [(c, True) for c in module.get_input_cases()]
        if hasattr(module, "get_verify_inputs"):
            lists += [(c, False) for c in module.get_verify_inputs()]
    for i, (inputs, timed) in enumerate(lists):
        shapes, dtypes = [], []
        for x in inputs:
            if hasattr(x, "shape"):
                shapes.append(tuple(x.shape))
                dtypes.append(str(x.dtype).removeprefix("torch."))
            else:
                shapes.append(())
                dtypes.append(type(x).__name__)
        out.append(CaseShape(i, tuple(shapes), tuple(dtypes), timed))
    return tuple(out)


def fp32_cases(*shapes: tuple[int, ...]) -> tuple[CaseShape, ...]:
    """Timed cases of one float32 input each, in order."""
    return tuple(CaseShape(i, (shape,), ("float32",)) for i, shape in enumerate(shapes))


def rule_input(cases: tuple[CaseShape, ...] = (), kernels: frozenset[str] = frozenset()) -> RuleInput:
    return RuleInput((), ProposalContext(cases=cases), kernels)


def finding(family: Family, kernel: str = "", severity: Severity = Severity.HIGH, line: int = 0) -> Finding:
    return Finding(
        code=code_for(family),
        severity=severity,
        args={"kernel": kernel},
        kernel=kernel,
        lines=(line,) if line else (),
    )


@functools.cache
def _check_pool():
    spec = importlib.util.spec_from_file_location("bench_check_pool", ROOT / "bench" / "check_pool.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@functools.cache
def _interp_pool():
    """The interpreter-check children of this test process, kept from one test to the next."""
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(ROOT))
    pool = _check_pool().Pool([sys.executable, str(CHECK_SCRIPT), "--serve"], env, "INTERP_CHECK ")
    atexit.register(pool.close)
    return pool


def interp_check(paths: list[Path], timeout: float = 900, jobs: int = 1) -> dict[str, dict]:
    """Run the interpreter check on every module (each distinct autotune config, see
    interp_check.py) in up to `jobs` children (kept for the next call), each taking the next
    file when it is done. `timeout` is per file. Keyed by str(path)."""
    files = [str(p) for p in paths]
    raw = _interp_pool().run(files, min(jobs, len(files)), timeout)
    missing = {f: r for f, r in raw.items() if isinstance(r, str)}
    if missing or len(raw) != len(files):
        raise AssertionError(f"no result for {sorted(set(files) - set(raw)) + sorted(missing)}: {missing}")
    return raw


def assert_interp_ok(rewrites: dict[str, str], tmp_path: Path) -> None:
    """Each rewritten module (row id -> source), written under tmp_path, passes the interpreter
    check; a row whose id starts with "mutant" (a deliberately broken rewrite) must fail it."""
    paths = []
    for name, text in rewrites.items():
        path = tmp_path / f"{name.replace('-', '_')}.py"
        path.write_text(text)
        paths.append(path)
    results = interp_check(paths)
    for path in paths:
        ok = results[str(path)]["ok"]
        assert ok is not path.stem.startswith("mutant"), (path.stem, results[str(path)]["message"])
