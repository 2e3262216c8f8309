"""Admin: the workers' heartbeats, to see which device kinds a worker serves and since when."""

from __future__ import annotations

from django.contrib import admin

from runner.models import WorkerHeartbeat


@admin.register(WorkerHeartbeat)
class WorkerHeartbeatAdmin(admin.ModelAdmin):
    list_display = ["host", "queue", "kind", "pid", "started_at", "last_seen"]
    list_filter = ["kind"]
