"""RulesProposer: findings -> families -> transforms -> candidates (the separate 'apply' step)."""

from __future__ import annotations

import pytest

from diagnosis.engine.evidence import Family, Severity
from diagnosis.engine.proposers.base import ProposalContext, Proposer, RoundHistory
from diagnosis.engine.proposers.rules import (
    RuleInput,
    RulesProposer,
    apply_family,
    registered_families,
    transforms_for,
)
from diagnosis.engine.verdict import Verdict
from tests.engine.rules_cases import harness as h

MATMUL = h.source("matmul.py")
VEC_ADD = h.source("vec_add.py")
SOFTMAX = h.source("softmax_loops.py")


def test_it_implements_the_proposer_interface() -> None:
    assert isinstance(RulesProposer(), Proposer)
    assert RulesProposer.name == "rules"


def test_every_transform_module_registered_itself() -> None:
    for family in (
        Family.LAUNCH_CONFIG, Family.SWIZZLE, Family.SINGLE_PASS, Family.BLOCK_REDUCTION, Family.HINTS,
        Family.PIPELINING, Family.FUSION,
    ):
        assert family in registered_families()
        assert transforms_for(family)


NOTHING = [
    pytest.param(VEC_ADD, [], id="no-findings"),
    pytest.param(VEC_ADD, [h.finding(Family.COALESCE)], id="family-without-a-transform"),
    pytest.param(VEC_ADD, [h.finding(Family.SWIZZLE)], id="transform-does-not-apply"),
    pytest.param(VEC_ADD, [h.finding(Family.NONE)], id="informative-finding"),
    pytest.param(VEC_ADD, [h.finding(Family.LAUNCH_CONFIG, kernel="other_kernel")], id="finding-names-another-kernel"),
]


@pytest.mark.parametrize(("source", "findings"), NOTHING)
def test_it_proposes_nothing_without_an_applicable_finding(source, findings) -> None:
    assert RulesProposer().propose(source, findings, ProposalContext()) == []


def test_a_candidate_carries_diff_family_codes_and_a_rationale_citing_the_finding() -> None:
    f = h.finding(Family.LAUNCH_CONFIG, kernel="add_kernel", line=30)
    (cand,) = RulesProposer().propose(VEC_ADD, [f], ProposalContext())
    assert cand.family is Family.LAUNCH_CONFIG
    assert cand.proposer == "rules" and cand.tokens == 0
    assert cand.findings_addressed == (f.code,)
    assert cand.diff.startswith("--- a/kernel.py\n+++ b/kernel.py\n")
    assert "+@triton.autotune(" in cand.diff
    assert f"{f.code} (line 30)" in cand.rationale
    assert "Expected effect:" in cand.rationale
    assert h.parses(cand.source)
    # the parts the review page shows apart: the Rewrite's mechanism and effect
    assert cand.mechanism and cand.expected
    assert f"Change: {cand.mechanism} Expected effect: {cand.expected}" in cand.rationale


def test_swizzle_and_launch_config_on_one_gemm_compose_first() -> None:
    findings = [h.finding(Family.LAUNCH_CONFIG, kernel="matmul_kernel"), h.finding(Family.SWIZZLE, kernel="matmul_kernel")]
    cands = RulesProposer(max_candidates=3).propose(MATMUL, findings, ProposalContext())
    assert [c.family for c in cands] == [Family.LAUNCH_CONFIG, Family.LAUNCH_CONFIG, Family.SWIZZLE]
    composed = cands[0]
    assert "@triton.autotune(" in composed.source and "GROUP_SIZE_M" in composed.source
    assert "[launch_config + swizzle]" in composed.rationale or "[swizzle + launch_config]" in composed.rationale
    assert set(composed.findings_addressed) == {f.code for f in findings}
    assert len({c.source for c in cands}) == 3


def test_the_limit_comes_from_the_context_when_not_set() -> None:
    findings = [h.finding(Family.LAUNCH_CONFIG), h.finding(Family.SWIZZLE)]
    assert len(RulesProposer(max_candidates=None).propose(MATMUL, findings, ProposalContext(max_candidates=1))) == 1
    assert len(RulesProposer(max_candidates=None).propose(MATMUL, findings, ProposalContext(max_candidates=5))) == 3


def test_families_that_failed_or_gained_nothing_are_skipped() -> None:
    findings = [h.finding(Family.LAUNCH_CONFIG), h.finding(Family.SWIZZLE)]
    history = (
        RoundHistory(index=0, family=Family.LAUNCH_CONFIG, verdict=Verdict.FAILED),
        RoundHistory(index=1, family=Family.SINGLE_PASS, verdict=Verdict.IMPROVED),
    )
    cands = RulesProposer().propose(MATMUL, findings, ProposalContext(history=history))
    assert [c.family for c in cands] == [Family.SWIZZLE]
    assert "@triton.autotune" not in cands[0].source


def test_the_first_findings_family_leads_then_severity() -> None:
    low_first = [h.finding(Family.SINGLE_PASS, severity=Severity.LOW), h.finding(Family.LAUNCH_CONFIG)]
    cands = RulesProposer(max_candidates=3).propose(SOFTMAX, low_first, ProposalContext())
    # composed (single pass + autotune) first, led by the first finding's family
    assert [c.family for c in cands] == [Family.SINGLE_PASS, Family.SINGLE_PASS, Family.LAUNCH_CONFIG]


def test_it_is_deterministic() -> None:
    findings = [h.finding(Family.LAUNCH_CONFIG), h.finding(Family.SWIZZLE)]
    a = RulesProposer().propose(MATMUL, findings, ProposalContext())
    b = RulesProposer().propose(MATMUL, findings, ProposalContext())
    assert a == b


def test_an_unregistered_code_counts_by_its_family_override() -> None:
    from diagnosis.engine.evidence import Finding

    f = Finding(code="NOT-REGISTERED", severity=Severity.HIGH, family_override=Family.LAUNCH_CONFIG)
    (cand,) = RulesProposer().propose(VEC_ADD, [f], ProposalContext())
    assert cand.family is Family.LAUNCH_CONFIG and "NOT-REGISTERED" in cand.rationale
    assert RulesProposer().propose(VEC_ADD, [Finding(code="ALSO-NOT", severity=Severity.HIGH)], ProposalContext()) == []


# lightllm breaks long pointer expressions inside a call's parentheses: the argument alone is no
# expression, so a rule that reads it through `ast` must parenthesize it first
BROKEN_LINES = '''import torch
import triton
import triton.language as tl


@triton.jit
def scale_rows(X, Y, start, stride_x, stride_y, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(X + row * stride_x + (tl.load(start + row) + cols)
                * 1, mask=cols < n, other=0.0)
    tl.store(Y + row * stride_y + (tl.load(start + row) + cols)
             * 1, x * 2.0, mask=cols < n)


class ModelNew(torch.nn.Module):
    def forward(self, x, start):
        y = torch.empty_like(x)
        scale_rows[(x.shape[0],)](
            x, y, start, x.stride(0)
            + 0, y.stride(0), x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]),
        )
        return y
'''


def test_no_family_raises_on_arguments_broken_over_lines() -> None:
    for family in registered_families():
        apply_family(family, BROKEN_LINES, RuleInput((), ProposalContext(), frozenset()))
