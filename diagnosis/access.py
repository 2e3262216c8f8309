"""Who may see and decide what: each helper returns the object or raises.

A kernel, and everything under it, is visible to its team's members and reviewers; to anyone
else it does not exist (Http404, so its existence does not leak). Only the team's reviewers
decide on proposals (PermissionDenied for a member who is not a reviewer).
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404

from diagnosis.models import (
    Artefact,
    DiagnosisRun,
    Finding,
    Kernel,
    KernelVersion,
    Pattern,
    Proposal,
    Team,
)


def visible_teams(user) -> QuerySet[Team]:
    return Team.visible_to(user)


def reviewing_teams(user) -> QuerySet[Team]:
    return Team.objects.filter(reviewers=user)


def is_reviewer(user, team: Team) -> bool:
    return team.reviewers.filter(pk=user.pk).exists()


def visible_kernels(user) -> QuerySet[Kernel]:
    return Kernel.objects.filter(team__in=visible_teams(user))


def visible_runs(user) -> QuerySet[DiagnosisRun]:
    return DiagnosisRun.objects.filter(version__kernel__team__in=visible_teams(user))


def visible_proposals(user) -> QuerySet[Proposal]:
    # a semi-join on the visible runs' ids: counting a history list then probes one hash per
    # row instead of joining every row up to its team (bench/web_scale.py)
    return Proposal.objects.filter(round__run__in=visible_runs(user).values("pk"))


def visible_findings(user) -> QuerySet[Finding]:
    return Finding.objects.filter(run__in=visible_runs(user).values("pk"))


def get_team_for_user(user, pk: int) -> Team:
    try:
        return visible_teams(user).get(pk=pk)
    except Team.DoesNotExist:
        raise Http404("No such team") from None


def get_kernel_for_user(user, pk: int) -> Kernel:
    try:
        return visible_kernels(user).select_related("team", "owner").get(pk=pk)
    except Kernel.DoesNotExist:
        raise Http404("No such kernel") from None


def get_version_for_user(user, pk: int) -> KernelVersion:
    try:
        return KernelVersion.objects.select_related("kernel__team", "parent", "created_by").get(
            pk=pk, kernel__team__in=visible_teams(user)
        )
    except KernelVersion.DoesNotExist:
        raise Http404("No such version") from None


def get_run_for_user(user, pk: int) -> DiagnosisRun:
    try:
        return (
            visible_runs(user)
            .select_related("version__kernel__team", "best_version", "bench_import")
            .get(pk=pk)
        )
    except DiagnosisRun.DoesNotExist:
        raise Http404("No such run") from None


def get_artefact_for_user(user, pk: int) -> Artefact:
    try:
        return Artefact.objects.select_related("run__version__kernel__team", "round").get(
            pk=pk, run__version__kernel__team__in=visible_teams(user)
        )
    except Artefact.DoesNotExist:
        raise Http404("No such artefact") from None


def get_proposal_for_user(user, pk: int) -> Proposal:
    try:
        return (
            visible_proposals(user)
            .select_related("round__run__version__kernel__team", "parent_version", "result_version")
            .get(pk=pk)
        )
    except Proposal.DoesNotExist:
        raise Http404("No such proposal") from None


def get_proposal_for_reviewer(user, pk: int) -> Proposal:
    """The proposal if `user` reviews its team; 404 if they cannot see it, 403 if they only see it."""
    proposal = get_proposal_for_user(user, pk)
    if not is_reviewer(user, proposal.round.run.version.kernel.team):
        raise PermissionDenied("Only the team's reviewers decide on its proposals.")
    return proposal


def visible_patterns(user, team: Team) -> QuerySet[Pattern]:
    return Pattern.objects.filter(team=team, team__in=visible_teams(user))
