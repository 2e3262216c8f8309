"""What the web process knows about the workers: which device kinds some worker serves now.

A worker process says so every few seconds (`runner.workers`, through the `WorkerPresence`
dramatiq middleware); the upload and run forms offer only the kinds with a recent beat, so a
run is never queued where nothing will take it.
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class WorkerHeartbeat(models.Model):
    """One worker host consuming one device kind's queue, as it last said so."""

    host = models.CharField(max_length=200)
    queue = models.CharField(max_length=200)  # the dramatiq queue it consumes
    kind = models.CharField(max_length=8)  # the device kind whose runs that queue carries
    pid = models.PositiveIntegerField(default=0)  # of the process that beat last
    embedded = models.BooleanField(default=False)  # the worker inside `manage.py serve`
    started_at = models.DateTimeField(default=timezone.now)
    last_seen = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["host", "queue"], name="heartbeat_once_per_host_queue")
        ]
        indexes = [models.Index(fields=["kind", "-last_seen"], name="heartbeat_kind_seen")]

    def __str__(self) -> str:
        return f"{self.host} on {self.queue}"
