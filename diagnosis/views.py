"""Pages: uploads, a version, runs and their evidence, artefacts, teams.

The kernel list and history are in `diagnosis.history_views`, the code review in
`diagnosis.review_views`, downloads and JSON in `diagnosis.api`.
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
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import HttpResponseClientRefresh

from diagnosis import access, api, evidence, evidence_views
from diagnosis.engine.evidence import ArtefactRef
from diagnosis.engine.serialize import artefact_ref_from_json
from diagnosis.forms import RunForm, UploadForm
from diagnosis.models import Artefact, Proposal
from diagnosis.templatetags.kernelopt import ARTEFACT_PAGE_LINES

ARTEFACT_TRUNCATE_BYTES = 8 * 1024 * 1024  # beyond this the page shows the first part and a download link


def _fragment(request: HttpRequest, template: str, targets: dict[str, str]) -> str:
    """`template#fragment` when htmx asks for one of `targets` (element id -> partial name)."""
    if request.htmx and request.htmx.target in targets:
        return f"{template}#{targets[request.htmx.target]}"
    return template


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
def version_detail(request: HttpRequest, pk: int) -> HttpResponse:
    version = access.get_version_for_user(request.user, pk)
    runs = version.runs.order_by("-created")
    return render(
        request,
        "diagnosis/version_detail.html",
        {"version": version, "kernel": version.kernel, "runs": runs, "run_form": RunForm(request.user, prefix="run")},
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
@vary_on_headers("Accept")
def run_detail(request: HttpRequest, pk: int) -> HttpResponse:
    run = access.get_run_for_user(request.user, pk)
    if api.wants_json(request):
        return api.run_json_response(run)
    rounds = list(run.rounds.prefetch_related("proposals", "proposals__findings").order_by("index"))
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


# --- teams and patterns --------------------------------------------------------------------


@require_GET
@login_required
def team_list(request: HttpRequest) -> HttpResponse:
    teams = access.visible_teams(request.user).annotate(
        kernel_count=Count("kernels", distinct=True), pattern_count=Count("patterns", distinct=True)
    )
    reviewing = set(access.reviewing_teams(request.user).values_list("pk", flat=True))
    return render(request, "diagnosis/team_list.html", {"teams": teams, "reviewing": reviewing})
