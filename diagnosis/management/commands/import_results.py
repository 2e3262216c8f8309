"""manage.py import_results FILE --team TEAM: a bench/run.py result file as reviewable runs."""

from __future__ import annotations

from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from diagnosis.bench_import import import_results
from diagnosis.errors import ImportRefused
from diagnosis.models import Team


class Command(BaseCommand):
    help = (
        "Import a bench/run.py result file (bench/results/*.json) as finished runs of the team's "
        "kernels, with rounds, findings, proposals and their per-case verification, labelled with "
        "the device, date and commit they were measured on. Importing a file again adds nothing."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("file", type=Path)
        parser.add_argument("--team", required=True, help="the team whose kernels the runs belong to")
        parser.add_argument(
            "--user", help="who owns new kernels and requested the runs (default: a reviewer of the team)"
        )
        parser.add_argument(
            "--suite",
            type=Path,
            help="where the measured modules are (default: the report's source, bench/suite)",
        )

    def handle(self, *args, **options) -> None:
        try:
            team = Team.objects.get(name=options["team"])
        except Team.DoesNotExist:
            raise CommandError(f"no team {options['team']!r}") from None
        user = self._user(team, options["user"])
        if not options["file"].is_file():
            raise CommandError(f"no such file: {options['file']}")
        try:
            outcome = import_results(options["file"], team=team, user=user, suite_dir=options["suite"])
        except ImportRefused as exc:
            raise CommandError(exc.message) from None
        for name, why in outcome.skipped:
            self.stderr.write(f"{name}: not imported ({why})")
        self.stdout.write(
            f"{options['file'].name}: {len(outcome.imported)} run(s) imported, {len(outcome.existing)} already there, "
            f"{len(outcome.skipped)} skipped; from {outcome.bench.label}"
        )

    def _user(self, team: Team, name: str | None):
        User = get_user_model()
        if name:
            try:
                return User.objects.get(username=name)
            except User.DoesNotExist:
                raise CommandError(f"no user {name!r}") from None
        user = team.reviewers.order_by("pk").first() or team.members.order_by("pk").first()
        if user is None:
            raise CommandError(f"team {team.name!r} has nobody to own the runs; give --user")
        return user
