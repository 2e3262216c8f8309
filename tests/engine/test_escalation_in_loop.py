"""Escalation decisions as the round loop takes them, as tables.

Each row scripts what every tier's evidence passes (localizes / narrows / explains) and which
family its findings point to, then checks which tiers the loop ran, the tier the round reached,
and whether it proposed (and what) or stopped as inconclusive. The timings come from the
FAKE TIMING SOURCE of test_loop.py (loop-logic tests only).
"""

from __future__ import annotations

from typing import Any

import pytest

from diagnosis.engine.errors import TierUnavailable
from diagnosis.engine.evidence import Family, Finding, Severity, Tier, TierResult
from diagnosis.engine.verdict import Verdict
from tests.engine.test_loop import (
    HI,
    LC,
    SP,
    FakeTimingExecutor,
    ScriptedProposer,
    finding,
    install_script,
    module,
    run,
)

CODES = {Family.LAUNCH_CONFIG: LC.code, Family.HINTS: HI.code, Family.SINGLE_PASS: SP.code}
T0, T1, T2, T3 = Tier.TRIAGE, Tier.PROFILE, Tier.IR, Tier.COMPILER


@pytest.fixture
def scripted_tiers(monkeypatch: pytest.MonkeyPatch) -> Any:
    return lambda script: install_script(monkeypatch, script)


def ev(flags: str, family: Family | None = None) -> Any:
    """A tier's scripted evidence: flags among 'L', 'N', 'E'; '!' makes the tier's job fail."""

    def make(source: str, tier: Tier) -> TierResult:
        if flags == "!":
            raise TierUnavailable("the compile job failed: compile_error: scripted")
        findings = [finding(CODES[family])] if family else []
        return TierResult(tier, findings, localizes="L" in flags, narrows="N" in flags, explains="E" in flags)

    return make


def script(rows: dict[Tier, Any]) -> dict[Tier, Any]:
    return {tier: (lambda s, t=tier, f=fn: f(s, t)) for tier, fn in rows.items()}


ROUNDS = [
    pytest.param(
        {T0: ev("LNE", Family.LAUNCH_CONFIG)}, "cuda", T3,
        [T0], T0, Family.LAUNCH_CONFIG, id="tier0-sufficient-stops-at-tier0",
    ),
    pytest.param(
        {T0: ev("N", Family.LAUNCH_CONFIG), T1: ev("LE")}, "cuda", T3,
        [T0, T1], T1, Family.LAUNCH_CONFIG, id="tier0-narrows-tier1-localizes-and-explains",
    ),
    pytest.param(
        {T0: ev("N", Family.LAUNCH_CONFIG), T1: ev("L"), T2: ev("L"), T3: ev("L")}, "cuda", T3,
        [T0, T1, T2, T3], T3, None, id="nothing-explains-inconclusive-at-tier3",
    ),
    pytest.param(
        {T0: ev(""), T2: ev("LN", Family.HINTS), T3: ev("LNE", Family.HINTS)}, "cpu", T3,
        [T0, T2, T3], T3, Family.HINTS, id="cpu-skips-tier1",
    ),
    pytest.param(
        {T0: ev("NE", Family.LAUNCH_CONFIG)}, "cuda", T0,
        [T0], T0, Family.LAUNCH_CONFIG, id="max-tier0-explains-without-localizing-is-partial",
    ),
    pytest.param(
        {T0: ev("N", Family.LAUNCH_CONFIG)}, "cuda", T0,
        [T0], T0, None, id="max-tier0-narrows-only-is-inconclusive",
    ),
    pytest.param(
        {T0: ev("N", Family.LAUNCH_CONFIG), T1: ev(""), T2: ev("!"), T3: ev("LNE", Family.HINTS)}, "cuda", T3,
        [T0, T1, T2, T3], T3, Family.HINTS, id="failed-tier2-job-is-skipped",
    ),
    pytest.param(
        {T0: ev("LN", Family.SINGLE_PASS), T1: ev("E", Family.LAUNCH_CONFIG)}, "cuda", T3,
        [T0, T1], T1, Family.SINGLE_PASS, id="family-from-the-deepest-narrowing-tier",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("rows", "device", "max_tier", "ran", "reached", "family"), ROUNDS)
def test_one_round_climbs_only_while_the_evidence_fails_a_test(
    scripted_tiers, rows, device: str, max_tier: Tier, ran: list[Tier], reached: Tier, family: Family | None
) -> None:
    log = scripted_tiers(script(rows))
    proposer = ScriptedProposer({f: 0.5 for f in Family})
    # exploration far from speed-of-light is off: these rows are about the three tests alone
    # (test_loop.py's exploration table covers it)
    result = run(
        module(2.0), proposer, FakeTimingExecutor(device), device=device, max_tier=max_tier, round_budget=1,
        explore_below_sol=0.0,
    )  # fmt: skip
    r = result.rounds[0]
    assert [t for t, _ in log] == ran
    assert r.tier_reached is reached
    if family is None:
        assert r.verdict is Verdict.INCONCLUSIVE and r.proposal is None and r.hypothesis is None
        assert proposer.contexts == []  # never a guess: the proposer was not asked
    else:
        assert r.proposal is not None and r.proposal.family is family
        assert r.hypothesis.family is family


def test_an_inconclusive_round_names_time_outside_the_triton_kernels(scripted_tiers) -> None:
    """liger's sparsemax spends most of its forward in the wrapper's torch sort: the round that
    finds nothing to rewrite says where the time went, on the case with the largest share."""

    def profile(source: str, tier: Tier) -> TierResult:
        shares = [
            (0, 61.5, "radixSortKVInPlace 428.0 us"),
            (2, 94.6, "DeviceSegmentedRadixSortKernel 1776.6 us"),
        ]
        other = [
            Finding(
                "T1-OTHER-KERNELS", Severity.INFO,
                {"case": c, "share_pct": pct, "other_us": 1.0, "total_us": 2.0, "top": top},
            )
            for c, pct, top in shares
        ]  # fmt: skip
        return TierResult(tier, other, localizes=True)

    scripted_tiers(script({T0: ev("N", Family.LAUNCH_CONFIG), T1: profile, T2: ev("L"), T3: ev("L")}))
    result = run(
        module(2.0), ScriptedProposer({}), FakeTimingExecutor("cuda"), round_budget=1, explore_below_sol=0.0
    )
    (r,) = result.rounds
    assert r.verdict is Verdict.INCONCLUSIVE
    assert r.reason.endswith(
        "; case 2: 94.6% of the forward's kernel time is in kernels other than the module's Triton kernels "
        "(DeviceSegmentedRadixSortKernel 1776.6 us), which no rewrite of them removes"
    )


def test_a_failed_tier_is_named_in_the_round(scripted_tiers) -> None:
    scripted_tiers(script({T0: ev("N", Family.LAUNCH_CONFIG), T2: ev("!"), T3: ev("LNE", Family.HINTS)}))
    result = run(module(2.0), ScriptedProposer({Family.HINTS: 0.5}), round_budget=1)
    assert "tier 2 unavailable" in result.rounds[0].reason


SEQUENCES = [
    pytest.param(
        # launch_config fails on the source: the next round needs evidence for another family
        {T0: ev("LNE", Family.LAUNCH_CONFIG), T3: ev("LNE", Family.HINTS)},
        {Family.LAUNCH_CONFIG: 1.0, Family.HINTS: 0.5},
        [(T0, "launch_config", "no-gain"), (T3, "hints", "improved")],
        id="ruled-out-family-climbs-for-new-evidence",
    ),
    pytest.param(
        # the narrowed family has no rewrite: the same round moves to the next family
        {T0: ev("LNE", Family.SINGLE_PASS), T1: ev("LNE", Family.LAUNCH_CONFIG)},
        {Family.LAUNCH_CONFIG: 0.5},
        [(T1, "launch_config", "improved")],
        id="no-rewrite-family-moves-on-in-the-same-round",
    ),
    pytest.param(
        # a win resets the rule-outs: the new parent starts at tier 0 again
        {T0: ev("LNE", Family.LAUNCH_CONFIG)},
        {Family.LAUNCH_CONFIG: 0.5},
        [(T0, "launch_config", "improved"), (T0, "launch_config", "improved")],
        id="new-parent-starts-at-tier0",
    ),
]


@pytest.mark.parametrize(("rows", "factors", "expected"), SEQUENCES)
def test_rounds_in_sequence(scripted_tiers, rows, factors, expected) -> None:
    scripted_tiers(script(rows))
    result = run(module(2.0), ScriptedProposer(factors), round_budget=len(expected))
    got = [
        (r.tier_reached, str(r.proposal.family) if r.proposal else None, str(r.verdict))
        for r in result.rounds
    ]
    assert got == expected
