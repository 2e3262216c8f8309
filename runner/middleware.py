"""Dramatiq middleware for the run actors (STYLE.md 11): run-status bookkeeping and the stale sweep.

* `RunBookkeeping`: when a run actor raises, the run it claimed is queued again (within
  KERNELOPT_MAX_RUN_ATTEMPTS) or failed with the error stored; the actors themselves only
  claim, execute and finish.
* `StaleRunSweeper`: every worker process runs `runner.dispatch.requeue_stale` from a thread
  every few minutes (sooner for short stale periods), so a run whose worker died is re-queued
  without anyone calling `manage.py requeue_stale`.

`install(broker)` adds both, and `runner.workers.WorkerPresence` (the heartbeat of the device
kinds the worker serves), to a broker once; `runner.apps.RunnerConfig.ready` calls it on the
configured broker, so they apply wherever Django is set up (`rundramatiq`, embedded mode).
Database connections are django_dramatiq's `DbConnectionsMiddleware` (settings).
"""

from __future__ import annotations

import logging
import threading

import dramatiq
from django.conf import settings
from django.db import DatabaseError, close_old_connections, connection
from dramatiq.middleware import Middleware

logger = logging.getLogger(__name__)


def _is_run_actor(message: dramatiq.Message) -> bool:
    return message.actor_name.startswith("execute_run_")


class RunBookkeeping(Middleware):
    """Turns an exception escaping a run actor into a bounded retry or a failed run."""

    def before_process_message(self, broker: dramatiq.Broker, message: dramatiq.Message) -> None:
        if _is_run_actor(message):
            from runner.pipeline import clear_claim

            clear_claim()  # a claim left by an earlier message on this thread is not this one's

    def after_process_message(
        self,
        broker: dramatiq.Broker,
        message: dramatiq.Message,
        *,
        result: object = None,
        exception: BaseException | None = None,
    ) -> None:
        if not _is_run_actor(message):
            return
        from runner.pipeline import clear_claim, current_claim, record_failure

        claim = current_claim()
        clear_claim()
        if exception is None or claim is None:
            # No claim: the failure came before the run was ours (e.g. the database was down);
            # the run is still queued and the stale sweep sends it again.
            return
        logger.error("run %s: attempt %s raised", claim.run_id, claim.attempt, exc_info=exception)
        try:
            status = record_failure(claim, exception)
        except DatabaseError:
            # Could not even record it: the heartbeat stops with us, so the sweep will.
            logger.exception("run %s: could not record the failure", claim.run_id)
            return
        logger.warning("run %s is now %s", claim.run_id, status or "no longer ours")


class StaleRunSweeper(Middleware):
    """Periodically re-queues runs whose worker died (see runner.dispatch.requeue_stale)."""

    def __init__(self, interval: float | None = None) -> None:
        self.interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def period(self) -> float:
        if self.interval is not None:
            return self.interval
        return max(1.0, min(300.0, settings.KERNELOPT_STALE_RUN_SECONDS / 2))

    def after_worker_boot(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._sweep_forever, name="stale-run-sweeper", daemon=True)
        self._thread.start()

    def before_worker_shutdown(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def _sweep_forever(self) -> None:
        from runner.dispatch import requeue_stale

        try:
            while not self._stop.wait(self.period()):
                try:
                    requeue_stale()
                except DatabaseError:
                    logger.warning("stale-run sweep failed; next try in %.0f s", self.period(), exc_info=True)
                    close_old_connections()
        finally:
            connection.close()


def install(broker: dramatiq.Broker) -> None:
    """Add the run middleware to `broker` unless it already has them."""
    from runner.workers import WorkerPresence

    present = {type(m) for m in broker.middleware}
    for cls in (RunBookkeeping, StaleRunSweeper, WorkerPresence):
        if cls not in present:
            broker.add_middleware(cls())
