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
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import dramatiq
import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from diagnosis.models import DiagnosisRun, Finding, KernelVersion, Proposal, Round
from runner import pipeline
from runner.dispatch import enqueue_run
from tests.conftest import GOOD_SOURCE
from tests.runner import procs
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


def start_worker_process(queue_prefix: str, *, scripted: bool, bind: Path | None = None) -> subprocess.Popen:
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "KERNELOPT_STALE_RUN_SECONDS": "10",  # its heartbeat every 2 s
        "PYTHONPATH": str(ROOT),
    }
    if bind is not None:
        env["KERNELOPT_SANDBOX_BIND"] = str(bind)  # read-only in the worker's sandboxed jobs
    if scripted:
        env["KERNELOPT_TEST_SCRIPTED_LOOP"] = "block"
    return subprocess.Popen(
        [sys.executable, "-m", "tests.worker.worker_main", queue_prefix],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, so the kill takes the worker's threads
    )


@contextmanager
def reaped(proc: subprocess.Popen) -> Iterator[subprocess.Popen]:
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        if proc.stdout:
            proc.stdout.close()


@pytest.fixture
def worker_process(queue_prefix: str) -> Iterator[subprocess.Popen]:
    with reaped(start_worker_process(queue_prefix, scripted=True)) as proc:
        yield proc


def kill_and_requeue(run: DiagnosisRun, proc: subprocess.Popen, settings) -> str:
    """SIGKILL the worker's process group, see the run go stale, run `requeue_stale`."""
    run.refresh_from_db()
    assert run.status == DiagnosisRun.Status.RUNNING and run.attempts == 1
    dead_worker = run.worker

    os.killpg(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL

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
    return dead_worker


def finish_with_a_fresh_worker(broker) -> None:
    fresh = dramatiq.Worker(
        broker, queues=set(broker.test_queues.values()), worker_threads=1, worker_timeout=100
    )
    fresh.start()
    try:
        drain(broker, fresh)
    finally:
        fresh.stop(timeout=30_000)


def test_a_killed_worker_leaves_a_run_that_is_requeued_and_completed(
    run, broker, worker_process, monkeypatch, settings
) -> None:
    enqueue_run(run.id, "cpu")

    # The worker process claims the run and commits round 1 up to its proposal, then is stuck.
    def in_round_one() -> bool:
        return Proposal.objects.filter(round__run_id=run.id).exists()

    wait_for(in_round_one, "the worker process to reach its first proposal")
    dead_worker = kill_and_requeue(run, worker_process, settings)

    # A fresh worker picks the re-sent message up and finishes the run.
    monkeypatch.setattr(pipeline, "run_loop", ScriptedLoop())
    monkeypatch.setattr(pipeline, "make_executor", lambda run: "executor")
    finish_with_a_fresh_worker(broker)

    run.refresh_from_db()
    assert run.status == DiagnosisRun.Status.DONE
    assert run.attempts == 2 and run.worker != dead_worker and run.error == ""
    # Nothing the dead worker committed is lost: its round is kept, marked interrupted.
    rounds = list(Round.objects.filter(run=run).order_by("index").values_list("index", "verdict"))
    assert rounds == [(1, "inconclusive"), (2, "improved")]
    assert Finding.objects.filter(run=run, round__index=1).count() == 2
    assert Proposal.objects.filter(round__run=run).count() == 2


@pytest.mark.slow
def test_a_worker_killed_while_its_child_runs_user_code_loses_nothing(
    run, broker, queue_prefix, settings, tmp_path
) -> None:
    """The real loop and sandbox: the worker dies while its child is inside ModelNew.forward."""
    # The sandboxed child can write nothing the test sees and the test's directory is bound into
    # it read-only, so: it starts a process with a token in its command line when it enters
    # forward (found on the host), and waits while `hold` exists.
    token, hold = f"kernelopt-entered-{uuid.uuid4().hex}", tmp_path / "hold"
    hold.touch()
    slow = GOOD_SOURCE.replace(
        "        out = torch.empty_like(x)\n",
        "        import os, subprocess, sys, time\n"
        f"        subprocess.Popen([sys.executable, '-S', '-c', 'import time; time.sleep(300)', {token!r}])\n"
        f"        while os.path.exists({str(hold)!r}):  # held by the test, released after the kill\n"
        "            time.sleep(0.05)\n"
        "        out = torch.empty_like(x)\n",
        1,
    )
    KernelVersion.objects.filter(id=run.version_id).update(source=slow, sha256=KernelVersion.digest(slow))
    DiagnosisRun.objects.filter(id=run.id).update(round_budget=1)

    try:
        with reaped(start_worker_process(queue_prefix, scripted=False, bind=tmp_path)) as proc:
            enqueue_run(run.id, "cpu")
            wait_for(lambda: bool(procs.living(token)), "the sandboxed child to enter ModelNew.forward")
            kill_and_requeue(run, proc, settings)
            # the job dies with its worker (its PID namespace goes with the worker's death)
            assert procs.gone(token, timeout=10)
    finally:
        hold.unlink()

    finish_with_a_fresh_worker(broker)

    run.refresh_from_db()
    assert run.status == DiagnosisRun.Status.DONE, run.error
    assert run.attempts == 2 and run.error == ""
