"""Embedded mode: a dramatiq worker inside the web server process, on the stub broker.

With no BROKER_URL the broker is dramatiq's in-memory `StubBroker` (settings), so `make run`
needs neither RabbitMQ nor a separate `rundramatiq`: `start()` runs a dramatiq `Worker` on
threads of the server process, consuming the queue of every device kind this deployment offers
(KERNELOPT_DEVICES) and this host has (`embedded_queues`); its heartbeat (runner.workers) is
what lets the forms offer those kinds, so on a laptop they offer cpu only. Only the orchestration runs in those threads: every job on user code
(validate, verify, time, profile, compile) still runs in its own sandboxed child process
(`python -m runner.child`, see runner.sandbox), exactly as under a separate worker.

The stub broker forgets its messages when the process stops, so `start()` first re-sends what
the previous server left: every `queued` run, and every `running` run whose worker was a process
of this machine that is gone (through the usual stale-run logic, bounded attempts included).

Started by `manage.py serve` (the wrapper `make run` calls) only when KERNELOPT_EMBEDDED_WORKER
is on; never from tests, migrations or other management commands.
"""

from __future__ import annotations

import atexit
import logging
import threading

import dramatiq
from django.conf import settings
from dramatiq import Worker

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_worker: Worker | None = None


def start(*, threads: int = 1, recover: bool = True, poll_ms: int = 1000) -> Worker:
    """Start the embedded worker once per process; later calls return the running one."""
    global _worker
    with _lock:
        if _worker is not None:
            return _worker
        from runner import tasks  # declares the actors on the configured broker
        from runner.middleware import install

        broker = dramatiq.get_broker()
        install(broker)
        queues = embedded_queues(tasks)
        if recover:
            resend_lost_messages()
        # One thread by default: runs share this machine's accelerator and the server's cores.
        worker = Worker(broker, queues=queues, worker_threads=threads, worker_timeout=poll_ms)
        worker.start()
        atexit.register(stop)
        _worker = worker
        logger.info("embedded worker consuming %s on %s", sorted(queues), type(broker).__name__)
        return worker


def embedded_queues(tasks) -> set[str]:
    """The queues of the offered kinds (KERNELOPT_DEVICES) whose device this host has
    (runner.workers.present_kinds): on a laptop, cpu only, so a cuda run is never taken by a
    worker that cannot run it (the forms do not offer cuda then). With none of the offered
    kinds present, every offered queue, as before."""
    from runner.workers import present_kinds

    offered = list(settings.KERNELOPT_DEVICES)
    present = present_kinds()
    kinds = [d for d in offered if d in present] or offered
    return {tasks.actor_for(device).queue_name for device in kinds}


def stop(timeout_ms: int = 10_000) -> None:
    global _worker
    with _lock:
        if _worker is None:
            return
        _worker.stop(timeout=timeout_ms)
        _worker = None


def resend_lost_messages() -> list[int]:
    """Send again what an in-memory broker lost with the previous process."""
    from diagnosis.models import DiagnosisRun
    from runner.dispatch import enqueue_run, requeue_stale

    report = requeue_stale(dead_local_workers=True)
    resent = list(report.requeued)
    for run_id, device in DiagnosisRun.objects.filter(status=DiagnosisRun.Status.QUEUED).values_list(
        "id", "device"
    ):
        if run_id not in report.requeued and run_id not in report.resent:
            enqueue_run(run_id, device)
            resent.append(run_id)
    return resent
