"""Engine results -> model rows, written as the round loop goes.

`RunRecorder` is the loop's observer (diagnosis.engine.loop.LoopObserver): each callback
commits its rows at once (autocommit, one small transaction per step), so a worker that dies
mid-run loses only the step it was in. The converters below keep every field of a finding
(code, tier, severity, family, message, args, lines, kernel, evidence references, gain).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from django.db import transaction
from django.db.models import F

from diagnosis import models
from diagnosis.engine import evidence as ev
from diagnosis.engine import report
from diagnosis.engine.proposers.base import Candidate
from diagnosis.engine.records import (
    CandidateOutcome,
    CaseTiming,
    DecisionRecord,
    LoopResult,
    RoundRecord,
    VersionStats,
    sha256,
)
from diagnosis.engine.verdict import Verdict, geomean

MAX_EXCERPT_CHARS = 8000  # per evidence excerpt kept on a Finding; the whole text is an Artefact
ARTEFACT_KINDS = frozenset(models.Artefact.Kind.values)


# --- converters ---------------------------------------------------------------------------


def finding_row(run: models.DiagnosisRun, round_row: models.Round | None, f: ev.Finding) -> models.Finding:
    return models.Finding(
        run=run,
        round=round_row,
        tier=int(f.tier),
        code=f.code,
        severity=str(f.severity),
        family=str(f.family),
        message=f.message,
        args=_jsonable(f.args),
        lines=list(f.lines),
        kernel=f.kernel,
        evidence=[evidence_json(ref) for ref in f.evidence],
        gain=_finite(f.gain),
    )


def evidence_json(ref: ev.ArtefactRef) -> dict[str, Any]:
    return {
        "kind": ref.kind,
        "kernel": ref.kernel,
        "lines": list(ref.lines),
        "excerpt": ref.excerpt[:MAX_EXCERPT_CHARS],
        "name": ref.name,
    }


def artefact_row(run: models.DiagnosisRun, round_row: models.Round | None, a: ev.Artefact) -> models.Artefact:
    kind, name = a.kind, a.name
    if kind not in ARTEFACT_KINDS:  # an engine kind the schema does not list: keep it, as a log
        kind, name = models.Artefact.Kind.LOG, f"{a.kind}:{a.name}"
    return models.Artefact.build(run=run, round=round_row, kind=kind, name=name, text=a.text)


def decision_json(d: DecisionRecord) -> dict[str, Any]:
    return report.decision_json(d)


def case_json(
    c: CaseTiming, parent_ms: float | None = None, *, against_parent: bool = False
) -> dict[str, Any]:
    out = {
        "index": c.index,
        "time_ms": _finite(c.time_ms),
        "ref_ms": _finite(c.ref_ms),
        "sol_ms": _finite(c.sol_ms),
        "pct_sol": _finite(c.pct_sol),
        "speedup_over_eager": _finite(c.speedup_over_eager),
    }
    if against_parent:  # a candidate's case: its parent's time in the same process, and the ratio
        out["parent_ms"] = _finite(parent_ms)
        out["speedup"] = _finite(parent_ms / c.time_ms) if (parent_ms and c.time_ms) else None
    return out


def stats_json(v: VersionStats | None) -> dict[str, Any] | None:
    if v is None:
        return None
    return {
        "sha256": v.sha256,
        "timed": v.timed,
        "cases": [case_json(c) for c in v.cases],
        "pct_sol": _finite(v.pct_sol),
        "speedup_over_eager": _finite(v.speedup_over_eager),
    }


def outcome_json(o: CandidateOutcome) -> dict[str, Any]:
    parents = list(o.parent_ms) + [None] * max(0, len(o.cases) - len(o.parent_ms))
    chosen = dict(o.autotune_choices)
    cases = []
    floors = list(o.case_noise) + [None] * max(0, len(o.cases) - len(o.case_noise))
    rounds = list(o.case_rounds) + [None] * max(0, len(o.cases) - len(o.case_rounds))
    for c, p, f, r in zip(o.cases, parents, floors, rounds, strict=False):
        row = case_json(c, p, against_parent=True)
        row["noise_floor"] = _finite(f)  # the wider spread of the parent's and the candidate's timings of this case
        if r is not None:  # the medians of every timing round, behind the floor and the verdict
            row["rounds_ms"] = {"candidate": [_finite(t) for t in r[0]], "parent": [_finite(t) for t in r[1]]}
        if chosen.get(f"case {c.index}"):  # what @triton.autotune picked for this case's shapes
            row["autotune_choice"] = "; ".join(chosen[f"case {c.index}"])
        cases.append(row)
    return {
        "correct": o.correct,
        "error_kind": o.error_kind,
        "message": o.message,
        "timed": o.timed,
        "cases": cases,
        "autotune_choices": {label: list(v) for label, v in o.autotune_choices},
        "speedup": _finite(o.speedup),
        "noise": _finite(o.noise),
        "suspect": o.suspect,
        "wall_s": o.wall_s,
        "device_s": o.device_s,
    }


def result_summary(result: LoopResult, *, best_proposal_id: int | None, attempt: int) -> dict[str, Any]:
    """What DiagnosisRun.summary holds once the loop ends."""
    return {
        "stop_reason": str(result.stop_reason),
        "stop_detail": result.stop_detail,
        "attempt": attempt,
        "rounds": len(result.rounds),
        "improved": result.improved,
        "initial": stats_json(result.initial),
        "best": stats_json(result.best),
        "best_proposal": best_proposal_id,
        "best_sha256": sha256(result.best_source),
        "speedup_over_initial": _finite(result.speedup_over_initial),
        "speedups_over_initial": [_finite(s) for s in result.speedups_over_initial],
        "speedup_over_eager": _finite(result.speedup_over_eager),
        "pct_sol": _finite(result.pct_sol),
        "winning_tiers": [int(t) for t in result.winning_tiers],
        "device_name": result.device_name,
        "baseline_wall_s": result.baseline_wall_s,
        "baseline_device_s": result.baseline_device_s,
        "error": result.error,
    }


def _finite(x: float | None) -> float | None:
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def _jsonable(value: Any) -> Any:
    """Finding args may hold tuples, enums or numpy scalars; JSONField wants plain JSON."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(v) for v in value]
    if isinstance(value, enum.Enum):
        return _jsonable(value.value)
    if isinstance(value, bool | int | str) or value is None:
        return value
    if isinstance(value, float):
        return _finite(value)
    if hasattr(value, "item"):  # numpy scalar
        return _jsonable(value.item())
    if hasattr(value, "__dataclass_fields__"):
        return _jsonable(asdict(value))
    return str(value)


# --- the observer -------------------------------------------------------------------------


class RunRecorder:
    """Persists each step of the loop for one run (a `LoopObserver`).

    `round_offset` shifts round indices when an earlier attempt of the same run already
    committed rounds, so they are kept rather than overwritten. `should_stop` is supplied by
    the pipeline (cancellation, lost claim).
    """

    def __init__(
        self,
        run: models.DiagnosisRun,
        *,
        should_stop: Callable[[], bool] = lambda: False,
        round_offset: int = 0,
    ) -> None:
        self.run = run
        self._should_stop = should_stop
        self.round_offset = round_offset
        self.rounds: dict[int, models.Round] = {}
        self.parent_sources: dict[int, str] = {}
        self.findings: dict[int, dict[ev.Finding, models.Finding]] = {}
        self.proposals: dict[tuple[int, str], models.Proposal] = {}  # (index, source sha) -> row
        self._versions = {
            sha: pk
            for pk, sha in models.KernelVersion.objects.filter(kernel_id=run.version.kernel_id).values_list(
                "id", "sha256"
            )
        }

    def stored_index(self, index: int) -> int:
        return index + self.round_offset

    # LoopObserver ------------------------------------------------------------------------

    def round_started(self, index: int, parent_source: str) -> None:
        stored = self.stored_index(index)
        row = models.Round.objects.create(
            run=self.run,
            index=stored,
            parent_version_id=self._versions.get(sha256(parent_source)),
        )
        self.rounds[index] = row
        self.parent_sources[index] = parent_source
        self.findings[index] = {}
        models.DiagnosisRun.objects.filter(id=self.run.id).update(current_round=stored, current_tier=0)

    def tier_done(self, index: int, tier_result: ev.TierResult, decision: DecisionRecord) -> None:
        row = self._round(index)
        with transaction.atomic():
            self._save_findings(index, tier_result.findings)
            models.Artefact.objects.bulk_create(
                [artefact_row(self.run, row, a) for a in tier_result.artefacts]
            )
            row.tier_reached = max(row.tier_reached, int(tier_result.tier))
            row.escalation = [*row.escalation, decision_json(decision)]
            row.save(update_fields=["tier_reached", "escalation"])
            models.DiagnosisRun.objects.filter(id=self.run.id).update(current_tier=int(tier_result.tier))

    def proposal_made(self, index: int, candidate: Candidate) -> None:
        row = self._round(index)
        parent = self.parent_sources.get(index, "")
        with transaction.atomic():
            proposal = models.Proposal.objects.create(
                round=row,
                parent_version_id=self._versions.get(sha256(parent)),
                parent_source=parent,
                source=candidate.source,
                diff=candidate.diff,
                proposer=candidate.proposer,
                family=str(candidate.family),
                rationale=candidate.rationale,
                status=models.Proposal.Status.PENDING,
            )
            addressed = set(candidate.findings_addressed)
            proposal.findings.set([f for f in self.findings.get(index, {}).values() if f.code in addressed])
        self.proposals[(index, sha256(candidate.source))] = proposal

    def proposal_verified(self, index: int, candidate: Candidate, outcome: CandidateOutcome) -> None:
        proposal = self.proposals.get((index, sha256(candidate.source)))
        if proposal is None:  # the loop verified something it did not announce: record it now
            self.proposal_made(index, candidate)
            proposal = self.proposals[(index, sha256(candidate.source))]
        proposal.verification = outcome_json(outcome)
        proposal.speedup = _finite(outcome.speedup)
        proposal.pct_sol = _finite(geomean([c.pct_sol for c in outcome.cases if c.pct_sol is not None]))
        if not outcome.correct:
            proposal.status = models.Proposal.Status.FAILED
            proposal.failure_reason = f"{outcome.error_kind}: {outcome.message}".strip(": ")
        elif outcome.suspect:
            proposal.status = models.Proposal.Status.FAILED
            proposal.failure_reason = "suspect: measured time is below the speed-of-light bound"
        proposal.save(update_fields=["verification", "speedup", "pct_sol", "status", "failure_reason"])

    def round_finished(self, index: int, record: RoundRecord) -> None:
        row = self._round(index)
        with transaction.atomic():
            self._save_findings(index, record.findings)
            hypothesis = record.hypothesis.text if record.hypothesis else ""
            if record.reason:
                hypothesis = f"{hypothesis}\n{record.reason}".strip()
            row.tier_reached = max(row.tier_reached, int(record.tier_reached))
            row.hypothesis = hypothesis
            row.verdict = str(record.verdict)
            if record.decisions:
                row.escalation = [decision_json(d) for d in record.decisions]
            row.wall_s = record.cost.wall_s
            row.device_s = record.cost.device_s
            row.tokens = record.cost.tokens
            row.save()
            if record.proposal is not None:
                proposal = self.proposals.get((index, sha256(record.proposal.source)))
                if (
                    proposal is not None
                    and record.verdict is Verdict.NO_GAIN
                    and record.outcome is not None
                    and record.outcome.timed
                    and proposal.status == models.Proposal.Status.PENDING
                ):
                    # Correct but not faster above the noise floor: it fails the gate (DESIGN.md).
                    proposal.status = models.Proposal.Status.FAILED
                    proposal.failure_reason = "no gain: not faster than its parent above the noise floor"
                    proposal.save(update_fields=["status", "failure_reason"])
            models.DiagnosisRun.objects.filter(id=self.run.id).update(
                current_round=self.stored_index(index),
                wall_s=F("wall_s") + record.cost.wall_s,
                device_s=F("device_s") + record.cost.device_s,
                tokens=F("tokens") + record.cost.tokens,
            )

    def should_stop(self) -> bool:
        return self._should_stop()

    # helpers -----------------------------------------------------------------------------

    def _round(self, index: int) -> models.Round:
        if index not in self.rounds:  # a callback before round_started: open the round now
            self.round_started(index, "")
        return self.rounds[index]

    def _save_findings(self, index: int, findings: list[ev.Finding]) -> None:
        saved = self.findings.setdefault(index, {})
        new = [f for f in dict.fromkeys(findings) if f not in saved]
        if not new:
            return
        rows = models.Finding.objects.bulk_create([finding_row(self.run, self.rounds[index], f) for f in new])
        saved.update(zip(new, rows, strict=True))

    def run_artefact(self, kind: str, name: str, text: str) -> models.Artefact:
        """An artefact of the run as a whole (the baseline's profile, a log), outside any round."""
        row = artefact_row(self.run, None, ev.Artefact(kind, name, text))
        row.save()
        return row

    def best_proposal_id(self, best_source: str) -> int | None:
        """The proposal whose source is the loop's best (None when the upload stayed best)."""
        digest = sha256(best_source)
        for (_, sha), row in self.proposals.items():
            if sha == digest:
                return row.id
        return None


def close_interrupted_rounds(run: models.DiagnosisRun) -> int:
    """Rounds an earlier attempt left open (its worker died): mark them inconclusive.

    Returns the highest stored round index, so the next attempt numbers its rounds after it.
    """
    models.Round.objects.filter(run=run, verdict=models.Round.Verdict.PENDING).update(
        verdict=models.Round.Verdict.INCONCLUSIVE,
        hypothesis="interrupted: the worker stopped during this round",
    )
    last = models.Round.objects.filter(run=run).order_by("-index").values_list("index", flat=True).first()
    return last or 0
