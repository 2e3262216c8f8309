"""The run actors on a real RabbitMQ broker: claims, status transitions, retries, idempotency.

The round loop is replaced by a scripted one (tests/worker/fakes.py) where a test is about the
worker's mechanics; test_execution.py runs real kernels through the real loop.
"""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from diagnosis.models import DiagnosisRun, Finding, Proposal, Round
from runner import pipeline
from runner.dispatch import enqueue_run
from runner.errors import RunFailed
from tests.worker.conftest import drain
from tests.worker.fakes import ScriptedLoop

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def loop(monkeypatch) -> ScriptedLoop:
    scripted = ScriptedLoop()
    monkeypatch.setattr(pipeline, "run_loop", scripted)
    monkeypatch.setattr(pipeline, "make_executor", lambda run: "executor")
    return scripted


def test_a_run_goes_queued_running_done_through_the_worker(run, broker, worker, loop) -> None:
    assert run.status == DiagnosisRun.Status.QUEUED

    enqueue_run(run.id, "cpu")
    drain(broker, worker)

    # While the loop ran, the row said running and named this worker.
    ((status, name),) = loop.statuses_seen
    assert status == DiagnosisRun.Status.RUNNING
    assert name.split(":")[0] and name.count(":") == 3
    run.refresh_from_db()
    assert run.status == DiagnosisRun.Status.DONE
    assert run.attempts == 1 and run.error == ""
    assert run.started_at <= run.heartbeat_at <= run.finished_at
    assert run.summary["stop_reason"] == "round_budget"
    assert run.summary["speedup_over_initial"] == pytest.approx(2.0)
    assert Round.objects.filter(run=run, verdict="improved").count() == 1
    assert loop.calls[0]["config"].device == "cpu"


def test_sending_the_same_run_twice_executes_it_once(run, broker, worker, loop) -> None:
    enqueue_run(run.id, "cpu")
    enqueue_run(run.id, "cpu")
    drain(broker, worker)

    assert len(loop.calls) == 1
    run.refresh_from_db()
    assert run.status == DiagnosisRun.Status.DONE and run.attempts == 1
    assert Round.objects.filter(run=run).count() == 1


def test_a_finished_or_deleted_run_is_skipped_quietly(run, broker, worker, loop) -> None:
    DiagnosisRun.objects.filter(id=run.id).update(status=DiagnosisRun.Status.DONE)
    enqueue_run(run.id, "cpu")
    enqueue_run(run.id + 1000, "cpu")  # no such run
    drain(broker, worker)

    assert loop.calls == []
    run.refresh_from_db()
    assert run.attempts == 0


def test_a_crashed_attempt_is_retried_and_then_succeeds(run, broker, worker, loop) -> None:
    loop.raises = [ConnectionResetError("the database connection dropped")]

    enqueue_run(run.id, "cpu")
    drain(broker, worker)

    run.refresh_from_db()
    assert run.status == DiagnosisRun.Status.DONE
    assert run.attempts == 2
    assert len(loop.calls) == 2


def test_retries_are_bounded_and_the_last_error_is_stored(run, broker, worker, loop, settings) -> None:
    settings.KERNELOPT_MAX_RUN_ATTEMPTS = 3
    loop.raises = [RuntimeError(f"boom {i}") for i in range(1, 6)]

    enqueue_run(run.id, "cpu")
    drain(broker, worker)

    run.refresh_from_db()
    assert run.status == DiagnosisRun.Status.FAILED
    assert run.attempts == 3
    assert len(loop.calls) == 3
    assert run.error == "attempt 3 failed: RuntimeError: boom 3"
    assert run.finished_at is not None


def test_a_bad_configuration_fails_the_run_without_retry(run, broker, worker, loop, settings) -> None:
    settings.LLM_BASE_URL = settings.LLM_MODEL = None
    DiagnosisRun.objects.filter(id=run.id).update(proposer="llm")

    enqueue_run(run.id, "cpu")
    drain(broker, worker)

    run.refresh_from_db()
    assert run.status == DiagnosisRun.Status.FAILED and run.attempts == 1
    assert "llm proposer is not configured" in run.error
    assert loop.calls == []


def test_cancelling_a_running_run_stops_the_loop(run, broker, worker, loop) -> None:
    loop.gate = threading.Event()
    enqueue_run(run.id, "cpu")
    assert loop.reached_gate.wait(60)

    DiagnosisRun.objects.filter(id=run.id).update(status=DiagnosisRun.Status.CANCELLED)
    loop.gate.set()
    drain(broker, worker)

    run.refresh_from_db()
    assert run.status == DiagnosisRun.Status.CANCELLED
    assert run.summary["stop_reason"] == "cancelled"
    assert run.finished_at is not None
    # What was committed before the cancel is kept.
    assert Finding.objects.filter(run=run).count() == 2
    assert Proposal.objects.filter(round__run=run).count() == 1


def test_a_run_taken_over_by_another_worker_is_not_overwritten(run, broker, worker, loop) -> None:
    loop.gate = threading.Event()
    enqueue_run(run.id, "cpu")
    assert loop.reached_gate.wait(60)

    # Presumed dead and re-claimed elsewhere while it was still going.
    DiagnosisRun.objects.filter(id=run.id).update(worker="elsewhere:1:1:abcdef", attempts=2)
    loop.gate.set()
    drain(broker, worker)

    run.refresh_from_db()
    assert run.status == DiagnosisRun.Status.RUNNING
    assert run.worker == "elsewhere:1:1:abcdef"
    assert run.summary == {}


def test_two_workers_never_claim_the_same_run(run) -> None:
    contenders = 8
    barrier = threading.Barrier(contenders)
    claims: list[pipeline.Claim | None] = []
    lock = threading.Lock()

    def contend() -> None:
        try:
            barrier.wait()
            claim = pipeline.claim_run(run.id)  # each thread has its own database connection
            with lock:
                claims.append(claim)
        finally:
            connection.close()

    threads = [threading.Thread(target=contend) for _ in range(contenders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    won = [c for c in claims if c is not None]
    assert len(claims) == contenders and len(won) == 1
    run.refresh_from_db()
    assert run.status == DiagnosisRun.Status.RUNNING
    assert run.worker == won[0].worker and run.attempts == 1


def test_a_queued_run_out_of_attempts_is_failed_instead_of_claimed(run, settings) -> None:
    settings.KERNELOPT_MAX_RUN_ATTEMPTS = 2
    DiagnosisRun.objects.filter(id=run.id).update(attempts=2, error="worker w stopped sending heartbeats")

    assert pipeline.claim_run(run.id) is None

    run.refresh_from_db()
    assert run.status == DiagnosisRun.Status.FAILED
    assert run.error.startswith("gave up: the run already used its 2 attempts")
    assert run.error.endswith("previous error: worker w stopped sending heartbeats")


def test_the_llm_proposer_is_built_from_settings(run, settings) -> None:
    from diagnosis.engine.proposers.llm import LLMProposer

    settings.LLM_BASE_URL, settings.LLM_MODEL = "http://127.0.0.1:9/v1", "kernel-coder"
    settings.LLM_API_KEY, settings.LLM_TIMEOUT_S = "sk-test", 7.0

    run.proposer = "llm"
    proposer = pipeline.make_proposer(run)

    assert isinstance(proposer, LLMProposer)
    assert (proposer.config.base_url, proposer.config.model) == ("http://127.0.0.1:9/v1", "kernel-coder")
    assert (proposer.config.api_key, proposer.config.timeout_s) == ("sk-test", 7.0)
    run.proposer = "rules"
    assert pipeline.make_proposer(run) is None  # the loop's default
    run.proposer = "magic"
    with pytest.raises(RunFailed, match="unknown proposer 'magic'"):
        pipeline.make_proposer(run)
