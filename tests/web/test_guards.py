"""What the web limits must leave holding: CSRF on every POST, escaping, 404 across teams."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from diagnosis.models import Finding, Kernel

pytestmark = pytest.mark.django_db

HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'


@pytest.fixture
def strict(owner) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)
    return client


def _upload_data(team) -> dict:
    return {
        "name": "k",
        "team": team.pk,
        "device": "cpu",
        "target": "sm_90",
        "round_budget": 5,
        "source": "x",
    }


CSRF = [
    pytest.param(lambda team: reverse("kernel-upload"), id="upload"),
    pytest.param(lambda team: reverse("logout"), id="logout"),
]


@pytest.mark.parametrize("url", CSRF)
def test_a_post_without_the_csrf_token_is_refused(strict, team, url):
    assert strict.post(url(team), _upload_data(team)).status_code == 403
    assert Kernel.objects.count() == 0


def test_a_post_with_the_token_of_the_hx_headers_gets_through(strict, team):
    strict.get(reverse("kernel-upload"))
    token = strict.cookies["csrftoken"].value
    response = strict.post(reverse("kernel-upload"), _upload_data(team), HTTP_X_CSRFTOKEN=token)
    assert response.status_code == 400  # past CSRF: the form refuses the one-line module


def test_an_anonymous_login_post_without_the_token_is_refused_before_it_counts():
    from axes.models import AccessAttempt

    client = Client(enforce_csrf_checks=True)
    client.get(reverse("login"))
    assert client.post(reverse("login"), {"username": "owner", "password": "wrong"}).status_code == 403
    assert AccessAttempt.objects.count() == 0


def test_names_and_messages_are_escaped(client, owner, kernel, run, round_):
    Kernel.objects.filter(pk=kernel.pk).update(name=HOSTILE)
    Finding.objects.create(
        run=run, round=round_, tier=0, code="x", severity="low", message=HOSTILE, lines=[1]
    )
    client.force_login(owner)
    for url in (
        reverse("kernel-list"),
        reverse("kernel-detail", args=[kernel.pk]),
        reverse("run-detail", args=[run.pk]),
    ):
        page = client.get(url).content.decode()
        assert "<script>alert" not in page and "<img src=x" not in page, url
        assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page


def test_other_teams_kernels_are_still_404(client, outsider, run):
    client.force_login(outsider)
    for url in (reverse("kernel-detail", args=[run.version.kernel.pk]), reverse("run-detail", args=[run.pk])):
        assert client.get(url).status_code == 404
