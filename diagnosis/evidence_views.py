"""The evidence pages of a run: the annotated source with each line's compiled code, the
passes as diffs, and the profile with its roofline.

Function views (STYLE.md 7), one template per page whose htmx fragments are partialdef blocks
(STYLE.md 8): a line's panel and a pass's diff load in place under htmx and as a whole page
without JavaScript (`?line=N#LN`, `?pass=I`). Visible to the run's team only (diagnosis.access).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import urlencode
from django.utils.safestring import SafeString
from django.views.decorators.http import require_GET

from diagnosis import access, evidence
from diagnosis.engine import irmap
from diagnosis.models import Artefact, DiagnosisRun
from diagnosis.templatetags.evidence import highlight_lines


def _int(value: str | None) -> int | None:
    return int(value) if value and value.isdigit() else None


def _version(
    run: DiagnosisRun, request: HttpRequest
) -> tuple[list[evidence.SourceVersion], evidence.SourceVersion]:
    versions = evidence.run_versions(run)
    version = evidence.pick_version(versions, request.GET.get("version"))
    if version is None:
        raise Http404("No such version in this run")
    return versions, version


def _url(
    name: str, run: DiagnosisRun, version: evidence.SourceVersion, default: evidence.SourceVersion, **params
) -> str:
    """A page of this run; the upload's version needs no `version=` (the review page links so)."""
    query = {"version": version.key} if version.key != default.key else {}
    query.update({k: v for k, v in params.items() if v is not None and v != ""})
    base = reverse(name, args=[run.pk])
    return f"{base}?{urlencode(query)}" if query else base


# --- the annotated source and a line's panel -------------------------------------------------


@dataclass
class SourceLine:
    number: int
    html: SafeString
    chips: list[irmap.Chip] = field(default_factory=list)
    findings: list[evidence.FindingRef] = field(default_factory=list)
    compiled: bool = False  # some stage has code from this line
    url: str = ""  # the page with this line's panel open

    @property
    def has_panel(self) -> bool:
        return self.compiled or bool(self.findings)


@dataclass
class KernelPanel:
    kernel: evidence.KernelStages
    stages: list[evidence.PanelStage]


@dataclass
class LinePanel:
    line: SourceLine
    kernels: list[KernelPanel]


@require_GET
@login_required
def run_evidence(request: HttpRequest, pk: int) -> HttpResponse:
    run = access.get_run_for_user(request.user, pk)
    versions, version = _version(run, request)
    kernels = evidence.version_kernels(run, version)
    refs = evidence.version_findings(run, version)
    by_line = evidence.findings_by_line(refs)
    default = versions[0]
    lines = []
    for n, html in enumerate(highlight_lines(version.source), 1):
        row = SourceLine(n, html, findings=by_line.get(n, []))
        for k in kernels:
            row.chips.extend(k.chips.get(n, ()))
            row.compiled = row.compiled or any(n in m.by_source for m in k.maps.values())
        row.url = _url("run-evidence", run, version, default, line=n) + f"#L{n}"
        lines.append(row)
    selected = _int(request.GET.get("line"))
    panel = None
    if selected is not None and 1 <= selected <= len(lines):
        row = lines[selected - 1]
        panel = LinePanel(
            row,
            [
                KernelPanel(k, stages)
                for k in kernels
                if (stages := evidence.panel_stages(k, selected, evidence.cited_lines(row.findings, k.name)))
            ],
        )
    context = {
        "run": run,
        "kernel": run.version.kernel,
        "versions": versions,
        "version": version,
        "lines": lines,
        "kernels": kernels,
        "findings": refs,
        "panel": panel,
        "selected": selected,
        "module_name": evidence.module_name(run),
        "passes_url": _url("run-passes", run, version, default),
        "profile_url": _url("run-profile", run, version, default),
        "version_urls": [(v, _url("run-evidence", run, v, default)) for v in versions],
    }
    if request.htmx and request.htmx.target == "line-panel":
        return render(request, "diagnosis/evidence.html#line-panel", context)
    return render(request, "diagnosis/evidence.html", context)


# --- the passes as diffs ---------------------------------------------------------------------


@dataclass(frozen=True)
class PassStep:
    index: int
    name: str
    artefact_id: int
    url: str


@require_GET
@login_required
def run_passes(request: HttpRequest, pk: int) -> HttpResponse:
    run = access.get_run_for_user(request.user, pk)
    versions, version = _version(run, request)
    default = versions[0]
    dumps = list(
        run.artefacts.filter(source_sha256__in=evidence._shas(run, version), kind=Artefact.Kind.PASS_DUMP)
        .defer("data")
        .order_by("id")
    )
    by_kernel: dict[str, dict[int, Artefact]] = {}
    for a in dumps:
        for index, _ in irmap.pass_steps([a.name]):
            by_kernel.setdefault(evidence.kernel_of(a), {}).setdefault(index, a)
    names = sorted(by_kernel)
    kernel = request.GET.get("kernel") or (names[0] if names else "")
    if names and kernel not in by_kernel:
        raise Http404("No such kernel in this version")
    rows = by_kernel.get(kernel, {})
    steps = [
        PassStep(
            i,
            irmap.pass_steps([a.name])[0][1],
            a.pk,
            _url(
                "run-passes", run, version, default, kernel=kernel if len(names) > 1 else None, **{"pass": i}
            ),
        )
        for i, a in sorted(rows.items())
    ]
    changed = [s for s in steps if s.name != "(input)"]
    wanted = _int(request.GET.get("pass"))
    current = next((s for s in changed if s.index == wanted), None) if wanted is not None else None
    if wanted is not None and current is None:
        raise Http404("No such pass dump")
    current = current or (changed[0] if changed else None)
    diff = delta = None
    before = previous = following = None
    if current is not None:
        at = steps.index(current)
        before = steps[at - 1] if at > 0 else None
        k = changed.index(current)
        previous = changed[k - 1] if k > 0 else None
        following = changed[k + 1] if k + 1 < len(changed) else None
        texts = {
            a.pk: a.text
            for a in Artefact.objects.filter(pk__in=[s.artefact_id for s in (before, current) if s])
        }
        old = texts.get(before.artefact_id, "") if before else ""
        # the rows shown are scrubbed (rows stored before paths were), not the whole dumps
        diff = [
            replace(r, text=evidence.shown(r.text, run))
            for r in irmap.ir_diff(old, texts[current.artefact_id])
        ]
        delta = irmap.op_delta(old, texts[current.artefact_id])
    context = {
        "run": run,
        "kernel": run.version.kernel,
        "versions": versions,
        "version": version,
        "version_urls": [(v, _url("run-passes", run, v, default)) for v in versions],
        "kernel_name": kernel,
        "kernel_urls": [(n, _url("run-passes", run, version, default, kernel=n)) for n in names],
        "steps": changed,
        "current": current,
        "before": before,
        "previous": previous,
        "following": following,
        "diff": diff,
        "delta": delta,
        "evidence_url": _url("run-evidence", run, version, default),
    }
    if request.htmx and request.htmx.target == "passes":
        return render(request, "diagnosis/passes.html#passes", context)
    return render(request, "diagnosis/passes.html", context)


# --- the profile and its roofline ------------------------------------------------------------


@require_GET
@login_required
def run_profile(request: HttpRequest, pk: int) -> HttpResponse:
    run = access.get_run_for_user(request.user, pk)
    versions, version = _version(run, request)
    default = versions[0]
    profile = evidence.version_profile(run, version, request.GET.get("proposal"))
    context = {
        "run": run,
        "kernel": run.version.kernel,
        "versions": versions,
        "version": version,
        "version_urls": [(v, _url("run-profile", run, v, default)) for v in versions],
        "profile": profile,
        "candidate_urls": [
            (p, _url("run-profile", run, version, default, proposal=p.pk))
            for p in (profile.candidates if profile else [])
        ],
        "evidence_url": _url("run-evidence", run, version, default),
    }
    return render(request, "diagnosis/profile.html", context)


# --- the run page's sections (diagnosis.views.run_detail) -----------------------------------


def run_page_context(run: DiagnosisRun) -> dict[str, object]:
    """What the run page's evidence, profile and artefact sections show."""
    versions = evidence.run_versions(run)
    default = versions[0] if versions else None
    links = [
        {
            "version": v,
            "evidence": _url("run-evidence", run, v, default),
            "passes": _url("run-passes", run, v, default),
            "profile": _url("run-profile", run, v, default),
        }
        for v in versions
    ]
    profile = evidence.version_profile(run, default) if default else None
    groups = evidence.run_artefacts(run, versions)
    return {
        # a run that has diagnosed nothing yet (queued, or failed before its first round) has
        # nothing to show there
        "evidence_links": links if groups or any(v.rounds for v in versions) else [],
        "artefact_groups": groups,
        "run_profile": profile,
        "module_name": evidence.module_name(run),
    }
