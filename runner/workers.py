"""Which device kinds a worker serves now: each worker process beats for the queues it
consumes, and the forms offer a kind only while some worker beat for it recently.

The issue this answers: on a machine without a GPU the upload form offered CUDA, the run sat
in a queue the embedded worker consumed anyway, failed after 4 s and reported "Device time
4.0 s". A worker now advertises only the kinds whose device this host has (`present_kinds`:
the cpu kind always, an accelerator kind when its driver's device node exists, or what
KERNELOPT_WORKER_DEVICES declares), so the embedded worker of `make run` on a laptop
registers 'cpu' and nothing else.

`WorkerPresence` is the dramatiq middleware (installed with the run middleware, so
`rundramatiq` and the embedded worker both have it): one beat when the worker boots, then
one every KERNELOPT_WORKER_BEAT_SECONDS from a thread of its own, and its rows are removed
when it shuts down cleanly. A worker that dies simply stops beating; after
KERNELOPT_WORKER_LIVE_SECONDS its kinds read as absent.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

import dramatiq
from django.conf import settings
from django.db import DatabaseError, close_old_connections, connection
from django.db.models import Max
from django.utils import timezone
from dramatiq.middleware import Middleware

from diagnosis.engine import devices

logger = logging.getLogger(__name__)

# The node each accelerator's driver creates: NVIDIA's control device (also what a container
# runtime binds in with the GPUs), Ascend's device manager.
DEVICE_NODES: dict[str, tuple[str, ...]] = {
    "cuda": ("/dev/nvidiactl",),
    "npu": ("/dev/davinci_manager",),
}


def present_kinds() -> set[str]:
    """The device kinds this host can run: KERNELOPT_WORKER_DEVICES when set, else every kind
    without an accelerator and each accelerator kind whose device node exists."""
    declared = settings.KERNELOPT_WORKER_DEVICES
    if declared:
        return set(declared)
    return {
        kind.name
        for kind in devices.KINDS.values()
        if not kind.accelerator or any(os.path.exists(p) for p in DEVICE_NODES.get(kind.name, ()))
    }


def host_name() -> str:
    return socket.gethostname()[:200]


def beat(queues: Mapping[str, str], *, host: str | None = None, pid: int | None = None,
         now: datetime | None = None) -> None:  # fmt: skip
    """Record that this host consumes `queues` (queue name -> device kind) now."""
    from runner.models import WorkerHeartbeat

    if not queues:
        return
    now = now or timezone.now()
    host = host or host_name()
    pid = os.getpid() if pid is None else pid
    rows = [
        WorkerHeartbeat(host=host, queue=q, kind=k, pid=pid, started_at=now, last_seen=now)
        for q, k in queues.items()
    ]
    WorkerHeartbeat.objects.bulk_create(
        rows,
        update_conflicts=True,
        unique_fields=["host", "queue"],
        update_fields=["kind", "pid", "last_seen"],
    )


def forget(queues: Iterable[str], *, host: str | None = None, pid: int | None = None) -> int:
    """Remove this process's rows for `queues` (a clean shutdown): the kinds read as absent at once."""
    from runner.models import WorkerHeartbeat

    pid = os.getpid() if pid is None else pid
    deleted, _ = WorkerHeartbeat.objects.filter(
        host=host or host_name(), queue__in=list(queues), pid=pid
    ).delete()
    return deleted


@dataclass(frozen=True)
class Presence:
    """When a worker was last seen for each kind, and which of them count as live."""

    seen: Mapping[str, datetime]  # kind -> the latest beat of any worker for it
    now: datetime
    window: timedelta

    def live(self, kind: str) -> bool:
        last = self.seen.get(kind)
        return last is not None and last >= self.now - self.window

    def absence(self, kind: str) -> str:
        """'no worker has been seen for cuda' (with when one last was, if ever); '' when live."""
        if self.live(kind):
            return ""
        last = self.seen.get(kind)
        if last is None:
            return f"no worker has been seen for {kind}"
        when = timezone.localtime(last).strftime("%Y-%m-%d %H:%M")
        return f"no worker has been seen for {kind} since {when}"


def presence(now: datetime | None = None) -> Presence:
    """One query: the latest beat per kind."""
    from runner.models import WorkerHeartbeat

    seen = dict(
        WorkerHeartbeat.objects.order_by()
        .values("kind")
        .annotate(last=Max("last_seen"))
        .values_list("kind", "last")
    )
    return Presence(seen, now or timezone.now(), timedelta(seconds=settings.KERNELOPT_WORKER_LIVE_SECONDS))


# --- the middleware -------------------------------------------------------------------------


def advertised(worker: dramatiq.Worker) -> dict[str, str]:
    """The run queues `worker` consumes whose device kind this host has: queue -> kind."""
    from runner.tasks import ACTORS

    consumed = worker.consumer_whitelist or None  # dramatiq: an empty whitelist consumes every queue
    present = present_kinds()
    return {
        actor.queue_name: kind
        for kind, actor in ACTORS.items()
        if kind in present and (consumed is None or actor.queue_name in consumed)
    }


class WorkerPresence(Middleware):
    """Beats for the worker's queues while it runs (see the module docstring)."""

    def __init__(self, interval: float | None = None) -> None:
        self.interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._queues: dict[str, str] = {}

    def period(self) -> float:
        return self.interval if self.interval is not None else float(settings.KERNELOPT_WORKER_BEAT_SECONDS)

    def after_worker_boot(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        self._queues = advertised(worker)
        if not self._queues:
            return
        # The first beat from the booting thread, so the forms offer the kinds at once.
        self._beat()
        logger.info("worker presence: %s", ", ".join(sorted(set(self._queues.values()))))
        self._stop.clear()
        self._thread = threading.Thread(target=self._beat_forever, name="worker-presence", daemon=True)
        self._thread.start()

    def before_worker_shutdown(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        if self._queues:
            try:
                forget(self._queues)
            except DatabaseError:
                logger.warning("could not remove this worker's presence rows", exc_info=True)

    def _beat(self) -> None:
        try:
            beat(self._queues)
        except DatabaseError:
            logger.warning("worker presence beat failed; next try in %.0f s", self.period(), exc_info=True)
            close_old_connections()

    def _beat_forever(self) -> None:
        try:
            while not self._stop.wait(self.period()):
                self._beat()
        finally:
            connection.close()
