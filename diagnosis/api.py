"""Downloads and JSON: a version's source, a run's whole report, and `Accept: application/json`
on the run and proposal pages.

Every JSON shape here is `diagnosis.engine.serialize`'s, the encoders bench/run.py writes its
result files with: a stored run is turned back into the engine's records (`LoopResult`,
`RoundRecord`, `Candidate`, `CandidateOutcome`) and encoded by `loop_result_json`, so a client
reads a run with `loop_report_from_json` exactly as it reads a benchmark's operator.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.db.models import Prefetch
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import reverse
from django.views.decorators.http import require_GET

from diagnosis import access
from diagnosis.engine.evidence import Family
from diagnosis.engine.proposers.base import Candidate
from diagnosis.engine.records import LoopResult, RoundCost, RoundRecord, sha256
from diagnosis.engine.serialize import (
    JSON,
    decision_from_json,
    finding_from_json,
    finding_json,
    loop_result_json,
    rationale_from_json,
    round_json,
    summary_from_json,
    verification_from_json,
)
from diagnosis.engine.verdict import Verdict
from diagnosis.models import DiagnosisRun, Finding, KernelVersion, Proposal, Round
from diagnosis.reviews import FINDING_COLUMNS, acceptability

JSON_TYPE = "application/json"


def wants_json(request: HttpRequest) -> bool:
    """The client prefers JSON to HTML (`Accept: application/json`); a browser's
    `text/html,...,*/*` and a missing Accept header get the page."""
    return request.get_preferred_type(["text/html", JSON_TYPE]) == JSON_TYPE


def safe_filename(name: str, fallback: str) -> str:
    """`name` with anything but letters, digits and ._- replaced, for Content-Disposition."""
    cleaned = "".join(c if c.isascii() and (c.isalnum() or c in "._-") else "_" for c in name).strip("._")
    return cleaned[:150] or fallback


def _json_response(data: JSON, filename: str | None = None) -> JsonResponse:
    response = JsonResponse(data, json_dumps_params={"indent": 1})
    if filename:
        response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


# --- a version's source ---------------------------------------------------------------------


@require_GET
@login_required
def version_source(request: HttpRequest, pk: int) -> HttpResponse:
    version = access.get_version_for_user(request.user, pk)
    response = HttpResponse(version.source, content_type="text/x-python; charset=utf-8")
    name = safe_filename(version.kernel.name, "kernel")
    response["Content-Disposition"] = f'attachment; filename="{name}-v{version.number}.py"'
    return response


# --- a run as the engine's records ----------------------------------------------------------


def _family(value: str) -> Family:
    try:
        return Family(value)
    except ValueError:
        return Family.NONE


def _finding_records(rows: list[Finding]) -> list[Any]:
    return [finding_from_json({c: getattr(f, c) for c in FINDING_COLUMNS}) for f in rows]


def candidate_record(p: Proposal) -> Candidate:
    """A stored proposal as the candidate the loop made (its prefetched findings give the codes)."""
    parts = rationale_from_json(p.rationale_parts)
    return Candidate(
        source=p.source,
        diff=p.diff,
        family=_family(p.family),
        rationale=p.rationale,
        findings_addressed=tuple(dict.fromkeys(f.code for f in p.findings.all())),
        proposer=p.proposer,
        mechanism=parts.mechanism if parts else "",
        expected=parts.expected if parts else "",
    )


def _round_proposal(proposals: list[Proposal]) -> Proposal | None:
    """The proposal a round's record names: the one still standing (pending or accepted),
    else the last one verified."""
    standing = [p for p in proposals if p.status in (Proposal.Status.PENDING, Proposal.Status.ACCEPTED)]
    return (standing or proposals or [None])[-1]


def round_record(r: Round) -> RoundRecord | None:
    """A finished round as the loop recorded it; None while it is still running. Its
    hypothesis and reason are stored as one text, which comes back as the reason."""
    if r.verdict == Round.Verdict.PENDING:
        return None
    proposals = list(r.proposals.all())
    chosen = _round_proposal(proposals)
    parent = r.parent_version.sha256 if r.parent_version else ""
    if not parent and chosen is not None:
        parent = sha256(chosen.parent_source)
    return RoundRecord(
        index=r.index,
        parent_sha256=parent,
        tier_reached=r.tier_reached,
        verdict=Verdict(r.verdict),
        reason=r.hypothesis,
        findings=_finding_records(list(r.findings.all())),
        decisions=[decision_from_json(d) for d in r.escalation or () if isinstance(d, dict)],
        proposal=candidate_record(chosen) if chosen else None,
        outcome=verification_from_json(chosen.verification) if chosen else None,
        cost=RoundCost(wall_s=r.wall_s, device_s=r.device_s, tokens=r.tokens),
    )


def _rounds(run: DiagnosisRun) -> list[Round]:
    return list(
        run.rounds.select_related("parent_version")
        .prefetch_related(
            Prefetch("findings", queryset=Finding.objects.order_by("tier", "id")),
            Prefetch("proposals", queryset=Proposal.objects.order_by("id").prefetch_related("findings")),
        )
        .order_by("index")
    )


def loop_result(run: DiagnosisRun, rounds: list[Round]) -> LoopResult | None:
    """The run's LoopResult from its rows; None while it has no summary (queued, running, or
    failed before the loop ended)."""
    summary = summary_from_json(run.summary)
    if summary is None:
        return None
    records = [rec for r in rounds if (rec := round_record(r)) is not None]
    best_source = run.version.source
    if summary.best_proposal is not None:
        by_id = {p.pk: p for r in rounds for p in r.proposals.all()}
        if summary.best_proposal in by_id:
            best_source = by_id[summary.best_proposal].source
    elif run.best_version is not None:
        best_source = run.best_version.source
    return LoopResult(
        initial_source=run.version.source,
        best_source=best_source,
        initial=summary.initial,
        best=summary.best,
        rounds=records,
        stop_reason=summary.stop_reason,
        stop_detail=summary.stop_detail,
        speedups_over_initial=summary.speedups_over_initial,
        wall_s=run.wall_s,
        device_s=run.device_s,
        tokens=run.tokens,
        baseline_wall_s=summary.baseline_wall_s,
        baseline_device_s=summary.baseline_device_s,
        device_name=summary.device_name,
        error=summary.error or run.error,
        unchecked=summary.unchecked,
        skipped_cases=summary.skipped_cases,
    )


def _version_ref(v: KernelVersion | None) -> JSON | None:
    if v is None:
        return None
    return {"id": v.pk, "number": v.number, "sha256": v.sha256, "url": reverse("version-detail", args=[v.pk])}


def _bench_ref(run: DiagnosisRun) -> JSON | None:
    """Where an imported run was measured (manage.py import_results); None for a run made here."""
    bench = run.bench_import if run.bench_import_id else None
    if bench is None:
        return None
    return {
        "file": bench.filename,
        "sha256": bench.sha256,
        "operator": run.bench_operator,
        "device_name": bench.device_name,
        "measured_on": bench.measured_on,
        "commit": bench.commit,
    }


def run_json(run: DiagnosisRun) -> JSON:
    """The run's row and, once it has ended, its whole report (`loop_result_json`, with rounds);
    before that, the rounds finished so far (`round_json` each)."""
    rounds = _rounds(run)
    kernel = run.version.kernel
    data: JSON = {
        "run": {
            "id": run.pk,
            "url": reverse("run-detail", args=[run.pk]),
            "kernel": {"id": kernel.pk, "name": kernel.name, "team": kernel.team.name},
            "version": _version_ref(run.version),
            "best_version": _version_ref(run.best_version),
            "device": run.device,
            "target": run.target,
            "proposer": run.proposer,
            "status": run.status,
            "round_budget": run.round_budget,
            "current_round": run.current_round,
            "current_tier": run.current_tier,
            "created": run.created,
            "started_at": run.started_at,
            "finished_at": run.finished_at,
            "error": run.error,
            "wall_s": run.wall_s,
            "device_s": run.device_s,
            "tokens": run.tokens,
            "imported_from": _bench_ref(run),
            "proposals": [
                {
                    "id": p.pk,
                    "url": reverse("proposal-detail", args=[p.pk]),
                    "round": r.index,
                    "status": p.status,
                    "speedup": p.speedup,
                }
                for r in rounds
                for p in r.proposals.all()
            ],
        },
    }
    result = loop_result(run, rounds)
    data["report"] = None if result is None else loop_result_json(result, sources=False, rounds=True)
    if result is None:
        data["rounds"] = [round_json(rec) for r in rounds if (rec := round_record(r)) is not None]
    return data


@require_GET
@login_required
def run_report(request: HttpRequest, pk: int) -> JsonResponse:
    """The run's JSON as a file to keep."""
    run = access.get_run_for_user(request.user, pk)
    return _json_response(run_json(run), filename=f"run-{run.pk}-report.json")


def run_json_response(run: DiagnosisRun) -> JsonResponse:
    return _json_response(run_json(run))


# --- a proposal -----------------------------------------------------------------------------


def proposal_json(proposal: Proposal) -> JSON:
    """A proposal with its sources, findings (`finding_json`), verification (as stored:
    `verification_json`'s layout) and whether it can be accepted."""
    run = proposal.round.run
    verdict = acceptability(proposal)
    findings = list(proposal.findings.order_by("tier", "id"))
    return {
        "id": proposal.pk,
        "url": reverse("proposal-detail", args=[proposal.pk]),
        "run": {"id": run.pk, "url": reverse("run-detail", args=[run.pk])},
        "round": proposal.round.index,
        "kernel": {"id": run.version.kernel_id, "name": run.version.kernel.name},
        "parent_version": _version_ref(proposal.parent_version),
        "result_version": _version_ref(proposal.result_version),
        "status": proposal.status,
        "family": proposal.family,
        "proposer": proposal.proposer,
        "speedup": proposal.speedup,
        "pct_sol": proposal.pct_sol,
        "acceptable": {"ok": verdict.ok, "code": verdict.code, "reason": verdict.reason},
        "failure_reason": proposal.failure_reason,
        "rationale": proposal.rationale,
        "rationale_parts": proposal.rationale_parts or None,
        "findings": [finding_json(f) for f in _finding_records(findings)],
        "finding_ids": [f.pk for f in findings],
        "verification": proposal.verification or None,
        "diff": proposal.diff,
        "parent_source": proposal.parent_source,
        "source": proposal.source,
        "reviews": [
            {
                "reviewer": r.reviewer.get_username(),
                "decision": r.decision,
                "comment": r.comment,
                "at": r.created,
            }
            for r in proposal.reviews.select_related("reviewer")
        ],
    }


def proposal_json_response(proposal: Proposal) -> JsonResponse:
    return _json_response(proposal_json(proposal))
