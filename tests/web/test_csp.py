"""Content-Security-Policy: every page gets it, and no template needs an exception to it.

The policy allows scripts, styles and images from the site's own origin only and no framing;
the browser tests (tests/browser) check that Chromium reports no violation on the pages.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from django.test import override_settings
from django.urls import reverse

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = sorted((ROOT / "templates").rglob("*.html"))

pytestmark = pytest.mark.django_db


def _policy(response) -> dict[str, list[str]]:
    directives = {}
    for part in response["Content-Security-Policy"].split(";"):
        name, *values = part.split()
        directives[name] = values
    return directives


PAGES = [
    pytest.param(None, lambda f: reverse("login"), 200, id="login"),
    pytest.param("owner", lambda f: reverse("kernel-list"), 200, id="kernel-list"),
    pytest.param("owner", lambda f: reverse("kernel-upload"), 200, id="upload"),
    pytest.param("owner", lambda f: reverse("run-detail", args=[f.run.pk]), 200, id="run"),
    pytest.param("owner", lambda f: reverse("artefact-detail", args=[f.artefact.pk]), 200, id="artefact"),
    pytest.param("reviewer", lambda f: reverse("proposal-detail", args=[f.proposal.pk]), 200, id="proposal"),
    pytest.param("outsider", lambda f: reverse("run-detail", args=[f.run.pk]), 404, id="not-found"),
    pytest.param("admin", lambda f: reverse("admin:index"), 200, id="admin"),
]


class Fixtures:
    def __init__(self, run, artefact, proposal) -> None:
        self.run, self.artefact, self.proposal = run, artefact, proposal


@pytest.mark.parametrize(("who", "url", "status"), PAGES)
def test_every_page_carries_the_policy(
    client, admin_user, owner, reviewer, outsider, run, artefact, proposal, who, url, status
):
    users = {"owner": owner, "reviewer": reviewer, "outsider": outsider, "admin": admin_user}
    if who:
        client.force_login(users[who])
    response = client.get(url(Fixtures(run, artefact, proposal)))
    assert response.status_code == status
    policy = _policy(response)
    assert policy["default-src"] == ["'self'"]
    assert policy["frame-ancestors"] == ["'none'"]
    assert policy["object-src"] == ["'none'"] and policy["base-uri"] == ["'none'"]
    assert policy["form-action"] == ["'self'"]
    # Nothing loosens script or style sources: they fall back to default-src.
    assert not {"script-src", "style-src", "script-src-attr", "style-src-attr"} & policy.keys()
    assert "'unsafe-inline'" not in response["Content-Security-Policy"]
    assert "'unsafe-eval'" not in response["Content-Security-Policy"]


def test_the_lockout_and_413_pages_carry_it_too(client, owner):
    with override_settings(KERNELOPT_MAX_REQUEST_BYTES=2048):
        too_large = client.post(reverse("login"), {"password": "x" * 4096})
    assert too_large.status_code == 413 and _policy(too_large)["default-src"] == ["'self'"]
    for _ in range(5):
        locked = client.post(reverse("login"), {"username": "owner", "password": "wrong"})
    assert locked.status_code == 429 and _policy(locked)["default-src"] == ["'self'"]


# What a policy without 'unsafe-inline' refuses: a <script> without src, an on* handler, a
# style attribute or element, a javascript: URL. htmx's hx-on attributes would need eval.
INLINE = [
    pytest.param(r"<script(?![^>]*\bsrc=)[^>]*>", "<script>go()</script>", id="inline-script"),
    pytest.param(r"\son[a-z]+\s*=", '<a onclick="go()">', id="on-handler"),
    pytest.param(r"\sstyle\s*=", '<p style="color: red">', id="style-attribute"),
    pytest.param(r"<style", "<style>p {}</style>", id="style-element"),
    pytest.param(r"javascript:", '<a href="javascript:go()">', id="javascript-url"),
    pytest.param(r"\shx-on", '<button hx-on:click="go()">', id="hx-on"),
]


@pytest.mark.parametrize(("pattern", "example"), INLINE)
def test_no_template_has_inline_code_or_style(pattern, example):
    regex = re.compile(pattern, re.I)
    assert regex.search(example)  # the check finds what it looks for
    assert not regex.search('<script src="/static/htmx/htmx.min.js" defer></script>')
    assert TEMPLATES
    offenders = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in TEMPLATES
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if regex.search(line)
    ]
    assert offenders == []


def test_htmx_is_told_not_to_insert_styles_or_evaluate_code(client, owner):
    client.force_login(owner)
    page = client.get(reverse("kernel-list")).content.decode()
    config = re.search(r"<meta name=\"htmx-config\" content='([^']*)'>", page)
    assert config is not None
    assert json.loads(config.group(1)) == {
        "includeIndicatorStyles": False,
        "allowEval": False,
        "allowScriptTags": False,
    }
    # The meta tag must come before htmx itself, which reads it once when it loads.
    assert page.index('name="htmx-config"') < page.index("htmx.min.js")
