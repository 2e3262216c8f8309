"""`manage.py requeue_stale`: send again the runs whose worker died or whose message was lost.

Workers run the same sweep periodically (runner.middleware.StaleRunSweeper); this command is
for cron, for operators after an outage, and for deployments whose workers are all down.
"""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandParser

from runner.dispatch import requeue_stale


class Command(BaseCommand):
    help = "Re-queue running runs with a stale heartbeat (or fail them when out of attempts); resend orphaned queued runs."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--stale-seconds",
            type=float,
            default=None,
            help="heartbeat age that counts as dead (default: KERNELOPT_STALE_RUN_SECONDS)",
        )
        parser.add_argument("--json", action="store_true", dest="as_json", help="print the run ids as JSON")

    def handle(self, *args: object, stale_seconds: float | None, as_json: bool, **options: object) -> None:
        report = requeue_stale(stale_seconds=stale_seconds)
        if as_json:
            self.stdout.write(
                json.dumps({"requeued": report.requeued, "failed": report.failed, "resent": report.resent})
            )
            return
        self.stdout.write(
            f"requeued {len(report.requeued)} {report.requeued}, failed {len(report.failed)} {report.failed}, "
            f"resent {len(report.resent)} {report.resent}"
        )
