"""Pages: uploads, a version, runs and their evidence, artefacts, teams.

The kernel list and history are in `diagnosis.history_views`, the code review in
`diagnosis.review_views`, downloads and JSON in `diagnosis.api`.
Function views (STYLE.md 7); each page is one template whose htmx fragments are
`{% partialdef %}` blocks, rendered alone when htmx targets them (STYLE.md 8).
"""

from __future__ import annotations

import math

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import HttpResponseClientRefresh

from diagnosis import access, api, evidence, evidence_views, run_states
from diagnosis.forms import RunForm, UploadForm
from diagnosis.models import DiagnosisRun, Proposal
from diagnosis.templatetags.kernelopt import ARTEFACT_PAGE_LINES
from runner import workers

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
        {
            "version": version,
            "kernel": version.kernel,
            "runs": runs,
            "run_form": RunForm(request.user, prefix="run"),
        },
    )


# --- runs ----------------------------------------------------------------------------------


def _status_context(run: DiagnosisRun, rounds: list) -> dict:
    """What the status fragment (also polled alone) shows: the state in words, the rounds in
    words with the idle ones folded, and whether any worker serves the run's device kind."""
    absence = workers.presence().absence(run.device) if run.status == DiagnosisRun.Status.QUEUED else ""
    return {
        "run": run,
        "rounds": rounds,
        "round_groups": run_states.round_groups(rounds),
        "state": run_states.run_status(run, rounds, absence),
    }


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
        return render(request, "diagnosis/run_detail.html#status", _status_context(run, rounds))

    # the evidence, profile and artefact sections (diagnosis.evidence_views): artefacts in
    # pipeline order, once per source version; the findings' evidence links point at them
    sections = evidence_views.run_page_context(run)
    artefacts = [a for group in sections["artefact_groups"] for a in group.artefacts]
    findings = list(run.findings.select_related("round").order_by("tier", "round__index", "id"))
    tiers = run_states.finding_tiers(findings, artefacts)
    hl_lines = sorted({n for f in findings for n in (f.lines or []) if isinstance(n, int)})
    proposals = Proposal.objects.filter(round__run=run).select_related("round").order_by("round__index", "id")
    return render(
        request,
        "diagnosis/run_detail.html",
        {
            **_status_context(run, rounds),
            "kernel": run.version.kernel,
            "tiers": tiers,
            "finding_count": sum(len(items) for _, _, items in tiers),
            "finding_rows": len(findings),
            "hl_lines": hl_lines,
            "artefacts": artefacts,
            "proposals": proposals,
            **sections,
        },
    )


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
