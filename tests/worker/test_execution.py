"""Real execution: the actor on a real RabbitMQ broker runs a real kernel module on device=cpu.

Every job on the module runs in the sandboxed child under the Triton interpreter; nothing is
scripted. The round budget is kept at one round so the test stays short on two cores.
"""

from __future__ import annotations

import pytest

from diagnosis.models import Artefact, DiagnosisRun, KernelVersion
from runner.dispatch import enqueue_run
from tests.conftest import GOOD_SOURCE
from tests.worker.conftest import drain

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

WRONG_SOURCE = GOOD_SOURCE.replace(
    "tl.load(x_ptr + offs, mask=mask) * 2", "tl.load(x_ptr + offs, mask=mask) * 3"
)


def test_a_correct_module_goes_queued_running_done_on_cpu(run, broker, worker) -> None:
    DiagnosisRun.objects.filter(id=run.id).update(round_budget=1)

    enqueue_run(run.id, "cpu")
    drain(broker, worker)

    run.refresh_from_db()
    assert run.status == DiagnosisRun.Status.DONE, run.error
    assert run.attempts == 1 and run.error == ""
    assert run.started_at <= run.finished_at and run.wall_s > 0
    assert run.summary["initial"]["sha256"] == run.version.sha256
    assert run.summary["stop_reason"]
    assert Artefact.objects.filter(run=run).exists()


def test_an_incorrect_module_fails_with_the_reason_stored(run, broker, worker) -> None:
    KernelVersion.objects.filter(id=run.version_id).update(
        source=WRONG_SOURCE, sha256=KernelVersion.digest(WRONG_SOURCE)
    )
    DiagnosisRun.objects.filter(id=run.id).update(round_budget=1)

    enqueue_run(run.id, "cpu")
    drain(broker, worker)

    run.refresh_from_db()
    assert run.status == DiagnosisRun.Status.FAILED
    assert run.attempts == 1  # a wrong kernel is not retried
    assert "incorrect" in run.error
