"""Accepting and rejecting proposals: the records each decision leaves, and double decisions."""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied
from django.urls import reverse

from diagnosis.errors import DecisionRefused
from diagnosis.models import KernelVersion, Pattern, Proposal, Review
from diagnosis.reviews import accept_proposal, reject_proposal
from tests.conftest import PROPOSED_SOURCE

pytestmark = pytest.mark.django_db


def test_accepting_creates_a_version_a_review_and_a_pattern(proposal, reviewer, version, team):
    accepted = accept_proposal(proposal, reviewer, "looks right")
    new = accepted.version
    assert (new.number, new.origin, new.parent, new.source) == (2, "proposal", version, PROPOSED_SOURCE)
    assert new.from_proposal == proposal and new.created_by == reviewer
    assert new.sha256 == KernelVersion.digest(PROPOSED_SOURCE)
    review = Review.objects.get()
    assert (review.proposal, review.reviewer, review.decision, review.comment) == (
        proposal,
        reviewer,
        "accept",
        "looks right",
    )
    proposal.refresh_from_db()
    assert proposal.status == Proposal.Status.ACCEPTED and proposal.result_version == new
    pattern = Pattern.objects.get()
    assert pattern.team == team
    assert pattern.family == "launch_config"
    assert list(pattern.source_proposals.all()) == [proposal]
    assert "small_block" in pattern.evidence
    assert "1024" in pattern.after and "128" in pattern.before


def test_rejecting_records_the_review_and_creates_nothing_else(proposal, reviewer):
    reject_proposal(proposal, reviewer, "not convinced")
    proposal.refresh_from_db()
    assert proposal.status == Proposal.Status.REJECTED and proposal.result_version is None
    assert Review.objects.get().decision == "reject"
    assert KernelVersion.objects.count() == 1
    assert not Pattern.objects.exists()


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (accept_proposal, accept_proposal),
        (accept_proposal, reject_proposal),
        (reject_proposal, accept_proposal),
    ],
    ids=["accept-accept", "accept-reject", "reject-accept"],
)
def test_a_second_decision_is_refused(proposal, reviewer, first, second):
    first(proposal, reviewer, "")
    stale = Proposal.objects.get(pk=proposal.pk)
    stale.status = Proposal.Status.PENDING  # a copy loaded before the first decision
    with pytest.raises(DecisionRefused, match="already"):
        second(stale, reviewer, "")
    assert Review.objects.count() == 1
    assert KernelVersion.objects.count() == (2 if first is accept_proposal else 1)


def test_failed_proposals_cannot_be_accepted(proposal, reviewer):
    Proposal.objects.filter(pk=proposal.pk).update(status=Proposal.Status.FAILED)
    with pytest.raises(DecisionRefused, match="only pending proposals"):
        accept_proposal(proposal, reviewer)


def test_members_who_are_not_reviewers_cannot_decide(proposal, owner):
    with pytest.raises(PermissionDenied):
        accept_proposal(proposal, owner)
    assert not Review.objects.exists()


def test_accepting_a_source_that_already_exists_reuses_that_version(proposal, reviewer, version, owner):
    existing = KernelVersion.objects.create(
        kernel=version.kernel, number=2, source=PROPOSED_SOURCE, sha256=KernelVersion.digest(PROPOSED_SOURCE)
    )
    accepted = accept_proposal(proposal, reviewer)
    assert accepted.version == existing and accepted.reused_version
    assert KernelVersion.objects.count() == 2


def test_the_same_mechanism_learnt_twice_is_one_pattern(
    monkeypatch, proposal, reviewer, round_, version, finding
):
    import diagnosis.reviews as reviews
    from diagnosis.engine.evidence import Family
    from diagnosis.engine.patterns import PatternSpec

    spec = PatternSpec(
        Family.LAUNCH_CONFIG, "bigger blocks", "BLOCK=128", "BLOCK=1024", ("small_block",), frozenset({"block-up"})
    )
    monkeypatch.setattr(reviews, "_distil", lambda p: spec)
    accept_proposal(proposal, reviewer)
    second = Proposal.objects.create(
        round=round_,
        parent_version=version,
        parent_source=version.source,
        source=PROPOSED_SOURCE + "\n# again\n",
        diff="",
        proposer="rules",
        family="launch_config",
        verification=proposal.verification,  # verified faster too: it can be accepted
    )
    accept_proposal(second, reviewer)
    pattern = Pattern.objects.get()
    assert set(pattern.source_proposals.all()) == {proposal, second}
    assert pattern.signature == {"codes": [], "features": ["block-up"]}


def test_engine_findings_are_built_from_stored_rows(proposal):
    from diagnosis.engine.evidence import Family, Severity
    from diagnosis.reviews import _engine_findings

    (f,) = _engine_findings(proposal)
    assert f.code == "small_block" and f.severity is Severity.MEDIUM
    assert f.lines == (23,) and f.family_override is Family.LAUNCH_CONFIG
    assert f.evidence[0].kind == "ptx" and f.evidence[0].lines == (3,)


def test_review_page_accept_flow(client, reviewer, proposal):
    client.force_login(reviewer)
    url = reverse("proposal-decide", args=[proposal.pk])
    response = client.post(url, {"decision": "accept", "comment": "ship it"}, follow=True)
    page = response.content.decode()
    assert "Accepted proposal" in page and "version 2" in page
    assert 'data-status="accepted"' in page
    assert 'value="accept"' not in page  # no buttons once decided
    # A double submit is refused with a clear message and changes nothing.
    again = client.post(url, {"decision": "accept"}, follow=True).content.decode()
    assert "already accepted" in again and "second decision is refused" in again
    assert Review.objects.count() == 1 and KernelVersion.objects.count() == 2


def test_review_page_reject_flow(client, reviewer, proposal):
    client.force_login(reviewer)
    response = client.post(
        reverse("proposal-decide", args=[proposal.pk]), {"decision": "reject", "comment": "no"}, follow=True
    )
    assert "Rejected proposal" in response.content.decode()
    proposal.refresh_from_db()
    assert proposal.status == "rejected"


def test_an_unknown_decision_is_a_form_error(client, reviewer, proposal):
    client.force_login(reviewer)
    response = client.post(reverse("proposal-decide", args=[proposal.pk]), {"decision": "maybe"})
    assert response.status_code == 400
    assert not Review.objects.exists()


def test_the_stored_signature_is_json(proposal, reviewer):
    import json

    accept_proposal(proposal, reviewer)
    pattern = Pattern.objects.get()
    json.dumps(pattern.signature)
    assert isinstance(pattern.signature, dict)
