"""Worker fixtures: a real RabbitMQ broker with queues of its own per test, and dramatiq workers.

The run actors (runner.tasks.ACTORS) are rebound to the test's broker under unique queue
names, so tests never see each other's messages nor those of a developer's running worker;
the queues are deleted afterwards.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import dramatiq
import pytest
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from dramatiq.middleware import AgeLimit, Callbacks, Retries, TimeLimit

RABBITMQ_URL = "amqp://guest:guest@127.0.0.1:5672"


def make_broker(url: str = RABBITMQ_URL) -> RabbitmqBroker:
    """A broker configured like settings.DRAMATIQ_BROKER, plus the run middleware."""
    from django_dramatiq.middleware import DbConnectionsMiddleware

    from runner.middleware import install

    broker = RabbitmqBroker(
        url=url,
        confirm_delivery=True,  # a sent message is in its queue when send returns
        middleware=[AgeLimit(), TimeLimit(), Callbacks(), Retries(), DbConnectionsMiddleware()],
    )
    install(broker)
    return broker


@contextmanager
def bound_actors(broker: dramatiq.Broker, prefix: str) -> Iterator[dict[str, str]]:
    """Rebind the run actors to `broker` with queues `<prefix>-<device>`; yields device -> queue."""
    from runner.tasks import ACTORS

    saved = {d: (a.broker, a.queue_name) for d, a in ACTORS.items()}
    previous = dramatiq.get_broker()
    dramatiq.set_broker(broker)
    try:
        for device, actor in ACTORS.items():
            actor.broker = broker
            actor.queue_name = f"{prefix}-{device}"
            broker.declare_actor(actor)
        yield {d: a.queue_name for d, a in ACTORS.items()}
    finally:
        for device, actor in ACTORS.items():
            actor.broker, actor.queue_name = saved[device]
        dramatiq.set_broker(previous)


def delete_queues(broker: RabbitmqBroker, queues: list[str]) -> None:
    channel = broker.channel
    for queue in queues:
        for name in (queue, f"{queue}.DQ", f"{queue}.XQ"):
            channel.queue_delete(name)


@pytest.fixture
def queue_prefix() -> str:
    return f"test-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def broker(queue_prefix: str) -> Iterator[RabbitmqBroker]:
    broker = make_broker()
    with bound_actors(broker, queue_prefix) as queues:
        broker.test_queues = queues  # device -> queue name
        try:
            yield broker
        finally:
            delete_queues(broker, list(queues.values()))
            broker.close()


@pytest.fixture
def worker(broker: RabbitmqBroker) -> Iterator[dramatiq.Worker]:
    w = dramatiq.Worker(broker, queues=set(broker.test_queues.values()), worker_threads=2, worker_timeout=100)
    w.start()
    try:
        yield w
    finally:
        w.stop(timeout=30_000)


@pytest.fixture(autouse=True)
def _worker_settings(settings) -> None:
    settings.KERNELOPT_RETRY_BACKOFF_S = 0  # retries go straight back to the queue in tests
    settings.KERNELOPT_MAX_RUN_ATTEMPTS = 3


def drain(
    broker: RabbitmqBroker, worker: dramatiq.Worker, device: str = "cpu", timeout_ms: int = 120_000
) -> None:
    """Wait until every message of `device`'s queue (and its retries) has been processed."""
    queue = broker.test_queues[device]
    while True:
        broker.join(queue, min_successes=5, idle_time=50, timeout=timeout_ms)
        worker.join()
        if sum(broker.get_queue_message_counts(queue)[:-1]) == 0:
            return
