"""Sending runs, and finding the runs whose worker died or whose message was lost."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from diagnosis.models import DiagnosisRun
from runner.dispatch import enqueue_run, requeue_stale

pytestmark = pytest.mark.django_db(transaction=True)
Status = DiagnosisRun.Status


def messages_in(broker, device: str = "cpu") -> int:
    return broker.get_queue_message_counts(broker.test_queues[device])[0]


def make_running(run, *, age_s: float, attempts: int = 1, worker: str = "gpu-node-3:4242:77:a1b2c3") -> None:
    beat = timezone.now() - timedelta(seconds=age_s)
    DiagnosisRun.objects.filter(id=run.id).update(
        status=Status.RUNNING, worker=worker, heartbeat_at=beat, started_at=beat, attempts=attempts
    )


def test_enqueue_run_sends_to_the_devices_queue(run, broker) -> None:
    enqueue_run(run.id, "cuda")
    enqueue_run(run.id, "cpu")

    assert messages_in(broker, "cuda") == 1
    assert messages_in(broker, "cpu") == 1
    assert messages_in(broker, "npu") == 0


def test_enqueue_run_rejects_an_unknown_device(run, broker) -> None:
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        enqueue_run(run.id, "tpu")


def test_a_running_run_with_a_stale_heartbeat_is_requeued(run, broker, settings) -> None:
    settings.KERNELOPT_STALE_RUN_SECONDS = 60
    make_running(run, age_s=61)

    report = requeue_stale()

    assert report.requeued == [run.id]
    run.refresh_from_db()
    assert run.status == Status.QUEUED and run.attempts == 1
    assert run.error == "worker gpu-node-3:4242:77:a1b2c3 stopped sending heartbeats during attempt 1"
    assert messages_in(broker) == 1


def test_a_running_run_with_a_fresh_heartbeat_is_left_alone(run, broker, settings) -> None:
    settings.KERNELOPT_STALE_RUN_SECONDS = 60
    make_running(run, age_s=30)

    assert not requeue_stale()
    run.refresh_from_db()
    assert run.status == Status.RUNNING
    assert messages_in(broker) == 0


def test_a_stale_run_out_of_attempts_is_failed_with_the_last_error(run, broker, settings) -> None:
    settings.KERNELOPT_STALE_RUN_SECONDS = 60
    settings.KERNELOPT_MAX_RUN_ATTEMPTS = 2
    make_running(run, age_s=120, attempts=2)
    DiagnosisRun.objects.filter(id=run.id).update(error="attempt 1 failed: OSError: disk full")

    report = requeue_stale()

    assert report.failed == [run.id]
    run.refresh_from_db()
    assert run.status == Status.FAILED and run.finished_at is not None
    assert run.error == (
        "gave up after 2 attempts: worker gpu-node-3:4242:77:a1b2c3 stopped sending heartbeats during "
        "attempt 2; previous error: attempt 1 failed: OSError: disk full"
    )
    assert messages_in(broker) == 0


def test_a_queued_run_whose_message_was_lost_is_sent_once_per_stale_period(run, broker, settings) -> None:
    settings.KERNELOPT_STALE_RUN_SECONDS = 60
    DiagnosisRun.objects.filter(id=run.id).update(created=timezone.now() - timedelta(seconds=90))

    assert requeue_stale().resent == [run.id]
    assert not requeue_stale()  # just sent: not again until another stale period has passed
    assert requeue_stale(now=timezone.now() + timedelta(seconds=61)).resent == [run.id]
    assert messages_in(broker) == 2


def test_a_recently_queued_run_is_not_resent(run, broker, settings) -> None:
    settings.KERNELOPT_STALE_RUN_SECONDS = 60
    assert not requeue_stale()
    assert messages_in(broker) == 0


def test_dead_local_workers_are_requeued_at_once_when_asked(run, broker) -> None:
    import os
    import socket
    import subprocess

    child = subprocess.Popen(["true"])
    child.wait()  # a pid of this host that is now gone
    make_running(run, age_s=0, worker=f"{socket.gethostname()}:{child.pid}:1:abc123")

    assert not requeue_stale()
    assert requeue_stale(dead_local_workers=True).requeued == [run.id]

    # A claim held by this very process is alive.
    DiagnosisRun.objects.filter(id=run.id).update(
        status=Status.RUNNING, worker=f"{socket.gethostname()}:{os.getpid()}:1:abc123"
    )
    assert not requeue_stale(dead_local_workers=True)


def test_the_requeue_stale_command_reports_what_it_did(run, broker, settings, capsys) -> None:
    settings.KERNELOPT_STALE_RUN_SECONDS = 60
    make_running(run, age_s=61)

    call_command("requeue_stale", "--json")

    assert json.loads(capsys.readouterr().out) == {"requeued": [run.id], "failed": [], "resent": []}
