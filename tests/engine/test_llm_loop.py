"""The LLM and hybrid proposers inside the round loop, with the scripted stand-in endpoint.

The loop runs on the FAKE TIMING SOURCE of tests/engine/test_loop.py (modules state their own
times) with scripted tiers; the proposers are the real ones, and the LLM's answers come over
HTTP from tests/llm_standin.py through the real `openai` client. What is checked: which
proposer a round asks (rules first, the LLM for what they cannot rewrite and once they stall),
what a round records of the LLM's cost, and how refusals and the token caps end rounds and runs.
"""

from __future__ import annotations

import pytest

from diagnosis.engine import serialize
from diagnosis.engine.evidence import Family, Tier
from diagnosis.engine.proposers.base import RoundHistory
from diagnosis.engine.proposers.hybrid import HybridProposer
from diagnosis.engine.proposers.llm import LLMConfig, LLMProposer
from diagnosis.engine.proposers.rules import RulesProposer
from diagnosis.engine.records import StopReason
from diagnosis.engine.verdict import Verdict
from tests.engine.test_loop import (
    HI,
    LC,
    FakeTimingExecutor,
    ScriptedProposer,
    fake_ms,
    finding,
    install_script,
    module,
    run,
    sufficient,
    with_ms,
)
from tests.llm_standin import Reply, Request, StandIn, answer, family_in, module_in


@pytest.fixture
def lc_tiers(monkeypatch: pytest.MonkeyPatch) -> None:
    install_script(monkeypatch, {Tier.TRIAGE: lambda s: sufficient(Tier.TRIAGE, finding(LC.code))})


@pytest.fixture
def hints_tiers(monkeypatch: pytest.MonkeyPatch) -> None:
    install_script(monkeypatch, {Tier.TRIAGE: lambda s: sufficient(Tier.TRIAGE, finding(HI.code))})


def scaling(factor: float, code: str = "") -> object:
    """A responder that answers every request with its module, the fake time scaled by `factor`."""

    def respond(request: Request) -> Reply:
        source = module_in(request.user)
        new = with_ms(source, round(fake_ms(source) * factor, 6), f"\n# llm round at {request.at}\n")
        family = family_in(request.user)
        return Reply(answer(new, family=family, addresses=(code,) if code else ()), prompt_tokens=900)

    return respond


def llm(standin: StandIn, **kw: object) -> LLMProposer:
    kw.setdefault("max_retries", 0)
    return LLMProposer(LLMConfig(base_url=standin.url, model="kernel-coder", **kw))  # type: ignore[arg-type]


# --- the LLM proposer alone -------------------------------------------------------------------


def test_each_round_asks_the_llm_for_its_family_and_records_the_cost(lc_tiers, llm_standin) -> None:
    llm_standin.respond = scaling(0.5, LC.code)
    result = run(
        module(2.0), llm(llm_standin, price_prompt_per_m=1.0, price_completion_per_m=2.0), round_budget=2
    )

    assert [str(r.verdict) for r in result.rounds] == ["improved", "improved"]
    assert fake_ms(result.best_source) == pytest.approx(0.5)
    assert [family_in(r.user) for r in llm_standin.requests] == ["launch_config", "launch_config"]
    for record in result.rounds:
        usage = record.cost.llm
        assert record.proposal.proposer == "llm" and record.proposal.findings_addressed == (LC.code,)
        assert usage is not None and usage.requests == 1 and usage.prompt_tokens == 900
        assert record.cost.tokens == usage.tokens
        assert usage.cost == pytest.approx((usage.prompt_tokens * 1.0 + usage.completion_tokens * 2.0) / 1e6)
    assert result.tokens == sum(r.cost.tokens for r in result.rounds)
    # a report round keeps what the LLM cost
    kept, again = (
        result.rounds[0].cost.llm,
        serialize.cost_from_json(serialize.cost_json(result.rounds[0].cost)).llm,
    )
    assert (again.prompt_tokens, again.completion_tokens, again.prompt_chars) == (
        kept.prompt_tokens,
        kept.completion_tokens,
        kept.prompt_chars,
    )
    assert again.cost == pytest.approx(kept.cost) and again.latency_s == pytest.approx(
        kept.latency_s, abs=1e-3
    )


def test_a_refused_answer_is_inconclusive_and_the_next_prompt_says_why(lc_tiers, llm_standin) -> None:
    llm_standin.script(Reply("Sorry, I cannot see the code.", prompt_tokens=800, completion_tokens=9))
    llm_standin.respond = scaling(0.5)
    result = run(module(2.0), llm(llm_standin), round_budget=2)

    first, second = result.rounds
    assert first.verdict is Verdict.INCONCLUSIVE and first.proposal is None
    assert "no fenced python code block" in first.reason
    assert first.cost.tokens == 809 and first.cost.llm.requests == 1
    assert second.verdict is Verdict.IMPROVED
    assert (
        "round 1: nothing proposed -> inconclusive: the LLM answer contains no fenced"
        in llm_standin.requests[1].user
    )


def test_an_answer_that_edits_model_fails_without_a_job(lc_tiers, llm_standin) -> None:
    def respond(request: Request) -> Reply:
        source = module_in(request.user)
        return Reply(answer(with_ms(source.replace("return x * 2", "return x * 3"), 0.5)))

    llm_standin.respond = respond
    ex = FakeTimingExecutor()
    result = run(module(2.0), llm(llm_standin), ex, round_budget=1)
    record = result.rounds[0]
    assert record.verdict is Verdict.FAILED and record.outcome.error_kind == "reference_changed"
    assert "Model" in record.outcome.message
    assert ex.count("verify") == 1  # the baseline's: the answer never ran


def test_the_run_cap_stops_the_run_with_its_own_reason(lc_tiers, llm_standin) -> None:
    llm_standin.script(Reply(answer(with_ms(module(2.0), 1.9)), prompt_tokens=2500, completion_tokens=700))
    result = run(module(2.0), llm(llm_standin, run_tokens=5000, round_tokens=4000), round_budget=5)

    assert len(llm_standin.requests) == 1
    assert [str(r.verdict) for r in result.rounds] == ["improved", "inconclusive"]
    assert result.stop_reason is StopReason.TOKEN_BUDGET
    assert "token cap is reached: 3200 of 5000 tokens spent" in result.stop_detail
    assert result.tokens == 3200


def test_a_round_cap_too_small_for_the_module_ends_the_run(lc_tiers, llm_standin) -> None:
    result = run(module(2.0), llm(llm_standin, round_tokens=800), round_budget=5)
    assert llm_standin.requests == []
    assert len(result.rounds) == 1 and result.stop_reason is StopReason.NOTHING_LEFT
    assert "round's LLM token cap of 800 tokens" in result.stop_detail


# --- rules, then the LLM ----------------------------------------------------------------------


def test_the_rules_go_first_and_no_token_is_spent_while_they_win(lc_tiers, llm_standin) -> None:
    hybrid = HybridProposer(ScriptedProposer({Family.LAUNCH_CONFIG: 0.5}), llm(llm_standin))
    result = run(module(2.0), hybrid, round_budget=2)
    assert [r.proposal.proposer for r in result.rounds] == ["rules", "rules"]
    assert llm_standin.requests == [] and result.tokens == 0
    assert all(r.cost.llm is None for r in result.rounds)


def test_the_llm_gets_a_backed_family_the_rules_cannot_rewrite(hints_tiers, llm_standin) -> None:
    rules_alone = run(module(2.0), ScriptedProposer({Family.LAUNCH_CONFIG: 0.5}), round_budget=1)
    assert rules_alone.rounds[0].verdict is Verdict.INCONCLUSIVE
    assert "no applicable rewrite for hints" in rules_alone.rounds[0].reason

    llm_standin.respond = scaling(0.5, HI.code)
    hybrid = HybridProposer(ScriptedProposer({Family.LAUNCH_CONFIG: 0.5}), llm(llm_standin))
    result = run(module(2.0), hybrid, round_budget=1)
    (record,) = result.rounds
    assert record.verdict is Verdict.IMPROVED
    assert (record.proposal.proposer, record.proposal.family) == ("llm", Family.HINTS)
    assert [family_in(r.user) for r in llm_standin.requests] == ["hints"]


def test_once_the_rules_stall_the_llm_retries_their_family_and_a_win_resets(lc_tiers, llm_standin) -> None:
    llm_standin.respond = scaling(0.5, LC.code)
    rules = ScriptedProposer({Family.LAUNCH_CONFIG: 1.0})  # correct, never faster
    result = run(module(2.0), HybridProposer(rules, llm(llm_standin), stall_rounds=1), round_budget=3)

    proposers = [r.proposal.proposer for r in result.rounds]
    verdicts = [str(r.verdict) for r in result.rounds]
    assert proposers == ["rules", "llm", "rules"]  # round 3 is on the LLM's version: rules first again
    assert verdicts == ["no-gain", "improved", "no-gain"]
    assert [r.proposal.family for r in result.rounds] == [Family.LAUNCH_CONFIG] * 3
    assert len(llm_standin.requests) == 1
    # the LLM was told what the rules had tried
    assert (
        "round 1 by rules: launch_config (addressing TEST-LOOP-LC) -> no-gain" in llm_standin.requests[0].user
    )


def test_without_a_stall_a_family_the_rules_failed_stays_closed(lc_tiers, llm_standin) -> None:
    rules = ScriptedProposer({Family.LAUNCH_CONFIG: 1.0})
    result = run(
        module(2.0), HybridProposer(rules, llm(llm_standin), stall_rounds=3), round_budget=2, patience=1
    )
    assert [str(r.verdict) for r in result.rounds] == ["no-gain", "inconclusive"]
    assert llm_standin.requests == []


class Silent:
    """An LLM proposer that is never asked here (the policy reads only the history)."""

    name = "llm"

    def propose(self, source, findings, context):
        raise AssertionError("not asked")


@pytest.mark.parametrize(
    ("history", "stall_rounds", "stalled", "excluded"),
    [
        pytest.param((), 2, False, set(), id="fresh"),
        pytest.param(
            (RoundHistory(1, Family.HINTS, Verdict.NO_GAIN, proposer="rules"),),
            2,
            False,
            {Family.HINTS},
            id="one-miss",
        ),
        pytest.param(
            (
                RoundHistory(1, Family.HINTS, Verdict.NO_GAIN, proposer="rules"),
                RoundHistory(2, None, Verdict.INCONCLUSIVE),
            ),
            2,
            True,
            set(),
            id="miss-then-nothing-left",
        ),
        pytest.param(
            (
                RoundHistory(1, Family.HINTS, Verdict.FAILED, proposer="rules"),
                RoundHistory(2, Family.SWIZZLE, Verdict.FAILED, proposer="llm"),
            ),
            1,
            True,
            {Family.SWIZZLE},
            id="stalled-llm-failure-stays-out",
        ),
    ],
)
def test_what_the_hybrid_rules_out(
    history: tuple[RoundHistory, ...], stall_rounds: int, stalled: bool, excluded: set[Family]
) -> None:
    hybrid = HybridProposer(RulesProposer(), Silent(), stall_rounds=stall_rounds)
    assert hybrid.stalled(history) is stalled
    assert hybrid.excluded_families(history) == excluded
