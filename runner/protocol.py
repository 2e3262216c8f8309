"""The JSON contract between the worker (parent) and the sandbox child.

Standard library only: both the child (`python -m runner.child`, on a stock accelerator
image) and the worker import it. One request on the child's stdin, one response on its stdout.
The error record (`JobError`) and the device kinds are the engine's (`diagnosis.engine.errors`,
`diagnosis.engine.devices`), which are standard library only too.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from diagnosis.engine import devices
from diagnosis.engine.errors import JobError

__all__ = ["JOBS", "JobError", "JobRequest", "JobResponse", "gate_file", "run_key"]

JOBS = ("validate", "capture", "reference", "verify", "time", "profile", "compile")

# The files of the verification gate (runner/childlib/verify.py), relative to a job's working
# directory. What a job writes goes to GATE_DIR, which the job makes itself (so it is the job's
# own, whatever uid the sandbox runs it as): the reference job's gate/<run key>.in.kot (inputs)
# and .out.kot (Model's outputs); the verify job's .out.kot and .perturbed.out.kot (ModelNew's
# outputs, plain and with the kernels' writes perturbed) and its READY marker. What the worker
# hands a verify job goes to GATE_INPUTS, which the worker makes: the inputs
# (gate-in/<run key>.in.kot) and the DECISION on whether to time.
GATE_DIR = "gate"
GATE_INPUTS = "gate-in"
GATE_READY = "ready"  # the verify job: every run's output is written
GATE_DECISION = "decision.json"  # the worker: {"time": true | false}
# the sensitivity check draws a case's other inputs from seed + this
ALT_SEED_OFFSET = 1_000_003


def run_key(label: str, seed: int, variant: str) -> str:
    """The file stem of one run of the gate: 'case0-s1-main', 'verify2-s0-alt', 'derived0-s0-main'."""
    return f"{label.replace(' ', '')}-s{seed}-{variant}"


def gate_file(key: str, suffix: str, directory: str = GATE_DIR) -> str:
    """A gate file's path relative to the job's working directory (suffix: in, out, perturbed)."""
    return f"{directory}/{key}.{suffix}.kot"


@dataclass
class JobRequest:
    job: str  # one of JOBS
    module: str  # path of the uploaded module (the parent, for verify/time)
    device: str = "cpu"  # a kind of diagnosis.engine.devices
    target: str | None = None  # compile target for tiers 2/3: sm_90, gfx942, npu:Ascend910B3
    candidate: str | None = None  # path of a proposed revision (verify, time)
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    cases: list[int] | None = None  # indices into get_input_cases(); None = all
    options: dict[str, Any] = field(default_factory=dict)  # job-specific knobs

    def dumps(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def loads(cls, text: str) -> JobRequest:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("job request must be a JSON object")
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown job request fields: {sorted(unknown)}")
        req = cls(**data)
        if req.job not in JOBS:
            raise ValueError(f"unknown job {req.job!r}; expected one of {JOBS}")
        devices.get(req.device)  # UnknownDevice, a ValueError, for a kind nobody registered
        return req


@dataclass
class JobResponse:
    ok: bool
    job: str
    result: dict[str, Any] | None = None
    error: JobError | None = None
    elapsed_s: float = 0.0
    # seconds by phase inside the child (runner.childlib.phases): import, load, check, timing...
    phases: dict[str, float] = field(default_factory=dict)

    def dumps(self) -> str:
        return json.dumps(asdict(self), default=str)

    @classmethod
    def loads(cls, text: str) -> JobResponse:
        data = json.loads(text)
        if not isinstance(data, dict) or "ok" not in data or "job" not in data:
            raise ValueError("child response is not a job response object")
        err = data.get("error")
        return cls(
            ok=bool(data["ok"]),
            job=str(data["job"]),
            result=data.get("result"),
            error=JobError(**err) if err else None,
            elapsed_s=float(data.get("elapsed_s", 0.0)),
            phases=_phases(data.get("phases")),
        )


def _phases(value: object) -> dict[str, float]:
    """A child's phase seconds; anything else than a flat name -> number map is refused."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError("phases is not an object")
    return {str(k): float(v) for k, v in value.items()}

