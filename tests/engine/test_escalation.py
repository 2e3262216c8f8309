from __future__ import annotations

import pytest

import diagnosis.engine.tier0  # noqa: F401  (registers the T0 codes used below)
from diagnosis.engine.escalation import (
    FAILED_TEST_WORDS,
    Decision,
    choose_family,
    decide,
    modest_gain,
    top_finding,
)
from diagnosis.engine.evidence import Family, Finding, Severity, Tier, TierResult

ALL = {Tier.TRIAGE, Tier.PROFILE, Tier.IR, Tier.COMPILER}
NO_DEVICE = {Tier.TRIAGE, Tier.IR, Tier.COMPILER}


def f(severity: Severity, family: Family, gain: float | None = None, code: str = "T0-MULTI-PASS") -> Finding:
    return Finding(code, severity, {}, lines=(1,), kernel="k", gain=gain, family_override=family)


def r(tier: Tier, loc: bool, nar: bool, exp: bool, *findings: Finding) -> TierResult:
    return TierResult(tier=tier, findings=list(findings), localizes=loc, narrows=nar, explains=exp)


SP = f(Severity.MEDIUM, Family.SINGLE_PASS, 1.5)
CO = f(Severity.HIGH, Family.COALESCE, 4.5)

DECISIONS = [
    pytest.param(
        [], Tier.COMPILER, ALL, (True, Tier.TRIAGE, None, ("localizes", "narrows", "explains")), id="start"
    ),
    pytest.param(
        [r(Tier.TRIAGE, True, True, True, SP)],
        Tier.COMPILER,
        ALL,
        (False, None, Family.SINGLE_PASS, ()),
        id="tier0-sufficient",
    ),
    pytest.param(
        [r(Tier.TRIAGE, False, True, False, SP)],
        Tier.COMPILER,
        ALL,
        (True, Tier.PROFILE, Family.SINGLE_PASS, ("localizes", "explains")),
        id="tier0-narrows-climb-to-profile",
    ),
    pytest.param(
        [r(Tier.TRIAGE, False, True, False, SP), r(Tier.PROFILE, True, False, True)],
        Tier.COMPILER,
        ALL,
        (False, None, Family.SINGLE_PASS, ()),
        id="tier0-narrows-tier1-localizes-and-explains",
    ),
    pytest.param(
        [r(Tier.TRIAGE, False, True, False, SP)],
        Tier.COMPILER,
        NO_DEVICE,
        (True, Tier.IR, Family.SINGLE_PASS, ("localizes", "explains")),
        id="no-device-skips-tier1",
    ),
    pytest.param(
        [r(Tier.TRIAGE, False, False, False)],
        Tier.TRIAGE,
        ALL,
        (False, None, None, ("localizes", "narrows", "explains")),
        id="max-tier-0-inconclusive",
    ),
    pytest.param(
        [r(Tier.TRIAGE, False, True, True, SP)],
        Tier.TRIAGE,
        ALL,
        (False, None, Family.SINGLE_PASS, ("localizes",)),
        id="max-tier-0-partial",
    ),
    pytest.param(
        [r(Tier.TRIAGE, False, False, False), r(Tier.PROFILE, True, False, False)],
        Tier.COMPILER,
        {Tier.TRIAGE, Tier.PROFILE},
        (False, None, None, ("narrows", "explains")),
        id="no-compiler-tiers-inconclusive",
    ),
    pytest.param(
        [r(Tier.TRIAGE, True, True, False, SP), r(Tier.IR, True, True, True, CO)],
        Tier.COMPILER,
        NO_DEVICE,
        (False, None, Family.COALESCE, ()),
        id="deepest-narrowing-tier-names-the-family",
    ),
    pytest.param(
        [
            r(Tier.TRIAGE, True, False, False, SP, CO),
            r(Tier.IR, True, False, False),
            r(Tier.COMPILER, True, False, False),
        ],
        Tier.COMPILER,
        NO_DEVICE,
        (False, None, Family.COALESCE, ("narrows", "explains")),
        id="deepest-evidence-explains-nothing",
    ),
]


@pytest.mark.parametrize(("results", "max_tier", "available", "expected"), DECISIONS)
def test_decide(results: list[TierResult], max_tier: Tier, available: set[Tier], expected: tuple) -> None:
    d = decide(results, max_tier=max_tier, available=available)
    assert isinstance(d, Decision)
    assert (d.climb, d.next_tier, d.family, d.failed_tests) == expected
    assert d.reason


@pytest.mark.parametrize(
    ("results", "max_tier", "available", "word"),
    [
        pytest.param(DECISIONS[5].values[0], Tier.TRIAGE, ALL, "inconclusive", id="inconclusive"),
        pytest.param(
            DECISIONS[9].values[0], Tier.COMPILER, NO_DEVICE, "inconclusive", id="deepest-inconclusive"
        ),
        pytest.param(DECISIONS[6].values[0], Tier.TRIAGE, ALL, "partial", id="partial"),
        pytest.param(DECISIONS[1].values[0], Tier.COMPILER, ALL, "sufficient", id="sufficient"),
        pytest.param(
            DECISIONS[4].values[0], Tier.COMPILER, NO_DEVICE, "tier 1 cannot run here", id="skipped"
        ),
    ],
)
def test_the_reason_says_what_happened(
    results: list[TierResult], max_tier: Tier, available: set[Tier], word: str
) -> None:
    d = decide(results, max_tier=max_tier, available=available)
    assert word in d.reason
    assert d.inconclusive is (word == "inconclusive")


@pytest.mark.parametrize(("results", "max_tier", "available", "expected"), DECISIONS)
def test_the_reason_names_each_failed_test_in_words(
    results: list[TierResult], max_tier: Tier, available: set[Tier], expected: tuple
) -> None:
    d = decide(results, max_tier=max_tier, available=available)
    for test in d.failed_tests:
        if results:
            assert FAILED_TEST_WORDS[test] in d.reason
    assert "does not" not in d.reason


CHOICES = [
    pytest.param([], None, id="nothing"),
    pytest.param([f(Severity.INFO, Family.MASKING)], None, id="info-only"),
    pytest.param([f(Severity.HIGH, Family.NONE, 5.0)], None, id="no-family"),
    pytest.param([SP, CO], Family.COALESCE, id="higher-severity-and-gain"),
    pytest.param(
        [f(Severity.HIGH, Family.MASKING), f(Severity.MEDIUM, Family.USE_DOT, 2.5)],
        Family.USE_DOT,
        id="medium-with-gain-beats-high-without",
    ),
    pytest.param(
        [f(Severity.HIGH, Family.MASKING), f(Severity.MEDIUM, Family.SINGLE_PASS, 1.5)],
        Family.MASKING,
        id="tie-goes-to-severity",
    ),
]


@pytest.mark.parametrize(("findings", "family"), CHOICES)
def test_choose_family_maximizes_severity_times_gain(findings: list[Finding], family: Family | None) -> None:
    assert choose_family(findings) == family
    top = top_finding(findings)
    assert (top.family if top else None) == family


@pytest.mark.parametrize(("bound", "gain"), [(0.5, 1.0), (1.0, 1.0), (2.0, 1.5), (3.0, 2.0), (8.0, 4.5)])
def test_modest_gain_halves_the_excess(bound: float, gain: float) -> None:
    assert modest_gain(bound) == gain
