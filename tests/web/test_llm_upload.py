"""The proposer choice on the upload forms, and what the run page shows of an LLM's rounds."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from diagnosis.models import DiagnosisRun, Proposal, Round
from tests.conftest import GOOD_SOURCE, PROPOSED_SOURCE

pytestmark = pytest.mark.django_db

SECRET = "sk-LLMKEY-never-on-a-page-777"


@pytest.fixture
def enqueued(monkeypatch):
    calls: list[tuple[int, str]] = []
    monkeypatch.setattr("diagnosis.forms.enqueue_run", lambda run_id, device: calls.append((run_id, device)))
    return calls


@pytest.fixture
def llm_on(settings):
    settings.LLM_BASE_URL, settings.LLM_MODEL = "http://127.0.0.1:9/v1", "kernel-coder"
    settings.LLM_MODELS = ["kernel-coder-large", "kernel-coder"]
    settings.LLM_API_KEY = SECRET
    settings.LLM_TEMPERATURE = 0.2
    settings.LLM_ROUND_TOKENS, settings.LLM_RUN_TOKENS = 30_000, 300_000
    return settings


@pytest.fixture
def llm_off(settings):
    settings.LLM_BASE_URL = settings.LLM_MODEL = None
    return settings


def upload(client, url: str, **fields):
    data = {"device": "cpu", "target": "sm_90", "round_budget": 3, "name": "double", **fields}
    data["file"] = SimpleUploadedFile("double.py", GOOD_SOURCE.encode(), content_type="text/x-python")
    return client.post(url, data)


def test_without_an_llm_the_form_offers_the_rules_and_says_how_to_configure_one(
    client, owner, team, llm_off, enqueued
) -> None:
    client.force_login(owner)
    page = client.get(reverse("kernel-upload")).content.decode()
    assert 'name="proposer"' not in page and 'name="llm_model"' not in page
    assert 'id="llm-off"' in page and "LLM_BASE_URL" in page and "LLM_MODEL" in page

    response = upload(
        client, reverse("kernel-upload"), team=team.pk, proposer="llm"
    )  # a forged choice is ignored
    assert response.status_code == 302
    run = DiagnosisRun.objects.get()
    assert run.proposer == "rules" and run.llm_model == ""


@pytest.mark.parametrize("url_name", ["kernel-upload", "kernel-detail"])
def test_with_an_llm_both_forms_offer_the_three_proposers(client, owner, kernel, llm_on, url_name) -> None:
    client.force_login(owner)
    url = reverse(url_name) if url_name == "kernel-upload" else reverse(url_name, args=[kernel.pk])
    page = client.get(url).content.decode()
    for value, label in (("rules", "rules"), ("llm", "LLM"), ("hybrid", "rules, then LLM")):
        assert f'<option value="{value}"' in page and f">{label}</option>" in page
    assert '<option value="kernel-coder" selected>' in page  # LLM_MODEL first and chosen
    assert page.count('<option value="kernel-coder"') == 1 and '<option value="kernel-coder-large"' in page
    assert 'name="llm_round_tokens"' in page and 'max="30000"' in page
    assert 'id="llm-off"' not in page
    assert SECRET not in page


def test_an_llm_run_stores_its_choices(client, owner, team, llm_on, enqueued) -> None:
    client.force_login(owner)
    response = upload(
        client,
        reverse("kernel-upload"),
        team=team.pk,
        proposer="hybrid",
        llm_model="kernel-coder-large",
        llm_temperature="0.5",
        llm_round_tokens="12000",
        llm_run_tokens="60000",
    )
    assert response.status_code == 302, response.content.decode()[-2000:]
    run = DiagnosisRun.objects.get()
    assert (run.proposer, run.llm_model, run.llm_temperature) == ("hybrid", "kernel-coder-large", 0.5)
    assert (run.llm_round_tokens, run.llm_run_tokens) == (12_000, 60_000)


def test_a_rules_run_keeps_no_llm_choices(client, owner, team, llm_on, enqueued) -> None:
    client.force_login(owner)
    upload(client, reverse("kernel-upload"), team=team.pk, proposer="rules", llm_model="kernel-coder-large")
    run = DiagnosisRun.objects.get()
    assert (run.proposer, run.llm_model, run.llm_round_tokens) == ("rules", "", None)


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        pytest.param({"llm_round_tokens": "30001"}, "llm_round_tokens", id="round-above-the-deployment-cap"),
        pytest.param({"llm_run_tokens": "300001"}, "llm_run_tokens", id="run-above-the-deployment-cap"),
        pytest.param({"llm_round_tokens": "500"}, "llm_round_tokens", id="round-too-small"),
        pytest.param(
            {"llm_round_tokens": "20000", "llm_run_tokens": "10000"}, "llm_run_tokens", id="run-below-round"
        ),
        pytest.param({"llm_temperature": "3"}, "llm_temperature", id="temperature"),
        pytest.param({"llm_model": "someone-elses-model"}, "llm_model", id="model-not-offered"),
    ],
)
def test_llm_choices_outside_the_deployment_s_are_refused(
    client, owner, team, llm_on, enqueued, fields: dict, field: str
) -> None:
    client.force_login(owner)
    response = upload(client, reverse("kernel-upload"), team=team.pk, proposer="llm", **fields)
    assert response.status_code == 400
    assert field in response.context["form"].errors
    assert DiagnosisRun.objects.count() == 0 and enqueued == []


# --- the run page ----------------------------------------------------------------------------


@pytest.fixture
def llm_run(run, version, finding) -> DiagnosisRun:
    DiagnosisRun.objects.filter(id=run.id).update(
        proposer="hybrid", llm_model="kernel-coder", llm_run_tokens=50_000, tokens=3900, llm_cost=0.0123
    )
    first = Round.objects.get(run=run, index=1)
    Round.objects.filter(id=first.id).update(
        verdict="no-gain",
        tokens=3900,
        llm_requests=1,
        llm_prompt_tokens=3100,
        llm_completion_tokens=800,
        llm_prompt_chars=12_400,
        llm_prompt_version="v1",
        llm_latency_s=2.5,
        llm_cost=0.0123,
    )
    good = Proposal.objects.create(
        round=first,
        parent_version=version,
        parent_source=GOOD_SOURCE,
        source=PROPOSED_SOURCE,
        diff="",
        proposer="llm",
        family="launch_config",
        status=Proposal.Status.FAILED,
        failure_reason="constant_output: case 0, seed 0: the output did not change",
    )
    good.findings.add(finding)
    Round.objects.create(
        run=run, index=2, verdict="inconclusive", hypothesis="the run's LLM token cap is reached"
    )
    run.refresh_from_db()
    return run


def test_the_run_page_shows_each_llm_round_s_size_tokens_cost_and_cited_codes(client, owner, llm_run) -> None:
    client.force_login(owner)
    page = client.get(reverse("run-detail", args=[llm_run.pk])).content.decode()
    row = page[page.index('<div class="llm" data-round="1"') :]
    row = row[: row.index("</div>")]
    assert '<span class="llm-proposer">llm</span>' in row
    assert 'data-chars="12400"' in row and "~3100 tokens, v1" in row and "3100 + 800 tokens" in row
    assert 'data-prompt="3100" data-completion="800"' in row
    assert "$0.0123" in row and "2.5 s" in row
    assert "<code>small_block</code>" in row  # the code its proposal cites
    assert "refused: constant_output" in row
    assert "kernel-coder" in page and "3900 of 50000 tokens" in page
    assert SECRET not in page


def test_a_rules_run_page_has_no_llm_column(client, owner, run, round_) -> None:
    client.force_login(owner)
    page = client.get(reverse("run-detail", args=[run.pk])).content.decode()
    assert "<th>LLM</th>" not in page and 'class="llm"' not in page


def test_a_run_stopped_by_its_token_cap_says_so(client, owner, llm_run) -> None:
    DiagnosisRun.objects.filter(id=llm_run.id).update(
        status="done",
        summary={
            "stop_reason": "token_budget",
            "stop_detail": "the proposer cannot continue: the run's LLM token cap is reached",
        },
    )
    client.force_login(owner)
    page = client.get(reverse("run-detail", args=[llm_run.pk])).content.decode()
    assert 'data-stop="token_budget"' in page and "token cap is reached" in page
