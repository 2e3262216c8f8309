"""End to end in a real browser: log in, upload good and bad kernels, accept a proposal."""

from __future__ import annotations

import re

import pytest

from diagnosis.models import DiagnosisRun, Kernel, KernelVersion, Proposal
from tests.conftest import GOOD_SOURCE

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def no_enqueue(monkeypatch):
    """Runs stay queued: no broker message is sent from the live server."""
    calls = []
    monkeypatch.setattr("diagnosis.forms.enqueue_run", lambda run_id, device: calls.append((run_id, device)))
    return calls


def test_upload_a_valid_kernel_and_see_its_queued_run(page, login, owner, team, tmp_path, no_enqueue):
    module = tmp_path / "double.py"
    module.write_text(GOOD_SOURCE)
    login("owner", "owner-pass-1")
    page.click("text=Upload a kernel")
    page.set_input_files("#id_file", str(module))
    page.select_option("#id_device", "cpu")
    page.click("button:has-text('Upload and queue a run')")
    page.wait_for_url(re.compile(r"/kernels/\d+/$"))
    assert page.locator("h1").inner_text() == "double"
    assert "Stored version 1" in page.locator(".messages").inner_text()
    assert page.locator("td .status-queued").first.inner_text() == "queued"
    run = DiagnosisRun.objects.get()
    assert no_enqueue == [(run.pk, "cpu")]
    # The run page: queued, polling its status.
    page.click(f"a[href='/runs/{run.pk}/']")
    assert page.locator("#run-status [data-status]").inner_text() == "queued"
    assert page.locator("#run-status").get_attribute("hx-trigger") == "every 2s"


def test_upload_a_bad_kernel_and_see_the_error_with_its_line(page, login, owner, team, tmp_path, no_enqueue):
    module = tmp_path / "broken.py"
    module.write_text(GOOD_SOURCE.replace("def get_inputs():", "def get_inputs(:"))
    login("owner", "owner-pass-1")
    page.goto("/kernels/new/")
    page.set_input_files("#id_file", str(module))
    page.click("button:has-text('Upload and queue a run')")
    error = page.locator("#field-file .errorlist").inner_text()
    assert "line 27" in error and "syntax error" in error
    assert Kernel.objects.count() == KernelVersion.objects.count() == DiagnosisRun.objects.count() == 0
    assert no_enqueue == []


def test_a_reviewer_accepts_a_proposal_on_the_review_page(page, login, reviewer, proposal):
    login("reviewer", "reviewer-pass-1")
    page.click("text=Reviews")
    page.click(f"text=proposal {proposal.pk}")
    assert "BLOCK=1024" in page.locator(".diff-wrap").inner_text()
    page.fill("#id_comment", "bigger blocks, verified")
    page.click("button.accept")
    page.wait_for_selector("#decision [data-code='accepted']")  # swapped in place by htmx
    assert "Accepted proposal" in page.locator("#decision").inner_text()
    assert page.locator(".page-head [data-status]").inner_text() == "accepted"
    assert page.locator("button.accept").count() == 0
    proposal.refresh_from_db()
    assert proposal.status == Proposal.Status.ACCEPTED
    assert proposal.result_version.number == 2


def test_the_status_fragment_polls_and_updates_in_the_browser(page, login, owner, run):
    login("owner", "owner-pass-1")
    page.goto(f"/runs/{run.pk}/")
    assert page.locator("#run-status [data-status]").inner_text() == "queued"
    DiagnosisRun.objects.filter(pk=run.pk).update(status="running", current_round=1, current_tier=2)
    page.wait_for_selector("#run-status [data-status='running']", timeout=10_000)
    assert "1 / " in page.locator("#run-status").inner_text()
