"""Engine results -> model rows, written as the round loop goes.

`RunRecorder` is the loop's observer (diagnosis.engine.records.LoopObserver): each callback
commits its rows at once (autocommit, one small transaction per step), so a worker that dies
mid-run loses only the step it was in. The JSON a row holds (a finding's columns, a round's
escalation, a proposal's verification, the run's summary) is `diagnosis.engine.serialize`'s.

Artefacts are stored once per source version of a run: a round that diagnoses a source an
earlier round already diagnosed (every round of a run on a device that cannot time) stores
no second copy of an identical IR, dump or profile. Text that reaches a row (artefacts,
finding messages, arguments and excerpts) has its server paths replaced first
(diagnosis.engine.paths), so no page or download shows where the worker keeps its files.
"""

from __future__ import annotations

from collections.abc import Callable

from django.db import transaction
from django.db.models import F, Value
from django.db.models.functions import Coalesce

from diagnosis import models
from diagnosis.engine import evidence as ev
from diagnosis.engine.paths import display_name, scrub_paths
from diagnosis.engine.proposers.base import Candidate
from diagnosis.engine.records import CandidateOutcome, DecisionRecord, RoundRecord, sha256
from diagnosis.engine.serialize import decision_json, finding_json, finite, rationale_json, verification_json
from diagnosis.engine.verdict import Verdict, geomean

ARTEFACT_KINDS = frozenset(models.Artefact.Kind.values)
NO_GAIN_REASON = "no gain: not faster than its parent above the noise floor"


# --- converters ---------------------------------------------------------------------------


def module_name(run: models.DiagnosisRun) -> str:
    """What stored text calls the module being diagnosed: the upload's file name."""
    return display_name(run.version.filename)


def _scrubbed(value: object, name: str) -> object:
    if isinstance(value, str):
        return scrub_paths(value, name)
    if isinstance(value, list):
        return [_scrubbed(v, name) for v in value]
    if isinstance(value, dict):
        return {k: _scrubbed(v, name) for k, v in value.items()}
    return value


def finding_row(run: models.DiagnosisRun, round_row: models.Round | None, f: ev.Finding) -> models.Finding:
    """A finding's row: its columns are the finding's stored JSON (diagnosis.engine.serialize),
    with server paths out of its message, arguments and evidence excerpts."""
    columns = finding_json(f, db=True)
    name = module_name(run)
    for key in ("message", "args", "evidence"):
        columns[key] = _scrubbed(columns[key], name)
    return models.Finding(run=run, round=round_row, **columns)


def proposal_status(outcome: CandidateOutcome | None, verdict: Verdict | None = None) -> tuple[str, str]:
    """A verified proposal's status and failure reason: failed when it is wrong or its time is
    suspect, and (once its round ends) when it was timed and not faster above the noise floor;
    pending, for a reviewer, otherwise. The import of bench results applies it as a live run does."""
    if outcome is not None and not outcome.correct:
        return models.Proposal.Status.FAILED, f"{outcome.error_kind}: {outcome.message}".strip(": ")
    if outcome is not None and outcome.suspect:
        return models.Proposal.Status.FAILED, "suspect: measured time is below the speed-of-light bound"
    if verdict is Verdict.NO_GAIN and outcome is not None and outcome.timed:
        return models.Proposal.Status.FAILED, NO_GAIN_REASON
    return models.Proposal.Status.PENDING, ""


def artefact_row(
    run: models.DiagnosisRun, round_row: models.Round | None, a: ev.Artefact, *, source_sha256: str = ""
) -> models.Artefact:
    kind, name = a.kind, a.name
    if kind not in ARTEFACT_KINDS:  # an engine kind the schema does not list: keep it, as a log
        kind, name = models.Artefact.Kind.LOG, f"{a.kind}:{a.name}"
    module = module_name(run)
    return models.Artefact.build(
        run=run,
        round=round_row,
        kind=kind,
        name=scrub_paths(name, module),
        text=scrub_paths(a.text, module),
        source_sha256=source_sha256,
    )


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
        # (source sha, kind, name, digest) of every artefact the run holds: stored once each
        self._stored: set[tuple[str, str, str, str]] = set(
            models.Artefact.objects.filter(run=run).values_list("source_sha256", "kind", "name", "sha256")
        )
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
        digest = sha256(parent_source)
        row = models.Round.objects.create(
            run=self.run,
            index=stored,
            parent_version_id=self._versions.get(digest),
            parent_sha256=digest if parent_source else "",
        )
        self.rounds[index] = row
        self.parent_sources[index] = parent_source
        self.findings[index] = {}
        models.DiagnosisRun.objects.filter(id=self.run.id).update(current_round=stored, current_tier=0)

    def tier_done(self, index: int, tier_result: ev.TierResult, decision: DecisionRecord) -> None:
        row = self._round(index)
        with transaction.atomic():
            self._save_findings(index, tier_result.findings)
            self._save_artefacts(row, sha256(self.parent_sources.get(index, "")), tier_result.artefacts)
            row.tier_reached = max(row.tier_reached, int(tier_result.tier))
            row.escalation = [*row.escalation, decision_json(decision)]
            row.save(update_fields=["tier_reached", "escalation"])
            models.DiagnosisRun.objects.filter(id=self.run.id).update(current_tier=int(tier_result.tier))

    def proposal_made(self, index: int, candidate: Candidate) -> None:
        row = self._round(index)
        parent = self.parent_sources.get(index, "")
        found = self.findings.get(index, {})
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
                rationale_parts=rationale_json(candidate, found),
                status=models.Proposal.Status.PENDING,
            )
            addressed = set(candidate.findings_addressed)
            proposal.findings.set([f for f in found.values() if f.code in addressed])
        self.proposals[(index, sha256(candidate.source))] = proposal

    def proposal_verified(self, index: int, candidate: Candidate, outcome: CandidateOutcome) -> None:
        proposal = self.proposals.get((index, sha256(candidate.source)))
        if proposal is None:  # the loop verified something it did not announce: record it now
            self.proposal_made(index, candidate)
            proposal = self.proposals[(index, sha256(candidate.source))]
        proposal.verification = verification_json(outcome)
        proposal.speedup = finite(outcome.speedup)
        proposal.pct_sol = finite(geomean(c.pct_sol for c in outcome.cases))
        status, reason = proposal_status(outcome)
        if status == models.Proposal.Status.FAILED:
            proposal.status, proposal.failure_reason = status, reason
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
            usage = record.cost.llm
            if usage is not None:
                row.llm_requests = usage.requests
                row.llm_prompt_tokens = usage.prompt_tokens
                row.llm_completion_tokens = usage.completion_tokens
                row.llm_tokens_estimated = usage.estimated
                row.llm_prompt_chars = usage.prompt_chars
                row.llm_prompt_version = usage.prompt_version[:16]
                row.llm_latency_s = usage.latency_s
                row.llm_cost = finite(usage.cost)
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
            totals = {
                "current_round": self.stored_index(index),
                "wall_s": F("wall_s") + record.cost.wall_s,
                "device_s": F("device_s") + record.cost.device_s,
                "tokens": F("tokens") + record.cost.tokens,
            }
            if usage is not None and finite(usage.cost) is not None:
                totals["llm_cost"] = Coalesce(F("llm_cost"), Value(0.0)) + usage.cost
            models.DiagnosisRun.objects.filter(id=self.run.id).update(**totals)

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

    def _save_artefacts(
        self, round_row: models.Round | None, source_sha: str, artefacts: list[ev.Artefact]
    ) -> list[models.Artefact]:
        """Rows for the artefacts this source version does not hold yet (kind, name and digest
        decide), under the first round that produced them."""
        new = []
        for a in artefacts:
            row = artefact_row(self.run, round_row, a, source_sha256=source_sha)
            key = (source_sha, row.kind, row.name, row.sha256)
            if key not in self._stored:
                self._stored.add(key)
                new.append(row)
        return models.Artefact.objects.bulk_create(new)

    def run_artefact(self, kind: str, name: str, text: str) -> models.Artefact | None:
        """An artefact of the run as a whole (the baseline's profile, a log), outside any round;
        None when the run already holds the same one."""
        saved = self._save_artefacts(None, self.run.version.sha256, [ev.Artefact(kind, name, text)])
        return saved[0] if saved else None

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
