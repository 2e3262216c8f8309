"""Who sees what: members and reviewers see their team's records; others get 404; only reviewers decide."""

from __future__ import annotations

import pytest
from django.urls import reverse

from diagnosis.models import Proposal, Review

pytestmark = pytest.mark.django_db


@pytest.fixture
def pages(kernel, version, run, artefact, proposal, team):
    return {
        "kernel": reverse("kernel-detail", args=[kernel.pk]),
        "version": reverse("version-detail", args=[version.pk]),
        "version-upload": reverse("version-upload", args=[kernel.pk]),
        "run": reverse("run-detail", args=[run.pk]),
        "artefact": reverse("artefact-detail", args=[artefact.pk]),
        "artefact-raw": reverse("artefact-raw", args=[artefact.pk]),
        "proposal": reverse("proposal-detail", args=[proposal.pk]),
        "patterns": reverse("team-patterns", args=[team.pk]),
    }


@pytest.mark.parametrize("user_name", ["owner", "reviewer"])
def test_members_and_reviewers_see_every_page_of_their_team(client, request, pages, user_name):
    client.force_login(request.getfixturevalue(user_name))
    for name, url in pages.items():
        assert client.get(url).status_code == 200, name


def test_outsiders_get_404_everywhere_so_nothing_leaks(client, outsider, pages):
    client.force_login(outsider)
    for name, url in pages.items():
        assert client.get(url).status_code == 404, name


def test_missing_and_hidden_records_look_the_same(client, outsider, kernel):
    client.force_login(outsider)
    hidden = client.get(reverse("kernel-detail", args=[kernel.pk]))
    missing = client.get(reverse("kernel-detail", args=[kernel.pk + 1000]))
    assert hidden.status_code == missing.status_code == 404


def test_anonymous_users_are_sent_to_login(client, pages):
    for name, url in {
        **pages,
        "list": reverse("kernel-list"),
        "upload": reverse("kernel-upload"),
        "reviews": reverse("review-queue"),
        "teams": reverse("team-list"),
    }.items():
        response = client.get(url)
        assert response.status_code == 302, name
        assert response["Location"].startswith(reverse("login")), name


def test_the_kernel_list_shows_only_the_users_teams(client, owner, outsider, kernel):
    client.force_login(owner)
    assert kernel.name in client.get(reverse("kernel-list")).content.decode()
    client.force_login(outsider)
    page = client.get(reverse("kernel-list")).content.decode()
    assert reverse("kernel-detail", args=[kernel.pk]) not in page


def test_the_review_queue_lists_pending_proposals_for_reviewers_only(
    client, owner, reviewer, outsider, proposal
):
    link = reverse("proposal-detail", args=[proposal.pk])
    client.force_login(reviewer)
    assert link in client.get(reverse("review-queue")).content.decode()
    for user in (owner, outsider):
        client.force_login(user)
        assert link not in client.get(reverse("review-queue")).content.decode()


@pytest.mark.parametrize("decision", ["accept", "reject"])
def test_members_who_are_not_reviewers_get_403_on_decisions(client, owner, proposal, decision):
    client.force_login(owner)
    response = client.post(reverse("proposal-decide", args=[proposal.pk]), {"decision": decision})
    assert response.status_code == 403
    proposal.refresh_from_db()
    assert proposal.status == Proposal.Status.PENDING
    assert not Review.objects.exists()


@pytest.mark.parametrize("decision", ["accept", "reject"])
def test_outsiders_get_404_on_decisions(client, outsider, proposal, decision):
    client.force_login(outsider)
    response = client.post(reverse("proposal-decide", args=[proposal.pk]), {"decision": decision})
    assert response.status_code == 404
    assert not Review.objects.exists()


def test_only_reviewers_see_the_decision_buttons(client, owner, reviewer, proposal):
    url = reverse("proposal-detail", args=[proposal.pk])
    client.force_login(owner)
    assert 'value="accept"' not in client.get(url).content.decode()
    client.force_login(reviewer)
    assert 'value="accept"' in client.get(url).content.decode()


def test_decisions_must_be_posted(client, reviewer, proposal):
    client.force_login(reviewer)
    assert client.get(reverse("proposal-decide", args=[proposal.pk])).status_code == 405


def test_logout_ends_the_session(client, owner):
    client.force_login(owner)
    client.post(reverse("logout"))
    assert client.get(reverse("kernel-list")).status_code == 302


def test_login_page_logs_in(client, owner):
    assert client.get(reverse("login")).status_code == 200
    response = client.post(reverse("login"), {"username": "owner", "password": "owner-pass-1"})
    assert response.status_code == 302 and response["Location"] == reverse("kernel-list")
