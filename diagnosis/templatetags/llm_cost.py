"""Template helpers for what the LLM did in a round: who proposed, the codes it cited, sizes."""

from __future__ import annotations

from django import template

from diagnosis.engine.proposers.prompt import estimate_tokens
from diagnosis.models import Round

register = template.Library()


@register.filter
def round_proposers(round_: Round) -> str:
    """'llm', 'rules' or 'rules, llm': whose proposals the round has; 'llm' for a round whose
    LLM answer was refused before it became a proposal."""
    names = list(dict.fromkeys(p.proposer for p in round_.proposals.all()))
    if not names and round_.llm_requests:
        names = ["llm"]
    return ", ".join(names)


@register.filter
def cited_codes(round_: Round) -> list[str]:
    """The finding codes the round's proposals say they act on, in order (prefetch
    `proposals__findings` to read them without a query per round)."""
    return list(dict.fromkeys(f.code for p in round_.proposals.all() for f in p.findings.all()))


@register.filter
def approx_tokens(chars: int) -> int:
    """The prompt's size in tokens, estimated at characters / 4 (as the docs' figures are)."""
    return estimate_tokens(int(chars or 0))
