"""Pages: kernels, uploads, runs and their evidence, artefacts, proposals and their review, patterns.

Function views (STYLE.md 7); each page is one template whose htmx fragments are
`{% partialdef %}` blocks, rendered alone when htmx targets them (STYLE.md 8).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import groupby
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import Count, OuterRef, Subquery
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRefresh

from diagnosis import access, evidence, evidence_views
from diagnosis.engine.evidence import ArtefactRef
from diagnosis.engine.records import CandidateOutcome
from diagnosis.engine.serialize import artefact_ref_from_json, verification_from_json
from diagnosis.errors import DecisionRefused
from diagnosis.forms import DecisionForm, UploadForm
from diagnosis.models import Artefact, DiagnosisRun, Proposal, Review
from diagnosis.reviews import accept_proposal, reject_proposal
from diagnosis.templatetags.kernelopt import ARTEFACT_PAGE_LINES

ARTEFACT_TRUNCATE_BYTES = 8 * 1024 * 1024  # beyond this the page shows the first part and a download link


def _fragment(request: HttpRequest, template: str, targets: dict[str, str]) -> str:
    """`template#fragment` when htmx asks for one of `targets` (element id -> partial name)."""
    if request.htmx and request.htmx.target in targets:
        return f"{template}#{targets[request.htmx.target]}"
    return template


# --- kernels -------------------------------------------------------------------------------


@require_GET
@login_required
def kernel_list(request: HttpRequest) -> HttpResponse:
    teams = list(access.visible_teams(request.user))
    latest = DiagnosisRun.objects.filter(version__kernel=OuterRef("pk")).order_by("-created")
    kernels = (
        access.visible_kernels(request.user)
        .select_related("team", "owner")
        .annotate(
            latest_run_id=Subquery(latest.values("pk")[:1]),
            latest_status=Subquery(latest.values("status")[:1]),
            latest_device=Subquery(latest.values("device")[:1]),
            version_count=Count("versions", distinct=True),
        )
        .order_by("-created")
    )
    team_id = request.GET.get("team")
    selected = None
    if team_id and team_id.isdigit():
        selected = next((t for t in teams if t.pk == int(team_id)), None)
        if selected is not None:
            kernels = kernels.filter(team=selected)
    template = _fragment(request, "diagnosis/kernel_list.html", {"kernel-table": "kernel-table"})
    return render(request, template, {"kernels": kernels, "teams": teams, "selected_team": selected})


def _body_too_large(request: HttpRequest) -> HttpResponse | None:
    """Refuse a request body far above the upload limit before Django parses (and spools) it."""
    limit = settings.KERNELOPT_MAX_UPLOAD_BYTES
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    if request.method != "POST" or length <= 2 * limit + 64 * 1024:
        return None
    messages.error(
        request, f"whole file: the upload is too large: {length} bytes, the limit is {limit} bytes"
    )
    return redirect(request.path)


@require_http_methods(["GET", "POST"])
@login_required
def kernel_upload(request: HttpRequest) -> HttpResponse:
    if refused := _body_too_large(request):
        return refused
    form = UploadForm(request.user, request.POST or None, request.FILES or None)
    if request.method == "POST" and form.is_valid():
        outcome = form.save()
        _upload_message(request, outcome)
        return redirect("kernel-detail", outcome.kernel.pk)
    status = 400 if request.method == "POST" else 200
    return render(request, "diagnosis/upload.html", {"form": form}, status=status)


@require_http_methods(["GET", "POST"])
@login_required
def version_upload(request: HttpRequest, pk: int) -> HttpResponse:
    kernel = access.get_kernel_for_user(request.user, pk)
    if refused := _body_too_large(request):
        return refused
    form = UploadForm(request.user, request.POST or None, request.FILES or None, kernel=kernel)
    if request.method == "POST" and form.is_valid():
        outcome = form.save()
        _upload_message(request, outcome)
        return redirect("kernel-detail", kernel.pk)
    status = 400 if request.method == "POST" else 200
    return render(request, "diagnosis/upload.html", {"form": form, "kernel": kernel}, status=status)


def _upload_message(request: HttpRequest, outcome) -> None:
    v, run = outcome.version, outcome.run
    if outcome.reused_version:
        messages.info(
            request,
            f"This source is identical to version {v.number}; that version was reused. "
            f"Run {run.pk} is queued on it ({run.device}, {run.target}).",
        )
    else:
        messages.success(
            request, f"Stored version {v.number}. Run {run.pk} is queued ({run.device}, {run.target})."
        )


@require_GET
@login_required
def kernel_detail(request: HttpRequest, pk: int) -> HttpResponse:
    kernel = access.get_kernel_for_user(request.user, pk)
    versions = kernel.versions.select_related("created_by", "parent").annotate(run_count=Count("runs"))
    runs = DiagnosisRun.objects.filter(version__kernel=kernel).select_related("version").order_by("-created")
    proposals = (
        Proposal.objects.filter(round__run__version__kernel=kernel)
        .select_related("round__run", "parent_version")
        .order_by("-created")[:50]
    )
    form = UploadForm(request.user, kernel=kernel)
    return render(
        request,
        "diagnosis/kernel_detail.html",
        {
            "kernel": kernel,
            "versions": versions,
            "runs": runs,
            "proposals": proposals,
            "form": form,
            "is_reviewer": access.is_reviewer(request.user, kernel.team),
        },
    )


@require_GET
@login_required
def version_detail(request: HttpRequest, pk: int) -> HttpResponse:
    version = access.get_version_for_user(request.user, pk)
    runs = version.runs.order_by("-created")
    return render(
        request, "diagnosis/version_detail.html", {"version": version, "kernel": version.kernel, "runs": runs}
    )


# --- runs ----------------------------------------------------------------------------------


@dataclass
class EvidenceView:
    kind: str
    kernel: str
    name: str
    lines: list[int]
    excerpt: str
    artefact: Artefact | None


@dataclass
class FindingView:
    finding: Any
    evidence: list[EvidenceView]


def _match_artefact(ref: ArtefactRef, by_kind: dict[str, list[Artefact]]) -> Artefact | None:
    candidates = by_kind.get(ref.kind, [])
    name, kernel = ref.name, ref.kernel
    for test in (
        lambda a: name and a.name == name,
        lambda a: name and name in a.name,
        lambda a: kernel and a.name.startswith(kernel),
    ):
        for artefact in candidates:
            if test(artefact):
                return artefact
    return candidates[0] if candidates else None


@require_GET
@login_required
def run_detail(request: HttpRequest, pk: int) -> HttpResponse:
    run = access.get_run_for_user(request.user, pk)
    rounds = list(run.rounds.prefetch_related("proposals").order_by("index"))
    if request.htmx and request.htmx.target == "run-status":
        # A poll that sees the run finish reloads the page, so findings and artefacts appear.
        was = request.GET.get("was")
        if was and was != run.status and run.is_finished:
            return HttpResponseClientRefresh()
        return render(request, "diagnosis/run_detail.html#status", {"run": run, "rounds": rounds})

    # the evidence, profile and artefact sections (diagnosis.evidence_views): artefacts in
    # pipeline order, once per source version
    sections = evidence_views.run_page_context(run)
    artefacts = [a for group in sections["artefact_groups"] for a in group.artefacts]
    by_kind: dict[str, list[Artefact]] = {}
    for a in artefacts:
        by_kind.setdefault(a.kind, []).append(a)
    findings = list(run.findings.select_related("round").order_by("tier", "round__index", "id"))
    tiers = []
    hl_lines: set[int] = set()
    for tier, items in groupby(findings, key=lambda f: f.tier):
        views = []
        for f in items:
            hl_lines.update(n for n in (f.lines or []) if isinstance(n, int))
            refs = [artefact_ref_from_json(ref) for ref in (f.evidence or []) if isinstance(ref, dict)]
            evidence = [
                EvidenceView(ref.kind, ref.kernel, ref.name, list(ref.lines), ref.excerpt, _match_artefact(ref, by_kind))
                for ref in refs
            ]
            views.append(FindingView(f, evidence))
        tiers.append((tier, TIER_NAMES.get(tier, f"tier {tier}"), views))
    proposals = Proposal.objects.filter(round__run=run).select_related("round").order_by("round__index", "id")
    return render(
        request,
        "diagnosis/run_detail.html",
        {
            "run": run,
            "kernel": run.version.kernel,
            "rounds": rounds,
            "tiers": tiers,
            "finding_count": len(findings),
            "hl_lines": sorted(hl_lines),
            "artefacts": artefacts,
            "proposals": proposals,
            **sections,
        },
    )


TIER_NAMES = {
    0: "Tier 0 · pattern triage",
    1: "Tier 1 · profiling",
    2: "Tier 2 · IR attribution",
    3: "Tier 3 · compiler analysis",
}


# --- artefacts -----------------------------------------------------------------------------


@require_GET
@login_required
def artefact_detail(request: HttpRequest, pk: int) -> HttpResponse:
    artefact = access.get_artefact_for_user(request.user, pk)
    text = artefact.text
    truncated = len(text) > ARTEFACT_TRUNCATE_BYTES
    if truncated:
        text = text[:ARTEFACT_TRUNCATE_BYTES]
    lines = text.splitlines()
    pages = max(1, math.ceil(len(lines) / ARTEFACT_PAGE_LINES))
    try:
        page = min(max(1, int(request.GET.get("page", "1"))), pages)
    except ValueError:
        page = 1
    start = (page - 1) * ARTEFACT_PAGE_LINES
    # the page's lines lose server paths (rows stored before runner.persist scrubbed them)
    shown = [
        (start + i + 1, evidence.shown(line, artefact.run))
        for i, line in enumerate(lines[start : start + ARTEFACT_PAGE_LINES])
    ]
    return render(
        request,
        "diagnosis/artefact.html",
        {
            "artefact": artefact,
            "run": artefact.run,
            "lines": shown,
            "line_count": len(lines),
            "page": page,
            "pages": pages,
            "page_range": range(1, pages + 1),
            "truncated": truncated,
            "ratio": artefact.compressed_size / artefact.size if artefact.size else None,
        },
    )


@require_GET
@login_required
def artefact_raw(request: HttpRequest, pk: int) -> HttpResponse:
    artefact = access.get_artefact_for_user(request.user, pk)
    response = HttpResponse(evidence.shown(artefact.text, artefact.run), content_type="text/plain; charset=utf-8")
    filename = "".join(c if c.isalnum() or c in "._-" else "_" for c in artefact.name) or f"artefact-{pk}"
    response["Content-Disposition"] = f'attachment; filename="{filename}.{artefact.kind}.txt"'
    return response


# --- proposals and reviews -----------------------------------------------------------------


@dataclass
class CaseRow:
    label: str
    correct: bool | None
    parent_ms: float | None
    candidate_ms: float | None
    speedup: float | None
    pct_sol: float | None
    autotune_choice: str = ""  # the config @triton.autotune chose for this case
    noise_floor_pct: float | None = None  # the spread of the parent's rounds (what "faster" must beat)
    rounds: str = ""  # every timing round's median, parent then candidate


def _rounds_text(rounds: tuple[tuple[float, ...], tuple[float, ...]] | None) -> str:
    """'0.0349, 0.0351 | 0.0558, 0.0560': the parent's round medians, then the candidate's (ms)."""
    if rounds is None:
        return ""
    candidate, parent = rounds

    def side(values: tuple[float, ...]) -> str:
        return ", ".join(f"{v:.4g}" for v in values) or "–"

    return f"{side(parent)} | {side(candidate)}"


def verification_rows(verification: object) -> tuple[list[CaseRow], dict[str, Any]]:
    """Per-case rows from Proposal.verification (diagnosis.engine.serialize.verification_json),
    and the outcome's own figures as notes."""
    return _rows(verification_from_json(verification))


def _rows(outcome: CandidateOutcome | None) -> tuple[list[CaseRow], dict[str, Any]]:
    """Correctness is decided for the whole proposal, so every row shows the proposal's."""
    if outcome is None:
        return [], {}
    n = len(outcome.cases)
    parents = (list(outcome.parent_ms) + [None] * n)[:n]
    floors = (list(outcome.case_noise) + [None] * n)[:n]
    rounds: list[tuple[tuple[float, ...], tuple[float, ...]] | None] = [*outcome.case_rounds, *[None] * n][:n]
    chosen = dict(outcome.autotune_choices)
    rows = [
        CaseRow(
            label=str(c.index),
            correct=outcome.correct,
            parent_ms=p,
            candidate_ms=c.time_ms,
            speedup=s,
            pct_sol=c.pct_sol,
            autotune_choice="; ".join(chosen.get(f"case {c.index}", ())),
            noise_floor_pct=None if f is None else 100.0 * f,
            rounds=_rounds_text(r),
        )
        for c, p, s, f, r in zip(outcome.cases, parents, outcome.speedups, floors, rounds, strict=True)
    ]
    notes = {
        "correct": outcome.correct,
        "error kind": outcome.error_kind,
        "message": outcome.message,
        "timed": outcome.timed,
        "speedup": outcome.speedup,
        "noise": outcome.noise,
        "suspect": outcome.suspect,
        "wall s": outcome.wall_s,
        "device s": outcome.device_s,
    }
    shown = {k: f"{v:.3g}" if isinstance(v, float) else v for k, v in notes.items() if v is not None and v != ""}
    return rows, shown


def _proposal_context(request: HttpRequest, proposal: Proposal, form: DecisionForm | None = None) -> dict:
    run = proposal.round.run
    team = run.version.kernel.team
    outcome = verification_from_json(proposal.verification)
    rows, notes = _rows(outcome)
    return {
        "proposal": proposal,
        "run": run,
        "kernel": run.version.kernel,
        "findings": proposal.findings.order_by("tier", "id"),
        "cases": rows,
        "autotuned": any(r.autotune_choice for r in rows),
        "has_rounds": any(r.rounds for r in rows),
        "has_floors": any(r.noise_floor_pct is not None for r in rows),
        "verification_notes": notes,
        # a verification recorded with no case timed (cpu): checked for correctness only
        "checked_only": outcome is not None and not outcome.timed,
        "reviews": proposal.reviews.select_related("reviewer"),
        "can_decide": access.is_reviewer(request.user, team) and proposal.status == Proposal.Status.PENDING,
        "is_reviewer": access.is_reviewer(request.user, team),
        "form": form or DecisionForm(),
    }


@require_GET
@login_required
def proposal_detail(request: HttpRequest, pk: int) -> HttpResponse:
    proposal = access.get_proposal_for_user(request.user, pk)
    return render(request, "diagnosis/proposal.html", _proposal_context(request, proposal))


@require_POST
@login_required
def proposal_decide(request: HttpRequest, pk: int) -> HttpResponse:
    proposal = access.get_proposal_for_reviewer(request.user, pk)
    form = DecisionForm(request.POST)
    if not form.is_valid():
        context = _proposal_context(request, proposal, form)
        return render(request, "diagnosis/proposal.html", context, status=400)
    comment = form.cleaned_data["comment"]
    try:
        if form.cleaned_data["decision"] == Review.Decision.ACCEPT:
            accepted = accept_proposal(proposal, request.user, comment)
            note = " (the same source already existed as that version)" if accepted.reused_version else ""
            messages.success(
                request,
                f"Accepted proposal {proposal.pk}: it is now version {accepted.version.number}{note}"
                + (
                    f"; pattern “{accepted.pattern.family}” recorded for {proposal.round.run.version.kernel.team}."
                    if accepted.pattern
                    else "."
                ),
            )
        else:
            reject_proposal(proposal, request.user, comment)
            messages.success(request, f"Rejected proposal {proposal.pk}.")
    except DecisionRefused as exc:
        messages.error(request, exc.message)
    return redirect("proposal-detail", proposal.pk)


@require_GET
@login_required
def review_queue(request: HttpRequest) -> HttpResponse:
    teams = access.reviewing_teams(request.user)
    pending = (
        Proposal.objects.filter(status=Proposal.Status.PENDING, round__run__version__kernel__team__in=teams)
        .select_related("round__run__version__kernel__team", "parent_version")
        .order_by("created")
    )
    recent = (
        Review.objects.filter(proposal__round__run__version__kernel__team__in=teams)
        .select_related("proposal__round__run__version__kernel", "reviewer")
        .order_by("-created")[:20]
    )
    return render(
        request,
        "diagnosis/review_queue.html",
        {"pending": pending, "recent": recent, "is_reviewer": teams.exists()},
    )


# --- teams and patterns --------------------------------------------------------------------


@require_GET
@login_required
def team_list(request: HttpRequest) -> HttpResponse:
    teams = access.visible_teams(request.user).annotate(
        kernel_count=Count("kernels", distinct=True), pattern_count=Count("patterns", distinct=True)
    )
    reviewing = set(access.reviewing_teams(request.user).values_list("pk", flat=True))
    return render(request, "diagnosis/team_list.html", {"teams": teams, "reviewing": reviewing})


@require_GET
@login_required
def team_patterns(request: HttpRequest, pk: int) -> HttpResponse:
    team = access.get_team_for_user(request.user, pk)
    family = request.GET.get("family", "")
    patterns = team.patterns.annotate(proposal_count=Count("source_proposals")).prefetch_related(
        "source_proposals"
    )
    families = sorted(set(team.patterns.values_list("family", flat=True)))
    if family:
        patterns = patterns.filter(family=family)
    template = _fragment(request, "diagnosis/patterns.html", {"pattern-list": "pattern-list"})
    return render(
        request, template, {"team": team, "patterns": patterns, "families": families, "family": family}
    )
