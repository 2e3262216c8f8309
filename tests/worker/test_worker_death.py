"""A worker process killed mid-run: its run is found stale, re-queued, and finished by another.

The first worker is a real process (tests/worker/worker_main.py) on the real broker and
database; it is SIGKILLed (its whole process group) while the run is in its first round.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import dramatiq
import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from diagnosis.models import DiagnosisRun, Finding, Proposal, Round
from runner import pipeline
from runner.dispatch import enqueue_run
from tests.worker.conftest import drain
from tests.worker.fakes import ScriptedLoop

pytestmark = pytest.mark.django_db(transaction=True)
ROOT = Path(__file__).resolve().parents[2]


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Poll the database for a state another process produces (no broker to join on here)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def database_url() -> str:
    s = connection.settings_dict
    return f"postgres://{s['USER']}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


@pytest.fixture
def worker_process(queue_prefix: str) -> Iterator[subprocess.Popen]:
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "KERNELOPT_STALE_RUN_SECONDS": "10",  # its heartbeat every 2 s
        "KERNELOPT_TEST_SCRIPTED_LOOP": "block",
        "PYTHONPATH": str(ROOT),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.worker.worker_main", queue_prefix],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, so the kill takes everything it started
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        if proc.stdout:
            proc.stdout.close()


def test_a_killed_worker_leaves_a_run_that_is_requeued_and_completed(
    run, broker, worker_process, monkeypatch, settings
) -> None:
    enqueue_run(run.id, "cpu")

    # The worker process claims the run and commits round 1 up to its proposal, then is stuck.
    def in_round_one() -> bool:
        return Proposal.objects.filter(round__run_id=run.id).exists()

    wait_for(in_round_one, "the worker process to reach its first proposal")
    run.refresh_from_db()
    assert run.status == DiagnosisRun.Status.RUNNING and run.attempts == 1
    dead_worker = run.worker

    os.killpg(worker_process.pid, signal.SIGKILL)
    assert worker_process.wait(timeout=30) == -signal.SIGKILL

    # No more heartbeats: with a 1 s threshold the run soon looks dead, but stays `running`.
    settings.KERNELOPT_STALE_RUN_SECONDS = 1

    def stale() -> bool:
        beat = DiagnosisRun.objects.values_list("heartbeat_at", flat=True).get(id=run.id)
        return beat < timezone.now() - timedelta(seconds=1)

    wait_for(stale, "the heartbeat to go stale", timeout=10)
    run.refresh_from_db()
    assert run.status == DiagnosisRun.Status.RUNNING and run.worker == dead_worker

    call_command("requeue_stale")

    run.refresh_from_db()
    assert run.status == DiagnosisRun.Status.QUEUED
    assert run.error == f"worker {dead_worker} stopped sending heartbeats during attempt 1"

    # A fresh worker picks the re-sent message up and finishes the run.
    loop = ScriptedLoop()
    monkeypatch.setattr(pipeline, "run_loop", loop)
    monkeypatch.setattr(pipeline, "make_executor", lambda run: "executor")
    fresh = dramatiq.Worker(
        broker, queues=set(broker.test_queues.values()), worker_threads=1, worker_timeout=100
    )
    fresh.start()
    try:
        drain(broker, fresh)
    finally:
        fresh.stop(timeout=30_000)

    run.refresh_from_db()
    assert run.status == DiagnosisRun.Status.DONE
    assert run.attempts == 2 and run.worker != dead_worker and run.error == ""
    # Nothing the dead worker committed is lost: its round is kept, marked interrupted.
    rounds = list(Round.objects.filter(run=run).order_by("index").values_list("index", "verdict"))
    assert rounds == [(1, "inconclusive"), (2, "improved")]
    assert Finding.objects.filter(run=run, round__index=1).count() == 2
    assert Proposal.objects.filter(round__run=run).count() == 2
