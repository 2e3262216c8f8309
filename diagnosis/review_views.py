"""The code review: a proposal's page (diff, rationale, verification), the decision on it in
place, the review queue, and "run this version".

Function views (STYLE.md 7). The proposal page is one template; its `diff` and `decision`
fragments are rendered alone when htmx asks for them (STYLE.md 8), and every htmx action
is also a plain link or form that works without JavaScript.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers

from diagnosis import access, api
from diagnosis.engine import verdict as policy
from diagnosis.engine.records import CandidateOutcome
from diagnosis.engine.serialize import rationale_from_json, verification_from_json
from diagnosis.errors import DecisionRefused
from diagnosis.forms import DecisionForm, RunForm
from diagnosis.models import DiagnosisRun, Proposal, Review
from diagnosis.paging import page_of
from diagnosis.reviews import Acceptability, accept_proposal, acceptability, reject_proposal, timing_verdict
from diagnosis.templatetags.kernelopt import ms_unit, percent, speedup_words

DIFF_VIEWS = ("split", "unified")
QUEUE_PAGE_SIZE = 50


# --- the verification, in words -------------------------------------------------------------


@dataclass(frozen=True)
class CaseRow:
    label: str
    correctness: str  # "correct", "wrong", "not checked"
    parent: str  # "0.020 ms", "not timed"
    candidate: str
    change: str  # "2.31x faster", "within the noise floor (1.01x)", "not timed on this device"
    change_class: str  # faster, slower, same, untimed
    pct_sol: str  # "61.5 %", "–"
    noise_floor: str
    rounds: str = ""  # every timing round's median, parent then candidate
    autotune_choice: str = ""  # the config @triton.autotune chose for this case


@dataclass(frozen=True)
class Verification:
    rows: list[CaseRow]
    facts: list[tuple[str, str]]  # (what, in words)
    measured: str  # one sentence: the rationale's "measured"
    has_rounds: bool
    has_floors: bool
    autotuned: bool
    timed: bool


def _rounds_text(rounds: tuple[tuple[float, ...], tuple[float, ...]] | None) -> str:
    """'0.0349, 0.0351 | 0.0558, 0.0560': the parent's round medians, then the candidate's (ms)."""
    if rounds is None:
        return ""
    candidate, parent = rounds

    def side(values: tuple[float, ...]) -> str:
        return ", ".join(f"{v:.4g}" for v in values) or "–"

    return f"{side(parent)} | {side(candidate)}"


def _change(decision: policy.CaseDecision) -> tuple[str, str]:
    if decision.speedup is None:
        return "not timed on this device", "untimed"
    if decision.suspect:
        return f"suspect: below the speed-of-light bound ({decision.speedup:.2f}x)", "slower"
    if decision.faster:
        return speedup_words(decision.speedup), "faster"
    if decision.slower:
        return speedup_words(decision.speedup), "slower"
    return f"within the noise floor ({decision.speedup:.2f}x)", "same"


def verification_view(outcome: CandidateOutcome | None) -> Verification:
    """The verification table's rows and facts, every state and figure in words with its unit."""
    if outcome is None:
        return Verification([], [], "Not verified yet.", False, False, False, False)
    n = len(outcome.cases)
    parents = (list(outcome.parent_ms) + [None] * n)[:n]
    floors = (list(outcome.case_noise) + [None] * n)[:n]
    rounds = [*outcome.case_rounds, *[None] * n][:n]
    chosen = dict(outcome.autotune_choices)
    correctness = "correct" if outcome.correct else "wrong"
    rows = []
    for c, p, f, r in zip(outcome.cases, parents, floors, rounds, strict=True):
        floor = max(f or outcome.noise or policy.MIN_NOISE_FLOOR, policy.MIN_NOISE_FLOOR)
        change, css = _change(policy.decide_case(p, c.time_ms, floor, c.sol_ms))
        rows.append(
            CaseRow(
                label=f"case {c.index}",
                correctness=correctness,
                parent=ms_unit(p),
                candidate=ms_unit(c.time_ms),
                change=change,
                change_class=css,
                pct_sol=percent(c.pct_sol),
                noise_floor=percent(None if f is None else 100.0 * f),
                rounds=_rounds_text(r),
                autotune_choice="; ".join(chosen.get(f"case {c.index}", ())),
            )
        )
    facts = [
        (
            "Correctness",
            "correct on every timed case and verify input"
            if outcome.correct
            else f"wrong: {outcome.error_kind or 'failed'}"
            + (f": {outcome.message}" if outcome.message else ""),
        ),
        # what the gate checked beyond the tolerance table: derived cases, a float64 judgement
        *(("Gate", note) for note in outcome.gate_notes),
        (
            "Timing",
            "timed against its parent in the same process" if outcome.timed else "not timed on this device",
        ),
    ]
    if outcome.timed:
        facts.append(
            ("Speedup", f"{speedup_words(outcome.speedup)} (geomean over {n} case{'s' if n != 1 else ''})")
        )
    if outcome.noise is not None:
        facts.append(("Noise floor", percent(100.0 * outcome.noise)))
    facts.append(
        (
            "Speed-of-light check",
            "suspect: a case ran below the speed-of-light bound"
            if outcome.suspect
            else "no case below the bound",
        )
    )
    if outcome.wall_s or outcome.device_s:
        # device time only where a device was used (a cpu check spends none)
        on_device = f", {outcome.device_s:.1f} s on the device" if outcome.device_s else ""
        facts.append(("Cost", f"{outcome.wall_s:.1f} s wall{on_device}"))
    return Verification(
        rows=rows,
        facts=facts,
        measured=_measured(outcome),
        has_rounds=any(r.rounds for r in rows),
        has_floors=any(f is not None for f in floors),
        autotuned=any(r.autotune_choice for r in rows),
        timed=outcome.timed,
    )


def _measured(outcome: CandidateOutcome) -> str:
    if not outcome.correct:
        return f"Failed verification ({outcome.error_kind or 'failed'})."
    verdict = timing_verdict(outcome)
    if verdict is policy.TimingVerdict.SUSPECT:
        return "Correct, but a case ran below the speed-of-light bound: the timing is suspect."
    if not outcome.timed:
        return "Correct; speed not measured on this device."
    n = len(outcome.cases)
    basis = f"geomean of {n} case{'s' if n != 1 else ''}"
    if outcome.noise is not None:
        basis += f"; noise floor {percent(100.0 * outcome.noise)}"
    if verdict in (policy.TimingVerdict.IMPROVED, policy.TimingVerdict.SLOWER):
        return f"Correct; {speedup_words(outcome.speedup)} than its parent ({basis})."
    return f"Correct; within the noise floor of its parent ({(outcome.speedup or 1.0):.2f}x; {basis})."


# --- the proposal page ----------------------------------------------------------------------


def _diff_view(request: HttpRequest) -> str:
    view = request.GET.get("view", "split")
    return view if view in DIFF_VIEWS else "split"


def _proposal_context(
    request: HttpRequest,
    proposal: Proposal,
    form: DecisionForm | None = None,
    notice: tuple[str, str, str] | None = None,
) -> dict:
    run = proposal.round.run
    kernel = run.version.kernel
    reviewer = access.is_reviewer(request.user, kernel.team)
    verdict: Acceptability = acceptability(proposal)
    outcome = verification_from_json(proposal.verification)
    return {
        "proposal": proposal,
        "run": run,
        "kernel": kernel,
        "findings": list(proposal.findings.order_by("tier", "id")),
        "parts": rationale_from_json(proposal.rationale_parts),
        "verification": verification_view(outcome),
        "acceptability": verdict,
        "reviews": list(proposal.reviews.select_related("reviewer")),
        "is_reviewer": reviewer,
        "can_decide": reviewer and proposal.status == Proposal.Status.PENDING,
        "can_accept": reviewer and verdict.ok,
        "form": form or DecisionForm(),
        "notice": notice,  # (level, text, code) shown in the decision fragment
        "diff_view": _diff_view(request),
        "run_form": RunForm(request.user, prefix="run") if proposal.result_version else None,
    }


@require_GET
@login_required
@vary_on_headers("Accept")
def proposal_detail(request: HttpRequest, pk: int) -> HttpResponse:
    proposal = access.get_proposal_for_user(request.user, pk)
    if api.wants_json(request):
        return api.proposal_json_response(proposal)
    template = "diagnosis/proposal.html"
    if request.htmx and request.htmx.target == "diff":
        template += "#diff"
    return render(request, template, _proposal_context(request, proposal))


@require_POST
@login_required
def proposal_decide(request: HttpRequest, pk: int) -> HttpResponse:
    """Accept or reject. With htmx the decided fragment comes back in place (the status badge
    too, out of band); without, a redirect to the page with the outcome as a message."""
    proposal = access.get_proposal_for_reviewer(request.user, pk)
    form = DecisionForm(request.POST)
    if not form.is_valid():
        context = _proposal_context(request, proposal, form)
        if request.htmx:  # htmx swaps only 2xx answers: the errors must come back as one
            return render(request, "diagnosis/proposal.html#decision", context)
        return render(request, "diagnosis/proposal.html", context, status=400)
    comment = form.cleaned_data["comment"]
    try:
        if form.cleaned_data["decision"] == Review.Decision.ACCEPT:
            accepted = accept_proposal(proposal, request.user, comment)
            note = " (the same source already existed as that version)" if accepted.reused_version else ""
            team = proposal.round.run.version.kernel.team
            notice = (
                "success",
                f"Accepted proposal {proposal.pk}: it is now version {accepted.version.number}{note}"
                + (
                    f"; pattern “{accepted.pattern.family}” recorded for {team}." if accepted.pattern else "."
                ),
                "accepted",
            )
        else:
            reject_proposal(proposal, request.user, comment)
            notice = ("success", f"Rejected proposal {proposal.pk}.", "rejected")
    except DecisionRefused as exc:
        notice = ("error", exc.message, exc.code)
    if request.htmx:
        proposal = access.get_proposal_for_user(request.user, pk)  # the decided row, freshly
        context = _proposal_context(request, proposal, notice=notice)
        context["oob_status"] = True
        return render(request, "diagnosis/proposal.html#decision", context)
    level, text, code = notice
    (messages.success if level == "success" else messages.error)(request, text, extra_tags=code)
    return redirect("proposal-detail", proposal.pk)


# --- run this version -----------------------------------------------------------------------


@require_POST
@login_required
def version_run(request: HttpRequest, pk: int) -> HttpResponse:
    """Queue a run of any version, as an upload does (device, target, round budget), and send it."""
    version = access.get_version_for_user(request.user, pk)
    form = RunForm(request.user, request.POST, prefix="run")
    if not form.is_valid():
        errors = "; ".join(f"{form.fields[f].label or f}: {', '.join(e)}" for f, e in form.errors.items())
        messages.error(request, f"No run queued: {errors}", extra_tags="run-refused")
        return redirect("version-detail", version.pk)
    run = form.queue(version)
    messages.success(
        request,
        f"Run {run.pk} is queued on {version.kernel.name} v{version.number} ({run.device}, {run.target}).",
        extra_tags="run-queued",
    )
    return redirect("run-detail", run.pk)


# --- the review queue -----------------------------------------------------------------------


@require_GET
@login_required
def review_queue(request: HttpRequest) -> HttpResponse:
    teams = list(access.reviewing_teams(request.user))
    pending = (
        Proposal.objects.filter(
            status=Proposal.Status.PENDING,
            round__run__in=DiagnosisRun.objects.filter(version__kernel__team__in=teams).values("pk"),
        )
        .select_related("round__run__version__kernel__team", "parent_version")
        .order_by("created", "pk")
    )
    page = page_of(pending, request.GET.get("page"), QUEUE_PAGE_SIZE)
    rows = [(p, acceptability(p)) for p in page.object_list]
    recent = (
        Review.objects.filter(proposal__round__run__version__kernel__team__in=teams)
        .select_related("proposal__round__run__version__kernel", "reviewer")
        .order_by("-created")[:20]
    )
    return render(
        request,
        "diagnosis/review_queue.html",
        {"page": page, "rows": rows, "recent": recent, "is_reviewer": bool(teams)},
    )
