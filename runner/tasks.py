"""Dramatiq actors: one per device kind, each on the queue the registry names for that kind
(`diagnosis.engine.devices`: `cuda`, `npu`, `cpu`).

Messages carry only a run id (DESIGN.md section 3). The actor is idempotent (STYLE.md 10): it
loads the row again, claims it with a conditional update and returns quietly when the run is
gone, finished, or already claimed by another worker; `runner.pipeline` does the work.

Dramatiq's own retries are off (`max_retries=0`): a run's attempts are counted in Postgres
(`DiagnosisRun.attempts`, bounded by KERNELOPT_MAX_RUN_ATTEMPTS), because a worker that dies
takes no exception handler with it. `runner.middleware.RunBookkeeping` turns an unexpected
exception into a bounded retry or a failed run; `runner.middleware.StaleRunSweeper` finds runs
whose worker stopped sending heartbeats and sends them again.

A node consumes the queues of the devices it has, one run at a time per accelerator, e.g.
`python manage.py rundramatiq --processes 1 --threads 1 --queues cuda` on a one-GPU node.

A message stays unacknowledged while its run executes. RabbitMQ closes a channel whose
delivery stays unacknowledged past its `consumer_timeout` (30 minutes by default), so raise
it on the broker for long runs (`consumer_timeout = 86400000` in rabbitmq.conf). If it fires
anyway the message is delivered again, and the claim makes that delivery a no-op.
"""

from __future__ import annotations

import dramatiq

from diagnosis.engine import devices
from runner import pipeline
from runner.sandbox import make_non_dumpable

# A process that runs these actors holds the database and broker credentials: no job (nor any
# other process of its uid) may read its /proc/<pid>/environ or mem, or ptrace it.
make_non_dumpable()

# A whole run (up to the round budget of rounds) runs in one message; each sandboxed job has
# its own much shorter limit, so this only catches a wedged worker thread.
RUN_TIME_LIMIT_MS = 24 * 3600 * 1000


def execute_run(run_id: int) -> None:
    """Claim run `run_id` and drive it to done, failed or cancelled (no-op if not claimable)."""
    pipeline.execute_run(run_id)


ACTORS: dict[str, dramatiq.Actor] = {
    kind.name: dramatiq.actor(
        execute_run,
        actor_name=f"execute_run_{kind.name}",
        queue_name=kind.queue,
        max_retries=0,
        time_limit=RUN_TIME_LIMIT_MS,
    )
    for kind in devices.KINDS.values()
}
ACTOR_NAMES = frozenset(actor.actor_name for actor in ACTORS.values())


def actor_for(device: str) -> dramatiq.Actor:
    """The actor of a device kind; UnknownDevice (a ValueError) for a kind nobody registered."""
    return ACTORS[devices.get(device).name]
