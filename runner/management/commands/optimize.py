"""`manage.py optimize FILE`: diagnose and optimize one kernel module from the command line.

The file is validated (without importing it), stored like an upload (Kernel + KernelVersion +
DiagnosisRun in team 'cli' unless --team), then executed in this process through the same
`runner.pipeline.execute_run` the worker actors use, and reported as text or, with --json, as

    {"run": {...}, "findings": [...], "proposals": [...], "best_version": {...}, "timings": {...}}

A bad file is a clear error naming the problem and the line, with a non-zero exit; so is a run
that ends `failed` (after printing its report).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction
from django.db.models import Max

from diagnosis.engine.serialize import summary_from_json, version_json
from diagnosis.models import DiagnosisRun, Finding, Kernel, KernelVersion, Proposal, Team
from diagnosis.validation import validate_module_source
from runner import pipeline


class Command(BaseCommand):
    help = "Diagnose and optimize one kernel module synchronously and print a report."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "file", help="a kernel module (KernelBench convention: Model, ModelNew, get_inputs ...)"
        )
        parser.add_argument("--device", choices=DiagnosisRun.Device.values, default=DiagnosisRun.Device.CPU)
        parser.add_argument(
            "--arch", default=None, help="compile target for tiers 2/3 (default KERNELOPT_DEFAULT_ARCH)"
        )
        parser.add_argument("--json", action="store_true", dest="as_json", help="print the report as JSON")
        parser.add_argument(
            "--rounds", type=int, default=None, help="round budget (default KERNELOPT_ROUND_BUDGET)"
        )
        parser.add_argument(
            "--team", default="cli", help="team that owns the stored kernel (created if needed)"
        )
        parser.add_argument(
            "--user", default="cli", help="user recorded as owner and requester (created if needed)"
        )
        parser.add_argument(
            "--proposer",
            choices=DiagnosisRun.Proposer.values,
            default=DiagnosisRun.Proposer.RULES,
            help="rules, llm or hybrid (rules, then the LLM); llm and hybrid need LLM_BASE_URL and LLM_MODEL",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        path = Path(opts["file"])
        if not path.is_file():
            raise CommandError(f"{path}: no such file")
        if opts["rounds"] is not None and opts["rounds"] < 0:
            raise CommandError("--rounds must be 0 or more")
        raw = path.read_bytes()
        source = validate(raw, path)

        run = store(
            source,
            filename=path.name,
            device=opts["device"],
            target=opts["arch"] or settings.KERNELOPT_DEFAULT_ARCH,
            rounds=settings.KERNELOPT_ROUND_BUDGET if opts["rounds"] is None else opts["rounds"],
            team=opts["team"],
            username=opts["user"],
            proposer=opts["proposer"],
        )
        try:
            pipeline.execute_run(run.id)
        except Exception as exc:
            # Same bookkeeping as the worker's middleware, minus the retry: nobody would pick it up.
            claim = pipeline.current_claim()
            if claim is not None:
                pipeline.record_failure(claim, exc, retry=False)
            raise
        finally:
            pipeline.clear_claim()

        run.refresh_from_db()
        report = run_report(run)
        if opts["as_json"]:
            self.stdout.write(json.dumps(report, indent=2))
        else:
            self.stdout.write(render_text(report))
        if run.status != DiagnosisRun.Status.DONE:
            raise CommandError(f"run {run.id} {run.status}: {run.error or 'no error recorded'}")


def validate(raw: bytes, path: Path) -> str:
    """The decoded source, or CommandError naming the file, the line and the problem."""
    result = validate_module_source(raw, path.name, settings.KERNELOPT_MAX_UPLOAD_BYTES)
    if not result.ok:
        raise CommandError("\n".join(_where(path, e.line) + e.message for e in result.errors))
    return result.source


def _where(path: Path, line: int | None) -> str:
    return f"{path}:{line}: " if line else f"{path}: "


def store(
    source: str,
    *,
    filename: str,
    device: str,
    target: str,
    rounds: int,
    team: str,
    username: str,
    proposer: str,
) -> DiagnosisRun:
    """Kernel + KernelVersion + DiagnosisRun, as an upload would store them."""
    user_model = get_user_model()
    with transaction.atomic():
        user, created = user_model.objects.get_or_create(**{user_model.USERNAME_FIELD: username})
        if created:
            user.set_unusable_password()
            user.save()
        team_row, _ = Team.objects.get_or_create(name=team)
        team_row.members.add(user)
        name = Path(filename).stem
        kernel = Kernel.objects.filter(team=team_row, name=name).order_by("created").first()
        if kernel is None:
            kernel = Kernel.objects.create(team=team_row, name=name, owner=user)
        digest = KernelVersion.digest(source)
        version = KernelVersion.objects.filter(kernel=kernel, sha256=digest).first()
        if version is None:
            number = (kernel.versions.aggregate(n=Max("number"))["n"] or 0) + 1
            version = KernelVersion.objects.create(
                kernel=kernel, number=number, source=source, sha256=digest, filename=filename, created_by=user
            )
        return DiagnosisRun.objects.create(
            version=version,
            device=device,
            target=target,
            proposer=proposer,
            round_budget=rounds,
            requested_by=user,
        )


def run_report(run: DiagnosisRun) -> dict[str, Any]:
    """The run as stored: what --json prints."""
    summary = summary_from_json(run.summary)
    findings = Finding.objects.filter(run=run).select_related("round").order_by("round__index", "tier", "id")
    proposals = (
        Proposal.objects.filter(round__run=run)
        .select_related("round")
        .prefetch_related("findings")
        .order_by("round__index", "id")
    )
    best_id = summary.best_proposal if summary else None
    best_proposal = next((p for p in proposals if best_id is not None and p.id == best_id), None)
    return {
        "run": {
            "id": run.id,
            "status": run.status,
            "device": run.device,
            "target": run.target,
            "proposer": run.proposer,
            "kernel": run.version.kernel.name,
            "version": run.version.number,
            "rounds": run.rounds.count(),
            "round_budget": run.round_budget,
            "stop_reason": str(summary.stop_reason) if summary else None,
            "wall_s": run.wall_s,
            "device_s": run.device_s,
            "tokens": run.tokens,
            "attempts": run.attempts,
            "error": run.error,
        },
        "findings": [
            {
                "round": f.round.index if f.round else None,
                "tier": f.tier,
                "code": f.code,
                "severity": f.severity,
                "family": f.family,
                "message": f.message,
                "args": f.args,
                "lines": f.lines,
                "kernel": f.kernel,
                "gain": f.gain,
                "evidence": f.evidence,
            }
            for f in findings
        ],
        "proposals": [
            {
                "id": p.id,
                "round": p.round.index,
                "proposer": p.proposer,
                "family": p.family,
                "status": p.status,
                "speedup": p.speedup,
                "pct_sol": p.pct_sol,
                "rationale": p.rationale,
                "findings_addressed": sorted({f.code for f in p.findings.all()}),
                "failure_reason": p.failure_reason,
                "diff": p.diff,
            }
            for p in proposals
        ],
        "best_version": {
            "origin": "proposal" if best_proposal else "upload",
            "version": None if best_proposal else run.version.number,
            "proposal": best_proposal.id if best_proposal else None,
            "sha256": (summary.best_sha256 if summary else "") or run.version.sha256,
            "speedup_over_initial": summary.speedup_over_initial if summary else None,
            "speedup_over_eager": summary.speedup_over_eager if summary else None,
            "pct_sol": summary.pct_sol if summary else None,
            "source": best_proposal.source if best_proposal else run.version.source,
        },
        "timings": {
            "initial": version_json(summary.initial) if summary else None,
            "best": version_json(summary.best) if summary else None,
            "baseline_wall_s": summary.baseline_wall_s if summary else None,
            "baseline_device_s": summary.baseline_device_s if summary else None,
        },
    }


def render_text(report: dict[str, Any]) -> str:
    r = report["run"]
    lines = [
        f"run {r['id']}: {r['kernel']} v{r['version']} on {r['device']} ({r['target']}): {r['status']}"
        + (f" ({r['stop_reason']})" if r["stop_reason"] else ""),
        f"  {r['rounds']} of {r['round_budget']} rounds, wall {r['wall_s']:.1f} s, device {r['device_s']:.1f} s,"
        f" {r['tokens']} tokens, attempt {r['attempts']}",
    ]
    if r["error"]:
        lines.append(f"  error: {r['error']}")
    for label in ("initial", "best"):
        stats = report["timings"][label]
        if not stats:
            continue
        for c in stats["cases"]:
            lines.append(
                f"  {label} case {c['index']}: {_ms(c['time_ms'])} (eager {_ms(c['ref_ms'])}, SOL {_pct(c['pct_sol'])})"
            )
    best = report["best_version"]
    if best["origin"] == "proposal":
        lines.append(
            f"  best: proposal {best['proposal']}, x{best['speedup_over_initial'] or 0:.2f} over the upload"
        )
    else:
        lines.append("  best: the uploaded version")
    if report["findings"]:
        lines.append("findings:")
        for f in report["findings"]:
            where = f" lines {','.join(map(str, f['lines']))}" if f["lines"] else ""
            lines.append(
                f"  r{f['round']} t{f['tier']} {f['severity']:<6} {f['code']}: {f['message']}{where}"
            )
    if report["proposals"]:
        lines.append("proposals:")
        for p in report["proposals"]:
            speed = f" x{p['speedup']:.2f}" if p["speedup"] else ""
            reason = f" ({p['failure_reason']})" if p["failure_reason"] else ""
            lines.append(
                f"  #{p['id']} r{p['round']} {p['proposer']} {p['family']}: {p['status']}{speed}{reason}"
            )
    return "\n".join(lines)


def _ms(x: float | None) -> str:
    return f"{x:.3f} ms" if x is not None else "-"


def _pct(x: float | None) -> str:
    return f"{x:.0f}%" if x is not None else "-"
