"""Reviewers' decisions on proposals: accept (new version + pattern) or reject.

Both are atomic and lock the proposal row, so a double submit or two reviewers deciding at
once give exactly one decision; the second is refused with `DecisionRefused`. Only a proposal
verified correct and measured faster than its parent above the noise floor can be accepted
(`acceptability`): the page offers no button for any other, and the accept is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from diagnosis.engine import verdict as policy
from diagnosis.engine.evidence import Finding as EngineFinding
from diagnosis.engine.patterns import PatternSpec, distill_pattern
from diagnosis.engine.proposers.base import unified_diff
from diagnosis.engine.records import CandidateOutcome
from diagnosis.engine.serialize import finding_from_json, verification_from_json
from diagnosis.errors import DecisionRefused
from diagnosis.forms import next_version_number
from diagnosis.models import Kernel, KernelVersion, Pattern, Proposal, Review, Team

# the columns of a Finding row: the finding's stored JSON (diagnosis.engine.serialize)
FINDING_COLUMNS = ("code", "tier", "severity", "family", "message", "args", "lines", "kernel", "gain", "evidence")


@dataclass(frozen=True)
class Accepted:
    review: Review
    version: KernelVersion
    pattern: Pattern
    reused_version: bool = False


@dataclass(frozen=True)
class Acceptability:
    """Whether a proposal may be accepted, and why not. `code` is stable (pages and tests
    read it): verified-faster, not-pending, not-verified, incorrect, suspect, untimed,
    not-faster."""

    code: str
    reason: str

    @property
    def ok(self) -> bool:
        return self.code == "verified-faster"


def timing_verdict(outcome: CandidateOutcome) -> policy.TimingVerdict:
    """The gate's verdict on a recorded outcome: each case against its own noise floor
    (diagnosis.engine.verdict's rules, as the round loop applies them)."""
    noise = outcome.case_noise or (outcome.noise,) * len(outcome.cases)
    decisions = [
        policy.decide_case(p, c.time_ms, max(f or policy.MIN_NOISE_FLOOR, policy.MIN_NOISE_FLOOR), c.sol_ms)
        for c, p, f in zip(outcome.cases, outcome.parent_ms, noise, strict=False)
    ]
    if outcome.suspect:
        return policy.TimingVerdict.SUSPECT
    return policy.overall(outcome.correct, decisions)


def acceptability(proposal: Proposal) -> Acceptability:
    """May `proposal` be accepted? Pending, correct on every case, timed, and faster above
    the noise floor; read from its verification through the one decoder."""
    if proposal.status != Proposal.Status.PENDING:
        return Acceptability("not-pending", f"it is {proposal.get_status_display()}")
    outcome = verification_from_json(proposal.verification)
    if outcome is None:
        return Acceptability("not-verified", "it has not been verified yet")
    if not outcome.correct:
        return Acceptability("incorrect", "it failed verification")
    verdict = timing_verdict(outcome)
    if verdict is policy.TimingVerdict.SUSPECT:
        return Acceptability("suspect", "a case timed below the speed-of-light bound, which a correct kernel cannot do")
    if verdict is policy.TimingVerdict.UNTIMED or not outcome.timed:
        return Acceptability(
            "untimed", "it was checked for correctness only: its speed was not measured on this device"
        )
    if verdict is not policy.TimingVerdict.IMPROVED:
        return Acceptability("not-faster", "it was not measured faster than its parent above the noise floor")
    return Acceptability("verified-faster", "verified correct and measured faster than its parent")


def _lock_pending(proposal: Proposal, reviewer) -> Proposal:
    locked = (
        Proposal.objects.select_for_update(of=("self",))
        .select_related("round__run__version__kernel__team", "parent_version")
        .get(pk=proposal.pk)
    )
    team = locked.round.run.version.kernel.team
    if not team.reviewers.filter(pk=reviewer.pk).exists():
        raise PermissionDenied("Only the team's reviewers decide on its proposals.")
    if locked.status != Proposal.Status.PENDING:
        last = locked.reviews.select_related("reviewer").first()
        if last is not None:
            when = timezone.localtime(last.created).strftime("%Y-%m-%d %H:%M")
            raise DecisionRefused(
                f"Proposal {locked.pk} was already {locked.get_status_display()} by {last.reviewer} "
                f"on {when}; a second decision is refused."
            )
        raise DecisionRefused(
            f"Proposal {locked.pk} is {locked.get_status_display()}; only pending proposals can be decided.",
            "not-pending",
        )
    return locked


def _sync(proposal: Proposal, locked: Proposal) -> None:
    proposal.status = locked.status
    proposal.result_version = locked.result_version


@transaction.atomic
def accept_proposal(proposal: Proposal, reviewer, comment: str = "") -> Accepted:
    """Accept: a new KernelVersion from the proposal's source, a Review, and a team Pattern.
    Refused (DecisionRefused with the acceptability's code) unless verified correct and faster."""
    locked = _lock_pending(proposal, reviewer)
    verdict = acceptability(locked)
    if not verdict.ok:
        raise DecisionRefused(f"Proposal {locked.pk} cannot be accepted: {verdict.reason}.", verdict.code)
    kernel = Kernel.objects.select_for_update().get(pk=locked.round.run.version.kernel_id)
    sha = KernelVersion.digest(locked.source)
    version = KernelVersion.objects.filter(kernel=kernel, sha256=sha).first()
    reused = version is not None
    if version is None:
        parent = locked.parent_version
        version = KernelVersion.objects.create(
            kernel=kernel,
            number=next_version_number(kernel),
            parent=parent,
            source=locked.source,
            sha256=sha,
            filename=parent.filename if parent else "",
            origin=KernelVersion.Origin.PROPOSAL,
            from_proposal=locked,
            created_by=reviewer,
        )
    review = Review.objects.create(
        proposal=locked, reviewer=reviewer, decision=Review.Decision.ACCEPT, comment=comment
    )
    locked.status = Proposal.Status.ACCEPTED
    locked.result_version = version
    locked.save(update_fields=["status", "result_version"])
    pattern = _record_pattern(locked, kernel.team)
    _sync(proposal, locked)
    return Accepted(review, version, pattern, reused)


@transaction.atomic
def reject_proposal(proposal: Proposal, reviewer, comment: str = "") -> Review:
    locked = _lock_pending(proposal, reviewer)
    review = Review.objects.create(
        proposal=locked, reviewer=reviewer, decision=Review.Decision.REJECT, comment=comment
    )
    locked.status = Proposal.Status.REJECTED
    locked.save(update_fields=["status"])
    _sync(proposal, locked)
    return review


def _engine_findings(proposal: Proposal) -> list[EngineFinding]:
    """The proposal's findings as engine records, decoded from their rows' columns. A stored
    code this process does not register (its tier module was never imported by the web, or
    the code was retired since) keeps its stored tier, family and message."""
    return [finding_from_json(row) for row in proposal.findings.values(*FINDING_COLUMNS)]


def _distil(proposal: Proposal) -> PatternSpec:
    return distill_pattern(
        proposal.parent_source,
        proposal.source,
        _engine_findings(proposal),
        gain=proposal.speedup,
        source_proposals=(proposal.pk,),
    )


def _record_pattern(proposal: Proposal, team: Team) -> Pattern:
    spec = _distil(proposal)
    signature = spec.signature_json()
    family = str(spec.family)[:32]
    if any(signature.values()):
        # The same mechanism learnt again: one pattern, several source proposals.
        existing = Pattern.objects.filter(team=team, family=family, signature=signature).first()
        if existing is not None:
            existing.source_proposals.add(proposal)
            return existing
    pattern = Pattern.objects.create(
        team=team,
        family=family,
        mechanism=spec.mechanism or proposal.rationale,
        before=spec.before,
        after=spec.after,
        example_diff=proposal.diff or unified_diff(proposal.parent_source, proposal.source),
        evidence=list(dict.fromkeys(spec.evidence_codes)),
        signature=signature,
    )
    pattern.source_proposals.add(proposal)
    return pattern
