"""Runs with an LLM proposer, driven by `runner.pipeline.execute_run` (what the actor calls),
against the scripted stand-in endpoint with the real client.

Two kinds: loop logic and storage on the fake timing source of tests/engine/test_loop.py
(what each round row keeps of the LLM, the run's totals, the token-cap stop), and one run whose
jobs really run in the sandboxed cpu child, to show that the API key never reaches a child:
the LLM's answer is a module that reports the environment it sees.
"""

from __future__ import annotations

import pytest

from diagnosis.engine import loop as loop_mod
from diagnosis.engine.evidence import Tier, TierResult
from diagnosis.engine.proposers.hybrid import HybridProposer
from diagnosis.engine.proposers.llm import LLMProposer
from diagnosis.models import Artefact, DiagnosisRun, KernelVersion, Proposal, Round
from runner import pipeline
from runner.errors import RunFailed
from runner.execute import Executor
from tests.conftest import GOOD_SOURCE
from tests.engine.test_loop import LC, FakeTimingExecutor, fake_ms, finding, module, sufficient, with_ms
from tests.llm_standin import Reply, Request, StandIn, answer, family_in, module_in

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "sk-LLMKEY-must-not-reach-a-child-4242"


@pytest.fixture
def llm_settings(settings, llm_standin: StandIn):
    settings.LLM_BASE_URL, settings.LLM_MODEL = llm_standin.url, "kernel-coder"
    settings.LLM_MODELS = ["kernel-coder-large"]
    settings.LLM_API_KEY = SECRET
    settings.LLM_MAX_RETRIES = 0
    settings.LLM_PRICE_PROMPT_PER_M, settings.LLM_PRICE_COMPLETION_PER_M = 2.0, 8.0
    settings.LLM_HYBRID_STALL_ROUNDS = 1
    return settings


@pytest.fixture
def lc_tiers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tier 0 finds a launch-config problem; no other tier runs a job (no compile on cpu)."""

    def run_tier(self, tier: Tier, parent, results) -> TierResult:
        if tier is Tier.TRIAGE:
            return sufficient(Tier.TRIAGE, finding(LC.code))
        return TierResult(tier)

    monkeypatch.setattr(loop_mod._Loop, "_run_tier", run_tier)


def fake_run(version: KernelVersion, proposer: str, **fields) -> DiagnosisRun:
    source = module(2.0)
    KernelVersion.objects.filter(id=version.id).update(source=source, sha256=KernelVersion.digest(source))
    return DiagnosisRun.objects.create(
        version=version, device="cuda", target="sm_90", proposer=proposer, round_budget=3, **fields
    )


def halving(request: Request) -> Reply:
    source = module_in(request.user)
    new = with_ms(source, fake_ms(source) / 2, f"\n# llm {request.at}\n")
    return Reply(answer(new, family=family_in(request.user), addresses=(LC.code,)), prompt_tokens=1500)


def test_each_llm_round_stores_its_tokens_latency_and_cost(
    version, llm_settings, llm_standin, lc_tiers
) -> None:
    llm_standin.respond = halving
    run = fake_run(version, "llm", llm_model="kernel-coder-large", llm_temperature=0.7)

    pipeline.execute_run(run.id, executor=FakeTimingExecutor())

    run.refresh_from_db()
    assert run.status == DiagnosisRun.Status.DONE, run.error
    rounds = list(Round.objects.filter(run=run).order_by("index"))
    assert [r.verdict for r in rounds] == ["improved"] * 3
    assert [r.model for r in llm_standin.requests] == ["kernel-coder-large"] * 3
    assert {r.body["temperature"] for r in llm_standin.requests} == {0.7}
    for row, request in zip(rounds, llm_standin.requests, strict=True):
        assert row.llm_requests == 1 and row.llm_prompt_tokens == 1500
        assert row.llm_completion_tokens > 0 and not row.llm_tokens_estimated
        assert row.tokens == row.llm_prompt_tokens + row.llm_completion_tokens
        assert row.llm_prompt_chars == request.prompt_chars and row.llm_prompt_version == "v1"
        assert row.llm_latency_s > 0
        assert row.llm_cost == pytest.approx((1500 * 2.0 + row.llm_completion_tokens * 8.0) / 1e6)
    assert run.tokens == sum(r.tokens for r in rounds)
    assert run.llm_cost == pytest.approx(sum(r.llm_cost for r in rounds))
    proposals = Proposal.objects.filter(round__run=run)
    assert {p.proposer for p in proposals} == {"llm"}
    assert all([f.code for f in p.findings.all()] == [LC.code] for p in proposals)  # the codes it cited


def test_the_run_cap_stops_the_run_and_the_summary_says_so(
    version, llm_settings, llm_standin, lc_tiers
) -> None:
    llm_standin.respond = halving
    run = fake_run(version, "llm", llm_round_tokens=4000, llm_run_tokens=4000)

    pipeline.execute_run(run.id, executor=FakeTimingExecutor())

    run.refresh_from_db()
    assert run.status == DiagnosisRun.Status.DONE
    assert run.summary["stop_reason"] == "token_budget"
    assert "token cap is reached" in run.summary["stop_detail"]
    assert run.tokens <= 4000  # the cap held, on the server's own counts
    last = Round.objects.filter(run=run).order_by("index").last()
    assert last.verdict == "inconclusive" and "token cap is reached" in last.hypothesis
    assert len(llm_standin.requests) < last.index  # the last round sent nothing


def test_a_second_attempt_counts_the_first_attempts_tokens(
    version, llm_settings, llm_standin, lc_tiers
) -> None:
    run = fake_run(version, "llm", llm_run_tokens=10_000)
    DiagnosisRun.objects.filter(id=run.id).update(tokens=9_500)
    run.refresh_from_db()
    proposer = pipeline.make_proposer(run)
    assert isinstance(proposer, LLMProposer) and proposer.spent_tokens == 9_500


def test_rules_then_llm_records_which_proposer_made_each_round(
    version, llm_settings, llm_standin, lc_tiers
) -> None:
    llm_standin.respond = halving
    run = fake_run(version, "hybrid")

    pipeline.execute_run(run.id, executor=FakeTimingExecutor())

    rounds = list(Round.objects.filter(run=run).order_by("index").prefetch_related("proposals"))
    by = [[p.proposer for p in r.proposals.all()] for r in rounds]
    # the rules' launch-config rewrite (an autotune space) gains nothing on the fake timing
    # source; stalled after one round, the LLM takes the family and wins; then the rules again
    assert by[0] == ["rules"] and rounds[0].llm_requests == 0 and rounds[0].tokens == 0
    assert by[1] == ["llm"] and rounds[1].verdict == "improved" and rounds[1].llm_requests == 1


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        pytest.param({}, ("kernel-coder", 0.2, 32_000, 400_000), id="defaults"),
        pytest.param(
            {
                "llm_model": "kernel-coder-large",
                "llm_temperature": 0.0,
                "llm_round_tokens": 9000,
                "llm_run_tokens": 20_000,
            },
            ("kernel-coder-large", 0.0, 9000, 20_000),
            id="the-run-chose",
        ),
        pytest.param(
            {"llm_round_tokens": 10**6, "llm_run_tokens": 10**7},
            ("kernel-coder", 0.2, 32_000, 400_000),
            id="capped",
        ),
    ],
)
def test_the_run_s_choices_within_the_deployment_s_caps(version, llm_settings, fields, expected) -> None:
    llm_settings.LLM_TEMPERATURE, llm_settings.LLM_ROUND_TOKENS, llm_settings.LLM_RUN_TOKENS = (
        0.2,
        32_000,
        400_000,
    )
    run = DiagnosisRun.objects.create(version=version, proposer="hybrid", **fields)
    proposer = pipeline.make_proposer(run)
    assert isinstance(proposer, HybridProposer) and proposer.stall_rounds == 1
    cfg = proposer.llm.config
    assert (cfg.model, cfg.temperature, cfg.round_tokens, cfg.run_tokens) == expected
    assert cfg.api_key == SECRET and (cfg.price_prompt_per_m, cfg.price_completion_per_m) == (2.0, 8.0)


def test_a_model_the_deployment_does_not_offer_fails_the_run(version, llm_settings) -> None:
    run = DiagnosisRun.objects.create(version=version, proposer="llm", llm_model="someone-elses-model")
    with pytest.raises(RunFailed, match="does not offer"):
        pipeline.make_proposer(run)


ENV_REPORTING = GOOD_SOURCE.replace(
    "class ModelNew(nn.Module):\n    def forward(self, x):\n",
    "class ModelNew(nn.Module):\n    def forward(self, x):\n"
    "        import os\n\n"
    "        raise RuntimeError('environment seen by the candidate: ' + repr(sorted(os.environ.items())))\n",
)


@pytest.mark.slow
def test_the_api_key_never_reaches_a_child(version, llm_settings, llm_standin, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("LLM_API_KEY", SECRET)  # where a deployment keeps it: the worker's environment
    monkeypatch.setattr(
        loop_mod._Loop,
        "_run_tier",
        lambda self, tier, parent, results: (
            sufficient(Tier.TRIAGE, finding(LC.code)) if tier is Tier.TRIAGE else TierResult(tier)
        ),
    )
    llm_standin.script(Reply(answer(ENV_REPORTING, addresses=(LC.code,))))
    run = DiagnosisRun.objects.create(version=version, device="cpu", proposer="llm", round_budget=1)

    pipeline.execute_run(run.id, executor=Executor("cpu", "sm_90", cache_dir=tmp_path / "triton"))

    (request,) = llm_standin.requests
    assert request.headers["authorization"] == f"Bearer {SECRET}"  # the key was in play
    proposal = Proposal.objects.get(round__run=run)
    assert proposal.status == Proposal.Status.FAILED
    assert "environment seen by the candidate" in proposal.failure_reason
    assert "'PATH'" in proposal.failure_reason  # it did report what it saw
    assert "LLM_API_KEY" not in proposal.failure_reason
    run.refresh_from_db()
    stored = [
        run.error,
        str(run.summary),
        *Round.objects.filter(run=run).values_list("hypothesis", flat=True),
        *(
            str(v)
            for v in Proposal.objects.filter(round__run=run).values_list("verification", "failure_reason")
        ),
        *(a.text for a in Artefact.objects.filter(run=run)),
    ]
    assert not any(SECRET in text for text in stored)


def test_manage_py_optimize_runs_rules_then_llm(
    llm_settings, llm_standin, lc_tiers, monkeypatch, tmp_path, capsys
):
    import json

    from django.core.management import call_command

    llm_standin.respond = halving
    monkeypatch.setattr(pipeline, "make_executor", lambda run: FakeTimingExecutor())
    path = tmp_path / "fake.py"
    path.write_text(module(2.0))

    call_command("optimize", str(path), "--device", "cuda", "--proposer", "hybrid", "--rounds", "2", "--json")

    report = json.loads(capsys.readouterr().out)
    assert report["run"]["proposer"] == "hybrid"
    assert [p["proposer"] for p in report["proposals"]] == ["rules", "llm"]
    assert report["run"]["tokens"] == sum(r.tokens for r in Round.objects.all()) > 0
