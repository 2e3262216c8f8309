"""Helpers for the rules tests: load case modules, build a ProposalContext, run the
interpreter check (every autotune config) in a subprocess."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
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


def rule_input(cases: tuple[CaseShape, ...] = (), kernels: frozenset[str] = frozenset()) -> RuleInput:
    return RuleInput((), ProposalContext(cases=cases), kernels)


def finding(family: Family, kernel: str = "", severity: Severity = Severity.HIGH, line: int = 0) -> Finding:
    return Finding(
        code=code_for(family), severity=severity, args={"kernel": kernel}, kernel=kernel,
        lines=(line,) if line else (),
    )


def interp_check(paths: list[Path], timeout: float = 900, jobs: int = 1) -> dict[str, dict]:
    """Run the interpreter check on every module (each autotune config), in `jobs` subprocesses."""
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(ROOT))
    chunks = [paths[i::jobs] for i in range(jobs) if paths[i::jobs]]
    procs = [
        subprocess.Popen(
            [sys.executable, str(CHECK_SCRIPT), *map(str, chunk)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for chunk in chunks
    ]
    output = ""
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        output += out + err
    results = {}
    for line in output.splitlines():
        if line.startswith("INTERP_CHECK "):
            r = json.loads(line[len("INTERP_CHECK "):])
            results[r["file"]] = r
    missing = [str(p) for p in paths if str(p) not in results]
    if missing:
        raise AssertionError(f"no result for {missing}:\n{output[-3000:]}")
    return results
