"""Admin: teams are managed here; the other records are browsable (artefacts by size, never the blob)."""

from __future__ import annotations

from django.contrib import admin
from django.template.defaultfilters import filesizeformat

from diagnosis.models import (
    Artefact,
    BenchImport,
    DiagnosisRun,
    Finding,
    Kernel,
    KernelVersion,
    Pattern,
    Proposal,
    Review,
    Round,
    Team,
)


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ["name", "member_count", "reviewer_count", "created"]
    search_fields = ["name"]
    filter_horizontal = ["members", "reviewers"]

    @admin.display(description="members")
    def member_count(self, obj: Team) -> int:
        return obj.members.count()

    @admin.display(description="reviewers")
    def reviewer_count(self, obj: Team) -> int:
        return obj.reviewers.count()


@admin.register(Kernel)
class KernelAdmin(admin.ModelAdmin):
    list_display = ["name", "team", "owner", "created"]
    list_filter = ["team"]
    search_fields = ["name", "owner__username"]
    raw_id_fields = ["owner"]


@admin.register(KernelVersion)
class KernelVersionAdmin(admin.ModelAdmin):
    list_display = ["kernel", "number", "origin", "short_sha", "filename", "created_by", "created"]
    list_filter = ["origin", "kernel__team"]
    search_fields = ["kernel__name", "sha256", "filename"]
    raw_id_fields = ["kernel", "parent", "from_proposal", "created_by"]
    readonly_fields = ["sha256"]

    @admin.display(description="sha256")
    def short_sha(self, obj: KernelVersion) -> str:
        return obj.sha256[:12]


@admin.register(DiagnosisRun)
class DiagnosisRunAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "version",
        "device",
        "target",
        "status",
        "current_round",
        "current_tier",
        "attempts",
        "created",
    ]
    list_filter = ["status", "device", "target", "proposer"]
    search_fields = ["version__kernel__name", "worker", "error"]
    raw_id_fields = ["version", "best_version", "requested_by"]


@admin.register(Round)
class RoundAdmin(admin.ModelAdmin):
    list_display = ["run", "index", "tier_reached", "verdict", "wall_s", "device_s", "tokens"]
    list_filter = ["verdict", "tier_reached"]
    raw_id_fields = ["run", "parent_version"]


@admin.register(Finding)
class FindingAdmin(admin.ModelAdmin):
    list_display = ["code", "severity", "tier", "family", "run", "round", "kernel"]
    list_filter = ["tier", "severity", "family", "code"]
    search_fields = ["code", "message", "kernel"]
    raw_id_fields = ["run", "round"]


@admin.register(Artefact)
class ArtefactAdmin(admin.ModelAdmin):
    list_display = ["name", "kind", "run", "human_size", "human_compressed_size", "short_sha", "created"]
    list_filter = ["kind"]
    search_fields = ["name", "sha256"]
    raw_id_fields = ["run", "round"]
    exclude = ["data"]  # the compressed blob is neither readable nor editable here
    readonly_fields = ["size", "compressed_size", "sha256"]

    def get_queryset(self, request):
        return super().get_queryset(request).defer("data")

    @admin.display(description="size", ordering="size")
    def human_size(self, obj: Artefact) -> str:
        return filesizeformat(obj.size)

    @admin.display(description="compressed", ordering="compressed_size")
    def human_compressed_size(self, obj: Artefact) -> str:
        return filesizeformat(obj.compressed_size)

    @admin.display(description="sha256")
    def short_sha(self, obj: Artefact) -> str:
        return obj.sha256[:12]


@admin.register(Proposal)
class ProposalAdmin(admin.ModelAdmin):
    list_display = ["id", "round", "proposer", "family", "status", "speedup", "pct_sol", "created"]
    list_filter = ["status", "proposer", "family"]
    search_fields = ["rationale", "family"]
    raw_id_fields = ["round", "parent_version", "result_version", "findings"]


@admin.register(Review)
class ReviewAdmin(admin.ModelAdmin):
    list_display = ["proposal", "reviewer", "decision", "created"]
    list_filter = ["decision"]
    raw_id_fields = ["proposal", "reviewer"]


@admin.register(Pattern)
class PatternAdmin(admin.ModelAdmin):
    list_display = ["family", "team", "short_mechanism", "times_matched", "created"]
    list_filter = ["team", "family"]
    search_fields = ["mechanism"]
    raw_id_fields = ["source_proposals"]

    @admin.display(description="mechanism")
    def short_mechanism(self, obj: Pattern) -> str:
        return obj.mechanism[:80]


@admin.register(BenchImport)
class BenchImportAdmin(admin.ModelAdmin):
    list_display = ["filename", "team", "device_name", "measured_on", "commit", "imported_at"]
    list_filter = ["team", "device"]
    readonly_fields = ["sha256", "meta"]
