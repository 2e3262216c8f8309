"""Embedded mode: the in-process worker on the stub broker runs what the web sends."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from django_dramatiq.middleware import DbConnectionsMiddleware
from dramatiq.brokers.stub import StubBroker

from diagnosis.models import DiagnosisRun
from runner import embedded, pipeline
from runner.dispatch import enqueue_run
from runner.middleware import RunBookkeeping, StaleRunSweeper
from tests.worker.conftest import bound_actors
from tests.worker.fakes import ScriptedLoop

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def stub_broker() -> Iterator[StubBroker]:
    broker = StubBroker()
    broker.add_middleware(DbConnectionsMiddleware())  # as settings.DRAMATIQ_BROKER has it
    broker.emit_after("process_boot")
    with bound_actors(broker, f"embedded-{uuid.uuid4().hex[:8]}") as queues:
        broker.test_queues = queues
        yield broker
    embedded.stop()
    broker.close()


@pytest.fixture
def loop(monkeypatch) -> ScriptedLoop:
    scripted = ScriptedLoop()
    monkeypatch.setattr(pipeline, "run_loop", scripted)
    monkeypatch.setattr(pipeline, "make_executor", lambda run: "executor")
    return scripted


def test_the_embedded_worker_runs_a_run_sent_by_the_web(run, stub_broker, loop, settings) -> None:
    settings.KERNELOPT_DEVICES = ["cpu"]
    worker = embedded.start(poll_ms=100)
    assert embedded.start() is worker  # once per process
    assert {type(m) for m in stub_broker.middleware} >= {RunBookkeeping, StaleRunSweeper}

    enqueue_run(run.id, "cpu")
    stub_broker.join(stub_broker.test_queues["cpu"], fail_fast=True)
    worker.join()

    run.refresh_from_db()
    assert run.status == DiagnosisRun.Status.DONE
    assert len(loop.calls) == 1


def test_start_resends_runs_the_previous_server_left_queued(run, stub_broker, loop, settings) -> None:
    settings.KERNELOPT_DEVICES = ["cpu"]
    # The run was queued on a stub broker that died with its process; nothing is in this one.
    worker = embedded.start(poll_ms=100)
    stub_broker.join(stub_broker.test_queues["cpu"], fail_fast=True)
    worker.join()

    run.refresh_from_db()
    assert run.status == DiagnosisRun.Status.DONE


def test_embedded_mode_only_consumes_the_devices_offered(run, stub_broker, loop, settings) -> None:
    settings.KERNELOPT_DEVICES = ["cuda"]
    worker = embedded.start(recover=False, poll_ms=100)

    enqueue_run(run.id, "cpu")
    worker.join()

    assert set(worker.consumers) == {stub_broker.test_queues["cuda"], stub_broker.test_queues["cuda"] + ".DQ"}
    run.refresh_from_db()
    assert run.status == DiagnosisRun.Status.QUEUED
