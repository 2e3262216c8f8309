"""bench/targeted: modules written with the problem one rule targets, for measuring that rule
on hardware with `bench/run.py bench/targeted`. Here, on CPU: tier 0 points at the rule's family,
the rules proposer rewrites the module, and both versions are correct under the interpreter."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnosis.engine.evidence import Family
from diagnosis.engine.proposers.base import ProposalContext
from diagnosis.engine.proposers.rules import RulesProposer
from diagnosis.engine.tier0 import run_tier0
from tests.engine.rules_cases import harness as h

TARGETED = Path(__file__).resolve().parents[2] / "bench" / "targeted"
CASES = [
    pytest.param("01_gemm_fp32_ieee.py", Family.DOT_PRECISION, "T0-DOT-IEEE", 'input_precision="tf32"', id="dot-precision"),
    pytest.param("02_bias_rows_fp32.py", Family.HOIST, "T0-INVARIANT-LOAD-IN-STORING-LOOP",
                 "    b = tl.load(b_ptr + cols, mask=col_mask & (0 < ROWS), other=0.0)\n    for r in", id="hoist"),  # fmt: skip
]


def test_the_directory_holds_the_modules_tested_here() -> None:
    assert sorted(p.name for p in TARGETED.glob("*.py")) == sorted(p.values[0] for p in CASES)


@pytest.mark.parametrize(("name", "family", "code", "after"), CASES)
def test_tier0_leads_to_the_rule_and_both_versions_are_correct(
    name: str, family: Family, code: str, after: str, tmp_path: Path
) -> None:
    source = (TARGETED / name).read_text()
    findings = run_tier0(source).findings
    mine = [f for f in findings if f.code == code]
    assert len(mine) == 1 and mine[0].family is family
    # the rule's finding outranks everything else tier 0 says about the module
    assert all(f.severity.value in ("low", "info") for f in findings if f.code != code)
    cands = RulesProposer().propose(source, mine, ProposalContext())
    assert [c.family for c in cands] == [family]
    assert after in cands[0].source
    paths = [tmp_path / f"before_{name}", tmp_path / f"after_{name}"]
    paths[0].write_text(source)
    paths[1].write_text(cands[0].source)
    results = h.interp_check(paths)
    for p in paths:
        assert results[str(p)]["ok"], results[str(p)]["message"]
