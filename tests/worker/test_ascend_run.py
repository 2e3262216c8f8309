"""An upload for npu:Ascend910B3 on the embedded CPU worker, through the real pipeline.

The web test client uploads the module, the embedded worker (stub broker) runs the whole loop:
verification under CUDA triton's interpreter, tiers 2 and 3 compiled in the sandbox under
.venv-ascend (child_python('npu')). The run page then shows the TTIR and linalg artefacts, the
pass dumps and the Ascend findings, and the stage that needs CANN as a finding, not an error.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.urls import reverse
from django_dramatiq.middleware import DbConnectionsMiddleware
from dramatiq.brokers.stub import StubBroker

from diagnosis.models import Artefact, DiagnosisRun, Finding
from runner import embedded
from tests.worker.conftest import bound_actors

MODULE = Path(__file__).resolve().parents[1] / "kernels" / "npu_discrete.py"

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def stub_broker() -> Iterator[StubBroker]:
    broker = StubBroker()
    broker.add_middleware(DbConnectionsMiddleware())
    broker.emit_after("process_boot")
    with bound_actors(broker, f"ascend-{uuid.uuid4().hex[:8]}") as queues:
        broker.test_queues = queues
        yield broker
    embedded.stop()
    broker.close()


def test_an_npu_upload_on_the_cpu_worker_shows_ttir_linalg_and_findings(
    client, owner, team, stub_broker, settings, ascend_python
) -> None:
    settings.KERNELOPT_DEVICES = ["cpu"]
    worker = embedded.start(poll_ms=100)
    client.force_login(owner)
    response = client.post(
        reverse("kernel-upload"),
        {
            "source": MODULE.read_text(),
            "name": "npu_discrete",
            "team": team.pk,
            "device": "cpu",
            "target": "npu:Ascend910B3",
            "round_budget": 1,
        },
    )
    assert response.status_code == 302
    run = DiagnosisRun.objects.get()
    stub_broker.join(stub_broker.test_queues["cpu"], fail_fast=True)
    worker.join()

    run.refresh_from_db()
    assert (run.status, run.device, run.target) == ("done", "cpu", "npu:Ascend910B3"), run.error
    kinds = set(run.artefacts.values_list("kind", flat=True))
    assert {"ttir", "linalg", "pass_dump"} <= kinds
    codes = set(Finding.objects.filter(run=run).values_list("code", flat=True))
    assert {"NPU_DISCRETE_ACCESS", "NPU_MASK_SELECT", "NPU_STAGE_UNAVAILABLE", "CG_NPU_LOWERING"} <= codes
    stage = Finding.objects.filter(run=run, code="NPU_STAGE_UNAVAILABLE").first()
    assert stage.args["stage"] == "npubin" and stage.args["reason"] == "needs_cann"

    page = client.get(reverse("run-detail", args=[run.pk])).content.decode()
    for text in ("gather_kernel.ttir", "gather_kernel.ttadapter", "NPU_DISCRETE_ACCESS", "CG_NPU_LOWERING"):
        assert text in page
    linalg = Artefact.objects.get(run=run, kind="linalg")
    assert f'href="{reverse("artefact-detail", args=[linalg.pk])}' in page
    artefact_page = client.get(reverse("artefact-detail", args=[linalg.pk])).content.decode()
    assert "memref.copy" in artefact_page and "func.func @gather_kernel" in artefact_page
