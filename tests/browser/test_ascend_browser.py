"""In Chromium: upload a kernel for npu:Ascend910B3, the embedded CPU worker runs it, the run
page shows the TTIR and linalg artefacts and the Ascend findings, and the linalg opens."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from django_dramatiq.middleware import DbConnectionsMiddleware
from dramatiq.brokers.stub import StubBroker

from diagnosis.models import DiagnosisRun
from runner import embedded
from tests.worker.conftest import bound_actors

MODULE = Path(__file__).resolve().parents[1] / "kernels" / "npu_discrete.py"

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def stub_broker() -> Iterator[StubBroker]:
    broker = StubBroker()
    broker.add_middleware(DbConnectionsMiddleware())
    broker.emit_after("process_boot")
    with bound_actors(broker, f"ascend-browser-{uuid.uuid4().hex[:8]}") as queues:
        broker.test_queues = queues
        yield broker
    embedded.stop()
    broker.close()


def test_an_npu_upload_shows_its_ir_and_findings_in_the_browser(
    page, login, owner, team, stub_broker, settings, ascend_python
) -> None:
    settings.KERNELOPT_DEVICES = ["cpu"]
    worker = embedded.start(poll_ms=100)
    login("owner", "owner-pass-1")
    page.click("text=Upload a kernel")
    page.set_input_files("#id_file", str(MODULE))
    page.select_option("#id_device", "cpu")
    page.fill("#id_target", "npu:Ascend910B3")
    page.fill("#id_round_budget", "1")
    page.click("button:has-text('Upload and queue a run')")
    page.wait_for_url(re.compile(r"/kernels/\d+/$"))
    run = DiagnosisRun.objects.get()
    stub_broker.join(stub_broker.test_queues["cpu"], fail_fast=True)
    worker.join()
    run.refresh_from_db()
    assert run.status == "done", run.error

    page.goto(f"/runs/{run.pk}/")
    assert page.locator("#run-status [data-status]").inner_text() == "done"
    for name in ("gather_kernel.ttir", "gather_kernel.ttadapter"):
        assert page.locator(f"a:text-is('{name}')").count() == 1
    body = page.locator("body").inner_text()
    for code in ("NPU_DISCRETE_ACCESS", "NPU_MASK_SELECT", "NPU_STAGE_UNAVAILABLE", "CG_NPU_LOWERING"):
        assert code in body
    page.click("a:text-is('gather_kernel.ttadapter')")
    page.wait_for_url(re.compile(r"/artefacts/\d+/"))
    assert "func.func @gather_kernel" in page.locator("body").inner_text()
