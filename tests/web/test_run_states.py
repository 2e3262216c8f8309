"""The run page says honestly what happened: findings once per run with the rounds they were
found in, rounds that proposed nothing folded, device time only where a device was used, and
correctness that could not be checked said in the status."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from diagnosis.models import DiagnosisRun, Finding, Proposal, Round

pytestmark = pytest.mark.django_db

STUCK = [
    {
        "tier": 3,
        "climb": False,
        "next_tier": None,
        "reason": "inconclusive",
        "failed_tests": ["narrows", "explains"],
    }
]
INCONCLUSIVE = (
    "inconclusive: max tier reached; the deepest evidence (tier 3) does not narrow, does not explain"
)


def _page(client, user, run) -> str:
    client.force_login(user)
    return client.get(reverse("run-detail", args=[run.pk])).content.decode()


def _rounds(run, verdicts: list[str]) -> list[Round]:
    return [
        Round.objects.create(run=run, index=i, verdict=v, tier_reached=3, escalation=STUCK,
                             hypothesis="" if v == "inconclusive" else "hints: x (backed by A)\nverified: 1.5x")
        for i, v in enumerate(verdicts, start=1)
    ]  # fmt: skip


def _same_findings(run, rounds: list[Round]) -> None:
    """Each round reads the same source and finds the same three things (what a CPU run does)."""
    for r in rounds:
        for code, line in (("T0-NO-AUTOTUNE", 12), ("IR_SCALAR_GLOBAL", 14), ("CG_NOT_PIPELINED", 15)):
            Finding.objects.create(run=run, round=r, tier=int(code[1]) if code[0] == "T" else 2, code=code,
                                   severity="low", message=f"{code} at {line}", lines=[line])  # fmt: skip


def test_each_finding_is_listed_once_with_the_rounds_it_was_found_in(client, owner, run):
    rounds = _rounds(run, ["no-gain", "no-gain", "no-gain", "no-gain"])
    _same_findings(run, rounds)
    page = _page(client, owner, run)
    articles = re.findall(
        r'<article class="finding[^"]*" id="finding-\d+" data-code="([^"]+)" data-rounds="([^"]*)"', page
    )
    assert sorted(articles) == [
        ("CG_NOT_PIPELINED", "1,2,3,4"),
        ("IR_SCALAR_GLOBAL", "1,2,3,4"),
        ("T0-NO-AUTOTUNE", "1,2,3,4"),
    ]
    assert page.count("rounds 1–4") == 3
    assert 'Findings <span class="muted">(3, each listed once' in page


def test_a_finding_that_measured_something_else_later_is_listed_once_with_both(client, owner, run):
    first, second = _rounds(run, ["improved", "no-gain"])
    for r, ms in ((first, "0.43 ms"), (second, "0.21 ms")):
        Finding.objects.create(
            run=run, round=r, tier=1, code="T1-SLOW", severity="low", message=ms, lines=[24]
        )
    page = _page(client, owner, run)
    assert re.findall(r'data-code="T1-SLOW" data-rounds="([^"]*)"', page) == ["1,2"]
    assert "<p>0.43 ms</p>" in page  # the first measurement, and the later one folded under it
    assert '<li>0.21 ms <span class="muted">(round 2)</span></li>' in page


def test_rounds_that_proposed_nothing_are_folded_into_one_line(client, owner, run, version):
    rounds = _rounds(run, ["improved", "no-gain", "inconclusive", "inconclusive"])
    for r in rounds[:2]:
        Proposal.objects.create(
            round=r, parent_version=version, parent_source="a", source="b", diff="", proposer="rules"
        )
    Round.objects.filter(pk__in=[r.pk for r in rounds[2:]]).update(hypothesis=INCONCLUSIVE)
    page = _page(client, owner, run)
    assert re.findall(r'<li class="round" data-round="(\d+)">', page) == ["1", "2"]
    folded = re.findall(
        r'<li class="round round-idle" data-rounds="(\d+)">\s*<details>\s*<summary>(.*?)</summary>',
        page,
        re.S,
    )
    assert len(folded) == 1 and folded[0][0] == "2"
    summary = re.sub(r"<[^>]+>", "", folded[0][1])
    assert summary.startswith(
        "Rounds 3–4 · Nothing to try: the evidence, up to the compiler&#x27;s passes (tier 3)"
    )
    assert "does not narrow, does not explain" not in summary  # the engine's words stay folded inside


@pytest.mark.parametrize(
    ("device", "device_s", "summary", "shown"),
    [
        pytest.param("cpu", 0.0, {}, False, id="cpu-has-no-device"),
        pytest.param("cuda", 4.0, {}, False, id="cuda-failed-before-reaching-a-gpu"),
        pytest.param("cuda", 85.9, {"device_name": "NVIDIA H200"}, True, id="cuda-that-ran"),
    ],
)
def test_device_time_is_shown_only_when_a_device_was_used(
    client, owner, run, device, device_s, summary, shown
):
    base = {"stop_reason": "nothing_left", "initial": None, "best": None}
    DiagnosisRun.objects.filter(pk=run.pk).update(
        device=device, device_s=device_s, status="failed" if not summary else "done",
        summary={**base, **summary} if summary else {}, error="device_error: no CUDA device" if not summary else "",
    )  # fmt: skip
    page = _page(client, owner, run)
    assert ("data-device-time" in page) is shown
    assert ("Device time" in page) is shown


def test_a_run_whose_correctness_could_not_be_checked_says_so_and_names_no_best_version(
    client, owner, run, version
):
    DiagnosisRun.objects.filter(pk=run.pk).update(
        status="done",
        best_version=version,
        summary={
            "stop_reason": "diagnosed_only",
            "stop_detail": "diagnosis only, nothing verified or proposed: no input case is small enough to check "
            "on the interpreter (the module has no get_verify_inputs)",
            "initial": None,
            "best": None,
        },
    )
    page = _page(client, owner, run)
    assert 'data-state="warn">Diagnosed only: correctness was not checked on this device' in page
    assert "Why: no input case is small enough to check on the interpreter" in page
    assert "<dt>Best</dt>" not in page


def test_a_finished_cpu_run_says_its_speed_was_not_measured(client, owner, run, version):
    DiagnosisRun.objects.filter(pk=run.pk).update(
        status="done",
        best_version=version,
        summary={
            "stop_reason": "nothing_left",
            "stop_detail": "2 consecutive rounds found nothing left to try",
            "initial": {"sha256": version.sha256, "cases": [{"index": 0, "time_ms": None}]},
            "best": {"sha256": version.sha256, "cases": [{"index": 0, "time_ms": None}]},
            "improved": False,
        },
    )
    page = _page(client, owner, run)
    assert "Done: correct, speed not measured on this device." in page
    assert "Correct on every case the cpu can check; speed not measured on this device." in page


@pytest.mark.parametrize(
    ("wall_s", "device_s", "cost"),
    [
        pytest.param(3.2, 0.0, "3.2 s wall", id="cpu-check"),
        pytest.param(6.3, 6.3, "6.3 s wall, 6.3 s on the device", id="gpu-check"),
    ],
)
def test_a_proposals_cost_names_device_time_only_when_a_device_was_used(wall_s, device_s, cost):
    from diagnosis.engine.records import CandidateOutcome, CaseTiming
    from diagnosis.review_views import verification_view

    outcome = CandidateOutcome(True, cases=(CaseTiming(0, None),), wall_s=wall_s, device_s=device_s)
    assert dict(verification_view(outcome).facts)["Cost"] == cost
