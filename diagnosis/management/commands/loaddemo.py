"""Create the demo team and user, load demo kernels with a queued run each, and import the
committed H200 results as measured runs to review (idempotent)."""

from __future__ import annotations

from functools import partial
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from diagnosis.bench_import import import_results
from diagnosis.errors import ImportRefused
from diagnosis.forms import enqueue_run
from diagnosis.models import DiagnosisRun, Kernel, KernelVersion, Team
from diagnosis.validation import validate_module_source

DEMO_TEAM = "demo"
DEMO_USER = "demo"
DEMO_PASSWORD = "kernelopt-demo"
DEMO_DIR = Path(settings.BASE_DIR) / "bench" / "demo"
SUITE_DIR = Path(settings.BASE_DIR) / "bench" / "suite"
# Three suite modules loaded by default, when the suite is there: an elementwise op, a
# row reduction and a normalization, all fp32 so the CPU interpreter can check them.
DEFAULT_SUITE = ("06_relu_fp32.py", "09_softmax_fp32.py", "11_layernorm_fp32.py")
# The committed H200 table: every suite operator's rounds, findings and verified proposals, so a
# new user on a machine without a GPU reviews measured proposals at once.
DEMO_RESULTS = Path(settings.BASE_DIR) / "bench" / "results" / "2026-11-30-nvidia-h200-6.json"


class Command(BaseCommand):
    help = (
        "Create the demo team and the demo user (member and reviewer), load the demo kernel modules "
        "as kernels with one version each and a queued run, and import the committed H200 results "
        "(bench/results) as measured runs with proposals to review. Safe to run again."
    )

    def add_arguments(self, parser) -> None:
        group = parser.add_mutually_exclusive_group()
        group.add_argument("--suite", action="store_true", help="load every module of bench/suite")
        group.add_argument("--no-suite", action="store_true", help="load only bench/demo")
        parser.add_argument(
            "--device",
            default=None,
            help="device kind of the queued runs (default: the first of KERNELOPT_DEVICES)",
        )
        parser.add_argument(
            "--no-enqueue", action="store_true", help="leave the runs queued without sending them"
        )
        parser.add_argument("--address", default="http://127.0.0.1:8000/", help="the address to print")
        results = parser.add_mutually_exclusive_group()
        results.add_argument(
            "--results", type=Path, default=DEMO_RESULTS, help="the bench/run.py result file to import"
        )
        results.add_argument("--no-results", action="store_true", help="import no bench results")

    def handle(self, *args, **options) -> None:
        device = options["device"] or (settings.KERNELOPT_DEVICES[0] if settings.KERNELOPT_DEVICES else "cpu")
        if device not in DiagnosisRun.Device.values:
            raise CommandError(f"unknown device kind {device!r} (cpu, cuda or npu)")
        files = sorted(DEMO_DIR.glob("*.py"))
        if options["suite"]:
            files += sorted(SUITE_DIR.glob("[0-9]*.py"))
        elif not options["no_suite"]:
            present = [SUITE_DIR / name for name in DEFAULT_SUITE if (SUITE_DIR / name).is_file()]
            if len(present) < len(DEFAULT_SUITE) and SUITE_DIR.is_dir():
                missing = sorted(set(DEFAULT_SUITE) - {p.name for p in present})
                self.stderr.write(f"bench/suite has no {', '.join(missing)}; skipped")
            files += present
        if not files:
            raise CommandError(f"no demo modules found in {DEMO_DIR}")

        user, team = self._user_and_team()
        for path in files:
            self._load(path, user, team, device, not options["no_enqueue"])
        if not options["no_results"]:
            self._import(options["results"], user, team)

        self.stdout.write("")
        self.stdout.write(f"kernelopt demo: {options['address']}")
        self.stdout.write(f"  log in as {DEMO_USER} / {DEMO_PASSWORD}")

    def _user_and_team(self):
        User = get_user_model()
        with transaction.atomic():
            user, created = User.objects.get_or_create(username=DEMO_USER)
            if created or not user.has_usable_password():
                user.set_password(DEMO_PASSWORD)
                user.save()
            team, _ = Team.objects.get_or_create(name=DEMO_TEAM)
            team.members.add(user)
            team.reviewers.add(user)
        self.stdout.write(
            f"user {DEMO_USER}: {'created' if created else 'exists'}; team {DEMO_TEAM}: member and reviewer"
        )
        return user, team

    def _import(self, path: Path, user, team: Team) -> None:
        if not path.is_file():
            self.stderr.write(f"{path}: no such results file; no measured runs imported")
            return
        try:
            outcome = import_results(path, team=team, user=user)
        except ImportRefused as exc:
            self.stderr.write(f"{exc.message}; no measured runs imported")
            return
        for name, why in outcome.skipped:
            self.stderr.write(f"{name}: not imported ({why})")
        self.stdout.write(
            f"{path.name}: {len(outcome.imported)} measured run(s) imported, {len(outcome.existing)} already "
            f"there; from {outcome.bench.label}"
        )

    def _load(self, path: Path, user, team: Team, device: str, enqueue: bool) -> None:
        result = validate_module_source(path.read_bytes(), path.name, settings.KERNELOPT_MAX_UPLOAD_BYTES)
        if not result.ok:
            problems = "; ".join(str(e) for e in result.errors)
            self.stderr.write(f"{path.name}: not loaded ({problems})")
            return
        name = path.stem
        with transaction.atomic():
            kernel = Kernel.objects.filter(team=team, name=name).order_by("created").first()
            if kernel is None:
                kernel = Kernel.objects.create(
                    team=team,
                    name=name,
                    owner=user,
                    description=f"Demo module {path.parent.name}/{path.name}",
                )
            version = kernel.versions.order_by("number").first()
            if version is None:
                version = KernelVersion.objects.create(
                    kernel=kernel,
                    number=1,
                    source=result.source,
                    sha256=KernelVersion.digest(result.source),
                    filename=path.name,
                    created_by=user,
                )
            run = version.runs.order_by("created").first()
            if run is None:
                run = DiagnosisRun.objects.create(
                    version=version,
                    device=device,
                    target=settings.KERNELOPT_DEFAULT_ARCH,
                    round_budget=settings.KERNELOPT_ROUND_BUDGET,
                    requested_by=user,
                )
                if enqueue:
                    transaction.on_commit(partial(enqueue_run, run.pk, run.device), robust=True)
                self.stdout.write(f"{name}: v{version.number}, run {run.pk} queued on {device}")
            else:
                self.stdout.write(f"{name}: already loaded (v{version.number}, run {run.pk} {run.status})")
