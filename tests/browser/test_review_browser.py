"""In Chromium: review a proposal side by side, accept it in place, run the new version, find
it in the kernel's timeline, filter the history; an outsider sees none of it. Manners: no
page wider than the window from 360 to 1280 px with a 200-character kernel name, the skip
link, and the polling note only where polling happens. Every page visited is screenshotted."""

from __future__ import annotations

import re

import pytest

from diagnosis.models import DiagnosisRun, Kernel, Pattern, Proposal

pytestmark = pytest.mark.django_db(transaction=True)

LONG_NAME = "fused_layernorm_gelu_dropout_residual_" * 5 + "x" * 10  # 200 characters, no break opportunity
assert len(LONG_NAME) == 200


@pytest.fixture
def sent(monkeypatch):
    """Runs stay queued: the live server sends no broker message; the test sees what it would."""
    calls = []
    monkeypatch.setattr("diagnosis.forms.enqueue_run", lambda run_id, device: calls.append((run_id, device)))
    return calls


def test_review_accept_run_and_find_it_in_the_timeline_and_history(
    page, login, reviewer, proposal, sent, screenshot
):
    kernel = proposal.round.run.version.kernel
    login("reviewer", "reviewer-pass-1")
    page.click("nav >> text=Reviews")
    screenshot("review-queue")
    page.click(f"text=proposal {proposal.pk}")

    # side by side by default: the old line beside what it became, the changed words marked
    split = page.locator("table.diff-split")
    assert split.is_visible()
    changed = split.locator("tr.row-change").first
    assert changed.locator("td.code.del del").first.inner_text() == "128"
    assert changed.locator("td.code.add ins").first.inner_text() == "1024"
    assert page.locator("dl.rationale dt").all_inner_texts() == [
        "Rationale",
        "Evidence",
        "Expected",
        "Measured",
    ]
    assert "2.00x faster" in page.locator("table.verification").inner_text()
    screenshot("proposal-side-by-side")

    # the toggle swaps the diff in place and pushes its URL
    page.evaluate("() => { window.__sameDocument = true }")
    page.click(".diff-toggle >> text=Unified")
    page.wait_for_selector("table.diff-unified")
    assert page.url.endswith("?view=unified")
    screenshot("proposal-unified")
    page.click(".diff-toggle >> text=Side by side")
    page.wait_for_selector("table.diff-split")

    # accept: the decision comes back in place (no page load), the badge with it
    page.fill("#id_comment", "bigger blocks, verified on every case")
    page.click("button.accept")
    page.wait_for_selector("#decision [data-code='accepted']")
    assert page.evaluate("() => window.__sameDocument") is True
    assert page.locator("#proposal-status").inner_text() == "accepted"
    assert page.locator("button.accept").count() == 0
    assert page.locator("#acceptability").inner_text() == ""  # "it can be accepted" went with it
    proposal.refresh_from_db()
    assert proposal.status == Proposal.Status.ACCEPTED and proposal.result_version.number == 2
    screenshot("proposal-accepted")

    # run the new version from there
    page.select_option("#id_run-device", "cpu")
    page.fill("#id_run-round_budget", "3")
    page.click("button.run-this")
    page.wait_for_url(re.compile(r"/runs/\d+/$"))
    run = DiagnosisRun.objects.get(version=proposal.result_version)
    assert (run.status, run.round_budget) == ("queued", 3) and sent == [(run.pk, "cpu")]
    assert page.locator("[data-code='run-queued']").is_visible()
    screenshot("run-of-the-new-version")

    # the kernel's timeline: v2 came from the proposal, 2x faster, its run queued
    page.goto(f"/kernels/{kernel.pk}/")
    v2 = page.locator("ol.timeline li[data-version='2']")
    assert "accepted proposal" in v2.inner_text() and v2.locator("[data-gain]").inner_text() == "2.00x faster"
    assert v2.locator(".status-queued").inner_text() == "queued"
    screenshot("kernel-timeline")

    # the history: filter the proposals by status, in place; the URL keeps the filter
    page.goto("/proposals/")
    page.select_option("#id_status", "rejected")
    page.click("form.filters-form button[type=submit]")
    page.wait_for_selector("#results .empty")
    assert "status=rejected" in page.url
    page.select_option("#id_status", "accepted")
    page.click("form.filters-form button[type=submit]")
    page.wait_for_selector(f"#results tr[data-proposal='{proposal.pk}']")
    assert "status=accepted" in page.url
    screenshot("proposal-history-filtered")
    page.goto(f"/runs/?device=cpu&kernel={kernel.pk}")
    assert page.locator(f"tr[data-run='{run.pk}']").is_visible()
    screenshot("run-history")
    page.goto("/findings/?code=small_block")
    assert page.locator("table.findings tbody tr").count() == 1
    screenshot("finding-history")
    page.goto(f"/teams/{kernel.team_id}/patterns/")
    assert page.locator("article.pattern").count() == 1
    screenshot("patterns")


def test_an_outsider_sees_none_of_it(page, login, outsider, proposal, screenshot):
    run = proposal.round.run
    kernel = run.version.kernel
    login("outsider", "outsider-pass-1")
    for path in (
        f"/proposals/{proposal.pk}/",
        f"/kernels/{kernel.pk}/",
        f"/runs/{run.pk}/",
        f"/versions/{run.version.pk}/",
        f"/runs/{run.pk}/report.json",
    ):
        response = page.goto(path)
        assert response.status == 404, path
    for path in ("/", "/runs/", "/findings/", "/proposals/", "/reviews/"):
        page.goto(path)
        assert kernel.name not in page.locator("main").inner_text(), path
    screenshot("outsider-kernel-list")


WIDTHS = [360, 768, 1280]


def test_no_page_is_wider_than_the_window_with_a_200_character_name(
    page, login, reviewer, proposal, artefact, screenshot
):
    run = proposal.round.run
    Kernel.objects.filter(pk=run.version.kernel_id).update(name=LONG_NAME)
    long_line = "    out = " + " + ".join(f"tl.load(x_ptr + offs_{i}, mask=mask)" for i in range(12))
    Pattern.objects.create(
        team=run.version.kernel.team,
        family="fusion",
        mechanism="m",
        before="x",
        after=long_line,
        example_diff="",
    )
    login("reviewer", "reviewer-pass-1")
    paths = {
        "kernel-list": "/",
        "kernel": f"/kernels/{run.version.kernel_id}/",
        "version": f"/versions/{run.version.pk}/",
        "run": f"/runs/{run.pk}/",
        "proposal": f"/proposals/{proposal.pk}/",
        "proposal-unified": f"/proposals/{proposal.pk}/?view=unified",
        "review-queue": "/reviews/",
        "runs": "/runs/",
        "findings": "/findings/",
        "proposals": "/proposals/",
        "patterns": f"/teams/{run.version.kernel.team_id}/patterns/",
        "artefact": f"/artefacts/{artefact.pk}/",
    }
    too_wide = []
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        for name, path in paths.items():
            page.goto(path)
            scroll = page.evaluate("() => document.documentElement.scrollWidth")
            if scroll > width:
                too_wide.append((name, width, scroll))
            if name == "patterns":  # the After box stays inside its card; its long line scrolls
                card = page.locator("article.pattern").first.bounding_box()
                after = page.locator(".before-after > div").last.bounding_box()
                if after["x"] + after["width"] > card["x"] + card["width"]:
                    too_wide.append(("patterns: After box", width, after["x"] + after["width"]))
            if width == 360:
                screenshot(f"{name}-360px")
    assert too_wide == []


def test_the_skip_link_is_the_first_tab_stop_and_moves_focus_to_the_content(page, login, owner, team):
    login("owner", "owner-pass-1")
    page.keyboard.press("Tab")
    assert page.evaluate("() => document.activeElement.className") == "skip-link"
    assert page.locator(".skip-link").is_visible()  # shown when focused
    page.keyboard.press("Enter")
    assert page.evaluate("() => document.activeElement.id") == "main"


def test_the_polling_note_shows_only_where_htmx_polls(
    browser, live_server, page, login, owner, run, screenshot
):
    login("owner", "owner-pass-1")
    page.goto(f"/runs/{run.pk}/")
    assert "Updating every 2 s" in page.locator("#run-status .live").inner_text()
    screenshot("run-polling")
    DiagnosisRun.objects.filter(pk=run.pk).update(status="running", current_round=1)
    page.wait_for_selector("#run-status [data-status='running']", timeout=10_000)
    assert "Updating every 2 s" in page.locator("#run-status .live").inner_text()  # after a swap too

    # without JavaScript nothing polls, and nothing says it does
    context = browser.new_context(base_url=live_server.url, java_script_enabled=False)
    try:
        plain = context.new_page()
        plain.goto("/login/")
        plain.fill("#id_username", "owner")
        plain.fill("#id_password", "owner-pass-1")
        plain.click("button[type=submit]")
        plain.wait_for_url("**/")
        plain.goto(f"/runs/{run.pk}/")
        live = plain.locator("#run-status .live").inner_text()
        assert "Updating" not in live and "refresh" in live
        screenshot("run-without-javascript", plain)
    finally:
        context.close()
