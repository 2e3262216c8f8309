"""The LLM settings as the web and the workers read them, and the proposers a run asks.

One place for both sides: the upload form offers the LLM proposers only when `llm_enabled()`,
and a worker builds the run's proposer with `make_proposer(run)` from the same settings plus
what the run chose (model, temperature, token caps). The API key comes from the settings (the
environment) straight into the client object in this process; it is never stored on the run
and never handed to a sandboxed job.
"""

from __future__ import annotations

from django.conf import settings

from diagnosis.engine.patterns import PatternSpec
from diagnosis.engine.proposers.base import Proposer
from diagnosis.engine.proposers.hybrid import HybridProposer
from diagnosis.engine.proposers.llm import LLMConfig, LLMProposer
from diagnosis.engine.proposers.rules import RulesProposer
from diagnosis.models import DiagnosisRun, Pattern
from runner.errors import RunFailed

Choice = DiagnosisRun.Proposer


def llm_enabled() -> bool:
    """An endpoint and a model are configured."""
    return bool(settings.LLM_BASE_URL and settings.LLM_MODEL)


def llm_models() -> list[str]:
    """The models a run may choose: LLM_MODEL first, then LLM_MODELS."""
    if not llm_enabled():
        return []
    return list(dict.fromkeys([settings.LLM_MODEL, *settings.LLM_MODELS]))


def llm_config(run: DiagnosisRun) -> LLMConfig:
    """The run's LLM: the deployment's endpoint and key, the run's model, temperature and caps
    (within the deployment's), and the deployment's prices."""
    model = run.llm_model or settings.LLM_MODEL
    if model not in llm_models():
        raise RunFailed(f"the run asks for LLM model {model!r}, which this deployment does not offer")
    temperature = run.llm_temperature if run.llm_temperature is not None else settings.LLM_TEMPERATURE
    return LLMConfig(
        base_url=settings.LLM_BASE_URL,
        model=model,
        api_key=settings.LLM_API_KEY,
        timeout_s=settings.LLM_TIMEOUT_S,
        max_retries=settings.LLM_MAX_RETRIES,
        temperature=temperature,
        max_completion_tokens=settings.LLM_MAX_COMPLETION_TOKENS,
        round_tokens=min(run.llm_round_tokens or settings.LLM_ROUND_TOKENS, settings.LLM_ROUND_TOKENS),
        run_tokens=min(run.llm_run_tokens or settings.LLM_RUN_TOKENS, settings.LLM_RUN_TOKENS),
        price_prompt_per_m=settings.LLM_PRICE_PROMPT_PER_M,
        price_completion_per_m=settings.LLM_PRICE_COMPLETION_PER_M,
        token_param=settings.LLM_TOKEN_PARAM,
    )


def team_patterns(run: DiagnosisRun) -> tuple[PatternSpec, ...]:
    """The patterns the run's team accepted, as tier 0 matches them and the prompt shows them."""
    rows = Pattern.objects.filter(team_id=run.version.kernel.team_id).order_by("created")
    return tuple(
        PatternSpec.from_json(
            {
                "family": row.family,
                "mechanism": row.mechanism,
                "before": row.before,
                "after": row.after,
                "evidence_codes": row.evidence or [],
                "signature": row.signature or {},
                "name": f"pattern {row.pk}",
            }
        )
        for row in rows
    )


def make_proposer(run: DiagnosisRun, patterns: tuple[PatternSpec, ...] = ()) -> Proposer | None:
    """The run's proposer; None selects the loop's default (the rules). RunFailed when the run
    asks for an LLM this deployment does not have."""
    name = run.proposer
    if name in ("", Choice.RULES):
        return None
    if name not in (Choice.LLM, Choice.HYBRID):
        raise RunFailed(f"unknown proposer {name!r} (rules, llm or hybrid)")
    if not llm_enabled():
        raise RunFailed(f"the {name} proposer is not configured: set LLM_BASE_URL and LLM_MODEL")
    # an earlier attempt's tokens count against the run's cap
    llm = LLMProposer(llm_config(run), spent_tokens=run.tokens, patterns=patterns)
    if name == Choice.LLM:
        return llm
    return HybridProposer(
        RulesProposer(max_candidates=None), llm, stall_rounds=settings.LLM_HYBRID_STALL_ROUNDS
    )
