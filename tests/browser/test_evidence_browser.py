"""The evidence pages in Chromium: a real cpu run (the round loop, the sandboxed compile for
sm_90, runner.persist) opened at a finding's line, a line opened in place, a pass diff, and the
roofline of an H200 profile; an outsider sees none of it. Each page is saved as a screenshot
under $KERNELOPT_SCREENSHOT_DIR (else the test's own temporary directory)."""

from __future__ import annotations

import re

import pytest

from diagnosis.models import DiagnosisRun, Finding, Kernel, KernelVersion
from runner import pipeline
from tests.web.evidence_data import LOAD_LINE, VADD, gemm_run

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def real_run(owner, team):
    """vadd_unaligned run for one round by the real loop on the cpu device."""
    source = VADD.read_text()
    kernel = Kernel.objects.create(team=team, name="vadd", owner=owner)
    version = KernelVersion.objects.create(
        kernel=kernel, number=1, source=source, sha256=KernelVersion.digest(source), filename="vadd.py"
    )
    run = DiagnosisRun.objects.create(
        version=version, device="cpu", target="sm_90", round_budget=1, requested_by=owner
    )
    pipeline.execute_run(run.pk)
    run.refresh_from_db()
    assert run.status == DiagnosisRun.Status.DONE, run.error
    return run


def no_overflow(page) -> None:
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


def test_a_findings_line_shows_its_ptx_and_sass_and_a_pass_diff(page, login, owner, real_run, screenshot):
    finding = Finding.objects.filter(run=real_run, code="IR_SCALAR_GLOBAL", lines=[LOAD_LINE]).first()
    assert finding is not None
    login("owner", "owner-pass-1")

    # the review page's link to a finding's line: ?line=N#LN
    page.goto(f"/runs/{real_run.pk}/evidence/?line={LOAD_LINE}#L{LOAD_LINE}")
    panel = page.locator("section#line-panel")
    assert "IR_SCALAR_GLOBAL" in panel.inner_text()
    assert page.locator("#line-panel .stage-ptx").inner_text().count("ld.global.b32") == 8
    assert re.search(r"LDG\.E\b", page.locator("#line-panel .stage-sass").inner_text())
    # the panel sits right under its line
    assert page.evaluate(f"document.getElementById('L{LOAD_LINE}').nextElementSibling.id") == "line-panel"
    no_overflow(page)
    screenshot("evidence-load-line")

    # another line, in place (htmx): the panel moves under it and the address follows
    page.locator("#L17 a.src-code").click()
    # (no wait_for_function: it evaluates a string, which the page's policy refuses)
    page.locator("#line-panel h2", has_text="Line 17").wait_for()
    assert page.evaluate("document.getElementById('L17').nextElementSibling.id") == "line-panel"
    assert page.locator("#line-panel").count() == 1
    assert "st.global.b32" in page.locator("#line-panel .stage-ptx").inner_text()
    assert page.url.endswith("?line=17#L17")
    assert (
        page.locator("#L17.is-selected").count() == 1 and page.locator(".src-line.is-selected").count() == 1
    )
    screenshot("evidence-store-line-htmx")

    # a bare anchor (no ?line=) opens its line's panel too, once evidence.js runs
    page.goto(f"/runs/{real_run.pk}/evidence/#L16")
    page.locator("#line-panel h2", has_text="Line 16").wait_for()
    assert page.evaluate("document.getElementById('L16').nextElementSibling.id") == "line-panel"

    # line numbers stay out of the tab order: the first Tab stops in the page's own links
    tabbable = page.evaluate(
        "[...document.querySelectorAll('#annotated-source a')].filter(a => a.tabIndex >= 0).length"
    )
    assert 0 < tabbable < len(VADD.read_text().splitlines()) // 2

    # the passes: open one from the list, in place
    page.click("text=Passes")
    page.wait_for_selector("#pass-diff")
    screenshot("passes-first")
    page.locator(".pass-list a", has_text="TritonGPUCoalesce").click()
    page.wait_for_selector("#pass-title:has-text('TritonGPUCoalesce')")
    assert (
        "ttg.convert_layout" in page.locator(".ir-diff .d-add").first.inner_text()
        or page.locator(".ir-diff .d-add", has_text="ttg.convert_layout").count()
    )
    assert page.locator(".pass-list a[aria-current]").inner_text().endswith("TritonGPUCoalesce")
    no_overflow(page)
    screenshot("passes-coalesce")

    # the run page links here and lists the artefacts once each, SASS included
    page.goto(f"/runs/{real_run.pk}/")
    artefacts = page.locator("table.artefacts").inner_text()
    assert "SASS" in artefacts and artefacts.count("add_kernel.ptx") == 1
    assert "/tmp/" not in page.content() and ".venv" not in page.content()
    screenshot("run-page")


def test_the_roofline_of_an_h200_profile(page, login, owner, team, screenshot):
    run, _ = gemm_run(owner, team)
    login("owner", "owner-pass-1")
    page.goto(f"/runs/{run.pk}/profile/")
    svg = page.locator("svg.roofline-svg")
    assert svg.is_visible()
    assert page.locator("svg.roofline-svg .rl-parent circle").count() == 5
    assert page.locator("svg.roofline-svg .rl-candidate rect").count() == 5
    box = svg.bounding_box()
    assert box["width"] > 300 and box["height"] > 150
    # the roofs are drawn (their stroke comes from evidence.css, not from style attributes)
    stroke = page.evaluate("getComputedStyle(document.querySelector('.rl-compute')).stroke")
    assert stroke not in ("", "none")
    no_overflow(page)
    screenshot("profile-roofline")


def test_an_outsider_sees_none_of_it(page, login, outsider, owner, team):
    run, _ = gemm_run(owner, team)
    login("outsider", "outsider-pass-1")
    for url in (f"/runs/{run.pk}/evidence/?line=24", f"/runs/{run.pk}/passes/", f"/runs/{run.pk}/profile/"):
        response = page.goto(url)
        assert response.status == 404, url
        assert "gemm" not in page.content()
