"""The Django-side driver of one run: claim it, keep a heartbeat, run the round loop, finish it.

The same code runs under a dramatiq actor (runner.tasks) and in `manage.py optimize`.

* **Claim** (STYLE.md 12): `queued -> running` with a conditional update that also stamps
  the worker, the start and the heartbeat and counts the attempt; exactly one worker wins.
  A run that has used KERNELOPT_MAX_RUN_ATTEMPTS attempts is failed instead of claimed.
* **Heartbeat**: a thread refreshes `heartbeat_at` while the run is ours (`status=running`
  and `worker=` our claim). When that update matches nothing, the run was cancelled or given
  to another worker after we were presumed dead, and the loop is told to stop.
* **Execute**: `diagnosis.engine.loop.run_loop` on the uploaded source, with a
  `runner.persist.RunRecorder` that commits each round, finding, artefact and proposal as it
  happens. User code never runs in this process: the executor runs every job in a sandboxed
  child process (runner.sandbox).
* **Finish**: `running -> done | failed` (or the summary of a `cancelled` run), again
  conditional on the claim, so a worker that lost its run cannot overwrite the new owner's.

Unexpected exceptions are not caught here: `runner.middleware.RunBookkeeping` (or the
optimize command) passes them to `record_failure`, which retries within the attempt budget.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import DatabaseError, close_old_connections, connection
from django.db.models import F, QuerySet
from django.utils import timezone

from diagnosis.engine import serialize
from diagnosis.engine.loop import run_loop
from diagnosis.engine.paths import scrub_paths
from diagnosis.engine.records import LoopConfig, LoopResult, StopReason
from diagnosis.models import DiagnosisRun, Round
from runner import persist
from runner.dispatch import enqueue_run, with_last_error
from runner.errors import RunFailed
from runner.llm import make_proposer, team_patterns

logger = logging.getLogger(__name__)
Status = DiagnosisRun.Status

MAX_ERROR_CHARS = 4000


@dataclass(frozen=True)
class Claim:
    run_id: int
    worker: str  # host:pid:thread:token, unique per claim
    attempt: int
    device: str


_local = threading.local()


def current_claim() -> Claim | None:
    """The claim the current thread holds (for the middleware's bookkeeping)."""
    return getattr(_local, "claim", None)


def clear_claim() -> None:
    _local.claim = None


def worker_name() -> str:
    # The token makes two claims of one run by the same thread distinguishable.
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_native_id()}:{secrets.token_hex(3)}"


def heartbeat_interval() -> float:
    """Several beats per stale period, so one late beat does not make a live run look dead."""
    return max(0.2, min(30.0, settings.KERNELOPT_STALE_RUN_SECONDS / 5))


# --- claim ----------------------------------------------------------------------------------


def claim_run(run_id: int) -> Claim | None:
    """queued -> running for this worker, or None when the run is not ours to execute."""
    now = timezone.now()
    name = worker_name()
    max_attempts = settings.KERNELOPT_MAX_RUN_ATTEMPTS
    queued = DiagnosisRun.objects.filter(id=run_id, status=Status.QUEUED)
    claimed = queued.filter(attempts__lt=max_attempts).update(
        status=Status.RUNNING,
        worker=name,
        started_at=now,
        heartbeat_at=now,
        finished_at=None,
        attempts=F("attempts") + 1,
    )
    if claimed != 1:
        # Queued but out of attempts (requeued by an older sweeper, or by hand): fail it here.
        queued.filter(attempts__gte=max_attempts).update(
            status=Status.FAILED,
            finished_at=now,
            error=with_last_error(f"gave up: the run already used its {max_attempts} attempts"),
        )
        return None
    row = DiagnosisRun.objects.values("attempts", "device").get(id=run_id)
    claim = Claim(run_id=run_id, worker=name, attempt=row["attempts"], device=row["device"])
    _local.claim = claim
    return claim


def owned(claim: Claim) -> QuerySet[DiagnosisRun]:
    """The run's row, only while this claim still owns it."""
    return DiagnosisRun.objects.filter(id=claim.run_id, status=Status.RUNNING, worker=claim.worker)


# --- heartbeat and stopping -----------------------------------------------------------------


class Heartbeat:
    """Refreshes heartbeat_at from a thread of its own (with its own database connection)."""

    def __init__(self, claim: Claim, interval: float | None = None) -> None:
        self.claim = claim
        self.interval = interval or heartbeat_interval()
        self.lost = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat-run-{claim.run_id}", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _beat(self) -> None:
        try:
            while not self._stop.wait(self.interval):
                try:
                    if owned(self.claim).update(heartbeat_at=timezone.now()) == 0:
                        self.lost = True
                        return
                except DatabaseError:
                    # The database may come back before the run is presumed dead; keep trying.
                    logger.warning("heartbeat of run %s failed", self.claim.run_id, exc_info=True)
                    close_old_connections()
        finally:
            connection.close()


class StopCheck:
    """The loop's `should_stop`: the run was cancelled, or is no longer ours."""

    def __init__(self, claim: Claim, heartbeat: Heartbeat | None, min_interval: float = 1.0) -> None:
        self.claim = claim
        self.heartbeat = heartbeat
        self.min_interval = min_interval
        self._checked = 0.0
        self.stop = False
        self.reason = ""

    def __call__(self) -> bool:
        if self.stop:
            return True
        if self.heartbeat is not None and self.heartbeat.lost:
            self.stop, self.reason = True, "lost"
            return True
        now = time.monotonic()
        if now - self._checked < self.min_interval:
            return False
        self._checked = now
        row = DiagnosisRun.objects.filter(id=self.claim.run_id).values_list("status", "worker").first()
        if row is None:
            self.stop, self.reason = True, "deleted"
        elif row[0] == Status.CANCELLED:
            self.stop, self.reason = True, "cancelled"
        elif row[0] != Status.RUNNING or row[1] != self.claim.worker:
            self.stop, self.reason = True, "lost"
        return self.stop


# --- execution ------------------------------------------------------------------------------


def execute_run(run_id: int, *, executor: Any | None = None, proposer: Any | None = None) -> Claim | None:
    """Claim run `run_id` and drive it to its end; None when it was not ours to run.

    `executor` / `proposer` replace the ones built from the run's device and settings.
    """
    claim = claim_run(run_id)
    if claim is None:
        logger.info("run %s is not claimable (gone, finished or taken); skipping", run_id)
        return None
    logger.info("run %s claimed by %s (attempt %s)", run_id, claim.worker, claim.attempt)
    with Heartbeat(claim) as heartbeat:
        try:
            _drive(claim, StopCheck(claim, heartbeat), executor=executor, proposer=proposer)
        except RunFailed as exc:
            fail(claim, exc.message)
    return claim


def _drive(claim: Claim, stop: StopCheck, *, executor: Any | None, proposer: Any | None) -> None:
    run = DiagnosisRun.objects.select_related("version").get(id=claim.run_id)
    offset = persist.close_interrupted_rounds(run) if claim.attempt > 1 else 0
    done_rounds = Round.objects.filter(run=run).count()
    patterns = team_patterns(run)  # tier 0 matches them; the LLM's prompt shows their examples
    config = LoopConfig(
        round_budget=max(0, run.round_budget - done_rounds),
        sol_stop_fraction=settings.KERNELOPT_SOL_STOP_FRACTION,
        device=run.device,
        target=run.target or None,
        proposer=run.proposer,
        patterns=patterns,
        round_time_budget_s=settings.KERNELOPT_ROUND_TIME_BUDGET_S or None,
        compile_timeout_s=settings.KERNELOPT_COMPILE_TIMEOUT_S or None,
    )
    recorder = persist.RunRecorder(run, should_stop=stop, round_offset=offset)
    executor = executor if executor is not None else make_executor(run)
    proposer = proposer if proposer is not None else make_proposer(run, patterns)
    result = run_loop(
        run.version.source, executor=executor, config=config, observer=recorder, proposer=proposer
    )
    finish(claim, run, result, recorder, stop)


def make_executor(run: DiagnosisRun) -> Any:
    from runner.execute import Executor

    return Executor(run.device, run.target or None, python=settings.KERNELOPT_CHILD_PYTHONS.get(run.device))


# --- finishing ------------------------------------------------------------------------------


def finish(
    claim: Claim, run: DiagnosisRun, result: LoopResult, recorder: persist.RunRecorder, stop: StopCheck
) -> None:
    now = timezone.now()
    summary = serialize.summary_json(
        result, best_proposal_id=recorder.best_proposal_id(result.best_source), attempt=claim.attempt
    )
    # Rounds already added their own cost; the rest is the baseline and the loop's overhead.
    rest_wall = max(0.0, result.wall_s - sum(r.cost.wall_s for r in result.rounds))
    rest_device = max(0.0, result.device_s - sum(r.cost.device_s for r in result.rounds))
    rest_tokens = max(0, result.tokens - sum(r.cost.tokens for r in result.rounds))
    fields = {
        "summary": summary,
        "finished_at": now,
        "heartbeat_at": now,
        "wall_s": F("wall_s") + rest_wall,
        "device_s": F("device_s") + rest_device,
        "tokens": F("tokens") + rest_tokens,
        # an initial version that could not be checked is no verified best
        "best_version": None if result.improved or not result.checked else run.version,
    }
    if result.stop_reason is StopReason.INITIAL_FAILED:
        updated = owned(claim).update(
            status=Status.FAILED, error=_clip(result.error or "the upload failed"), **fields
        )
    else:
        updated = owned(claim).update(status=Status.DONE, error="", **fields)
    if updated:
        logger.info("run %s finished: %s", claim.run_id, result.stop_reason)
        return
    # Not ours any more: a cancelled run still gets its summary; a run taken over does not.
    DiagnosisRun.objects.filter(id=claim.run_id, status=Status.CANCELLED, worker=claim.worker).update(
        **fields
    )
    logger.info("run %s ended as %s", claim.run_id, stop.reason or "not ours")


def fail(claim: Claim, message: str) -> bool:
    """running -> failed with `message`, for a failure no retry can fix."""
    return bool(owned(claim).update(status=Status.FAILED, finished_at=timezone.now(), error=_clip(message)))


def record_failure(claim: Claim, exc: BaseException, *, retry: bool = True) -> str:
    """An unexpected exception ended an attempt: queue the run again, or fail it when out of attempts.

    Returns the run's new status ('' when the run was no longer ours).
    """
    message = _clip(f"attempt {claim.attempt} failed: {type(exc).__name__}: {exc}")
    now = timezone.now()
    if not retry or claim.attempt >= settings.KERNELOPT_MAX_RUN_ATTEMPTS:
        if owned(claim).update(status=Status.FAILED, finished_at=now, error=message):
            return Status.FAILED
        return ""
    if owned(claim).update(status=Status.QUEUED, heartbeat_at=now, error=message):
        backoff_ms = int(1000 * settings.KERNELOPT_RETRY_BACKOFF_S * claim.attempt)
        enqueue_run(claim.run_id, claim.device, delay_ms=backoff_ms or None)
        return Status.QUEUED
    return ""


def _clip(text: str) -> str:
    # an error names the files the worker read (the loop's temporary module, the venv):
    # the run page shows it, so the server paths go first (diagnosis.engine.paths)
    text = scrub_paths(text)
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 20] + " ... (truncated)"
