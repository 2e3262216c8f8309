"""History: the kernel list, a kernel's timeline, searchable lists of runs, findings and
proposals, and the team's patterns with how often each fired and was accepted.

Every list is a GET form of filters over one annotated query and a page of it: figures
come from subqueries, never from a query per row, so a page costs the same number of
queries whatever it shows (tests/web/test_history.py counts them). The filter form also
works without JavaScript; with htmx it swaps the results in place and pushes the URL.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, time

from django import forms
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.core.paginator import Page
from django.db.models import Count, Exists, FloatField, IntegerField, Max, OuterRef, QuerySet, Subquery
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Coalesce
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from diagnosis import access
from diagnosis.engine.patterns import PATTERN_MATCH
from diagnosis.engine.verdict import Verdict
from diagnosis.forms import UploadForm
from diagnosis.models import DiagnosisRun, Finding, Kernel, KernelVersion, Pattern, Proposal, Review, Round
from diagnosis.paging import page_of

PAGE_SIZE = 25
SEVERITIES = ("high", "medium", "low", "info")


# --- filters --------------------------------------------------------------------------------


class HistoryFilter(forms.Form):
    """Every filter a history list may offer; each list keeps the fields it applies (`FIELDS`)."""

    q = forms.CharField(required=False, label="Kernel name")
    team = forms.ModelChoiceField(queryset=None, required=False, empty_label="any team")
    kernel = forms.IntegerField(required=False, widget=forms.HiddenInput)
    run = forms.IntegerField(required=False, widget=forms.HiddenInput)
    code = forms.CharField(required=False, label="Finding code")
    tier = forms.TypedChoiceField(
        required=False,
        coerce=int,
        empty_value=None,
        choices=[("", "any tier"), *((str(t), f"tier {t}") for t in range(4))],
    )
    severity = forms.ChoiceField(
        required=False, choices=[("", "any severity"), *((s, s) for s in SEVERITIES)]
    )
    device = forms.ChoiceField(required=False, label="Device kind")
    status = forms.ChoiceField(required=False)
    verdict = forms.ChoiceField(
        required=False,
        label="Round verdict",
        choices=[("", "any verdict"), *((v.value, v.label) for v in Verdict)],
    )
    reviewer = forms.ModelChoiceField(queryset=None, required=False, empty_label="any reviewer")
    since = forms.DateField(required=False, label="From", widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(required=False, label="To", widget=forms.DateInput(attrs={"type": "date"}))

    def __init__(self, data, *, user, fields: tuple[str, ...], statuses: list[tuple[str, str]]) -> None:
        super().__init__(data)
        for name in list(self.fields):
            if name not in fields:
                del self.fields[name]
        teams = access.visible_teams(user)
        if "team" in self.fields:
            self.fields["team"].queryset = teams
        if "reviewer" in self.fields:
            self.fields["reviewer"].queryset = (
                get_user_model().objects.filter(reviewing_teams__in=teams).distinct().order_by("username")
            )
        if "device" in self.fields:
            self.fields["device"].choices = [("", "any device"), *DiagnosisRun.Device.choices]
        if "status" in self.fields:
            self.fields["status"].choices = [("", "any status"), *statuses]

    def value(self, name: str) -> object:
        """The cleaned value of `name`; None when absent, empty or invalid (an invalid filter
        is shown with its error and not applied)."""
        if not self.is_bound or name not in self.fields:
            return None
        self.is_valid()
        value = getattr(self, "cleaned_data", {}).get(name)
        return None if value in ("", None) else value

    @property
    def active(self) -> bool:
        return any(self.value(name) is not None for name in self.fields)


def _day_start(d) -> datetime:
    return timezone.make_aware(datetime.combine(d, time.min))


def _day_end(d) -> datetime:
    return timezone.make_aware(datetime.combine(d, time.max))


def _dates(qs: QuerySet, f: HistoryFilter, field: str) -> QuerySet:
    if (since := f.value("since")) is not None:
        qs = qs.filter(**{f"{field}__gte": _day_start(since)})
    if (until := f.value("until")) is not None:
        qs = qs.filter(**{f"{field}__lte": _day_end(until)})
    return qs


@dataclass
class Listing:
    """What a history page renders: its filter form and one page of rows."""

    form: HistoryFilter
    page: Page


def _page(request: HttpRequest, qs: QuerySet, size: int = PAGE_SIZE) -> Page:
    return page_of(qs, request.GET.get("page"), size)


def _render(request: HttpRequest, template: str, context: dict) -> HttpResponse:
    if request.htmx and request.htmx.target == "results":
        template += "#results"
    return render(request, template, context)


# --- figures of a run, as subqueries --------------------------------------------------------


def _summary_float(key: str) -> Cast:
    return Cast(KT(f"summary__{key}"), FloatField())


def _distinct_codes(run_ref: str) -> Subquery:
    """How many different finding codes the run `run_ref` names (a finding repeated in every
    round counts once)."""
    counted = (
        Finding.objects.filter(run_id=OuterRef(run_ref))
        .order_by()
        .values("run_id")
        .annotate(n=Count("code", distinct=True))
        .values("n")
    )
    return Coalesce(Subquery(counted, output_field=IntegerField()), 0)


# --- kernels --------------------------------------------------------------------------------

KERNEL_FILTERS = ("q", "team", "device", "status", "code", "since", "until")


def kernel_rows(user) -> QuerySet[Kernel]:
    """The kernels `user` sees with their latest run (status, device), the latest finished run's
    speedup over its upload and %SOL, the different findings of the latest run, and how many
    versions each has."""
    runs = DiagnosisRun.objects.filter(version__kernel=OuterRef("pk")).order_by("-created", "-pk")
    done = runs.filter(status=DiagnosisRun.Status.DONE)
    versions = (
        KernelVersion.objects.filter(kernel=OuterRef("pk"))
        .order_by()
        .values("kernel")
        .annotate(n=Count("pk"))
        .values("n")
    )
    return (
        access.visible_kernels(user)
        .select_related("team", "owner")
        .annotate(
            latest_run_id=Subquery(runs.values("pk")[:1]),
            latest_status=Subquery(runs.values("status")[:1]),
            latest_device=Subquery(runs.values("device")[:1]),
            # '' for a run made here; the device a bench run measured it on, for an imported one
            latest_imported_on=Subquery(runs.values("bench_import__device_name")[:1]),
            latest_speedup=Subquery(done.annotate(x=_summary_float("speedup_over_initial")).values("x")[:1]),
            latest_pct_sol=Subquery(done.annotate(x=_summary_float("pct_sol")).values("x")[:1]),
            version_count=Coalesce(Subquery(versions, output_field=IntegerField()), 0),
        )
        .annotate(open_findings=_distinct_codes("latest_run_id"))
        .order_by("-created", "-pk")
    )


@require_GET
@login_required
def kernel_list(request: HttpRequest) -> HttpResponse:
    teams = list(access.visible_teams(request.user))
    form = HistoryFilter(
        request.GET or None, user=request.user, fields=KERNEL_FILTERS, statuses=DiagnosisRun.Status.choices
    )
    kernels = kernel_rows(request.user)
    if q := form.value("q"):
        kernels = kernels.filter(name__icontains=q)
    if team := form.value("team"):
        kernels = kernels.filter(team=team)
    if device := form.value("device"):
        kernels = kernels.filter(
            Exists(DiagnosisRun.objects.filter(version__kernel=OuterRef("pk"), device=device))
        )
    if status := form.value("status"):
        kernels = kernels.filter(latest_status=status)
    if code := form.value("code"):
        kernels = kernels.filter(Exists(Finding.objects.filter(run_id=OuterRef("latest_run_id"), code=code)))
    kernels = _dates(kernels, form, "created")
    return _render(
        request,
        "diagnosis/kernel_list.html",
        {
            "listing": Listing(form, _page(request, kernels)),
            "teams": teams,
            "selected_team": form.value("team"),
        },
    )


# --- a kernel and its timeline --------------------------------------------------------------


@dataclass(frozen=True)
class TimelineEntry:
    version: KernelVersion
    gain: float | None  # what the accepted rewrite measured against its parent
    over_root: float | None  # the product of the gains back to the upload it grew from
    root: int | None  # that upload's number (None: the chain back to it is broken or untimed)


def timeline(versions: list[KernelVersion]) -> list[TimelineEntry]:
    """Versions oldest first: each accepted rewrite with the speedup it was measured to bring
    over its parent, and the product of those back to the upload it grew from (none once a
    link of the chain is missing or was not timed)."""
    entries: dict[int, TimelineEntry] = {}
    for v in sorted(versions, key=lambda v: v.number):
        if v.origin != KernelVersion.Origin.PROPOSAL or v.from_proposal is None:
            entries[v.pk] = TimelineEntry(v, None, 1.0, v.number)
            continue
        gain = v.from_proposal.speedup
        parent = entries.get(v.parent_id) if v.parent_id else None
        if parent is None or parent.over_root is None or gain is None:
            entries[v.pk] = TimelineEntry(v, gain, None, None)
        else:
            entries[v.pk] = TimelineEntry(v, gain, parent.over_root * gain, parent.root)
    return list(entries.values())


KERNEL_RUNS_SHOWN = 10


@require_GET
@login_required
def kernel_detail(request: HttpRequest, pk: int) -> HttpResponse:
    kernel = access.get_kernel_for_user(request.user, pk)
    runs = DiagnosisRun.objects.filter(version=OuterRef("pk")).order_by("-created", "-pk")
    versions = list(
        kernel.versions.select_related("created_by", "parent", "from_proposal").annotate(
            run_count=Coalesce(
                Subquery(
                    DiagnosisRun.objects.filter(version=OuterRef("pk"))
                    .order_by()
                    .values("version")
                    .annotate(n=Count("pk"))
                    .values("n"),
                    output_field=IntegerField(),
                ),
                0,
            ),
            latest_run_id=Subquery(runs.values("pk")[:1]),
            latest_status=Subquery(runs.values("status")[:1]),
        )
    )
    recent_runs = list(
        DiagnosisRun.objects.filter(version__kernel=kernel)
        .select_related("version")
        .order_by("-created", "-pk")[: KERNEL_RUNS_SHOWN + 1]
    )
    proposals = list(
        Proposal.objects.filter(round__run__version__kernel=kernel)
        .select_related("round", "parent_version")
        .order_by("-created", "-pk")[: KERNEL_RUNS_SHOWN + 1]
    )
    return render(
        request,
        "diagnosis/kernel_detail.html",
        {
            "kernel": kernel,
            "timeline": list(reversed(timeline(versions))),
            "runs": recent_runs[:KERNEL_RUNS_SHOWN],
            "more_runs": len(recent_runs) > KERNEL_RUNS_SHOWN,
            "proposals": proposals[:KERNEL_RUNS_SHOWN],
            "more_proposals": len(proposals) > KERNEL_RUNS_SHOWN,
            "form": UploadForm(request.user, kernel=kernel),
            "is_reviewer": access.is_reviewer(request.user, kernel.team),
        },
    )


# --- runs -----------------------------------------------------------------------------------

RUN_FILTERS = (
    "q",
    "team",
    "kernel",
    "device",
    "status",
    "verdict",
    "tier",
    "code",
    "reviewer",
    "since",
    "until",
)


@require_GET
@login_required
def run_list(request: HttpRequest) -> HttpResponse:
    form = HistoryFilter(
        request.GET or None, user=request.user, fields=RUN_FILTERS, statuses=DiagnosisRun.Status.choices
    )
    deepest = (
        Round.objects.filter(run=OuterRef("pk"))
        .order_by()
        .values("run")
        .annotate(t=Max("tier_reached"))
        .values("t")
    )
    proposals = (
        Proposal.objects.filter(round__run=OuterRef("pk"))
        .order_by()
        .values("round__run")
        .annotate(n=Count("pk"))
    )
    runs = (
        access.visible_runs(request.user)
        .select_related("version__kernel__team")
        .annotate(
            deepest_tier=Subquery(deepest, output_field=IntegerField()),
            speedup=_summary_float("speedup_over_initial"),
            pct_sol=_summary_float("pct_sol"),
            finding_codes=_distinct_codes("pk"),
            proposal_count=Coalesce(Subquery(proposals.values("n"), output_field=IntegerField()), 0),
        )
        .order_by("-created", "-pk")
    )
    if q := form.value("q"):
        runs = runs.filter(version__kernel__name__icontains=q)
    if team := form.value("team"):
        runs = runs.filter(version__kernel__team=team)
    if kernel := form.value("kernel"):
        runs = runs.filter(version__kernel_id=kernel)
    if device := form.value("device"):
        runs = runs.filter(device=device)
    if status := form.value("status"):
        runs = runs.filter(status=status)
    if verdict := form.value("verdict"):
        runs = runs.filter(Exists(Round.objects.filter(run=OuterRef("pk"), verdict=verdict)))
    if (tier := form.value("tier")) is not None:
        runs = runs.filter(deepest_tier=tier)
    if code := form.value("code"):
        runs = runs.filter(Exists(Finding.objects.filter(run=OuterRef("pk"), code=code)))
    if reviewer := form.value("reviewer"):
        runs = runs.filter(
            Exists(Review.objects.filter(proposal__round__run=OuterRef("pk"), reviewer=reviewer))
        )
    runs = _dates(runs, form, "created")
    return _render(request, "diagnosis/run_list.html", {"listing": Listing(form, _page(request, runs))})


# --- findings -------------------------------------------------------------------------------

FINDING_FILTERS = (
    "q",
    "team",
    "kernel",
    "code",
    "tier",
    "severity",
    "device",
    "status",
    "verdict",
    "since",
    "until",
)


@require_GET
@login_required
def finding_list(request: HttpRequest) -> HttpResponse:
    form = HistoryFilter(
        request.GET or None, user=request.user, fields=FINDING_FILTERS, statuses=DiagnosisRun.Status.choices
    )
    findings = (
        access.visible_findings(request.user)
        .select_related("run__version__kernel", "round")
        .defer("evidence", "args")
        # newest first by id: a backward scan of the primary key stops after a page, where
        # ordering by the run's date sorted every joined row (1.5 s at 100,000 findings)
        .order_by("-id")
    )
    if q := form.value("q"):
        findings = findings.filter(run__version__kernel__name__icontains=q)
    if team := form.value("team"):
        findings = findings.filter(run__version__kernel__team=team)
    if kernel := form.value("kernel"):
        findings = findings.filter(run__version__kernel_id=kernel)
    if run := form.value("run"):
        findings = findings.filter(run_id=run)
    if code := form.value("code"):
        findings = findings.filter(code=code)
    if (tier := form.value("tier")) is not None:
        findings = findings.filter(tier=tier)
    if severity := form.value("severity"):
        findings = findings.filter(severity=severity)
    if device := form.value("device"):
        findings = findings.filter(run__device=device)
    if status := form.value("status"):
        findings = findings.filter(run__status=status)
    if verdict := form.value("verdict"):
        findings = findings.filter(round__verdict=verdict)
    findings = _dates(findings, form, "run__created")
    return _render(
        request, "diagnosis/finding_list.html", {"listing": Listing(form, _page(request, findings))}
    )


# --- proposals ------------------------------------------------------------------------------

PROPOSAL_FILTERS = (
    "q", "team", "kernel", "status", "code", "tier", "device", "verdict", "reviewer", "since", "until",
)  # fmt: skip


@require_GET
@login_required
def proposal_list(request: HttpRequest) -> HttpResponse:
    form = HistoryFilter(
        request.GET or None, user=request.user, fields=PROPOSAL_FILTERS, statuses=Proposal.Status.choices
    )
    last_review = Review.objects.filter(proposal=OuterRef("pk")).order_by("-created", "-pk")
    proposals = (
        access.visible_proposals(request.user)
        .select_related("round__run__version__kernel", "parent_version", "result_version")
        .defer("source", "parent_source", "diff", "verification")
        .annotate(
            reviewed_by=Subquery(last_review.values("reviewer__username")[:1]),
            reviewed_at=Subquery(last_review.values("created")[:1]),
        )
        .order_by("-created", "-pk")
    )
    if q := form.value("q"):
        proposals = proposals.filter(round__run__version__kernel__name__icontains=q)
    if team := form.value("team"):
        proposals = proposals.filter(round__run__version__kernel__team=team)
    if kernel := form.value("kernel"):
        proposals = proposals.filter(round__run__version__kernel_id=kernel)
    if status := form.value("status"):
        proposals = proposals.filter(status=status)
    if code := form.value("code"):
        proposals = proposals.filter(Exists(Finding.objects.filter(proposals=OuterRef("pk"), code=code)))
    if (tier := form.value("tier")) is not None:
        proposals = proposals.filter(round__tier_reached=tier)
    if device := form.value("device"):
        proposals = proposals.filter(round__run__device=device)
    if verdict := form.value("verdict"):
        proposals = proposals.filter(round__verdict=verdict)
    if reviewer := form.value("reviewer"):
        proposals = proposals.filter(
            Exists(Review.objects.filter(proposal=OuterRef("pk"), reviewer=reviewer))
        )
    proposals = _dates(proposals, form, "created")
    return _render(
        request, "diagnosis/proposal_list.html", {"listing": Listing(form, _page(request, proposals))}
    )


# --- patterns -------------------------------------------------------------------------------


def pattern_rows(team) -> QuerySet[Pattern]:
    """The team's patterns with: the accepted proposals each was learnt from; the runs in
    which tier 0 matched it (a `T0-PATTERN-MATCH` finding of its family on the team's
    kernels); and the proposals accepted on those matches."""
    matches = Finding.objects.filter(
        code=PATTERN_MATCH.code, family=OuterRef("family"), run__version__kernel__team=OuterRef("team")
    )
    fired = matches.order_by().values("code").annotate(n=Count("run", distinct=True)).values("n")
    accepted = (
        Proposal.objects.filter(
            status=Proposal.Status.ACCEPTED,
            findings__code=PATTERN_MATCH.code,
            findings__family=OuterRef("family"),
            round__run__version__kernel__team=OuterRef("team"),
        )
        .order_by()
        .values("status")
        .annotate(n=Count("pk", distinct=True))
        .values("n")
    )
    learnt = (
        Pattern.source_proposals.through.objects.filter(pattern=OuterRef("pk"))
        .order_by()
        .values("pattern")
        .annotate(n=Count("pk"))
        .values("n")
    )
    return (
        team.patterns.annotate(
            learnt_from=Coalesce(Subquery(learnt, output_field=IntegerField()), 0),
            fired=Coalesce(Subquery(fired, output_field=IntegerField()), 0),
            accepted_on_match=Coalesce(Subquery(accepted, output_field=IntegerField()), 0),
        )
        .prefetch_related("source_proposals")
        .order_by("-created", "-pk")
    )


@require_GET
@login_required
def team_patterns(request: HttpRequest, pk: int) -> HttpResponse:
    team = access.get_team_for_user(request.user, pk)
    family = request.GET.get("family", "")
    families = sorted(set(team.patterns.values_list("family", flat=True)))
    patterns = pattern_rows(team)
    if family:
        patterns = patterns.filter(family=family)
    template = "diagnosis/patterns.html"
    if request.htmx and request.htmx.target == "pattern-list":
        template += "#pattern-list"
    return render(
        request,
        template,
        {"team": team, "page": _page(request, patterns, 20), "families": families, "family": family},
    )
