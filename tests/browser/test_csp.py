"""Chromium enforces the Content-Security-Policy and reports no violation on any page.

The `page` fixture fails a test whose pages report a violation; these tests visit the pages
the other browser tests do not, and check that a violation would be seen.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_violation_is_reported_and_blocked(page, login, owner, csp_violations):
    login("owner", "owner-pass-1")
    page.evaluate("""() => {
        const style = document.createElement("style");
        style.textContent = "body { display: none }";
        document.head.appendChild(style);
    }""")
    page.wait_for_function("() => true")
    page.wait_for_timeout(200)  # the violation event is queued as a task
    assert page.locator("body").is_visible()  # the inline style was refused
    assert any(v.get("directive") == "style-src-elem" for v in csp_violations)
    csp_violations.clear()  # seen: the fixture's own check must not fail this test


PAGES = [
    pytest.param("/", id="kernel-list"),
    pytest.param("/kernels/new/", id="upload"),
    pytest.param("/reviews/", id="review-queue"),
    pytest.param("/teams/", id="teams"),
]


@pytest.mark.parametrize("path", PAGES)
def test_the_pages_report_no_violation(page, login, owner, team, path, csp_violations):
    login("owner", "owner-pass-1")
    page.goto(path)
    page.wait_for_load_state("load")
    assert page.evaluate("() => typeof htmx") == "object"  # the project's script did load
    assert page.evaluate("() => htmx.config.includeIndicatorStyles") is False
    assert csp_violations == []


def test_the_proposal_and_run_pages_report_no_violation(page, login, reviewer, proposal, csp_violations):
    login("reviewer", "reviewer-pass-1")
    page.goto(f"/proposals/{proposal.pk}/")
    page.wait_for_load_state("load")
    page.goto(f"/runs/{proposal.round.run.pk}/")
    page.wait_for_load_state("load")
    assert csp_violations == []


def test_the_admin_reports_no_violation(page, admin_user, csp_violations):
    page.goto("/admin/login/")
    page.fill("#id_username", "admin")
    page.fill("#id_password", "password")
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/")
    for path in ("/admin/diagnosis/kernel/", "/admin/diagnosis/kernel/add/", "/admin/axes/accessattempt/"):
        page.goto(path)
        page.wait_for_load_state("load")
    assert csp_violations == []


def test_the_login_lockout_page_reports_no_violation(page, owner, csp_violations):
    for _ in range(5):
        page.goto("/login/")
        page.fill("#id_username", "owner")
        page.fill("#id_password", "wrong")
        page.click("button[type=submit]")
        page.wait_for_load_state("load")
    assert page.locator("[data-code=login-locked]").is_visible()
    assert csp_violations == []
