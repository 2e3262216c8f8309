"""The code review page: the diff and its toggle, the rationale in parts, the verification in
words, deciding in place with and without htmx, only verified-faster proposals accepted, and
"run this version"."""

from __future__ import annotations

import pytest
from django.urls import reverse

from diagnosis.models import DiagnosisRun, KernelVersion, Proposal, Review
from diagnosis.reviews import acceptability

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}
TIMED = {"correct": True, "timed": True, "speedup": 2.0, "noise": 0.02, "suspect": False}
CASE = {"index": 0, "time_ms": 0.010, "parent_ms": 0.020, "sol_ms": 0.00615, "speedup": 2.0}

# (what is stored on the proposal, the acceptability code it must get)
NOT_ACCEPTABLE = [
    pytest.param({"status": "pending", "verification": {}}, "not-verified", id="not-verified"),
    pytest.param(
        {"status": "pending", "verification": {"correct": True, "timed": False, "cases": []}},
        "untimed",
        id="checked-for-correctness-only",
    ),
    pytest.param(
        {
            "status": "pending",
            "verification": {
                "correct": True,
                "timed": False,
                "cases": [{**CASE, "time_ms": None, "parent_ms": None}],
            },
        },
        "untimed",
        id="cases-not-timed",
    ),
    pytest.param(
        {
            "status": "pending",
            "verification": {**TIMED, "correct": False, "error_kind": "incorrect", "cases": [CASE]},
        },
        "incorrect",
        id="wrong-answer",
    ),
    pytest.param(
        {"status": "pending", "verification": {**TIMED, "suspect": True, "cases": [CASE]}},
        "suspect",
        id="below-speed-of-light",
    ),
    pytest.param(
        {"status": "pending", "verification": {**TIMED, "cases": [{**CASE, "time_ms": 0.0199}]}},
        "not-faster",
        id="within-the-noise-floor",
    ),
    pytest.param(
        {"status": "pending", "verification": {**TIMED, "cases": [{**CASE, "time_ms": 0.030}]}},
        "not-faster",
        id="slower",
    ),
    pytest.param({"status": "failed"}, "not-pending", id="failed-verification"),
    pytest.param({"status": "rejected"}, "not-pending", id="already-rejected"),
]


def _store(proposal: Proposal, **fields) -> Proposal:
    Proposal.objects.filter(pk=proposal.pk).update(**fields)
    proposal.refresh_from_db()
    return proposal


def test_a_verified_faster_proposal_can_be_accepted(proposal):
    assert acceptability(proposal).code == "verified-faster"


@pytest.mark.parametrize(("stored", "code"), NOT_ACCEPTABLE)
def test_what_cannot_be_accepted_and_why(proposal, stored, code):
    assert acceptability(_store(proposal, **stored)).code == code


@pytest.mark.parametrize(("stored", "code"), NOT_ACCEPTABLE)
def test_no_accept_button_and_the_accept_is_refused_with_its_reason(client, reviewer, proposal, stored, code):
    _store(proposal, **stored)
    client.force_login(reviewer)
    page = client.get(reverse("proposal-detail", args=[proposal.pk])).content.decode()
    assert 'value="accept"' not in page
    url = reverse("proposal-decide", args=[proposal.pk])
    # without JavaScript: a redirect to the page, which says why
    refused = client.post(url, {"decision": "accept"}, follow=True)
    assert refused.redirect_chain[-1][0] == reverse("proposal-detail", args=[proposal.pk])
    expected = "not-pending" if stored["status"] != "pending" else code
    assert f'data-code="{expected}"' in refused.content.decode()
    # with htmx: the decision fragment, in place, with the reason
    fragment = client.post(url, {"decision": "accept"}, **HTMX).content.decode()
    assert f'data-code="{expected}"' in fragment and 'role="alert"' in fragment
    assert "<html" not in fragment
    proposal.refresh_from_db()
    assert proposal.status == stored["status"]
    assert not Review.objects.exists() and KernelVersion.objects.count() == 1


def test_an_untimed_proposal_can_still_be_rejected(client, reviewer, proposal):
    _store(proposal, verification={"correct": True, "timed": False, "cases": []})
    client.force_login(reviewer)
    page = client.get(reverse("proposal-detail", args=[proposal.pk])).content.decode()
    assert 'value="reject"' in page and 'data-acceptability="untimed"' in page
    client.post(reverse("proposal-decide", args=[proposal.pk]), {"decision": "reject"})
    assert Review.objects.get().decision == "reject"


def test_accepting_in_place_returns_the_decided_fragment_and_the_new_status(client, reviewer, proposal):
    client.force_login(reviewer)
    response = client.post(
        reverse("proposal-decide", args=[proposal.pk]), {"decision": "accept", "comment": "ok"}, **HTMX
    )
    body = response.content.decode()
    assert response.status_code == 200 and "<html" not in body
    # the status badge travels out of band; the decision section replaces the form
    assert body.lstrip().startswith('<span id="proposal-status"') and 'hx-swap-oob="true"' in body
    assert 'data-status="accepted"' in body and '<section id="decision"' in body
    assert 'data-code="accepted"' in body and 'value="accept"' not in body
    new = KernelVersion.objects.get(number=2)
    assert f'action="{reverse("version-run", args=[new.pk])}"' in body  # run this version, right there
    assert reverse("version-source", args=[new.pk]) in body


def test_accepting_without_javascript_redirects_to_the_page(client, reviewer, proposal):
    client.force_login(reviewer)
    response = client.post(reverse("proposal-decide", args=[proposal.pk]), {"decision": "accept"})
    assert response.status_code == 302 and response["Location"] == reverse(
        "proposal-detail", args=[proposal.pk]
    )
    page = client.get(response["Location"]).content.decode()
    assert 'data-code="accepted"' in page and "Run this version" in page


@pytest.mark.parametrize("htmx", [False, True], ids=["plain", "htmx"])
def test_members_get_403_and_outsiders_404_on_decide(client, owner, outsider, proposal, htmx):
    extra = HTMX if htmx else {}
    url = reverse("proposal-decide", args=[proposal.pk])
    client.force_login(owner)
    assert client.post(url, {"decision": "accept"}, **extra).status_code == 403
    client.force_login(outsider)
    assert client.post(url, {"decision": "accept"}, **extra).status_code == 404
    assert not Review.objects.exists()


# --- the diff ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "table"),
    [
        pytest.param({}, "diff-split", id="side-by-side-by-default"),
        pytest.param({"view": "split"}, "diff-split", id="side-by-side"),
        pytest.param({"view": "unified"}, "diff-unified", id="unified"),
        pytest.param({"view": "bogus"}, "diff-split", id="unknown-view"),
    ],
)
def test_the_diff_toggle_works_as_a_plain_link(client, owner, proposal, query, table):
    client.force_login(owner)
    page = client.get(reverse("proposal-detail", args=[proposal.pk]), query).content.decode()
    assert f'class="diff-table {table}"' in page
    assert 'href="?view=split#diff"' in page and 'href="?view=unified#diff"' in page


def test_the_diff_fragment_for_htmx(client, owner, proposal):
    client.force_login(owner)
    response = client.get(
        reverse("proposal-detail", args=[proposal.pk]), {"view": "unified"}, HTTP_HX_TARGET="diff", **HTMX
    )
    body = response.content.decode()
    assert body.lstrip().startswith('<section id="diff"') and "diff-unified" in body
    assert "Verification" not in body


# --- the rationale ----------------------------------------------------------------------------


def test_the_rationale_in_parts_with_its_findings_linked_to_their_lines(client, owner, proposal, finding):
    _store(
        proposal,
        rationale_parts={
            "mechanism": "BLOCK 128 -> 1024 in double_kernel",
            "expected": "fewer programs: up to 8x fewer launches' worth of scheduling",
            "evidence": [
                {"code": "small_block", "tier": 0, "lines": [23], "kernel": "double_kernel", "message": "m"}
            ],
        },
    )
    client.force_login(owner)
    page = client.get(reverse("proposal-detail", args=[proposal.pk])).content.decode()
    for part in ("<dt>Mechanism</dt>", "<dt>Evidence</dt>", "<dt>Expected</dt>", "<dt>Measured</dt>"):
        assert part in page
    assert "BLOCK 128 -&gt; 1024 in double_kernel" in page
    assert f'href="/runs/{finding.run_id}/evidence/?line=23#L23"' in page  # the line in the evidence viewer
    assert "Correct; 2.00x faster than its parent (geomean of 1 case; noise floor 2.0 %)." in page


def test_a_proposal_stored_before_the_parts_shows_its_rationale_whole(client, owner, proposal):
    client.force_login(owner)
    page = client.get(reverse("proposal-detail", args=[proposal.pk])).content.decode()
    assert "<dt>Rationale</dt>" in page and proposal.rationale in page
    assert "<dt>Mechanism</dt>" not in page and "<dt>Measured</dt>" in page


# --- the verification in words ----------------------------------------------------------------


def test_the_verification_table_has_units_and_words_not_booleans(client, owner, proposal):
    client.force_login(owner)
    page = client.get(reverse("proposal-detail", args=[proposal.pk])).content.decode()
    table = page[
        page.index('<table class="grid verification">') : page.index("</table>", page.index("verification"))
    ]
    assert ">correct<" in table and "0.020 ms" in table and "0.010 ms" in table and "2.00x faster" in table
    assert "61.5 %" in table
    for forbidden in ("True", "False", "-x", "×"):
        assert forbidden not in table
    assert "True" not in page and "False" not in page


def test_an_untimed_case_says_not_timed_on_this_device(client, owner, proposal):
    _store(proposal, verification={"correct": True, "timed": False, "cases": [{"index": 0, "time_ms": None}]})
    client.force_login(owner)
    page = client.get(reverse("proposal-detail", args=[proposal.pk])).content.decode()
    assert "not timed on this device" in page and "Correct; speed not measured on this device." in page
    assert "no gain" not in page


# --- run this version ---------------------------------------------------------------------------


@pytest.fixture
def sent(monkeypatch):
    calls = []
    monkeypatch.setattr("diagnosis.forms.enqueue_run", lambda run_id, device: calls.append((run_id, device)))
    return calls


RUN = {"run-device": "cpu", "run-target": "sm_80", "run-round_budget": "4"}


@pytest.mark.parametrize("who", ["owner", "reviewer"])
def test_any_member_runs_any_version(request, client, version, sent, django_capture_on_commit_callbacks, who):
    client.force_login(request.getfixturevalue(who))
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("version-run", args=[version.pk]), RUN)
    run = DiagnosisRun.objects.get()
    assert response.status_code == 302 and response["Location"] == reverse("run-detail", args=[run.pk])
    assert (run.version, run.status, run.device, run.target, run.round_budget) == (
        version,
        "queued",
        "cpu",
        "sm_80",
        4,
    )
    assert run.requested_by.username == who
    assert sent == [(run.pk, "cpu")]  # sent once the row is committed


def test_an_outsider_cannot_run_a_version(client, outsider, version, sent):
    client.force_login(outsider)
    assert client.post(reverse("version-run", args=[version.pk]), RUN).status_code == 404
    assert not DiagnosisRun.objects.exists() and sent == []


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param({"run-round_budget": "0"}, id="budget-zero"),
        pytest.param({"run-device": "tpu"}, id="unknown-device"),
        pytest.param({"run-target": "sm_90; rm -rf /"}, id="bad-target"),
    ],
)
def test_a_bad_run_request_queues_nothing_and_says_so(client, owner, version, sent, bad):
    client.force_login(owner)
    response = client.post(reverse("version-run", args=[version.pk]), {**RUN, **bad}, follow=True)
    assert 'data-code="run-refused"' in response.content.decode()
    assert not DiagnosisRun.objects.exists() and sent == []


def test_runs_must_be_posted(client, owner, version):
    client.force_login(owner)
    assert client.get(reverse("version-run", args=[version.pk])).status_code == 405


def test_the_version_page_offers_a_run_and_the_source(client, owner, version):
    client.force_login(owner)
    page = client.get(reverse("version-detail", args=[version.pk])).content.decode()
    assert f'action="{reverse("version-run", args=[version.pk])}"' in page
    assert f'href="{reverse("version-source", args=[version.pk])}"' in page


# --- the review queue ---------------------------------------------------------------------------


def test_the_queue_says_which_proposals_can_be_accepted(client, reviewer, proposal, round_, version):
    Proposal.objects.create(
        round=round_,
        parent_version=version,
        parent_source=version.source,
        source=version.source + "\n",
        diff="",
        proposer="rules",
        verification={"correct": True, "timed": False, "cases": []},
    )
    client.force_login(reviewer)
    page = client.get(reverse("review-queue")).content.decode()
    assert 'data-acceptability="verified-faster"' in page and 'data-acceptability="untimed"' in page


@pytest.mark.parametrize(
    ("speedup", "words"),
    [pytest.param(2.0, "2.00x faster", id="timed"), pytest.param(None, "not timed", id="untimed")],
)
def test_the_run_page_says_each_proposals_speed_in_words(client, owner, proposal, speedup, words):
    _store(proposal, speedup=speedup)
    client.force_login(owner)
    page = client.get(reverse("run-detail", args=[proposal.round.run_id])).content.decode()
    table = page[page.index("<th>Proposal</th>") :]
    table = table[: table.index("</table>")]
    assert f"<td>{words}</td>" in table and "×" not in table
