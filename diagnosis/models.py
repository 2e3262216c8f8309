"""The records of kernelopt (DESIGN.md section 4): Postgres is the source of truth."""

from __future__ import annotations

import hashlib
import zlib

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from diagnosis.engine import devices
from diagnosis.engine.verdict import Verdict as RoundVerdict


class Team(models.Model):
    name = models.CharField(max_length=100, unique=True)
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, related_name="teams", blank=True)
    reviewers = models.ManyToManyField(settings.AUTH_USER_MODEL, related_name="reviewing_teams", blank=True)
    created = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @classmethod
    def visible_to(cls, user) -> models.QuerySet[Team]:
        """Teams whose kernels `user` may see: members and reviewers both."""
        return cls.objects.filter(Q(members=user) | Q(reviewers=user)).distinct()


class Kernel(models.Model):
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="kernels")
    name = models.CharField(max_length=200)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="kernels")
    description = models.TextField(blank=True)
    created = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created"]
        indexes = [models.Index(fields=["team", "-created"])]

    def __str__(self) -> str:
        return self.name


class KernelVersion(models.Model):
    class Origin(models.TextChoices):
        UPLOAD = "upload", "upload"
        PROPOSAL = "proposal", "accepted proposal"

    kernel = models.ForeignKey(Kernel, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()  # 1, 2, ... within the kernel
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children")
    source = models.TextField()
    sha256 = models.CharField(max_length=64)
    filename = models.CharField(max_length=255, blank=True)
    origin = models.CharField(max_length=16, choices=Origin.choices, default=Origin.UPLOAD)
    from_proposal = models.ForeignKey(
        "Proposal", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["kernel", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["kernel", "sha256"], name="version_sha_unique_per_kernel"),
            models.UniqueConstraint(fields=["kernel", "number"], name="version_number_unique_per_kernel"),
        ]

    def __str__(self) -> str:
        return f"{self.kernel.name} v{self.number}"

    @staticmethod
    def digest(source: str) -> str:
        return hashlib.sha256(source.encode()).hexdigest()


class DiagnosisRun(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued", "queued"
        RUNNING = "running", "running"
        DONE = "done", "done"
        FAILED = "failed", "failed"
        CANCELLED = "cancelled", "cancelled"

    # the kinds of diagnosis.engine.devices: a kind registered there is a choice here
    Device = models.TextChoices("Device", [(k.name.upper(), (k.name, k.label)) for k in devices.KINDS.values()])

    class Proposer(models.TextChoices):
        RULES = "rules", "rules"
        LLM = "llm", "LLM"
        HYBRID = "hybrid", "rules, then LLM"

    FINISHED = (Status.DONE, Status.FAILED, Status.CANCELLED)

    version = models.ForeignKey(KernelVersion, on_delete=models.CASCADE, related_name="runs")
    device = models.CharField(max_length=8, choices=Device.choices, default=Device.CPU)
    target = models.CharField(max_length=40, default="sm_90")  # compile target for tiers 2/3
    proposer = models.CharField(max_length=8, choices=Proposer.choices, default=Proposer.RULES)
    # the LLM a run asks (llm and hybrid runs; blank and null: the settings' defaults). The
    # endpoint and its key are the deployment's (settings), never stored here.
    llm_model = models.CharField(max_length=200, blank=True)
    llm_temperature = models.FloatField(null=True, blank=True)
    llm_round_tokens = models.PositiveIntegerField(null=True, blank=True)  # cap: prompt + completion per round
    llm_run_tokens = models.PositiveIntegerField(null=True, blank=True)  # cap: the whole run
    llm_cost = models.FloatField(null=True, blank=True)  # estimated, from the price settings; null: unpriced
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.QUEUED)
    round_budget = models.PositiveIntegerField(default=15)
    current_round = models.PositiveIntegerField(default=0)
    current_tier = models.PositiveSmallIntegerField(null=True, blank=True)
    best_version = models.ForeignKey(
        KernelVersion, null=True, blank=True, on_delete=models.SET_NULL, related_name="best_of_runs"
    )
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    worker = models.CharField(max_length=200, blank=True)  # host:pid of the claiming worker
    attempts = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    wall_s = models.FloatField(default=0.0)
    device_s = models.FloatField(default=0.0)
    tokens = models.PositiveIntegerField(default=0)
    summary = models.JSONField(default=dict, blank=True)  # timings, best speedup, %SOL, report
    # a run imported from a bench/run.py result file (manage.py import_results) rather than
    # executed here: the file it came from and the operator it is (one run per operator)
    bench_import = models.ForeignKey(
        "BenchImport", null=True, blank=True, on_delete=models.PROTECT, related_name="runs"
    )
    bench_operator = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-created"]
        indexes = [
            models.Index(fields=["status", "device"]),
            models.Index(fields=["version", "-created"]),
            models.Index(fields=["status", "heartbeat_at"]),
            # the run list's order: its first page is an index scan that stops after 25 rows
            models.Index(fields=["-created", "-id"], name="run_created_id"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["bench_import", "bench_operator"],
                condition=Q(bench_import__isnull=False),
                name="run_once_per_bench_operator",
            )
        ]

    def __str__(self) -> str:
        return f"run {self.pk} of {self.version} on {self.device}"

    @property
    def is_finished(self) -> bool:
        return self.status in self.FINISHED

    @property
    def imported(self) -> bool:
        return self.bench_import_id is not None


class BenchImport(models.Model):
    """A bench/run.py result file imported into a team (manage.py import_results): where,
    when and on which commit its figures were measured, so every run from it says so."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="bench_imports")
    sha256 = models.CharField(max_length=64)  # of the file's bytes: importing it again adds nothing
    filename = models.CharField(max_length=255)
    device = models.CharField(max_length=8, choices=DiagnosisRun.Device.choices)
    device_name = models.CharField(max_length=100, blank=True)  # "NVIDIA H200"
    measured_on = models.DateField(null=True, blank=True)
    commit = models.CharField(max_length=40, blank=True)  # of the measured tree
    meta = models.JSONField(default=dict, blank=True)  # the file's `meta`, as written
    imported_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-imported_at"]
        constraints = [models.UniqueConstraint(fields=["team", "sha256"], name="bench_import_once_per_team")]

    def __str__(self) -> str:
        return self.label

    @property
    def label(self) -> str:
        """'a bench run on NVIDIA H200, 2026-11-30, commit 877efb0'."""
        parts = [self.device_name or self.get_device_display()]
        if self.measured_on:
            parts.append(self.measured_on.isoformat())
        if self.commit:
            parts.append(f"commit {self.commit}")
        return "a bench run on " + ", ".join(parts)


class Round(models.Model):
    # the engine's round verdicts, plus the state of a round still running
    Verdict = models.TextChoices(
        "Verdict", [("PENDING", ("pending", "pending")), *((v.name, (v.value, v.label)) for v in RoundVerdict)]
    )

    run = models.ForeignKey(DiagnosisRun, on_delete=models.CASCADE, related_name="rounds")
    index = models.PositiveIntegerField()
    parent_version = models.ForeignKey(KernelVersion, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # sha256 of the source the round diagnosed: a round may start from a verified candidate
    # that is no KernelVersion yet, and the evidence viewer groups rounds by the source they read
    parent_sha256 = models.CharField(max_length=64, blank=True, default="")
    tier_reached = models.PositiveSmallIntegerField(default=0)
    hypothesis = models.TextField(blank=True)
    verdict = models.CharField(max_length=16, choices=Verdict.choices, default=Verdict.PENDING)
    escalation = models.JSONField(default=list, blank=True)  # one decision per tier climbed
    wall_s = models.FloatField(default=0.0)
    device_s = models.FloatField(default=0.0)
    tokens = models.PositiveIntegerField(default=0)
    # the round's LLM requests (diagnosis.engine.usage.LLMUsage); zero when none was made
    llm_requests = models.PositiveSmallIntegerField(default=0)
    llm_prompt_tokens = models.PositiveIntegerField(default=0)
    llm_completion_tokens = models.PositiveIntegerField(default=0)
    llm_tokens_estimated = models.BooleanField(default=False)  # the endpoint reported no usage
    llm_prompt_chars = models.PositiveIntegerField(default=0)
    llm_prompt_version = models.CharField(max_length=16, blank=True)
    llm_latency_s = models.FloatField(default=0.0)
    llm_cost = models.FloatField(null=True, blank=True)  # estimated; null: unpriced or no request
    created = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["run", "index"]
        constraints = [models.UniqueConstraint(fields=["run", "index"], name="round_index_unique_per_run")]

    def __str__(self) -> str:
        return f"round {self.index} of run {self.run_id}"


class Finding(models.Model):
    run = models.ForeignKey(DiagnosisRun, on_delete=models.CASCADE, related_name="findings")
    round = models.ForeignKey(Round, null=True, blank=True, on_delete=models.CASCADE, related_name="findings")
    tier = models.PositiveSmallIntegerField()
    code = models.CharField(max_length=64)
    severity = models.CharField(max_length=8)
    family = models.CharField(max_length=32, blank=True)
    message = models.TextField()
    args = models.JSONField(default=dict, blank=True)
    lines = models.JSONField(default=list, blank=True)  # lines of the Python source
    kernel = models.CharField(max_length=200, blank=True)
    evidence = models.JSONField(default=list, blank=True)  # ArtefactRefs: kind, kernel, lines, excerpt
    gain = models.FloatField(null=True, blank=True)

    class Meta:
        ordering = ["run", "round", "tier", "id"]
        indexes = [
            models.Index(fields=["run", "tier"]),
            models.Index(fields=["code"]),
            # "does this run have a finding with this code": the kernel and run lists' code filter
            models.Index(fields=["run", "code"], name="finding_run_code"),
        ]

    def __str__(self) -> str:
        return f"{self.code} ({self.severity})"


class Artefact(models.Model):
    class Kind(models.TextChoices):
        TTIR = "ttir", "TTIR"
        TTGIR = "ttgir", "TTGIR"
        LLIR = "llir", "LLVM IR"
        PTX = "ptx", "PTX"
        SASS = "sass", "SASS"
        AMDGCN = "amdgcn", "AMDGCN"
        LINALG = "linalg", "linalg (Ascend)"
        PASS_DUMP = "pass_dump", "pass dump"
        PROFILE = "profile", "profile"
        NCU = "ncu", "ncu counters"
        LOG = "log", "log"
        SOURCE = "source", "source"

    run = models.ForeignKey(DiagnosisRun, on_delete=models.CASCADE, related_name="artefacts")
    round = models.ForeignKey(Round, null=True, blank=True, on_delete=models.CASCADE, related_name="artefacts")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    name = models.CharField(max_length=300)
    data = models.BinaryField()  # zlib-compressed UTF-8 text
    size = models.PositiveIntegerField()  # uncompressed bytes
    compressed_size = models.PositiveIntegerField()
    sha256 = models.CharField(max_length=64)  # of the uncompressed bytes
    # sha256 of the kernel source this artefact was produced from: an artefact is stored once
    # per source version of a run (runner.persist), whichever rounds diagnosed that source
    source_sha256 = models.CharField(max_length=64, blank=True, default="")
    created = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["run", "kind", "name"]
        indexes = [
            models.Index(fields=["run", "kind"]),
            models.Index(fields=["run", "source_sha256", "kind"], name="artefact_run_source_kind"),
        ]

    def __str__(self) -> str:
        return f"{self.kind}:{self.name}"

    @classmethod
    def build(
        cls,
        *,
        run: DiagnosisRun,
        kind: str,
        name: str,
        text: str,
        round: Round | None = None,
        source_sha256: str = "",
    ) -> Artefact:
        raw = text.encode()
        packed = zlib.compress(raw, 6)
        return cls(
            run=run,
            round=round,
            source_sha256=source_sha256,
            kind=kind,
            name=name[:300],
            data=packed,
            size=len(raw),
            compressed_size=len(packed),
            sha256=hashlib.sha256(raw).hexdigest(),
        )

    @property
    def text(self) -> str:
        return zlib.decompress(bytes(self.data)).decode()


class Proposal(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending", "pending review"
        ACCEPTED = "accepted", "accepted"
        REJECTED = "rejected", "rejected"
        FAILED = "failed", "failed verification"

    round = models.ForeignKey(Round, on_delete=models.CASCADE, related_name="proposals")
    parent_version = models.ForeignKey(KernelVersion, null=True, on_delete=models.SET_NULL, related_name="proposals")
    parent_source = models.TextField()  # the exact source the rewrite applied to (a round may start from an unsaved best)
    source = models.TextField()
    diff = models.TextField()
    proposer = models.CharField(max_length=8)  # rules or llm
    family = models.CharField(max_length=32, blank=True)
    rationale = models.TextField(blank=True)
    # mechanism, evidence, expected (diagnosis.engine.serialize.rationale_json); {} on rows
    # stored before the parts were kept, whose page shows `rationale` whole
    rationale_parts = models.JSONField(default=dict, blank=True)
    findings = models.ManyToManyField(Finding, related_name="proposals", blank=True)
    verification = models.JSONField(default=dict, blank=True)  # per case: correct, times, speedup, %SOL
    speedup = models.FloatField(null=True, blank=True)  # geomean over cases vs the parent
    pct_sol = models.FloatField(null=True, blank=True)
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.PENDING)
    failure_reason = models.TextField(blank=True)
    result_version = models.ForeignKey(
        KernelVersion, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created"]
        indexes = [
            models.Index(fields=["status", "-created"]),
            models.Index(fields=["-created", "-id"], name="proposal_created_id"),  # the proposal list's order
        ]

    def __str__(self) -> str:
        return f"proposal {self.pk} ({self.status})"


class Review(models.Model):
    class Decision(models.TextChoices):
        ACCEPT = "accept", "accept"
        REJECT = "reject", "reject"

    proposal = models.ForeignKey(Proposal, on_delete=models.CASCADE, related_name="reviews")
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="reviews")
    decision = models.CharField(max_length=8, choices=Decision.choices)
    comment = models.TextField(blank=True)
    created = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created"]
        indexes = [models.Index(fields=["-created", "-id"], name="review_created_id")]  # recent reviews

    def __str__(self) -> str:
        return f"{self.decision} of proposal {self.proposal_id} by {self.reviewer_id}"


class Pattern(models.Model):
    """A rewrite distilled from accepted proposals; tier 0 matches it on later kernels of the team."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="patterns")
    family = models.CharField(max_length=32)
    mechanism = models.TextField()
    before = models.TextField()
    after = models.TextField()
    example_diff = models.TextField()
    evidence = models.JSONField(default=list, blank=True)  # the finding codes that pointed at it
    signature = models.JSONField(default=dict, blank=True)  # what tier 0 matches on
    source_proposals = models.ManyToManyField(Proposal, related_name="patterns", blank=True)
    times_matched = models.PositiveIntegerField(default=0)
    created = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created"]
        indexes = [models.Index(fields=["team", "family"])]

    def __str__(self) -> str:
        return f"{self.family}: {self.mechanism[:60]}"
