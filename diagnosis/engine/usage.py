"""What asking an LLM cost: tokens, latency and the estimated price of one or more requests.

A proposer that asks an LLM attaches an `LLMUsage` to its candidate (or to the ProposerError
it raises: a refused answer was still paid for); the round loop adds them up per round
(`RoundCost.llm`) and the worker stores them on the round row.

Standard library only: `diagnosis.engine.errors` imports it, and the sandbox child imports that.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LLMUsage:
    """One or more requests to one endpoint; `plus` adds the requests of a round together."""

    model: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0  # wall time of the requests, the client's retries and backoff included
    # estimated price from the price settings (per 1M prompt / completion tokens); None: unpriced
    cost: float | None = None
    prompt_chars: int = 0  # characters sent (system + user messages)
    prompt_version: str = ""  # the prompt templates' VERSION
    requests: int = 0  # requests made (each may include the client's own retries)
    estimated: bool = False  # the endpoint reported no usage: tokens estimated from characters

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def plus(self, other: LLMUsage | None) -> LLMUsage:
        if other is None:
            return self
        cost = None if self.cost is None and other.cost is None else (self.cost or 0.0) + (other.cost or 0.0)
        return LLMUsage(
            model=self.model or other.model,
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            latency_s=self.latency_s + other.latency_s,
            cost=cost,
            prompt_chars=self.prompt_chars + other.prompt_chars,
            prompt_version=self.prompt_version or other.prompt_version,
            requests=self.requests + other.requests,
            estimated=self.estimated or other.estimated,
        )


def add_usage(total: LLMUsage | None, more: LLMUsage | None) -> LLMUsage | None:
    """`total.plus(more)` where either may be None."""
    if total is None:
        return more
    return total.plus(more)
