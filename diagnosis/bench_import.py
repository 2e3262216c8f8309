"""Import a bench/run.py result file as finished runs a reviewer can work through.

Each operator of the file becomes a run of its kernel's version (the suite module whose sha256
the report names), with its rounds, findings (and the artefact references they carry),
proposals with their per-case verification, and the run's summary, labelled with the device,
date and commit the figures were measured on (`BenchImport`). A report keeps no proposal
source, only its diff and digest: every source is rebuilt from its parent's
(`diagnosis.engine.patch`) and checked against the digest, so a reviewer accepts exactly what
was measured.

The rows are the ones a live run stores: the same converters (`runner.persist.finding_row`,
`serialize.verification_json`, `rationale_json`, `summary_json`) and the same rule for a
proposal's status (`runner.persist.proposal_status`), written with a few bulk inserts for
the whole file. Importing a file twice adds nothing (one BenchImport per team and file
digest, one run per operator of it).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from diagnosis.engine import devices
from diagnosis.engine.patch import PatchError, apply_unified_diff
from diagnosis.engine.records import CaseTiming, LoopResult, RoundRecord, StopReason, VersionStats, sha256
from diagnosis.engine.serialize import (
    LoopReport,
    decision_json,
    finite,
    loop_report_from_json,
    rationale_json,
    summary_json,
    verification_json,
)
from diagnosis.engine.verdict import geomean
from diagnosis.errors import ImportRefused
from diagnosis.models import BenchImport, DiagnosisRun, Finding, Kernel, KernelVersion, Proposal, Round, Team
from runner.persist import finding_row, proposal_status

SCHEMA = 1  # bench/run.py's SCHEMA
# bench/run.py writes its own stop reason when an operator's time budget ran out; the loop had
# been stopped by its caller, which is what the run's summary says
STOP_REASONS = {"op_budget": StopReason.CANCELLED}


@dataclass
class ImportOutcome:
    bench: BenchImport
    imported: list[str] = field(default_factory=list)  # operators now stored as runs
    existing: list[str] = field(default_factory=list)  # imported before
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (operator, why)
    runs: list[DiagnosisRun] = field(default_factory=list)


@dataclass
class _Operator:
    """One operator decoded and checked, before any row exists."""

    name: str
    filename: str
    record: Mapping[str, Any]
    report: LoopReport
    initial_source: str
    sources: dict[str, str]  # sha256 -> source: the initial and every rebuilt proposal
    proposed: dict[int, str]  # round index -> its proposal's rebuilt source


def import_results(path: Path, *, team: Team, user, suite_dir: Path | None = None) -> ImportOutcome:
    """Store the operators of the result file `path` as runs of `team`'s kernels (see the
    module docstring). Raises ImportRefused for a file that is not a bench/run.py result."""
    raw = Path(path).read_bytes()
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ImportRefused(f"{path}: not JSON ({exc})") from exc
    if (
        not isinstance(data, dict)
        or data.get("schema") != SCHEMA
        or not isinstance(data.get("operators"), list)
    ):
        raise ImportRefused(f"{path}: not a bench/run.py result (schema {SCHEMA} with operators)")
    meta = data.get("meta") or {}
    device = meta.get("device")
    if device not in devices.NAMES:
        raise ImportRefused(f"{path}: unknown device kind {device!r}")
    suites = _suite_dirs(meta, suite_dir)
    digest = hashlib.sha256(raw).hexdigest()

    with transaction.atomic():
        bench, _ = BenchImport.objects.get_or_create(
            team=team,
            sha256=digest,
            defaults={
                "filename": Path(path).name[:255],
                "device": device,
                "device_name": str(meta.get("device_name") or "")[:100],
                "measured_on": _date(meta.get("date")),
                "commit": str(meta.get("commit") or "")[:40],
                "meta": meta,
            },
        )
        outcome = ImportOutcome(bench)
        done = set(bench.runs.values_list("bench_operator", flat=True))
        ops: list[_Operator] = []
        for record in data["operators"]:
            name = str(record.get("name") or "")
            if not name:
                outcome.skipped.append(("?", "the operator has no name"))
            elif name in done:
                outcome.existing.append(name)
            else:
                checked = _check(record, suites)
                if isinstance(checked, str):
                    outcome.skipped.append((name, checked))
                else:
                    ops.append(checked)
        if ops:
            outcome.runs = _store(ops, bench, meta, team, user)
            outcome.imported = [op.name for op in ops]
    return outcome


# --- checking an operator -------------------------------------------------------------------


def _suite_dirs(meta: Mapping[str, Any], suite_dir: Path | None) -> list[Path]:
    """Where the measured modules are: the directory given, the report's own `source` under
    this checkout, and bench/suite."""
    base = Path(settings.BASE_DIR)
    dirs = [suite_dir] if suite_dir else []
    source = meta.get("source")
    if isinstance(source, str) and source and not os.path.isabs(source):
        dirs.append(base / source)
    dirs.append(base / "bench" / "suite")
    return [d for d in dict.fromkeys(dirs) if d is not None]


def _check(record: Mapping[str, Any], suites: list[Path]) -> _Operator | str:
    """The operator decoded with every source rebuilt, or why it cannot be imported."""
    name = str(record["name"])
    status = record.get("status")
    if status not in ("ok", "initial_failed"):
        return f"it did not run to the end (status {status}: {str(record.get('error') or '')[:200]})"
    try:
        report = loop_report_from_json(record)
    except (KeyError, TypeError, ValueError) as exc:
        return f"its record does not decode ({type(exc).__name__}: {exc})"
    filename = os.path.basename(str(record.get("file") or f"{name}.py"))
    initial = record.get("initial_source")
    if not isinstance(initial, str):
        found = [d / filename for d in suites if (d / filename).is_file()]
        if not found:
            return f"{filename} is in none of {', '.join(str(d) for d in suites)}"
        initial = found[0].read_text()
    if report.initial_sha256 and sha256(initial) != report.initial_sha256:
        return f"{filename} is not the source that was measured (its sha256 differs)"
    digests = {r.get("index"): (r.get("proposal") or {}).get("sha256") for r in record.get("rounds") or ()}
    sources = {sha256(initial): initial}
    proposed: dict[int, str] = {}
    for r in report.rounds or ():
        if r.proposal is None:
            continue
        parent = sources.get(r.parent_sha256)
        if parent is None:
            return f"round {r.index} starts from a source the report does not lead to"
        try:
            rebuilt = apply_unified_diff(parent, r.proposal.diff)
        except PatchError as exc:
            return f"round {r.index}: its diff does not apply to its parent ({exc})"
        if sha256(rebuilt) != digests.get(r.index):
            return f"round {r.index}: its diff does not rebuild the source that was measured"
        sources[sha256(rebuilt)] = proposed[r.index] = rebuilt
    if report.best_sha256 and report.best_sha256 not in sources:
        return "its best version is none of the sources its rounds lead to"
    return _Operator(name, filename, record, report, initial, sources, proposed)


def _date(value: object) -> date | None:
    try:
        return date.fromisoformat(str(value)) if value else None
    except ValueError:
        return None


# --- the rows ------------------------------------------------------------------------------


def _started(op: _Operator, meta: Mapping[str, Any]) -> datetime:
    """When the operator's first job started (its timeline's epoch seconds), else the file's
    start, else now."""
    timeline = op.record.get("timeline") or []
    if timeline and isinstance(timeline[0], Mapping) and isinstance(timeline[0].get("start"), int | float):
        return datetime.fromtimestamp(timeline[0]["start"], tz=UTC)
    try:
        return datetime.fromisoformat(str(meta["started"]))
    except (KeyError, ValueError):
        return timezone.now()


def _loop_result(op: _Operator) -> LoopResult:
    """The LoopResult the report was written from, as far as a report keeps it: what the
    run's summary (`summary_json`) is made of."""
    rep = op.report
    initial = VersionStats(
        rep.initial_sha256 or sha256(op.initial_source),
        tuple(CaseTiming(c.index, c.initial_ms, c.ref_ms, c.sol_ms) for c in rep.cases),
    )
    best = VersionStats(
        rep.best_sha256 or initial.sha256,
        tuple(CaseTiming(c.index, c.best_ms, c.ref_ms, c.sol_ms) for c in rep.cases),
    )
    failed = op.record.get("status") == "initial_failed"
    try:
        stop = STOP_REASONS.get(rep.stop_reason) or StopReason(rep.stop_reason)
    except ValueError:
        stop = StopReason.INITIAL_FAILED if failed else StopReason.ROUND_BUDGET
    return LoopResult(
        initial_source=op.initial_source,
        best_source=op.sources.get(rep.best_sha256 or "", op.initial_source),
        initial=None if failed else initial,
        best=None if failed else best,
        rounds=list(rep.rounds or ()),
        stop_reason=stop,
        stop_detail=rep.stop_detail,
        speedups_over_initial=tuple(c.speedup_over_initial for c in rep.cases),
        wall_s=rep.wall_s or 0.0,
        device_s=rep.device_s or 0.0,
        tokens=rep.tokens,
        baseline_wall_s=rep.baseline_wall_s or 0.0,
        baseline_device_s=rep.baseline_device_s or 0.0,
        device_name=str(op.record.get("device_name") or ""),
        error=rep.error,
    )


def _hypothesis(r: RoundRecord) -> str:
    """What a live run stores as a round's hypothesis (runner.persist.round_finished)."""
    text = r.hypothesis.text if r.hypothesis else ""
    return f"{text}\n{r.reason}".strip() if r.reason else text


def _kernels(ops: list[_Operator], team: Team, user) -> dict[str, Kernel]:
    """The team's kernel of each operator's name (the oldest, as loaddemo finds it), new ones
    created in one insert."""
    names = {op.name for op in ops}
    kernels: dict[str, Kernel] = {}
    for k in Kernel.objects.filter(team=team, name__in=names).order_by("-created", "-pk"):
        kernels[k.name] = k  # the oldest wins: it is the last written
    new = [
        Kernel(team=team, name=op.name, owner=user, description=f"Suite module bench/suite/{op.filename}")
        for op in ops
        if op.name not in kernels
    ]
    for k in Kernel.objects.bulk_create(new):
        kernels[k.name] = k
    return kernels


def _versions(ops: list[_Operator], kernels: dict[str, Kernel], user) -> dict[str, KernelVersion]:
    """Each operator's measured initial version: the kernel's version with that sha256, else a
    new upload version numbered after the kernel's last."""
    ids = [k.pk for k in kernels.values()]
    found = {
        (v.kernel_id, v.sha256): v
        for v in KernelVersion.objects.filter(
            kernel_id__in=ids, sha256__in={sha256(op.initial_source) for op in ops}
        )
    }
    top = dict(
        KernelVersion.objects.filter(kernel_id__in=ids).order_by().values("kernel").annotate(n=Max("number"))
        .values_list("kernel", "n")
    )  # fmt: skip
    new: list[KernelVersion] = []
    for op in ops:
        kernel = kernels[op.name]
        key = (kernel.pk, sha256(op.initial_source))
        if key in found:
            continue
        top[kernel.pk] = top.get(kernel.pk, 0) + 1
        found[key] = KernelVersion(
            kernel=kernel,
            number=top[kernel.pk],
            source=op.initial_source,
            sha256=key[1],
            filename=op.filename,
            origin=KernelVersion.Origin.UPLOAD,
            created_by=user,
        )
        new.append(found[key])
    KernelVersion.objects.bulk_create(new)
    return {op.name: found[(kernels[op.name].pk, sha256(op.initial_source))] for op in ops}


def _store(
    ops: list[_Operator], bench: BenchImport, meta: Mapping[str, Any], team: Team, user
) -> list[DiagnosisRun]:
    kernels = _kernels(ops, team, user)
    versions = _versions(ops, kernels, user)
    target = str(meta.get("target") or devices.get(bench.device).default_target)[:40]
    runs: list[DiagnosisRun] = []
    results: list[LoopResult] = []
    for op in ops:
        result = _loop_result(op)
        started = _started(op, meta)
        failed = result.stop_reason is StopReason.INITIAL_FAILED
        version = versions[op.name]
        runs.append(
            DiagnosisRun(
                version=version,
                device=bench.device,
                target=target,
                proposer="rules",
                status=DiagnosisRun.Status.FAILED if failed else DiagnosisRun.Status.DONE,
                round_budget=int(meta.get("rounds") or max(1, len(result.rounds))),
                current_round=len(result.rounds),
                current_tier=max((int(r.tier_reached) for r in result.rounds), default=None),
                best_version=None if result.improved else version,
                requested_by=user,
                created=started,
                started_at=started,
                heartbeat_at=started + timedelta(seconds=result.wall_s),
                finished_at=started + timedelta(seconds=result.wall_s),
                attempts=1,
                error=result.error if failed else "",
                wall_s=result.wall_s,
                device_s=result.device_s,
                tokens=result.tokens,
                bench_import=bench,
                bench_operator=op.name,
            )
        )
        results.append(result)
    DiagnosisRun.objects.bulk_create(runs)

    rounds: list[tuple[DiagnosisRun, _Operator, RoundRecord, Round]] = []
    for run, op, result in zip(runs, ops, results, strict=True):
        at = run.started_at + timedelta(seconds=result.baseline_wall_s)
        for r in result.rounds:
            parent = run.version if r.parent_sha256 == run.version.sha256 else None
            row = Round(
                run=run,
                index=r.index,
                parent_version=parent,
                tier_reached=int(r.tier_reached),
                hypothesis=_hypothesis(r),
                verdict=str(r.verdict),
                escalation=[decision_json(d) for d in r.decisions],
                wall_s=r.cost.wall_s,
                device_s=r.cost.device_s,
                tokens=r.cost.tokens,
                created=at,
            )
            at += timedelta(seconds=r.cost.wall_s)
            rounds.append((run, op, r, row))
    Round.objects.bulk_create([row for *_, row in rounds])

    # a round's findings once each, as a live round stores them
    finding_rows: list[Finding] = []
    per_round: list[list[tuple[Any, Finding]]] = []
    for run, _, r, row in rounds:
        pairs = [(f, finding_row(run, row, f)) for f in dict.fromkeys(r.findings)]
        per_round.append(pairs)
        finding_rows += [fr for _, fr in pairs]
    Finding.objects.bulk_create(finding_rows)

    proposals: list[tuple[Proposal, list[Finding]]] = []
    for (_, op, r, row), pairs in zip(rounds, per_round, strict=True):
        if r.proposal is None:
            continue
        parent_source = op.sources[r.parent_sha256]
        source = op.proposed[r.index]
        candidate = replace(r.proposal, source=source)
        outcome = r.outcome
        status, reason = proposal_status(outcome, r.verdict)
        if (
            op.record.get("final_check") == "incorrect"
            and sha256(source) == op.report.best_sha256
            and status == Proposal.Status.PENDING
        ):
            # the benchmark verified its best version once more on fresh seeds, and it failed
            status, reason = Proposal.Status.FAILED, "incorrect on the benchmark's final check (fresh seeds)"
        addressed = set(candidate.findings_addressed)
        proposal = Proposal(
            round=row,
            parent_version=row.parent_version,
            parent_source=parent_source,
            source=source,
            diff=candidate.diff,
            proposer=candidate.proposer or "rules",
            family=str(candidate.family),
            rationale=candidate.rationale,
            rationale_parts=rationale_json(candidate, [f for f, _ in pairs]),
            verification=verification_json(outcome) if outcome is not None else {},
            speedup=finite(outcome.speedup) if outcome is not None else None,
            pct_sol=finite(geomean(c.pct_sol for c in outcome.cases)) if outcome is not None else None,
            status=status,
            failure_reason=reason,
            created=row.created + timedelta(seconds=max(0.0, r.cost.wall_s - r.cost.verify_wall_s)),
        )
        proposals.append((proposal, [fr for f, fr in pairs if f.code in addressed]))
    Proposal.objects.bulk_create([p for p, _ in proposals])
    Proposal.findings.through.objects.bulk_create(
        [Proposal.findings.through(proposal_id=p.pk, finding_id=f.pk) for p, fs in proposals for f in fs]
    )

    best_ids = {(p.round.run_id, sha256(p.source)): p.pk for p, _ in proposals}
    for run, result in zip(runs, results, strict=True):
        best = best_ids.get((run.pk, sha256(result.best_source))) if result.improved else None
        run.summary = summary_json(result, best_proposal_id=best, attempt=1)
    DiagnosisRun.objects.bulk_update(runs, ["summary"])
    return runs
