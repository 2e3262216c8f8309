"""The LLM proposer against the scripted stand-in (tests/llm_standin.py) with the real client.

The `openai` package makes every request over HTTP to a server on 127.0.0.1; the tests check
what it sent, what the proposer made of each reply (candidate or refusal code), how retries,
timeouts and the token caps behave, and what each request is recorded to have cost.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from diagnosis.engine.errors import ProposerError, TokenBudgetExhausted
from diagnosis.engine.evidence import ArtefactRef, Family, Finding, Severity, Tier, register_code
from diagnosis.engine.proposers import CaseShape, ProposalContext, Proposer, RoundHistory
from diagnosis.engine.proposers.llm import (
    CAP_CHARS_PER_TOKEN,
    InvalidAnswer,
    LLMConfig,
    LLMProposer,
    check_module,
    parse_answer,
)
from diagnosis.engine.proposers.prompts import VERSION
from diagnosis.engine.verdict import Verdict
from tests.llm_standin import Reply, StandIn, answer

KERNELS = Path(__file__).resolve().parent.parent / "kernels"
SOURCE = (KERNELS / "vadd_unaligned.py").read_text()

SCALAR = register_code(
    "test_llm.scalar_loads",
    Tier.IR,
    Family.HINTS,
    "{kernel}: loads on line {line} compile to scalar {insn}",
)
LOW_SOL = register_code(
    "test_llm.low_sol", Tier.PROFILE, Family.LAUNCH_CONFIG, "{pct:.0f}% of speed-of-light"
)

PTX_EXCERPT = "ld.global.b32 \t%r2, [ %rd1 + 0 ];\nld.global.b32 \t%r3, [ %rd2 + 0 ];"
FINDINGS = [
    Finding(
        code=SCALAR.code,
        severity=Severity.HIGH,
        args={"kernel": "add_kernel", "line": 15, "insn": "ld.global.b32"},
        lines=(15, 16),
        kernel="add_kernel",
        evidence=(ArtefactRef(kind="ptx", kernel="add_kernel", lines=(41, 42), excerpt=PTX_EXCERPT),),
        gain=1.3,
    ),
    Finding(code=LOW_SOL.code, severity=Severity.MEDIUM, args={"pct": 41.0}),
]
CONTEXT = ProposalContext(
    cases=(CaseShape(0, ((1_000_003,), (1_000_003,)), ("float32", "float32"), sol_us=2.5, time_us=6.1),),
    device_kind="cuda",
    target="sm_90",
    history=(RoundHistory(1, Family.LAUNCH_CONFIG, Verdict.NO_GAIN, proposer="rules", speedup=1.01),),
    round_index=2,
    family=Family.HINTS,
)

REVISED = SOURCE.replace(
    "    offs = pid * BLOCK + tl.arange(0, BLOCK)\n",
    "    offs = pid * BLOCK + tl.arange(0, BLOCK)\n    offs = tl.max_contiguous(tl.multiple_of(offs, BLOCK), BLOCK)\n",
)
GOOD = answer(
    REVISED,
    family="hints",
    addresses=(SCALAR.code,),
    rationale="The PTX shows scalar ld.global.b32 loads on lines 15-16 (test_llm.scalar_loads); contiguous "
    "multiples of BLOCK let the compiler emit 128-bit loads.",
)


def proposer(standin: StandIn, **kw) -> LLMProposer:
    kw.setdefault("max_retries", 0)
    cfg = LLMConfig(base_url=standin.url, model="kernel-coder-7b", api_key="sk-local-test", **kw)
    return LLMProposer(cfg)


def test_it_is_a_proposer(llm_standin: StandIn) -> None:
    assert isinstance(proposer(llm_standin), Proposer)


def test_it_sends_the_source_the_evidence_and_the_history(llm_standin: StandIn) -> None:
    llm_standin.script(Reply(GOOD))
    proposer(llm_standin, temperature=0.3).propose(SOURCE, FINDINGS, CONTEXT)

    (request,) = llm_standin.requests
    assert request.model == "kernel-coder-7b"
    assert request.body["temperature"] == 0.3
    assert "stream" not in request.body
    assert request.headers["authorization"] == "Bearer sk-local-test"
    assert "sk-local-test" not in request.prompt  # the key is a header, never prompt text
    prompt = request.prompt
    for i, line in enumerate(SOURCE.splitlines(), 1):  # the whole source, line-numbered
        assert f"{i:4d}| {line}" in prompt
    assert "one rewrite of family `hints`" in prompt
    assert f"[{SCALAR.code}]" in prompt and "lines 15, 16" in prompt
    assert "ld.global.b32 \t%r2, [ %rd1 + 0 ];" in prompt  # the evidence excerpt
    assert "PTX of `add_kernel`, lines 41-42" in prompt
    assert f"[{LOW_SOL.code}]" in prompt and "41% of speed-of-light" in prompt
    assert "(1000003,) float32" in prompt and "(41% of SOL)" in prompt  # the case and its %SOL
    assert "round 1 by rules: launch_config -> no-gain" in prompt  # history, to avoid repeats
    assert "launch of `add_kernel` at line 29 in ModelNew.forward" in prompt  # the launch site
    assert "sm_90" in prompt


def test_it_returns_the_whole_module_and_what_it_cost(llm_standin: StandIn) -> None:
    llm_standin.script(Reply(GOOD, prompt_tokens=1234, completion_tokens=567))
    cfg = {"price_prompt_per_m": 3.0, "price_completion_per_m": 15.0}
    (cand,) = proposer(llm_standin, **cfg).propose(SOURCE, FINDINGS, CONTEXT)

    assert cand.source == REVISED
    assert (cand.proposer, cand.family) == ("llm", Family.HINTS)
    assert cand.findings_addressed == (SCALAR.code,)
    assert "+    offs = tl.max_contiguous(tl.multiple_of(offs, BLOCK), BLOCK)" in cand.diff
    assert cand.rationale.startswith("The PTX shows scalar ld.global.b32 loads")
    usage = cand.usage
    assert usage is not None and cand.tokens == usage.tokens == 1234 + 567
    assert (usage.prompt_tokens, usage.completion_tokens, usage.requests) == (1234, 567, 1)
    assert usage.cost == pytest.approx((1234 * 3.0 + 567 * 15.0) / 1e6)
    assert usage.prompt_chars == llm_standin.requests[0].prompt_chars and usage.prompt_version == VERSION
    assert usage.latency_s > 0 and not usage.estimated


def test_an_unpriced_endpoint_costs_nothing_known(llm_standin: StandIn) -> None:
    llm_standin.script(Reply(GOOD))
    (cand,) = proposer(llm_standin).propose(SOURCE, FINDINGS, CONTEXT)
    assert cand.usage is not None and cand.usage.cost is None


def test_tokens_are_estimated_when_the_server_reports_none(llm_standin: StandIn) -> None:
    llm_standin.script(Reply(GOOD, usage=False))
    (cand,) = proposer(llm_standin).propose(SOURCE, FINDINGS, CONTEXT)
    usage = cand.usage
    assert usage is not None and usage.estimated
    assert usage.prompt_tokens == -(-usage.prompt_chars // 4)
    assert usage.completion_tokens == -(-len(GOOD) // 4)


@pytest.mark.parametrize(
    ("reply", "code"),
    [
        pytest.param(Reply("I would add tl.multiple_of hints to the offsets."), "no_code_block", id="prose"),
        pytest.param(
            Reply("FAMILY: hints\n```python\n@triton.jit\ndef add_kernel(x):\n    pass\n```\n"),
            "invalid_module",
            id="fragment",
        ),
        pytest.param(
            Reply("```python\n" + SOURCE.replace("@triton.jit\n", "") + "```\n"),
            "invalid_module",
            id="no-kernel",
        ),
        pytest.param(
            Reply("```python\n" + SOURCE.replace("):\n    pid", ")\n    pid", 1) + "```"),
            "invalid_module",
            id="syntax",
        ),
        pytest.param(Reply(answer(SOURCE, family="hints")), "unchanged", id="unchanged"),
        pytest.param(Reply(answer(REVISED, family="swizzle")), "wrong_family", id="another-family"),
        pytest.param(Reply("   "), "empty_answer", id="empty"),
        pytest.param(
            Reply(GOOD[: len(GOOD) // 2], finish_reason="length"), "truncated", id="cut-at-max-tokens"
        ),
    ],
)
def test_it_refuses_answers_that_are_not_one_whole_new_module(
    llm_standin: StandIn, reply: Reply, code: str
) -> None:
    reply.prompt_tokens, reply.completion_tokens = 1000, 200
    llm_standin.script(reply)
    with pytest.raises(ProposerError) as info:
        proposer(llm_standin).propose(SOURCE, FINDINGS, CONTEXT)
    assert info.value.code == code
    assert info.value.tokens == 1200  # a refused answer still cost its tokens
    assert info.value.usage is not None and info.value.usage.requests == 1
    assert not info.value.permanent


@pytest.mark.parametrize(
    ("module", "codes"),
    [
        pytest.param("import triton\n@triton.jit\ndef k(x):\n    pass\n", {"missing_name"}, id="fragment"),
        pytest.param(SOURCE.replace("@triton.jit\n", ""), {"no_triton_kernel"}, id="no-kernel"),
        pytest.param(SOURCE.replace("):\n    pid", ")\n    pid", 1), {"syntax_error"}, id="syntax"),
        pytest.param(
            SOURCE + "\n\ndef ModelNew():\n    return None\n",
            {"duplicate_name", "wrong_kind"},
            id="redefined",
        ),
    ],
)
def test_answers_are_checked_like_uploads(module: str, codes: set[str]) -> None:
    with pytest.raises(InvalidAnswer) as info:
        check_module(module)
    assert set(info.value.validation_codes) == codes


def test_check_module_accepts_the_test_kernels() -> None:
    for path in sorted(KERNELS.glob("*.py")):
        check_module(path.read_text())


def test_a_body_that_is_not_a_chat_completion_is_refused(llm_standin: StandIn) -> None:
    llm_standin.script(Reply(raw=b"<html>502 Bad Gateway</html>"))
    with pytest.raises(ProposerError) as info:
        proposer(llm_standin).propose(SOURCE, FINDINGS, CONTEXT)
    assert info.value.code in ("bad_response", "empty_answer")
    assert info.value.tokens == 0


def test_a_rate_limit_is_retried_after_the_server_says(llm_standin: StandIn) -> None:
    llm_standin.script(
        Reply(status=429, headers={"retry-after-ms": "150"}, error="rate limited"), Reply(GOOD)
    )
    (cand,) = proposer(llm_standin, max_retries=2).propose(SOURCE, FINDINGS, CONTEXT)

    first, second = llm_standin.requests
    assert second.at - first.at >= 0.15  # it waited what Retry-After asked
    assert cand.source == REVISED
    assert cand.usage is not None and cand.usage.latency_s >= 0.15


def test_server_errors_are_retried_then_reported(llm_standin: StandIn) -> None:
    llm_standin.script(*[Reply(status=503, error="model overloaded", headers={"retry-after-ms": "10"})] * 3)
    with pytest.raises(ProposerError, match="HTTP 503: model overloaded") as info:
        proposer(llm_standin, max_retries=2).propose(SOURCE, FINDINGS, CONTEXT)
    assert info.value.code == "http_503" and not info.value.permanent
    assert len(llm_standin.requests) == 3  # the first try and the client's two retries


def test_refused_credentials_are_permanent_and_not_retried(llm_standin: StandIn) -> None:
    llm_standin.script(Reply(status=401, error="invalid api key"))
    with pytest.raises(ProposerError, match="HTTP 401") as info:
        proposer(llm_standin, max_retries=3).propose(SOURCE, FINDINGS, CONTEXT)
    assert info.value.code == "http_401" and info.value.permanent
    assert len(llm_standin.requests) == 1


def test_a_reply_slower_than_the_timeout_is_a_timeout(llm_standin: StandIn) -> None:
    llm_standin.script(Reply(GOOD, delay_s=3.0))
    with pytest.raises(ProposerError, match="timed out after 0.5 s") as info:
        proposer(llm_standin, timeout_s=0.5).propose(SOURCE, FINDINGS, CONTEXT)
    assert info.value.code == "timeout" and not info.value.permanent
    assert info.value.usage is not None and 0.5 <= info.value.usage.latency_s < 3.0


def test_a_timeout_is_retried(llm_standin: StandIn) -> None:
    llm_standin.script(Reply(GOOD, delay_s=3.0), Reply(GOOD))
    (cand,) = proposer(llm_standin, timeout_s=0.5, max_retries=1).propose(SOURCE, FINDINGS, CONTEXT)
    assert cand.source == REVISED and len(llm_standin.requests) == 2


def test_an_unreachable_endpoint_is_reported() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = LLMConfig(base_url=f"http://127.0.0.1:{port}/v1", model="m", max_retries=0, timeout_s=2)
    with pytest.raises(ProposerError, match="cannot reach LLM endpoint") as info:
        LLMProposer(cfg).propose(SOURCE, FINDINGS, CONTEXT)
    assert info.value.code == "unreachable"


# --- the token caps --------------------------------------------------------------------------


def test_the_answer_may_take_what_the_round_cap_leaves(llm_standin: StandIn) -> None:
    llm_standin.script(Reply(GOOD))
    proposer(llm_standin, round_tokens=12_000, max_completion_tokens=50_000).propose(
        SOURCE, FINDINGS, CONTEXT
    )
    (request,) = llm_standin.requests
    prompt_cap_tokens = -(-request.prompt_chars // CAP_CHARS_PER_TOKEN)
    assert request.body["max_tokens"] == 12_000 - prompt_cap_tokens


def test_the_completion_limit_goes_under_the_configured_name(llm_standin: StandIn) -> None:
    llm_standin.script(Reply(GOOD))
    proposer(llm_standin, token_param="max_completion_tokens", temperature=None).propose(
        SOURCE, FINDINGS, CONTEXT
    )
    body = llm_standin.requests[0].body
    assert body["max_completion_tokens"] == 8192 and "max_tokens" not in body and "temperature" not in body


def test_a_round_cap_too_small_for_the_module_asks_nothing(llm_standin: StandIn) -> None:
    with pytest.raises(ProposerError) as info:
        proposer(llm_standin, round_tokens=1500).propose(SOURCE, FINDINGS, CONTEXT)
    assert info.value.code == "round_token_cap" and info.value.permanent
    assert llm_standin.requests == []


def test_evidence_is_left_out_before_the_round_cap_is_passed(llm_standin: StandIn) -> None:
    llm_standin.script(Reply(GOOD))
    many = [
        Finding(
            code=SCALAR.code,
            severity=Severity.LOW,
            args={"kernel": "add_kernel", "line": n, "insn": "st.global.b32"},
            lines=(n,),
            evidence=(ArtefactRef(kind="ptx", kernel="add_kernel", excerpt="x" * 1500),),
        )
        for n in range(20, 30)
    ]
    p = proposer(llm_standin, round_tokens=4000, max_completion_tokens=2000)
    p.propose(SOURCE, [*FINDINGS, *many], CONTEXT)
    (request,) = llm_standin.requests
    # the prompt (at the caps' density) and the answer's limit fit the round's cap together
    assert -(-request.prompt_chars // CAP_CHARS_PER_TOKEN) + request.body["max_tokens"] <= 4000
    assert request.body["max_tokens"] >= len(SOURCE) // CAP_CHARS_PER_TOKEN  # room to repeat the module
    assert "Left out to fit the prompt budget" in request.user
    assert f"{len(SOURCE.splitlines()):4d}| " in request.user  # the source is all there


def test_the_run_cap_ends_proposing_before_a_request_would_pass_it(llm_standin: StandIn) -> None:
    llm_standin.script(Reply(GOOD, prompt_tokens=3000, completion_tokens=900))
    p = proposer(llm_standin, run_tokens=6000, round_tokens=5000)
    p.propose(SOURCE, FINDINGS, CONTEXT)
    assert p.spent_tokens == 3900

    with pytest.raises(TokenBudgetExhausted) as info:
        p.propose(SOURCE, FINDINGS, ProposalContext(round_index=3, family=Family.HINTS))
    assert info.value.code == "token_budget" and info.value.permanent
    assert "3900 of 6000 tokens spent" in info.value.message
    assert len(llm_standin.requests) == 1  # the second request was never sent


def test_tokens_an_earlier_attempt_spent_count_against_the_run_cap(llm_standin: StandIn) -> None:
    cfg = LLMConfig(base_url=llm_standin.url, model="m", max_retries=0, run_tokens=10_000)
    with pytest.raises(TokenBudgetExhausted):
        LLMProposer(cfg, spent_tokens=9_000).propose(SOURCE, FINDINGS, CONTEXT)
    assert llm_standin.requests == []


def test_two_requests_in_one_round_share_the_round_cap(llm_standin: StandIn) -> None:
    llm_standin.script(Reply(GOOD, prompt_tokens=2500, completion_tokens=500), Reply(GOOD))
    p = proposer(llm_standin, round_tokens=8000)
    p.propose(SOURCE, FINDINGS, CONTEXT)
    p.propose(SOURCE, FINDINGS, CONTEXT)  # the same round (index 2)
    second = llm_standin.requests[1]
    assert second.body["max_tokens"] == 8000 - 3000 - -(-second.prompt_chars // CAP_CHARS_PER_TOKEN)


# --- reading the answer ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "family", "addressed"),
    [
        pytest.param(
            f"FAMILY: hints\nADDRESSES: {SCALAR.code}\n", Family.HINTS, (SCALAR.code,), id="explicit"
        ),
        pytest.param("**FAMILY**: `launch_config`\n", Family.LAUNCH_CONFIG, (LOW_SOL.code,), id="markdown"),
        pytest.param(
            f"ADDRESSES: {LOW_SOL.code}, made_up\n",
            Family.LAUNCH_CONFIG,
            (LOW_SOL.code,),
            id="from-addressed",
        ),
        pytest.param("FAMILY: telepathy\n", Family.HINTS, (SCALAR.code,), id="unknown-family"),
        pytest.param(
            f"FAMILY: hints\nRATIONALE: the loads of {SCALAR.code}. and {LOW_SOL.code} say so\n",
            Family.HINTS,
            (SCALAR.code, LOW_SOL.code),
            id="cited-in-the-rationale",
        ),
    ],
)
def test_it_reads_family_and_cited_findings(header: str, family: Family, addressed: tuple[str, ...]) -> None:
    cand = parse_answer(header + "```python\n" + REVISED + "```", SOURCE, FINDINGS)
    assert cand.family is family
    assert cand.findings_addressed == addressed


def test_an_answer_without_a_family_line_is_of_the_round_family() -> None:
    cand = parse_answer("```python\n" + REVISED + "```", SOURCE, FINDINGS, family=Family.LAUNCH_CONFIG)
    assert cand.family is Family.LAUNCH_CONFIG
    assert cand.findings_addressed == (LOW_SOL.code,)
