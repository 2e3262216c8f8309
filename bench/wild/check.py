"""Check built corpus modules: upload validation, then bench/check_suite.py's comparison on CPU.

Each module is first checked under the plain Triton interpreter. When that fails, it is checked
again with check_suite's --compat (float scalars as fp32, libdevice in numpy, an autotuner's
first config, element-wise `and`/`or`, an H200's device properties): a module that passes then
is correct, and the plain run's failure is what the interpreter could not run. A module that
fails both ways is WRONG when outputs differ, and CANNOT RUN when the interpreter stopped it
(the library's host code requires CUDA tensors, an interpreter NotImplementedError, ...).
"""

from __future__ import annotations

import concurrent.futures
import importlib.util
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]

# what says that the interpreter, not the kernel, stopped a run (message fragments)
_CANNOT_RUN = (
    "require CUDA",
    "requires CUDA",
    "Torch not compiled with CUDA",
    "not supported in interpreter mode",
    "has no numpy equivalent",
    "active drivers",
    "NotImplementedError",
)


# the plain interpreter's failure -> the construct it cannot run (check_suite --compat's patches)
_LIMITS = (
    ("object has no attribute 'to'", "a float scalar argument stays a Python float (`eps.to(...)`)"),
    ("active drivers", "@triton.autotune benchmarks its configs on a device"),
    ("Torch not compiled with CUDA", "the host code reads torch.cuda's device properties"),
    ("has no attribute 'value'", "a dtype passed to a jit helper is not a tl.constexpr"),
    ("_semantic` argument must be provided", "a libdevice call (through a module alias)"),
    ("'NoneType' object has no attribute 'type'", "a libdevice call"),
    ("and 'NoneType'", "a libdevice call"),
    ("cannot convert None of type", "a libdevice call"),
    ("malloc", "a memory error: `a and b` between masks is Python's `and` (the second mask)"),
    ("munmap", "a memory error: `a and b` between masks is Python's `and` (the second mask)"),
    ("free()", "a memory error: `a and b` between masks is Python's `and` (the second mask)"),
    ("corrupted", "a memory error: `a and b` between masks is Python's `and` (the second mask)"),
    ("double free", "a memory error: `a and b` between masks is Python's `and` (the second mask)"),
    ("exited with -11", "a segfault: `a and b` between masks is Python's `and` (the second mask)"),
)


def limitation(message: str) -> str:
    """What the plain interpreter could not run, from its failure message ("" when unknown)."""
    for fragment, label in _LIMITS:
        if fragment in message:
            return label
    return ""


def _check_suite() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_check_suite", ROOT / "bench" / "check_suite.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class Outcome:
    """One module's result: status PASS, PASS-COMPAT, CANNOT-RUN, WRONG or INVALID."""

    name: str
    status: str
    max_err: float | None
    seconds: float
    plain: str  # why the plain interpreter failed ("" when it passed)
    detail: str  # the failure that decided the status


def _first_line(message: str) -> str:
    for line in message.splitlines():
        line = line.strip()
        if line and not line.startswith(("Traceback", "File ", "child exited")):
            return line[:200]
    return message.strip()[:200]


def _reason(message: str) -> str:
    """The informative line of a check_suite failure (the innermost exception, not the wrapper)."""
    lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
    for line in lines:
        if (
            re.match(r"^(\w+Error|AssertionError|InterpreterError)\b", line)
            and "InterpreterError(" not in line
        ):
            return line[:200]
    return _first_line(message)


def validate(path: Path) -> list[str]:
    """Upload validation's error codes and lines for one file ([] when it validates)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from diagnosis.validation import validate_module_source

    result = validate_module_source(path.read_bytes(), path.name, 256 * 1024)
    return [f"{e.code}@{e.line}" for e in result.errors]


def check_one(path: Path, timeout: float) -> Outcome:
    errors = validate(path)
    if errors:
        return Outcome(path.stem, "INVALID", None, 0.0, "", ", ".join(errors))
    cs = _check_suite()
    plain = cs.check_module(path, timeout, meta_cases=True)
    if plain["ok"]:
        return Outcome(path.stem, "PASS", plain["max_err"], plain["seconds"], "", "")
    compat = cs.check_module(path, timeout, compat=True, meta_cases=True)
    seconds = plain["seconds"] + compat["seconds"]
    why = limitation(plain["message"]) or _reason(plain["message"])
    if compat["ok"]:
        return Outcome(path.stem, "PASS-COMPAT", compat["max_err"], seconds, why, "")
    detail = _reason(compat["message"])
    wrong = compat["message"].startswith("AssertionError: verify case") and "launched no" not in detail
    cannot = any(m in compat["message"] for m in _CANNOT_RUN) or "exited with" in compat["message"]
    status = "WRONG" if wrong or not cannot else "CANNOT-RUN"
    return Outcome(path.stem, status, None, seconds, why, detail)


def write_rewrites(directory: Path, out: Path, only: str | None = None) -> int:
    """Every registered transform of every family applied alone to each module of `directory`
    (no findings, so every kernel it matches; the module's case shapes on an H200, as
    bench/rules_fingerprint.py proposes them), and every composition, each distinct rewrite
    written to `out/<module>__<transform>.py` (`<module>__<first>_then_<second>.py`) for
    `check_dir`. Returns how many were written; a transform that raises is a bug and is not
    caught."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from bench.rules_fingerprint import cases_of
    from diagnosis.engine import sol
    from diagnosis.engine.proposers.base import ProposalContext
    from diagnosis.engine.proposers.rules import (
        COMPOSITIONS,
        RuleInput,
        apply_composition,
        apply_family,
        registered_families,
        transforms_for,
    )

    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.py"):
        old.unlink()
    written = 0
    for path in sorted(p for p in directory.glob("[0-9][0-9]_*.py") if not only or re.search(only, p.name)):
        source = path.read_text()
        inp = RuleInput((), ProposalContext(cases=cases_of(path), device=sol.lookup("NVIDIA H200").spec))
        # one transform at a time, through apply_family as the proposer calls it (which also
        # tries the module with its launches' `**d` written out)
        found = [
            (fn.__name__, apply_family(family, source, inp, skip=names - {fn.__name__}))
            for family in registered_families()
            for names in [{f.__name__ for f in transforms_for(family)}]
            for fn in transforms_for(family)
        ]
        found += [(f"{c.first}_then_{c.second}", apply_composition(c, source, inp)) for c in COMPOSITIONS]
        seen = {source}
        for name, rw in found:
            if rw is None or rw.source in seen:
                continue
            seen.add(rw.source)
            (out / f"{path.stem}__{name}.py").write_text(rw.source)
            written += 1
    return written


def format_table(outcomes: list[Outcome]) -> str:
    lines = [
        "| module | status | max err | seconds | plain interpreter | detail |",
        "|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        err = "-" if o.max_err is None else f"{o.max_err:.3g}"
        plain = o.plain.replace("|", "\\|")
        detail = o.detail.replace("|", "\\|")
        lines.append(f"| {o.name} | {o.status} | {err} | {o.seconds:.0f} | {plain} | {detail} |")
    counts: dict[str, int] = {}
    for o in outcomes:
        counts[o.status] = counts.get(o.status, 0) + 1
    lines.append("")
    lines.append(", ".join(f"{k}: {v}" for k, v in sorted(counts.items())) + f" (of {len(outcomes)})")
    return "\n".join(lines)


def check_dir(directory: Path, only: str | None = None, jobs: int = 1, timeout: float = 600) -> list[Outcome]:
    files = sorted(p for p in directory.glob("[0-9][0-9]_*.py") if not only or re.search(only, p.name))
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(lambda p: check_one(p, timeout), files))


def check_sets(directories: list[Path], only: str | None, jobs: int, timeout: float) -> int:
    """Check each directory, print its table (and write it as CHECK.md there); 1 if any is WRONG/INVALID."""
    bad = 0
    for directory in directories:
        outcomes = check_dir(directory, only, jobs, timeout)
        table = format_table(outcomes)
        print(f"\n## {directory.name}\n\n{table}", flush=True)
        if not only:  # a partial check leaves the whole set's table alone
            (directory / "CHECK.md").write_text(f"# {directory.name}\n\n{table}\n")
        bad += sum(o.status in ("WRONG", "INVALID") for o in outcomes)
    return 1 if bad else 0
