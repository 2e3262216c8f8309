"""Downloads and JSON (diagnosis.api): a version's source, a run's report in bench/run.py's
format read back with its decoder, and `Accept: application/json` on the run and proposal
pages."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from diagnosis.engine import serialize as ser
from diagnosis.engine.records import CaseTiming, LoopResult, StopReason, VersionStats, sha256
from diagnosis.engine.verdict import Verdict
from diagnosis.models import DiagnosisRun, Kernel, KernelVersion
from tests.conftest import GOOD_SOURCE, PROPOSED_SOURCE

pytestmark = pytest.mark.django_db

JSON_ACCEPT = {"HTTP_ACCEPT": "application/json"}
BROWSER_ACCEPT = {"HTTP_ACCEPT": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}


@pytest.fixture
def finished(run, round_, finding, proposal):
    """The run as a worker leaves it: done, a verdict on its round, the summary the loop wrote."""
    result = LoopResult(
        initial_source=GOOD_SOURCE,
        best_source=PROPOSED_SOURCE,
        initial=VersionStats(sha256(GOOD_SOURCE), (CaseTiming(0, 0.020, 0.05, 0.00615),)),
        best=VersionStats(sha256(PROPOSED_SOURCE), (CaseTiming(0, 0.010, 0.05, 0.00615),)),
        stop_reason=StopReason.ROUND_BUDGET,
        stop_detail="used the round budget (1 rounds)",
        speedups_over_initial=(2.0,),
        device_name="CPU",
    )
    round_.verdict = Verdict.IMPROVED
    round_.escalation = [
        {
            "tier": 0,
            "climb": True,
            "next_tier": 2,
            "reason": "climb",
            "family": None,
            "failed_tests": ["localizes"],
        }
    ]
    round_.wall_s = 1.5
    round_.save()
    run.status = DiagnosisRun.Status.DONE
    run.summary = ser.summary_json(result, best_proposal_id=proposal.pk, attempt=1)
    run.current_round = 1
    run.save()
    return run


def test_a_versions_source_downloads_as_a_python_file(client, owner, version):
    client.force_login(owner)
    response = client.get(reverse("version-source", args=[version.pk]))
    assert response.status_code == 200
    assert response["Content-Type"] == "text/x-python; charset=utf-8"
    assert response["Content-Disposition"] == 'attachment; filename="double-v1.py"'
    assert response.content.decode() == GOOD_SOURCE


def test_a_download_name_keeps_only_safe_characters(client, owner, team):
    kernel = Kernel.objects.create(team=team, name='weird "name"/../é x', owner=owner)
    v = KernelVersion.objects.create(
        kernel=kernel, number=3, source="x = 1\n", sha256=KernelVersion.digest("x = 1\n")
    )
    client.force_login(owner)
    disposition = client.get(reverse("version-source", args=[v.pk]))["Content-Disposition"]
    assert disposition == 'attachment; filename="weird__name__..___x-v3.py"'


@pytest.mark.parametrize("name", ["version-source", "run-report"], ids=["source", "report"])
def test_outsiders_get_404_on_downloads(client, outsider, version, run, name):
    client.force_login(outsider)
    pk = version.pk if name == "version-source" else run.pk
    assert client.get(reverse(name, args=[pk])).status_code == 404


def test_the_run_report_reads_back_with_the_benchmarks_decoder(client, owner, finished, proposal, finding):
    client.force_login(owner)
    response = client.get(reverse("run-report", args=[finished.pk]))
    assert response["Content-Type"] == "application/json"
    assert response["Content-Disposition"] == f'attachment; filename="run-{finished.pk}-report.json"'
    data = json.loads(response.content)
    assert data["run"]["id"] == finished.pk and data["run"]["status"] == "done"
    report = ser.loop_report_from_json(data["report"])
    assert (report.improved, report.rounds_used, report.stop_reason) == (True, 1, "round_budget")
    assert report.best_sha256 == sha256(PROPOSED_SOURCE) and report.speedup_over_initial == 2.0
    assert report.verdicts[Verdict.IMPROVED] == 1
    (rnd,) = report.rounds
    assert (rnd.index, rnd.verdict, rnd.tier_reached) == (1, Verdict.IMPROVED, 2)
    assert [f.code for f in rnd.findings] == ["small_block"] and rnd.findings[0].lines == (23,)
    assert rnd.decisions[0].failed_tests == ("localizes",)
    assert rnd.proposal.findings_addressed == ("small_block",) and rnd.proposal.family == "launch_config"
    # the outcome is the proposal's stored verification, decoded by the same decoder
    assert rnd.outcome == ser.verification_from_json(proposal.verification)
    assert data["run"]["proposals"] == [
        {"id": proposal.pk, "url": reverse("proposal-detail", args=[proposal.pk]), "round": 1,
         "status": "pending", "speedup": 2.0}
    ]  # fmt: skip


def test_a_run_still_going_has_no_report_yet_but_its_finished_rounds(client, owner, run, round_):
    round_.verdict = Verdict.NO_GAIN
    round_.save()
    run.status = DiagnosisRun.Status.RUNNING
    run.save()
    client.force_login(owner)
    data = client.get(reverse("run-detail", args=[run.pk]), **JSON_ACCEPT).json()
    assert data["report"] is None and data["run"]["status"] == "running"
    (rnd,) = [ser.round_from_json(r) for r in data["rounds"]]
    assert rnd.verdict is Verdict.NO_GAIN


def test_a_round_still_running_is_left_out(client, owner, run, round_):
    client.force_login(owner)
    assert client.get(reverse("run-detail", args=[run.pk]), **JSON_ACCEPT).json()["rounds"] == []


@pytest.mark.parametrize(
    ("accept", "kind"),
    [
        pytest.param(JSON_ACCEPT, "application/json", id="json"),
        pytest.param(BROWSER_ACCEPT, "text/html; charset=utf-8", id="browser"),
        pytest.param({}, "text/html; charset=utf-8", id="no-accept-header"),
    ],
)
@pytest.mark.parametrize("page", ["run-detail", "proposal-detail"])
def test_run_and_proposal_pages_answer_json_when_asked_and_vary_on_accept(
    client, owner, finished, proposal, accept, kind, page
):
    client.force_login(owner)
    pk = finished.pk if page == "run-detail" else proposal.pk
    response = client.get(reverse(page, args=[pk]), **accept)
    assert response.status_code == 200 and response["Content-Type"] == kind
    assert "Accept" in response["Vary"]


def test_the_proposal_json_decodes_with_the_engines_decoders(client, owner, proposal, finding):
    proposal.rationale_parts = {"mechanism": "m", "expected": "e", "evidence": []}
    proposal.save()
    client.force_login(owner)
    data = client.get(reverse("proposal-detail", args=[proposal.pk]), **JSON_ACCEPT).json()
    assert (data["id"], data["status"], data["acceptable"]["code"]) == (
        proposal.pk,
        "pending",
        "verified-faster",
    )
    outcome = ser.verification_from_json(data["verification"])
    assert outcome is not None and outcome.correct and outcome.speedup == pytest.approx(2.0)
    (f,) = [ser.finding_from_json(x) for x in data["findings"]]
    assert (f.code, f.lines, f.tier) == ("small_block", (23,), 0)
    assert data["finding_ids"] == [finding.pk]
    parts = ser.rationale_from_json(data["rationale_parts"])
    assert parts is not None and (parts.mechanism, parts.expected) == ("m", "e")
    assert data["source"] == PROPOSED_SOURCE and data["parent_source"] == GOOD_SOURCE


@pytest.mark.parametrize("page", ["run-detail", "proposal-detail", "run-report"])
def test_outsiders_get_404_as_json_too(client, outsider, run, proposal, page):
    client.force_login(outsider)
    pk = proposal.pk if page == "proposal-detail" else run.pk
    assert client.get(reverse(page, args=[pk]), **JSON_ACCEPT).status_code == 404


def test_the_favicon_is_an_svg_and_favicon_ico_points_at_it(client, owner):
    client.force_login(owner)
    page = client.get(reverse("kernel-list")).content.decode()
    assert '<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">' in page
    response = client.get("/favicon.ico")
    assert response.status_code == 301 and response["Location"] == "/static/favicon.svg"
