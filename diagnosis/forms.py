"""Forms: a run of a version (device, target, budget), kernel upload (a new kernel, or a new
version of one, with its first run) and the review decision."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import partial

from django import forms
from django.conf import settings
from django.core.validators import MaxValueValidator
from django.db import transaction
from django.db.models import Max

from diagnosis.access import visible_teams
from diagnosis.models import DiagnosisRun, Kernel, KernelVersion, Review
from diagnosis.validation import ValidationResult, validate_module_source
from runner import workers
from runner.dispatch import enqueue_run
from runner.llm import llm_enabled, llm_models

TARGET_SUGGESTIONS = ("sm_90", "sm_100", "sm_89", "sm_80", "gfx942", "npu:Ascend910B3")
_TARGET_RE = re.compile(r"^[A-Za-z0-9_.:\-]{1,40}$")
MAX_ROUND_BUDGET = 100
MIN_LLM_TOKENS = 2000  # below this no prompt with a module and its answer fits
LLM_FIELDS = ("llm_model", "llm_temperature", "llm_round_tokens", "llm_run_tokens")
LLM_OFF_NOTE = (
    "The proposer is the rules. An LLM proposer, alone or after the rules, is offered once the "
    "deployment sets LLM_BASE_URL and LLM_MODEL to an OpenAI-compatible endpoint (a hosted API, "
    "vLLM, llama.cpp's server or Ollama) and LLM_API_KEY where it needs one; see the README."
)


@dataclass(frozen=True)
class UploadOutcome:
    kernel: Kernel
    version: KernelVersion
    run: DiagnosisRun
    created_kernel: bool
    reused_version: bool


class DeviceSelect(forms.Select):
    """The device kinds, those no live worker serves shown with why and not selectable."""

    def __init__(self, *args, unavailable: frozenset[str] = frozenset(), **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.unavailable = unavailable

    def create_option(self, name, value, label, selected, index, subindex=None, attrs=None) -> dict:
        option = super().create_option(name, value, label, selected, index, subindex, attrs)
        if value in self.unavailable:
            option["attrs"]["disabled"] = True
        return option


class RunForm(forms.Form):
    """Where and how to run a version: the device kind, the compile target, the round budget.

    A device kind no live worker serves (runner.workers) is shown, marked "no worker has been
    seen for cuda", and refused: a run queued there would only wait.
    """

    device = forms.ChoiceField(label="Device kind")
    target = forms.CharField(
        max_length=40,
        help_text="Compile target for the IR tiers, e.g. sm_90, sm_80, gfx942, npu:Ascend910B3.",
        widget=forms.TextInput(attrs={"list": "target-suggestions"}),
    )
    round_budget = forms.IntegerField(min_value=1, max_value=MAX_ROUND_BUDGET, label="Round budget")
    # offered only when an LLM is configured (llm_enabled); otherwise the run uses the rules
    proposer = forms.ChoiceField(
        choices=DiagnosisRun.Proposer.choices,
        initial=DiagnosisRun.Proposer.RULES,
        help_text="rules: deterministic source transforms. LLM: the model rewrites from the evidence. "
        "Rules, then LLM: the LLM for a family the rules cannot rewrite, or once they stop gaining.",
    )
    llm_model = forms.ChoiceField(label="LLM model", required=False)
    llm_temperature = forms.FloatField(label="LLM temperature", min_value=0.0, max_value=2.0, required=False)
    llm_round_tokens = forms.IntegerField(
        label="LLM tokens per round", min_value=MIN_LLM_TOKENS, required=False, help_text="prompt and answer"
    )
    llm_run_tokens = forms.IntegerField(
        label="LLM tokens per run",
        min_value=MIN_LLM_TOKENS,
        required=False,
        help_text="proposing stops when the next request would pass it",
    )

    def __init__(self, user, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.user = user
        self.target_suggestions = TARGET_SUGGESTIONS
        devices = list(settings.KERNELOPT_DEVICES)
        labels = dict(DiagnosisRun.Device.choices)
        presence = workers.presence()
        self.device_absence = {d: presence.absence(d) for d in devices if not presence.live(d)}
        self.live_devices = [d for d in devices if d not in self.device_absence]
        field = self.fields["device"]
        field.choices = [
            (
                d,
                f"{labels.get(d, d)} ({self.device_absence[d]})"
                if d in self.device_absence
                else labels.get(d, d),
            )
            for d in devices
        ]
        field.widget = DeviceSelect(choices=field.choices, unavailable=frozenset(self.device_absence))
        field.initial = (self.live_devices or devices or [DiagnosisRun.Device.CPU])[0]
        self.fields["target"].initial = settings.KERNELOPT_DEFAULT_ARCH
        self.fields["round_budget"].initial = settings.KERNELOPT_ROUND_BUDGET
        self.llm_note = ""
        if llm_enabled():
            self.fields["llm_model"].choices = [(m, m) for m in llm_models()]
            self.fields["llm_model"].initial = settings.LLM_MODEL
            self.fields["llm_temperature"].initial = settings.LLM_TEMPERATURE
            for name, cap in (
                ("llm_round_tokens", settings.LLM_ROUND_TOKENS),
                ("llm_run_tokens", settings.LLM_RUN_TOKENS),
            ):
                field = self.fields[name]
                field.initial = cap
                field.validators.append(MaxValueValidator(cap))  # the deployment's cap is the most
                field.widget.attrs["max"] = cap
        else:
            for name in ("proposer", *LLM_FIELDS):
                del self.fields[name]
            self.llm_note = LLM_OFF_NOTE

    def clean(self) -> dict:
        cleaned = super().clean()
        self._clean_llm(cleaned)
        return cleaned

    def _clean_llm(self, cleaned: dict) -> None:
        """The LLM choices go with an LLM proposer only; a run's caps must hold one round."""
        proposer = cleaned.get("proposer") or DiagnosisRun.Proposer.RULES
        cleaned["proposer"] = proposer
        if proposer == DiagnosisRun.Proposer.RULES:
            for name in LLM_FIELDS:
                cleaned[name] = None
            return
        per_round, per_run = cleaned.get("llm_round_tokens"), cleaned.get("llm_run_tokens")
        if per_round and per_run and per_run < per_round:
            self.add_error("llm_run_tokens", "The run's cap must hold at least one round's.")

    def clean_device(self) -> str:
        device = self.cleaned_data["device"]
        if why := self.device_absence.get(device):
            if self.live_devices:
                instead = "choose " + " or ".join(self.live_devices)
            else:
                instead = "start a worker for it (make worker QUEUES=" + device + ")"
            raise forms.ValidationError(
                f"{why}: a run queued there would only wait; {instead}.", code="no-worker"
            )
        return device

    def clean_target(self) -> str:
        target = self.cleaned_data["target"].strip()
        if not _TARGET_RE.match(target):
            raise forms.ValidationError("Use letters, digits and _ . : - only (e.g. sm_90, npu:Ascend910B3).")
        return target

    def queue(self, version: KernelVersion) -> DiagnosisRun:
        """A queued run of `version`, sent to its device's queue once committed."""
        with transaction.atomic():
            return queue_run(version, self.cleaned_data, self.user)


def queue_run(version: KernelVersion, data: dict, user) -> DiagnosisRun:
    """Create a queued run of `version` (`data`: device, target, round_budget, the proposer
    and its LLM choices) inside the
    caller's transaction; it is sent to the broker only after the commit, so a worker never
    looks for a row that is not there yet."""
    run = DiagnosisRun.objects.create(
        version=version,
        device=data["device"],
        target=data["target"],
        round_budget=data["round_budget"],
        requested_by=user,
        proposer=data.get("proposer") or DiagnosisRun.Proposer.RULES,
        llm_model=data.get("llm_model") or "",
        llm_temperature=data.get("llm_temperature"),
        llm_round_tokens=data.get("llm_round_tokens"),
        llm_run_tokens=data.get("llm_run_tokens"),
    )
    transaction.on_commit(partial(enqueue_run, run.pk, run.device), robust=True)
    return run


class UploadForm(RunForm):
    """A kernel module as a file or pasted text, where it goes, and how to run it.

    With `kernel` given the upload is a new version of that kernel: name and team are fixed.
    """

    field_order = ["file", "source", "name", "team", "device", "target", "round_budget", "proposer"]
    field_order += LLM_FIELDS

    file = forms.FileField(required=False, label="Kernel module (.py)")
    source = forms.CharField(
        required=False,
        strip=False,
        label="…or paste the source",
        widget=forms.Textarea(attrs={"rows": 12, "spellcheck": "false", "class": "code"}),
    )
    name = forms.CharField(max_length=200, required=False, help_text="Defaults to the file name.")
    team = forms.ModelChoiceField(queryset=None, empty_label=None)

    def __init__(self, user, *args, kernel: Kernel | None = None, **kwargs) -> None:
        super().__init__(user, *args, **kwargs)
        self.kernel = kernel
        self.validation: ValidationResult | None = None
        self.fields["team"].queryset = visible_teams(user)
        if kernel is not None:
            del self.fields["name"]
            del self.fields["team"]
        elif len(self.fields["team"].queryset) == 1:
            self.fields["team"].initial = self.fields["team"].queryset[0]

    def clean(self) -> dict:
        cleaned = super().clean()
        upload = cleaned.get("file")
        pasted = cleaned.get("source") or ""
        max_bytes = settings.KERNELOPT_MAX_UPLOAD_BYTES
        if upload and pasted.strip():
            raise forms.ValidationError("Give either a file or pasted source, not both.")
        if upload:
            field, filename = "file", os.path.basename(upload.name or "upload.py")[:255]
            if upload.size is not None and upload.size > max_bytes:
                # Bounded before reading: the validator would say the same, but never sees the bytes.
                self.add_error(
                    field,
                    f"whole file: the file is too large: {upload.size} bytes, the limit is {max_bytes} bytes",
                )
                return cleaned
            data: str | bytes = upload.read(max_bytes + 1)
        elif pasted.strip():
            field, filename, data = "source", "pasted.py", pasted
        else:
            raise forms.ValidationError("Choose a kernel module file or paste its source.")
        result = validate_module_source(data, filename, max_bytes)
        for error in result.errors:
            self.add_error(field, str(error))
        if result.ok:
            self.validation = result
        self._clean_llm(cleaned)
        if self.kernel is None and "name" in self.fields:
            name = (cleaned.get("name") or "").strip()
            if not name and field == "file":
                name = os.path.splitext(filename)[0]
            if not name:
                self.add_error("name", "Give the kernel a name.")
            cleaned["name"] = name[:200]
        return cleaned

    def _clean_llm(self, cleaned: dict) -> None:
        """The LLM choices go with an LLM proposer only; a run's caps must hold one round."""
        proposer = cleaned.get("proposer") or DiagnosisRun.Proposer.RULES
        cleaned["proposer"] = proposer
        if proposer == DiagnosisRun.Proposer.RULES:
            for name in LLM_FIELDS:
                cleaned[name] = None
            return
        per_round, per_run = cleaned.get("llm_round_tokens"), cleaned.get("llm_run_tokens")
        if per_round and per_run and per_run < per_round:
            self.add_error("llm_run_tokens", "The run's cap must hold at least one round's.")

    def save(self) -> UploadOutcome:
        """Store kernel (if new), version (deduplicated by sha256) and a queued run in one transaction.

        The run is sent to the broker only after the commit, so a worker never looks for a
        row that is not there yet.
        """
        assert self.validation is not None and self.validation.source is not None
        source = self.validation.source
        sha = KernelVersion.digest(source)
        data = self.cleaned_data
        with transaction.atomic():
            if self.kernel is None:
                kernel = Kernel.objects.create(team=data["team"], name=data["name"], owner=self.user)
                created_kernel = True
            else:
                # The row lock serializes version numbering and dedup between concurrent uploads.
                kernel = Kernel.objects.select_for_update().get(pk=self.kernel.pk)
                created_kernel = False
            version = KernelVersion.objects.filter(kernel=kernel, sha256=sha).first()
            reused = version is not None
            if version is None:
                version = KernelVersion.objects.create(
                    kernel=kernel,
                    number=next_version_number(kernel),
                    parent=kernel.versions.order_by("-number").first(),
                    source=source,
                    sha256=sha,
                    filename=self.validation.filename,
                    origin=KernelVersion.Origin.UPLOAD,
                    created_by=self.user,
                )
            run = queue_run(version, data, self.user)
        return UploadOutcome(kernel, version, run, created_kernel, reused)


def next_version_number(kernel: Kernel) -> int:
    """The next version number; call inside a transaction that holds the kernel row lock."""
    top = kernel.versions.aggregate(top=Max("number"))["top"]
    return (top or 0) + 1


class DecisionForm(forms.Form):
    decision = forms.ChoiceField(choices=Review.Decision.choices, widget=forms.HiddenInput)
    comment = forms.CharField(
        required=False,
        max_length=5000,
        widget=forms.Textarea(attrs={"rows": 3, "placeholder": "Comment (optional)"}),
    )
