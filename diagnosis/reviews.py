"""Reviewers' decisions on proposals: accept (new version + pattern) or reject.

Both are atomic and lock the proposal row, so a double submit or two reviewers deciding at
once give exactly one decision; the second is refused with `DecisionRefused`.
"""

from __future__ import annotations

import difflib
import logging
from dataclasses import dataclass, field

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from diagnosis.forms import next_version_number
from diagnosis.models import Finding, Kernel, KernelVersion, Pattern, Proposal, Review, Team

logger = logging.getLogger(__name__)


class DecisionRefused(Exception):
    """The proposal is not pending (already decided, or it failed verification)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class Accepted:
    review: Review
    version: KernelVersion
    pattern: Pattern | None
    reused_version: bool = False


@dataclass(frozen=True)
class _Spec:
    """The fallback pattern when diagnosis.engine.patterns is not there."""

    family: str
    mechanism: str
    before: str
    after: str
    evidence_codes: list[str] = field(default_factory=list)
    signature: dict = field(default_factory=dict)


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
            f"Proposal {locked.pk} is {locked.get_status_display()}; only pending proposals can be decided."
        )
    return locked


def _sync(proposal: Proposal, locked: Proposal) -> None:
    proposal.status = locked.status
    proposal.result_version = locked.result_version


@transaction.atomic
def accept_proposal(proposal: Proposal, reviewer, comment: str = "") -> Accepted:
    """Accept: a new KernelVersion from the proposal's source, a Review, and a team Pattern."""
    locked = _lock_pending(proposal, reviewer)
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


def _engine_findings(rows: list[Finding]) -> list:
    """The proposal's findings as engine records (diagnosis.engine.evidence.Finding).

    A stored code may not be registered in this process (its tier module was never imported
    by the web, or the code was retired since); such findings keep their stored tier, family
    and message instead of failing the decision.
    """
    from diagnosis.engine.evidence import ArtefactRef, CodeInfo, Family, Severity, Tier, code_info
    from diagnosis.engine.evidence import Finding as EngineFinding

    @dataclass(frozen=True)
    class StoredFinding(EngineFinding):
        stored_tier: int = 0
        stored_message: str = ""

        @property
        def info(self) -> CodeInfo:
            try:
                return code_info(self.code)
            except KeyError:
                template = self.stored_message.replace("{", "{{").replace("}", "}}")
                try:
                    tier = Tier(self.stored_tier)
                except ValueError:
                    tier = Tier.TRIAGE
                return CodeInfo(self.code, tier, self.family_override or Family.NONE, template)

    out = []
    for row in rows:
        try:
            severity = Severity(row.severity)
        except ValueError:
            severity = Severity.INFO
        try:
            family = Family(row.family) if row.family else None
        except ValueError:
            family = None
        refs = tuple(
            ArtefactRef(
                kind=str(ref.get("kind", "")),
                kernel=str(ref.get("kernel", "")),
                lines=tuple(ref.get("lines") or ()),
                excerpt=str(ref.get("excerpt", "")),
                name=str(ref.get("name", "")),
            )
            for ref in (row.evidence or [])
            if isinstance(ref, dict)
        )
        out.append(
            StoredFinding(
                code=row.code,
                severity=severity,
                args=dict(row.args or {}),
                lines=tuple(row.lines or ()),
                kernel=row.kernel,
                evidence=refs,
                gain=row.gain,
                family_override=family,
                stored_tier=row.tier,
                stored_message=row.message,
            )
        )
    return out


def changed_lines(before: str, after: str) -> tuple[str, str]:
    """The removed and the added lines of a rewrite, without context."""
    removed, added = [], []
    diff = difflib.unified_diff(before.splitlines(), after.splitlines(), n=0, lineterm="")
    for line in diff:
        if line.startswith(("---", "+++", "@@")):
            continue
        if line.startswith("-"):
            removed.append(line[1:])
        elif line.startswith("+"):
            added.append(line[1:])
    return "\n".join(removed), "\n".join(added)


def _distil(proposal: Proposal, findings: list[Finding]):
    """A PatternSpec from diagnosis.engine.patterns, or a plain diff-based one without it."""
    try:
        from diagnosis.engine.patterns import distill_pattern
    except ModuleNotFoundError as exc:
        if exc.name != "diagnosis.engine.patterns":
            raise
        before, after = changed_lines(proposal.parent_source, proposal.source)
        return _Spec(
            family=proposal.family or "none",
            mechanism=proposal.rationale,
            before=before,
            after=after,
            evidence_codes=sorted({f.code for f in findings}),
        )
    return distill_pattern(
        proposal.parent_source,
        proposal.source,
        _engine_findings(findings),
        gain=proposal.speedup,
        source_proposals=(proposal.pk,),
    )


def _signature_json(spec) -> dict:
    if hasattr(spec, "signature_json"):
        return dict(spec.signature_json())
    signature = getattr(spec, "signature", None) or {}
    return dict(signature) if isinstance(signature, dict) else {"features": sorted(map(str, signature))}


def _record_pattern(proposal: Proposal, team: Team) -> Pattern | None:
    findings = list(proposal.findings.all())
    spec = _distil(proposal, findings)
    if spec is None:  # the distiller found nothing general to keep
        return None
    codes = list(getattr(spec, "evidence_codes", None) or getattr(spec, "evidence", None) or [])
    signature = _signature_json(spec)
    family = str(getattr(spec, "family", "") or proposal.family or "none")[:32]
    if signature and any(signature.values()):
        # The same mechanism learnt again: one pattern, several source proposals.
        existing = Pattern.objects.filter(team=team, family=family, signature=signature).first()
        if existing is not None:
            existing.source_proposals.add(proposal)
            return existing
    pattern = Pattern.objects.create(
        team=team,
        family=family,
        mechanism=str(getattr(spec, "mechanism", "") or proposal.rationale),
        before=str(getattr(spec, "before", "")),
        after=str(getattr(spec, "after", "")),
        example_diff=proposal.diff or _unified(proposal.parent_source, proposal.source),
        evidence=list(dict.fromkeys(str(c) for c in codes)),
        signature=signature,
    )
    pattern.source_proposals.add(proposal)
    return pattern


def _unified(before: str, after: str) -> str:
    return "\n".join(
        difflib.unified_diff(before.splitlines(), after.splitlines(), "before", "after", lineterm="")
    )
