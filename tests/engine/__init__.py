"""Engine tests (plain Python, no Django).

Tier-0 table cases write kernels inline and name the line a finding must point at with a
trailing ``# <- CODE`` marker, so adding a line to a case does not silently shift the
expected line numbers.
"""

from __future__ import annotations

import re
import textwrap

from diagnosis.engine.evidence import Finding, TierResult

_MARK = re.compile(r"#\s*<-\s*([A-Z0-9-]+(?:\s*,\s*[A-Z0-9-]+)*)")


def src(text: str) -> str:
    """Dedent an inline module and drop the leading newline, so line 1 is its first line."""
    return textwrap.dedent(text).lstrip("\n")


def marks(source: str, codes: set[str]) -> list[tuple[str, int]]:
    """(code, line) for every ``# <- CODE`` marker naming one of ``codes``."""
    out = []
    for lineno, line in enumerate(source.splitlines(), start=1):
        m = _MARK.search(line)
        if m:
            out += [(c.strip(), lineno) for c in m.group(1).split(",") if c.strip() in codes]
    return sorted(out)


def tier0(source: str) -> TierResult:
    """Run tier 0 strictly (rule bugs raise) on a case that must parse: a table case with a
    syntax error would pass every no-finding test without testing anything."""
    from diagnosis.engine.tier0 import run_tier0

    result = run_tier0(source, strict=True)
    assert not [f for f in result.findings if f.code == "T0-SYNTAX-ERROR"], "the test case does not parse"
    return result


def primary(findings: list[Finding], codes: set[str]) -> list[tuple[str, int]]:
    """(code, first line) of the findings with one of ``codes``."""
    return sorted((f.code, f.lines[0]) for f in findings if f.code in codes)
