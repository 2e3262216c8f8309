"""Tier 0: pattern triage on the uploaded source, with no execution (milliseconds).

The module is parsed (never imported), every registered rule reads it, and the stored
pattern library is matched against the result. Rule modules are discovered at import: every
module of this package other than the infrastructure below registers its rules with
``@rule`` when imported.
"""

from __future__ import annotations

import importlib
import pkgutil
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from diagnosis.engine.escalation import (
    MECHANISMS,
    actionable,
    top_finding,
    top_severity_families,
)
from diagnosis.engine.evidence import Family, Finding, Severity, Tier, TierResult, register_code
from diagnosis.engine.tier0.errors import UndeclaredCode
from diagnosis.engine.tier0.registry import Rule, rule, rule_codes, rules
from diagnosis.engine.tier0.source import KernelContext, ModuleContext, parse_module

if TYPE_CHECKING:
    from diagnosis.engine.patterns import PatternSpec

__all__ = ["KernelContext", "ModuleContext", "Rule", "assess", "rule", "rule_codes", "rules", "run_tier0"]

_INFRASTRUCTURE = frozenset({"errors", "registry", "source"})

SYNTAX_ERROR = register_code(
    "T0-SYNTAX-ERROR",
    Tier.TRIAGE,
    Family.NONE,
    "the module does not parse: {error}",
    "Syntax error",
)


def _discover() -> None:
    for info in pkgutil.iter_modules(__path__):
        if info.name in _INFRASTRUCTURE or info.name.startswith("_"):
            continue
        importlib.import_module(f"{__name__}.{info.name}")


_discover()


def run_tier0(
    source: str,
    *,
    patterns: Sequence[PatternSpec] = (),
    strict: bool = False,
    launched: frozenset[str] = frozenset(),
) -> TierResult:
    """Run every tier-0 rule over ``source`` and match the pattern library.

    ``launched``: the kernels the timed cases launched, when a run recorded them. A finding on a
    kernel that the module launches somewhere but no timed case ran (a library's other shape
    path) cannot make the timed forward faster: it is left out, and a note names it.

    A rule that crashes on an unusual module is a bug in that rule, not in the upload: the
    error is recorded in ``notes`` and ``data['rule_errors']`` and the other rules still run.
    ``strict`` re-raises instead (tests use it, so rule bugs surface).
    """
    # Imported here: patterns.py reads this package's parser, so a module-level import
    # would make the two packages import each other.
    from diagnosis.engine.patterns import match_patterns

    started = time.perf_counter()
    result = TierResult(tier=Tier.TRIAGE)
    try:
        module = parse_module(source)
    except SyntaxError as exc:
        result.findings.append(
            Finding(SYNTAX_ERROR.code, Severity.INFO, {"error": exc.msg}, lines=(exc.lineno or 0,))
        )
        result.wall_s = time.perf_counter() - started
        return result

    errors: list[str] = []
    findings: list[Finding] = []
    for r in rules():
        targets: Iterable[object] = module.kernels.values() if r.scope == "kernel" else (module,)
        for target in targets:
            try:
                for finding in r.func(target):
                    if finding.code not in r.codes:
                        raise UndeclaredCode(f"{r.name} emitted undeclared code {finding.code}")
                    findings.append(finding)
            except UndeclaredCode:
                raise
            except Exception as exc:
                if strict:
                    raise
                errors.append(f"{r.name}: {type(exc).__name__}: {exc}")
    findings = _dedupe(findings)
    idle = _idle_kernels(module, launched)
    if idle:
        left_out = sorted({f.kernel for f in findings if f.kernel in idle})
        findings = [f for f in findings if f.kernel not in idle]
        if left_out:
            result.notes.append(
                f"findings on {', '.join(left_out)} left out: no timed case launches "
                + ("it" if len(left_out) == 1 else "them")
            )
    findings.extend(match_patterns(source, findings, patterns))
    findings.sort(key=lambda f: (f.lines[0] if f.lines else 0, f.code))

    result.findings = findings
    result.localizes, result.narrows, result.explains = assess(findings)
    result.notes += [f"rule failed: {e}" for e in errors]
    result.data = {
        "kernels": {
            name: {"line": k.line, "autotuned": k.autotune is not None} for name, k in module.kernels.items()
        },
        "launches": [
            {"kernel": s.kernel, "line": s.line, "function": s.function, "programs": s.programs}
            for s in module.launches
        ],
        "rule_errors": errors,
    }
    result.wall_s = time.perf_counter() - started
    return result


def _idle_kernels(module: ModuleContext, launched: frozenset[str]) -> frozenset[str]:
    """The kernels with a launch site in the module that no timed case launched; none when the
    launches are unknown. A @triton.jit helper has no launch site: it runs inside its caller."""
    if not launched:
        return frozenset()
    return frozenset(s.kernel for s in module.launches if s.kernel) - launched


def assess(findings: Sequence[Finding]) -> tuple[bool, bool, bool]:
    """The three tests for source-only evidence.

    localizes: some finding of at least medium severity names a kernel and a line.
    narrows: the findings at the top severity all point to one family.
    explains: the best-scored finding's family has a known mechanism and its gain is estimated.
    """
    localizes = any(
        f.severity.rank >= Severity.MEDIUM.rank and f.kernel and f.lines for f in findings
    )
    if not actionable(findings):
        return localizes, False, False
    narrows = len(top_severity_families(findings)) == 1
    top = top_finding(findings)
    explains = top is not None and top.family in MECHANISMS and top.gain is not None
    return localizes, narrows, explains


def _dedupe(findings: list[Finding]) -> list[Finding]:
    """Two launch sites of one kernel can make a rule say the same thing twice."""
    seen: set[tuple[str, tuple[int, ...], str, str]] = set()
    out = []
    for f in findings:
        key = (f.code, f.lines, f.kernel, f.message)
        if key in seen:
            continue
        seen.add(key)
        out.append(f)
    return out
