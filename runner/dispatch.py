"""Sending runs to the workers, and sending again the runs whose message or worker was lost.

Broker messages are only triggers (DESIGN.md section 3): Postgres holds the run's state, so a
message may be sent twice (the claim makes the second a no-op) but a run must never be left
without one. `requeue_stale` is the safety net, run by every worker periodically
(`runner.middleware.StaleRunSweeper`) and by `manage.py requeue_stale`:

* a `running` run whose heartbeat is older than KERNELOPT_STALE_RUN_SECONDS lost its worker
  (killed, machine gone): it goes back to `queued` and is sent again, or is failed when it has
  used KERNELOPT_MAX_RUN_ATTEMPTS attempts, keeping the last error;
* a `queued` run not sent for that long (the web died between commit and send, a stub broker
  was restarted, a message was dropped) is sent again. For a queued run `heartbeat_at` records
  when it was last sent by this sweep (`created` before that), so each sweep sends it at most
  once per stale period.

Every change is a conditional update on the state just read, so several sweepers running at
once re-send a run once.

The sweep also removes what a dead worker left on this host: the per-run and per-job
directories under the temporary directory that no live process holds any more, and the
job cgroups of processes that are gone (`runner.sandbox.workdirs`, `runner.sandbox.cgroups`).
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Case, F, Q, TextField, Value, When
from django.db.models.functions import Coalesce, Concat
from django.utils import timezone

from diagnosis.models import DiagnosisRun

logger = logging.getLogger(__name__)
Status = DiagnosisRun.Status


def enqueue_run(run_id: int, device: str, *, delay_ms: int | None = None) -> None:
    """Send run `run_id` to the queue of `device`. Call it after the run row is committed."""
    from runner.tasks import actor_for  # the actors need the configured broker

    actor_for(device).send_with_options(args=(run_id,), delay=delay_ms)


@dataclass
class SweepReport:
    requeued: list[int] = field(default_factory=list)  # running -> queued, sent again
    failed: list[int] = field(default_factory=list)  # running -> failed: out of attempts
    resent: list[int] = field(default_factory=list)  # queued, sent again
    removed_dirs: list[str] = field(default_factory=list)  # run/job directories of dead workers

    def __bool__(self) -> bool:
        return bool(self.requeued or self.failed or self.resent or self.removed_dirs)


def requeue_stale(
    *, now: datetime | None = None, stale_seconds: float | None = None, dead_local_workers: bool = False
) -> SweepReport:
    """Find runs whose worker or message was lost and send them again (see the module docstring).

    `dead_local_workers`: also treat as lost, whatever their heartbeat, `running` runs claimed
    by a process of this host that no longer exists. Only for embedded mode at start-up, where
    the previous server process on this machine was the only worker.
    """
    now = now or timezone.now()
    stale = timedelta(
        seconds=settings.KERNELOPT_STALE_RUN_SECONDS if stale_seconds is None else stale_seconds
    )
    threshold = now - stale
    report = SweepReport()

    running = DiagnosisRun.objects.filter(status=Status.RUNNING)
    lost = list(
        running.filter(Q(heartbeat_at__lt=threshold) | Q(heartbeat_at__isnull=True)).values_list(
            "id", "heartbeat_at"
        )
    )
    if dead_local_workers:
        seen = {run_id for run_id, _ in lost}
        for run_id, heartbeat, worker in running.values_list("id", "heartbeat_at", "worker"):
            if run_id not in seen and _is_dead_local_worker(worker):
                lost.append((run_id, heartbeat))
    for run_id, heartbeat in lost:
        _requeue_lost(run_id, heartbeat, now, report)

    orphans = (
        DiagnosisRun.objects.filter(status=Status.QUEUED)
        .annotate(last_sent=Coalesce("heartbeat_at", "created"))
        .filter(last_sent__lt=threshold)
        .values_list("id", "device", "heartbeat_at")
    )
    for run_id, device, heartbeat in orphans:
        # Only the sweeper whose update matches the state it read sends the message.
        if DiagnosisRun.objects.filter(id=run_id, status=Status.QUEUED, heartbeat_at=heartbeat).update(
            heartbeat_at=now
        ):
            enqueue_run(run_id, device)
            report.resent.append(run_id)
    report.removed_dirs = _remove_left_behind()
    if report.requeued or report.failed or report.resent:
        logger.warning(
            "stale runs: requeued %s, failed %s, resent %s", report.requeued, report.failed, report.resent
        )
    return report


def _remove_left_behind() -> list[str]:
    """This host's run directories and job cgroups whose worker is gone (never raises).

    Only directories unchanged for an hour go, whatever the stale period: a loop makes its
    directory a moment before its first job claims it, and a worker of an older version
    claims none (it changes its directory at least every round).
    """
    from runner.sandbox import cgroups, workdirs

    try:
        removed = workdirs.sweep_run_dirs(grace_s=3600.0)
        cgroups.sweep()
    except OSError:
        logger.warning("sweeping the run directories failed", exc_info=True)
        return []
    return removed


def _requeue_lost(run_id: int, heartbeat: datetime | None, now: datetime, report: SweepReport) -> None:
    # The heartbeat we read must still be the one in the row: a worker that came back to life
    # (a long GC pause, a network blip) and beat in between keeps its run.
    same = DiagnosisRun.objects.filter(id=run_id, status=Status.RUNNING, heartbeat_at=heartbeat)
    row = same.values("device", "worker", "attempts").first()
    if row is None:
        return
    lost = f"worker {row['worker'] or '?'} stopped sending heartbeats during attempt {row['attempts']}"
    if row["attempts"] >= settings.KERNELOPT_MAX_RUN_ATTEMPTS:
        if same.update(
            status=Status.FAILED,
            finished_at=now,
            error=with_last_error(f"gave up after {row['attempts']} attempts: {lost}"),
        ):
            report.failed.append(run_id)
        return
    if same.update(status=Status.QUEUED, heartbeat_at=now, error=with_last_error(lost)):
        enqueue_run(run_id, row["device"])
        report.requeued.append(run_id)


def with_last_error(message: str) -> Concat:
    """`message`, then the error already stored on the row (the last attempt's), if any."""
    text = TextField()
    return Concat(
        Value(message, output_field=text),
        Case(
            When(error="", then=Value("", output_field=text)),
            default=Concat(Value("; previous error: ", output_field=text), F("error"), output_field=text),
            output_field=text,
        ),
        output_field=text,
    )


def _is_dead_local_worker(worker: str) -> bool:
    """True for `host:pid:...` of this host whose process is gone (not this process)."""
    host, _, rest = worker.partition(":")
    pid_text = rest.split(":", 1)[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, owned by someone else
        return False
    return False
