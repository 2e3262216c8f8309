"""The LLM proposer against a real local OpenAI-compatible HTTP server (no paid API is called).

A `http.server` thread on 127.0.0.1 answers `/v1/chat/completions` with canned but realistic
answers; the tests check what the proposer sent and what it made of each answer.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from diagnosis.engine.evidence import ArtefactRef, Family, Finding, Severity, Tier, register_code
from diagnosis.engine.proposers import CaseShape, ProposalContext, Proposer, ProposerError, RoundHistory
from diagnosis.engine.proposers.llm import LLMConfig, LLMProposer, check_module, parse_answer
from diagnosis.engine.verdict import Verdict

KERNELS = Path(__file__).resolve().parent.parent / "kernels"
SOURCE = (KERNELS / "vadd_unaligned.py").read_text()

register_code(
    "test_llm.scalar_loads",
    Tier.IR,
    Family.HINTS,
    "{kernel}: loads on line {line} compile to scalar {insn}",
)
register_code("test_llm.low_sol", Tier.PROFILE, Family.LAUNCH_CONFIG, "{pct:.0f}% of speed-of-light")

PTX_EXCERPT = "ld.global.b32 \t%r2, [ %rd1 + 0 ];\nld.global.b32 \t%r3, [ %rd2 + 0 ];"
FINDINGS = [
    Finding(
        code="test_llm.scalar_loads",
        severity=Severity.HIGH,
        args={"kernel": "add_kernel", "line": 15, "insn": "ld.global.b32"},
        lines=(15, 16),
        kernel="add_kernel",
        evidence=(ArtefactRef(kind="ptx", kernel="add_kernel", lines=(41, 42), excerpt=PTX_EXCERPT),),
        gain=1.3,
    ),
    Finding(code="test_llm.low_sol", severity=Severity.MEDIUM, args={"pct": 41.0}),
]
CONTEXT = ProposalContext(
    cases=(CaseShape(0, ((1_000_003,), (1_000_003,)), ("float32", "float32")),),
    device_kind="cuda",
    target="sm_90",
    history=(RoundHistory(1, Family.LAUNCH_CONFIG, Verdict.NO_GAIN, proposer="rules", speedup=1.01),),
    round_index=2,
)

REVISED = SOURCE.replace(
    "    offs = pid * BLOCK + tl.arange(0, BLOCK)\n",
    "    offs = pid * BLOCK + tl.arange(0, BLOCK)\n    offs = tl.max_contiguous(tl.multiple_of(offs, BLOCK), BLOCK)\n",
)
GOOD_ANSWER = f"""FAMILY: hints
ADDRESSES: test_llm.scalar_loads
RATIONALE: The PTX shows scalar ld.global.b32 loads on lines 15-16; telling the compiler the
offsets are contiguous multiples of BLOCK lets it emit 128-bit vector loads for unmasked blocks.
```python
{REVISED}```
"""


@dataclass
class StandIn:
    """What the fake endpoint answers and what it received."""

    answer: str = GOOD_ANSWER
    status: int = 200
    usage: tuple[int, int] = (1234, 567)
    hold: threading.Event | None = None  # when set: the handler waits on it (to provoke a timeout)
    requests: list[dict] = field(default_factory=list)
    headers: list[dict] = field(default_factory=list)
    url: str = ""


@pytest.fixture
def stand_in() -> Iterator[StandIn]:
    state = StandIn()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            body = self.rfile.read(int(self.headers["Content-Length"]))
            state.requests.append(json.loads(body))
            state.headers.append({k.lower(): v for k, v in self.headers.items()})
            if self.path != "/v1/chat/completions":
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            if state.hold is not None:
                state.hold.wait(10)
                return
            if state.status != 200:
                self._send(state.status, {"error": {"message": "model overloaded", "type": "server_error"}})
                return
            prompt_tokens, completion_tokens = state.usage
            self._send(
                200,
                {
                    "id": "chatcmpl-standin",
                    "object": "chat.completion",
                    "created": 1_790_000_000,
                    "model": state.requests[-1]["model"],
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": state.answer},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {
                        "prompt_tokens": prompt_tokens,
                        "completion_tokens": completion_tokens,
                        "total_tokens": prompt_tokens + completion_tokens,
                    },
                },
            )

        def _send(self, status: int, payload: dict) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        yield state
    finally:
        if state.hold is not None:
            state.hold.set()
        server.shutdown()
        server.server_close()


def _proposer(stand_in: StandIn, **kw) -> LLMProposer:
    cfg = LLMConfig(base_url=stand_in.url, model="kernel-coder-7b", api_key="sk-local", max_retries=0, **kw)
    return LLMProposer(cfg)


def test_it_is_a_proposer(stand_in: StandIn) -> None:
    assert isinstance(_proposer(stand_in), Proposer)


def test_it_sends_the_source_and_findings_with_evidence(stand_in: StandIn) -> None:
    _proposer(stand_in).propose(SOURCE, FINDINGS, CONTEXT)

    (request,) = stand_in.requests
    assert request["model"] == "kernel-coder-7b"
    assert stand_in.headers[0]["authorization"] == "Bearer sk-local"
    prompt = "\n".join(m["content"] for m in request["messages"])
    # The whole source, line-numbered.
    for i, line in enumerate(SOURCE.splitlines(), 1):
        assert f"{i:4d}| {line}" in prompt
    assert "[test_llm.scalar_loads]" in prompt and "lines 15, 16" in prompt
    assert "ld.global.b32 \t%r2, [ %rd1 + 0 ];" in prompt  # the evidence excerpt
    assert "[test_llm.low_sol]" in prompt and "41% of speed-of-light" in prompt
    assert "(1000003,) float32" in prompt  # the shape case
    assert "round 1: launch_config by rules -> no-gain" in prompt  # history, to avoid repeats
    assert "sm_90" in prompt


def test_it_returns_the_whole_revised_module_and_records_tokens(stand_in: StandIn) -> None:
    (cand,) = _proposer(stand_in).propose(SOURCE, FINDINGS, CONTEXT)

    assert cand.source == REVISED
    assert cand.proposer == "llm"
    assert cand.family is Family.HINTS
    assert cand.findings_addressed == ("test_llm.scalar_loads",)
    assert cand.tokens == 1234 + 567
    assert "+    offs = tl.max_contiguous(tl.multiple_of(offs, BLOCK), BLOCK)" in cand.diff
    assert cand.rationale.startswith("The PTX shows scalar ld.global.b32 loads")


@pytest.mark.parametrize(
    ("answer", "complaint"),
    [
        pytest.param(
            "I would add tl.multiple_of hints to the offsets.", "no fenced python code block", id="prose"
        ),
        pytest.param(
            "FAMILY: hints\n```python\n@triton.jit\ndef add_kernel(x):\n    pass\n```\n",
            "does not define Model, ModelNew, get_inputs, get_init_inputs",
            id="fragment",
        ),
        pytest.param(
            "```python\n" + SOURCE.replace("@triton.jit\n", "") + "```\n",
            "no @triton.jit kernel",
            id="no-kernel",
        ),
        pytest.param(
            "```python\n" + SOURCE.replace("):\n    pid", ")\n    pid", 1) + "```",
            "not valid Python",
            id="syntax",
        ),
        pytest.param(
            "FAMILY: hints\n```python\n" + SOURCE + "```\n", "identical to the current source", id="unchanged"
        ),
    ],
)
def test_it_rejects_answers_that_are_not_a_whole_new_module(
    stand_in: StandIn, answer: str, complaint: str
) -> None:
    stand_in.answer = answer
    with pytest.raises(ProposerError, match=complaint) as info:
        _proposer(stand_in).propose(SOURCE, FINDINGS, CONTEXT)
    assert info.value.tokens == 1234 + 567  # a rejected answer still cost tokens
    assert not info.value.permanent


def test_it_turns_a_server_error_into_a_proposer_error(stand_in: StandIn) -> None:
    stand_in.status = 503
    with pytest.raises(ProposerError, match="HTTP 503: model overloaded"):
        _proposer(stand_in).propose(SOURCE, FINDINGS, CONTEXT)


def test_it_marks_refused_credentials_as_permanent(stand_in: StandIn) -> None:
    stand_in.status = 401
    with pytest.raises(ProposerError, match="HTTP 401") as info:
        _proposer(stand_in).propose(SOURCE, FINDINGS, CONTEXT)
    assert info.value.permanent


def test_it_turns_a_timeout_into_a_proposer_error(stand_in: StandIn) -> None:
    stand_in.hold = threading.Event()
    with pytest.raises(ProposerError, match="timed out after 0.5 s"):
        _proposer(stand_in, timeout_s=0.5).propose(SOURCE, FINDINGS, CONTEXT)


def test_it_turns_an_unreachable_endpoint_into_a_proposer_error() -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = LLMConfig(base_url=f"http://127.0.0.1:{port}/v1", model="m", max_retries=0, timeout_s=2)
    with pytest.raises(ProposerError, match="cannot reach LLM endpoint"):
        LLMProposer(cfg).propose(SOURCE, FINDINGS, CONTEXT)


@pytest.mark.parametrize(
    ("header", "family", "addressed"),
    [
        pytest.param(
            "FAMILY: hints\nADDRESSES: test_llm.scalar_loads\n",
            Family.HINTS,
            ("test_llm.scalar_loads",),
            id="explicit",
        ),
        pytest.param(
            "**FAMILY**: `launch_config`\n", Family.LAUNCH_CONFIG, ("test_llm.low_sol",), id="markdown"
        ),
        pytest.param(
            "ADDRESSES: test_llm.low_sol, made_up\n",
            Family.LAUNCH_CONFIG,
            ("test_llm.low_sol",),
            id="from-addressed",
        ),
        pytest.param("FAMILY: telepathy\n", Family.HINTS, ("test_llm.scalar_loads",), id="unknown-family"),
    ],
)
def test_it_reads_family_and_addressed_findings(
    header: str, family: Family, addressed: tuple[str, ...]
) -> None:
    cand = parse_answer(header + "```python\n" + REVISED + "```", SOURCE, FINDINGS)
    assert cand.family is family
    assert cand.findings_addressed == addressed


def test_check_module_accepts_the_test_kernels() -> None:
    for path in sorted(KERNELS.glob("*.py")):
        check_module(path.read_text())
