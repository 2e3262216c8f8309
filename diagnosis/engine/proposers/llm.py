"""The LLM proposer: any OpenAI-compatible chat endpoint rewrites the module from the evidence.

Each call asks for ONE rewrite of the round's family (`ProposalContext.family`) with a prompt
built by `diagnosis.engine.proposers.prompt` from the versioned templates. The answer must be
a FAMILY line, an ADDRESSES line, a RATIONALE citing finding codes, and the whole revised
module in one fenced python block. The module goes through the upload's parse-only checks
(`diagnosis.validation.validate_module_source`: the file is never imported here); anything
else is refused as a `ProposerError` with a stable `code`, never passed on as a guess. An
answer that changes `Model` or the input functions is not refused here: the round loop refuses
it before any job runs (`loop.reference_changes`) and records it as a failed proposal, so the
reviewer sees what was tried.

Bounded: the client's own `timeout` and `max_retries` (exponential backoff, honouring
Retry-After, on connection errors, timeouts, 408/409/429 and 5xx); a hard cap on the tokens of
a round (prompt + completion; the request's completion limit is what is left of it) and of a
run (`TokenBudgetExhausted` ends the run's proposing with the stop reason `token_budget`). The
caps assume CAP_CHARS_PER_TOKEN characters per token for the prompt, denser than the
CHARS_PER_TOKEN estimate the reports use, because code tokenizes denser than prose and a cap
must hold for the server's real count. Every request's tokens (the server's `usage`, or an
estimate flagged `estimated` where it sends none), latency and estimated price come back as an
`LLMUsage`, on the candidate or on the error: a refused answer was still paid for.

The endpoint, model, key, caps and prices come from an `LLMConfig` the caller builds (the
worker reads them from Django settings and the run); this module imports no Django. The API
key lives only in the client object of the worker's process: it is never part of a prompt, a
stored row or a child job's environment.

Tested against a scripted OpenAI-compatible stand-in on loopback (tests/llm_standin.py) with
this same `openai` client; no paid API is called by the test suite.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from diagnosis.engine.errors import ProposerError, TokenBudgetExhausted
from diagnosis.engine.evidence import Family, Finding
from diagnosis.engine.patterns import PatternSpec
from diagnosis.engine.proposers import prompts
from diagnosis.engine.proposers.base import Candidate, ProposalContext, unified_diff
from diagnosis.engine.proposers.prompt import CHARS_PER_TOKEN, Prompt, build_prompt, estimate_tokens
from diagnosis.engine.usage import LLMUsage
from diagnosis.validation import validate_module_source

if TYPE_CHECKING:
    import openai

CAP_CHARS_PER_TOKEN = 3  # the prompt's tokens as the caps count them (see the module docstring)
MAX_ANSWER_BYTES = 1 << 20  # an answer's module above this is refused, like an oversized upload
# the answer repeats the whole module: reserve its size (at the cap's density) with this much
# more for the header and the rationale, and never less than ANSWER_MIN_TOKENS
ANSWER_SLACK = 1.25
ANSWER_EXTRA_TOKENS = 512
ANSWER_MIN_TOKENS = 1024
TOKEN_PARAMS = ("max_tokens", "max_completion_tokens")


@dataclass(frozen=True)
class LLMConfig:
    """Where and how to ask, and what a round and a run may spend. Built by the caller."""

    base_url: str
    model: str
    api_key: str | None = None  # local servers usually need none
    timeout_s: float = 120.0  # per attempt
    max_retries: int = 2  # the client's own retries on connection errors, timeouts, 429 and 5xx
    temperature: float | None = 0.2  # None: the endpoint's default (some models accept no other)
    max_completion_tokens: int = 8192  # the most one answer may take
    round_tokens: int = 32_000  # hard cap: prompt + completion tokens of one round
    run_tokens: int = 400_000  # hard cap: every round of the run together
    price_prompt_per_m: float = 0.0  # price per 1M prompt tokens (0 and 0: unpriced)
    price_completion_per_m: float = 0.0
    # the request field that bounds the answer: OpenAI's reasoning models want
    # max_completion_tokens, most OpenAI-compatible servers read max_tokens
    token_param: str = "max_tokens"
    prompt_version: str = prompts.VERSION

    def __post_init__(self) -> None:
        if self.token_param not in TOKEN_PARAMS:
            raise ValueError(f"token_param must be one of {TOKEN_PARAMS}, not {self.token_param!r}")

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float | None:
        if not (self.price_prompt_per_m or self.price_completion_per_m):
            return None
        return (
            prompt_tokens * self.price_prompt_per_m + completion_tokens * self.price_completion_per_m
        ) / 1e6


@dataclass(frozen=True)
class _Answer:
    text: str
    finish_reason: str
    usage: LLMUsage


class LLMProposer:
    """Proposer backed by an OpenAI-compatible `/chat/completions` endpoint (one per run: it
    counts the run's tokens)."""

    name = "llm"

    def __init__(
        self,
        config: LLMConfig,
        *,
        spent_tokens: int = 0,
        patterns: Sequence[PatternSpec] = (),
        client: Any | None = None,
    ) -> None:
        self.config = config
        self.spent_tokens = spent_tokens  # by this run so far (earlier attempts included)
        self.patterns = tuple(patterns)
        self._round_spent: dict[int, int] = {}
        self.prompts: list[Prompt] = []  # what was sent, for the caller's inspection
        self._client = client or _openai().OpenAI(
            base_url=config.base_url,
            # The client insists on a key; OpenAI-compatible local servers ignore it.
            api_key=config.api_key or "not-needed",
            timeout=config.timeout_s,
            max_retries=config.max_retries,
        )

    # -- budget

    def _budget(self, round_index: int) -> tuple[int, bool]:
        """Tokens this request may use (prompt + completion) and whether the run's cap (rather
        than the round's) is what limits it."""
        cfg = self.config
        round_left = cfg.round_tokens - self._round_spent.get(round_index, 0)
        run_left = cfg.run_tokens - self.spent_tokens
        return min(round_left, run_left), run_left <= round_left

    def _reserve(self, source: str) -> int:
        """Completion tokens to keep free for an answer that repeats the whole module."""
        need = math.ceil(len(source) / CAP_CHARS_PER_TOKEN * ANSWER_SLACK) + ANSWER_EXTRA_TOKENS
        return min(self.config.max_completion_tokens, max(ANSWER_MIN_TOKENS, need))

    # -- proposing

    def propose(self, source: str, findings: list[Finding], context: ProposalContext) -> list[Candidate]:
        cfg = self.config
        budget, run_limited = self._budget(context.round_index)
        reserve = self._reserve(source)
        prompt_chars = (budget - reserve) * CAP_CHARS_PER_TOKEN
        try:
            if prompt_chars <= 0:
                raise ProposerError("no room for a prompt", code="prompt_too_large", permanent=True)
            prompt = build_prompt(
                source,
                findings,
                context,
                max_chars=prompt_chars,
                patterns=self.patterns,
                version=cfg.prompt_version,
            )
        except ProposerError as exc:
            if exc.code != "prompt_too_large":
                raise
            if run_limited:
                raise TokenBudgetExhausted(
                    f"the run's LLM token cap is reached: {self.spent_tokens} of {cfg.run_tokens} tokens spent, "
                    f"and the next request needs about {reserve + _cap_tokens(len(source))} "
                    "(the module and its answer)"
                ) from exc
            raise ProposerError(
                f"the round's LLM token cap of {cfg.round_tokens} tokens cannot hold this module and its "
                f"answer (about {reserve + _cap_tokens(len(source))} tokens): {exc.message}",
                permanent=True,
                code="round_token_cap",
            ) from exc
        max_tokens = min(cfg.max_completion_tokens, budget - _cap_tokens(prompt.chars))
        self.prompts.append(prompt)
        answer = self._ask(prompt, max_tokens)
        self.spent_tokens += answer.usage.tokens
        self._round_spent[context.round_index] = (
            self._round_spent.get(context.round_index, 0) + answer.usage.tokens
        )
        if answer.finish_reason == "length":
            raise ProposerError(
                f"the answer was cut off at the completion limit of {max_tokens} tokens before it ended",
                code="truncated",
                usage=answer.usage,
            )
        return [parse_answer(answer.text, source, findings, family=context.family, usage=answer.usage)]

    def _ask(self, prompt: Prompt, max_tokens: int) -> _Answer:
        cfg = self.config
        options: dict[str, Any] = {cfg.token_param: max_tokens}
        if cfg.temperature is not None:
            options["temperature"] = cfg.temperature
        t0 = time.perf_counter()
        openai = _openai()

        def failed(message: str, code: str, *, permanent: bool = False) -> ProposerError:
            usage = LLMUsage(
                model=cfg.model,
                latency_s=time.perf_counter() - t0,
                prompt_chars=prompt.chars,
                prompt_version=prompt.version,
                requests=1,
            )
            return ProposerError(message, code=code, permanent=permanent, usage=usage)

        try:
            response = self._client.chat.completions.create(
                model=cfg.model, messages=prompt.messages(), **options
            )
        except openai.APITimeoutError as exc:
            raise failed(
                f"LLM endpoint {cfg.base_url} timed out after {cfg.timeout_s:g} s "
                f"({cfg.max_retries} retr{'y' if cfg.max_retries == 1 else 'ies'})",
                "timeout",
            ) from exc
        except openai.APIConnectionError as exc:
            raise failed(f"cannot reach LLM endpoint {cfg.base_url}: {exc}", "unreachable") from exc
        except (openai.AuthenticationError, openai.PermissionDeniedError, openai.NotFoundError) as exc:
            raise failed(
                f"LLM endpoint {cfg.base_url} refused model {cfg.model!r} (HTTP {exc.status_code}): {_brief(exc)}",
                f"http_{exc.status_code}",
                permanent=True,
            ) from exc
        except openai.APIStatusError as exc:
            raise failed(
                f"LLM endpoint {cfg.base_url} answered HTTP {exc.status_code}: {_brief(exc)}",
                f"http_{exc.status_code}",
            ) from exc
        except openai.OpenAIError as exc:
            raise failed(f"LLM request failed: {exc}", "bad_response") from exc
        except ValueError as exc:  # the client's json.JSONDecodeError: a 200 whose body is not JSON
            raise failed(
                f"LLM endpoint {cfg.base_url} answered with a body that is not JSON: {exc}", "bad_response"
            ) from exc
        latency = time.perf_counter() - t0

        choices = getattr(response, "choices", None) or []
        message = choices[0].message if choices else None
        text = (message.content if message is not None else None) or ""
        finish = str(choices[0].finish_reason or "") if choices else ""
        usage_in = getattr(response, "usage", None)
        if usage_in is not None and (usage_in.prompt_tokens or usage_in.completion_tokens):
            prompt_tokens = int(usage_in.prompt_tokens or 0)
            completion_tokens = int(usage_in.completion_tokens or 0)
            estimated = False
        else:  # the endpoint says nothing: count what went and came at CHARS_PER_TOKEN
            prompt_tokens, completion_tokens = estimate_tokens(prompt.chars), estimate_tokens(len(text))
            estimated = True
        usage = LLMUsage(
            model=cfg.model,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            latency_s=latency,
            cost=cfg.cost(prompt_tokens, completion_tokens),
            prompt_chars=prompt.chars,
            prompt_version=prompt.version,
            requests=1,
            estimated=estimated,
        )
        if not text.strip():
            raise ProposerError("the LLM answer has no content", code="empty_answer", usage=usage)
        return _Answer(text, finish, usage)


def _cap_tokens(chars: int) -> int:
    return math.ceil(chars / CAP_CHARS_PER_TOKEN)


def _openai():
    """The `openai` package, imported where a request is made: importing it takes 1.7 s (its
    generated types), and every Django process reads this module through the forms (the web
    process, `manage.py` commands, the workers) whether or not an LLM is configured."""
    import openai

    return openai


def _brief(exc: openai.APIStatusError) -> str:
    # The client hands over either the whole JSON body or its "error" object.
    body = exc.body if isinstance(exc.body, dict) else {}
    err = body.get("error", body)
    if isinstance(err, dict) and err.get("message"):
        return str(err["message"])[:300]
    return str(exc.message)[:300]


# --- the answer ---------------------------------------------------------------------------

# ```python\n...\n``` or ```py ... ``` or a bare ``` fence
_FENCE = re.compile(r"```[ \t]*(?:python|py|python3)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
_FAMILY = re.compile(r"^\s*\**FAMILY\**\s*:\s*`?([a-z_]+)`?", re.IGNORECASE | re.MULTILINE)
_ADDRESSES = re.compile(r"^\s*\**ADDRESSES\**\s*:\s*(.+)$", re.IGNORECASE | re.MULTILINE)
_RATIONALE = re.compile(
    r"^\s*\**RATIONALE\**\s*:\s*(.+?)(?=^\s*```|\Z)", re.IGNORECASE | re.MULTILINE | re.DOTALL
)
_CODE_TOKEN = re.compile(r"[A-Za-z0-9_.\-]+")


class InvalidAnswer(ProposerError):
    """The answer's module fails the upload's checks; `validation_codes` are theirs
    (`syntax_error`, `missing_name`, `no_triton_kernel`, ...)."""

    def __init__(self, message: str, validation_codes: Sequence[str], *, usage: LLMUsage | None) -> None:
        super().__init__(message, code="invalid_module", usage=usage)
        self.validation_codes = tuple(validation_codes)


def parse_answer(
    text: str,
    parent: str,
    findings: Sequence[Finding],
    *,
    family: Family | None = None,
    usage: LLMUsage | None = None,
) -> Candidate:
    """Turn the model's answer into a Candidate, or raise ProposerError saying what was wrong.

    `family` is the one the round asked for: an answer naming another is refused (one family
    per round); an answer naming none is taken to be of it.
    """

    def refuse(message: str, code: str) -> ProposerError:
        return ProposerError(message, code=code, usage=usage)

    blocks = [b for b in _FENCE.findall(text) if b.strip()]
    if not blocks:
        raise refuse("the LLM answer contains no fenced python code block", "no_code_block")
    # The longest block is the module; shorter ones are usually illustrative snippets.
    code = max(blocks, key=len).strip("\n") + "\n"
    check_module(code, usage=usage)
    if code.strip() == parent.strip():
        raise refuse("the LLM answer is identical to the current source", "unchanged")

    known = list(dict.fromkeys(f.code for f in findings))
    named: list[str] = []
    m = _ADDRESSES.search(text)
    if m:
        named = [c.strip(" `*.[]") for c in m.group(1).split(",")]
    m = _RATIONALE.search(text)
    rationale = " ".join(m.group(1).split()) if m else ""
    cited = [c for c in dict.fromkeys(t.strip(".-") for t in _CODE_TOKEN.findall(rationale)) if c in known]
    addressed = tuple(dict.fromkeys(c for c in [*named, *cited] if c in known))

    answered: Family | None = None
    m = _FAMILY.search(text)
    if m:
        try:
            answered = Family(m.group(1).lower())
        except ValueError:
            answered = None
    if family is not None and answered is not None and answered is not family:
        raise refuse(
            f"the LLM answer is a {answered} rewrite; this round asked for one {family} rewrite",
            "wrong_family",
        )
    chosen = family or answered
    if chosen is None:
        # Fall back to the family of the findings it says it acts on, else the strongest finding.
        pool = [f for f in findings if f.code in addressed] or list(findings)
        chosen = pool[0].family if pool else Family.NONE
    if not addressed:
        addressed = tuple(dict.fromkeys(f.code for f in findings if f.family == chosen))
    return Candidate(
        source=code,
        diff=unified_diff(parent, code),
        family=chosen,
        rationale=rationale[:2000],
        findings_addressed=addressed,
        proposer="llm",
        tokens=usage.tokens if usage is not None else 0,
        usage=usage,
    )


def check_module(code: str, *, usage: LLMUsage | None = None) -> None:
    """The upload's parse-only checks on an answer's module (size, syntax, Model, ModelNew,
    get_inputs, get_init_inputs, a @triton.jit kernel); ProposerError `invalid_module` naming
    each problem and its line."""
    result = validate_module_source(code, "answer.py", MAX_ANSWER_BYTES)
    if result.ok:
        return
    problems = "; ".join(str(e) for e in result.errors)
    raise InvalidAnswer(f"the LLM answer is not a valid kernel module: {problems}", result.codes, usage=usage)


__all__ = [
    "CAP_CHARS_PER_TOKEN",
    "CHARS_PER_TOKEN",
    "LLMConfig",
    "InvalidAnswer",
    "LLMProposer",
    "check_module",
    "parse_answer",
]
