"""The parent side of execution: run child jobs in the sandbox and return typed outcomes.

`Executor` is what the round loop, the dramatiq worker, `manage.py optimize` and
`bench/run.py` call. It imports no Django. No method raises for anything user code does: a
failure comes back as an outcome with `ok=False` and the child's `JobError` (see
`runner.errors.KINDS`). The child measures; this side applies the policy
(`diagnosis.engine.verdict`: noise floor, faster, suspect) and the SOL model
(`diagnosis.engine.sol`). Every child job's wall time is recorded in `Executor.costs`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from diagnosis.engine import devices, sol
from diagnosis.engine import verdict as policy
from diagnosis.engine.profile import DeviceSpec, ProfileResult
from diagnosis.engine.verdict import Verdict
from runner.protocol import JobError, JobRequest
from runner.sandbox import Limits, SandboxResponse, run_job

# ---------------------------------------------------------------- outcomes


@dataclass(frozen=True)
class JobCost:
    """One child job, for cost accounting (DESIGN.md section 6)."""

    job: str
    device: str
    wall_s: float
    ok: bool
    # the child's seconds by phase (runner.childlib.phases), plus 'process': the wall time
    # outside the child's main (interpreter start-up, sandbox set-up, exit)
    phases: dict[str, float] = field(default_factory=dict)
    started_at: float = 0.0  # wall clock (epoch seconds) when the job was started: a timeline

    @property
    def device_s(self) -> float:
        """Seconds an accelerator was held: the child's whole wall time on cuda / npu, 0 on cpu."""
        return self.wall_s if devices.get(self.device).accelerator else 0.0


@dataclass
class Outcome:
    """What every Executor method returns: ok, or the child's error."""

    ok: bool
    error: JobError | None = None
    wall_s: float = 0.0  # the child's wall-clock seconds
    device_s: float = 0.0  # accelerator seconds: wall_s on cuda / npu, 0 on cpu
    network: str = ""  # network namespace: 'isolated' or 'not isolated (<reason>)'
    processes: str = ""  # PID namespace: 'isolated' or 'not isolated (<reason>)'

    @property
    def kind(self) -> str | None:
        """The error kind (runner.errors.KINDS), None when ok."""
        return self.error.kind if self.error else None


@dataclass
class ValidateOutcome(Outcome):
    names: list[str] = field(default_factory=list)  # required and optional names present
    kernels: list[str] = field(default_factory=list)  # @triton.jit (and autotuned) objects
    input_cases: int = 0
    verify_cases: int = 0
    case_numel: list[int] = field(default_factory=list)
    parameters: list[dict[str, Any]] = field(default_factory=list)  # name, shape, dtype
    num_parameters: int = 0


@dataclass
class CaptureOutcome(Outcome):
    executed: bool = False  # False on cpu: recorded, not run
    target: str = ""
    launches: list[dict[str, Any]] = field(default_factory=list)  # Launch.to_json() each


@dataclass(frozen=True)
class CaseTiming:
    """One timed case: medians, the noise floor and the decision (diagnosis.engine.verdict)."""

    index: int
    label: str
    candidate_ms: float | None  # median over rounds of ModelNew under test
    parent_ms: float | None  # median over rounds of the parent's ModelNew (None without a candidate)
    reference_ms: float | None  # PyTorch eager
    candidate_repeats: tuple[float, ...] = ()
    parent_repeats: tuple[float, ...] = ()
    noise_floor: float = policy.MIN_NOISE_FLOOR
    speedup: float | None = None  # parent / candidate (reference / candidate without a parent)
    speedup_vs_reference: float | None = None
    faster: bool = False
    slower: bool = False
    suspect: bool = False  # candidate time below the speed of light
    sol_ms: float | None = None
    pct_sol: float | None = None
    bytes: int = 0
    flops: int = 0
    dtype: str = "float32"


@dataclass
class TimingComparison:
    """Candidate vs parent (or vs the reference when there is no parent), all timed cases."""

    timed: bool
    reason: str = ""  # why not timed
    device: DeviceSpec | None = None  # with the datasheet peaks the SOL used
    cases: list[CaseTiming] = field(default_factory=list)
    baseline: str = "parent"  # what `speedup` is against: 'parent' or 'reference'
    speedup: float | None = None  # geometric mean over cases
    speedup_vs_reference: float | None = None
    noise_floor: float = policy.MIN_NOISE_FLOOR  # the largest case floor
    faster: bool = False
    suspect: bool = False
    verdict: Verdict = Verdict.UNTIMED


@dataclass(frozen=True)
class CaseCheck:
    """One checked case of the verification gate (worst over seeds), with its timing if timed."""

    label: str  # 'case 0' (timed case) or 'verify 2' (get_verify_inputs case)
    kind: str  # 'timed' or 'verify'
    index: int
    numel: int
    seeds: tuple[int, ...]
    correct: bool
    max_abs_err: float
    max_rel_err: float
    rel_l2_err: float
    tolerance: dict[str, Any] | None
    launches: int
    kernels: tuple[str, ...]
    sensitivity: str  # 'changes with input', 'reference constant', 'not checked'
    bytes: int
    flops: int
    dtype: str
    timing: CaseTiming | None = None
    autotune_choices: tuple[str, ...] = ()  # the config @triton.autotune chose, per autotuned launch
    # kernel -> its integer arguments at the case's first launch of it
    launch_ints: dict[str, dict[str, int]] = field(default_factory=dict)


@dataclass
class VerifyOutcome(Outcome):
    passed: bool = False  # the correctness gate (compiles, runs, correct, launches, sensitive)
    verdict: Verdict = Verdict.FAILED
    reason: str = ""  # the error kind when not passed
    cases: list[CaseCheck] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)  # too large for the device (cpu)
    seeds: list[int] = field(default_factory=list)
    # every case (timed, then verify): kind, index, shapes, dtypes of its inputs
    input_shapes: list[dict[str, Any]] = field(default_factory=list)
    timing: TimingComparison | None = None
    faster: bool = False
    suspect: bool = False
    speedup: float | None = None
    # tier 1's profile of the version under test, from this job's own runs (its launches on
    # the first seed, its interleaved times): None unless the gate passed and it was timed
    profile: ProfileResult | None = None


@dataclass
class TimingOutcome(Outcome):
    timing: TimingComparison | None = None


@dataclass
class ProfileOutcome(Outcome):
    profile: ProfileResult | None = None  # SOL, %SOL and device peaks filled in


@dataclass
class CompileOutcome(Outcome):
    result: dict[str, Any] | None = None  # whatever runner.childlib.compile.compile_job returned


# ---------------------------------------------------------------- policy on raw numbers


def _floats(values: Any) -> tuple[float, ...]:
    return tuple(float(v) for v in values or () if v is not None)


def timing_comparison(raw: Mapping[str, Any] | None) -> TimingComparison | None:
    """Apply the verdict and SOL rules to a child's raw timing dict."""
    if raw is None:
        return None
    if not raw.get("timed"):
        return TimingComparison(timed=False, reason=str(raw.get("reason", "")))
    dev = raw.get("device") or {}
    spec = sol.device_spec(
        str(dev.get("name", "")),
        sm_count=int(dev.get("sm_count", 0) or 0),
        l2_mb=float(dev.get("l2_mb", 0.0) or 0.0),
        kind=str(dev.get("kind", "cuda")),
    )
    has_parent = any(c.get("parent_ms") for c in raw.get("cases", ()))
    cases: list[CaseTiming] = []
    decisions: list[policy.CaseDecision] = []
    for c in raw.get("cases", ()):
        cand_rep, par_rep = _floats(c.get("candidate_ms")), _floats(c.get("parent_ms"))
        ref_rep = _floats(c.get("reference_ms"))
        cand, par, ref = policy.median(cand_rep), policy.median(par_rep), policy.median(ref_rep)
        floor = policy.case_floor(par_rep, cand_rep)
        bound = sol.sol_ms(
            int(c.get("bytes", 0)), int(c.get("flops", 0)), str(c.get("dtype", "float32")), spec
        )
        decision = policy.decide_case(par if has_parent else ref, cand, floor, bound)
        decisions.append(decision)
        cases.append(
            CaseTiming(
                index=int(c["index"]),
                label=str(c.get("label", f"case {c['index']}")),
                candidate_ms=cand,
                parent_ms=par,
                reference_ms=ref,
                candidate_repeats=cand_rep,
                parent_repeats=par_rep,
                noise_floor=floor,
                speedup=decision.speedup,
                speedup_vs_reference=(ref / cand) if ref and cand else None,
                faster=decision.faster,
                slower=decision.slower,
                suspect=decision.suspect,
                sol_ms=bound,
                pct_sol=sol.pct_sol(cand, bound),
                bytes=int(c.get("bytes", 0)),
                flops=int(c.get("flops", 0)),
                dtype=str(c.get("dtype", "float32")),
            )
        )
    overall = policy.overall(True, decisions)
    return TimingComparison(
        timed=True,
        device=spec,
        cases=cases,
        baseline="parent" if has_parent else "reference",
        speedup=policy.geomean([c.speedup for c in cases if c.speedup]),
        speedup_vs_reference=policy.geomean(
            [c.speedup_vs_reference for c in cases if c.speedup_vs_reference]
        ),
        noise_floor=max((c.noise_floor for c in cases), default=policy.MIN_NOISE_FLOOR),
        faster=overall is Verdict.IMPROVED,
        suspect=overall is Verdict.SUSPECT,
        verdict=overall,
    )


def verify_profile(result: Mapping[str, Any], timing: TimingComparison | None) -> ProfileResult | None:
    """A verify job's result as the profile job's: per timed case the median time of the
    version under test, the reference's, bytes, FLOPs and the first seed's launches.

    The gate already ran and timed that version, so tier 1 needs no second job for it (a
    profile job costs an interpreter start, a compile-cache load, the autotuner and its own
    timing). None when something is missing: then the loop runs the profile job.
    """
    if timing is None or not timing.timed or not timing.cases:
        return None
    raw_device = (result.get("timing") or {}).get("device")
    launches = {
        c.get("index"): c.get("launch_info")
        for c in result.get("cases", ())
        if isinstance(c, Mapping) and c.get("kind") == "timed"
    }
    if not isinstance(raw_device, Mapping) or not all(launches.get(t.index) for t in timing.cases):
        return None
    note = "times from the verify job: medians of its interleaved rounds"
    try:
        cases = [
            {"index": t.index, "time_ms": t.candidate_ms, "ref_time_ms": t.reference_ms, "bytes": t.bytes,
             "flops": t.flops, "dtype": t.dtype, "launches": [_launch(li) for li in launches[t.index]]}  # fmt: skip
            for t in timing.cases
        ]
        device = {  # the peaks come from sol's table (fill_profile), not from the child
            "name": str(raw_device.get("name", "")),
            "kind": str(raw_device.get("kind", "cuda")),
            "sm_count": int(raw_device.get("sm_count", 0) or 0),
            "peak_bw_gbs": 0.0,
            "l2_mb": float(raw_device.get("l2_mb", 0.0) or 0.0),
            "max_threads_per_sm": int(raw_device.get("max_threads_per_sm", 2048) or 2048),
        }
        raw = ProfileResult.from_json({"device": device, "cases": cases, "notes": [note]})
    except (TypeError, ValueError, KeyError):  # the child's output is not to be trusted
        return None
    return sol.fill_profile(raw)


def _launch(raw: Any) -> dict[str, Any]:
    """One launch record of the child as LaunchInfo fields; ValueError when it is not one."""
    grid = [int(g) for g in raw["grid"]]
    if len(grid) != 3:
        raise ValueError(f"a launch grid has {len(grid)} dimensions")
    return {"kernel": str(raw["kernel"]), "grid": grid, "num_warps": int(raw["num_warps"]),
            "num_stages": int(raw["num_stages"])}  # fmt: skip


def _case_check(raw: Mapping[str, Any], timing: TimingComparison | None) -> CaseCheck:
    timed = None
    if timing is not None and raw.get("kind") == "timed":
        timed = next((t for t in timing.cases if t.index == raw.get("index")), None)
    return CaseCheck(
        label=str(raw["label"]),
        kind=str(raw["kind"]),
        index=int(raw["index"]),
        numel=int(raw.get("numel", 0)),
        seeds=tuple(raw.get("seeds", ())),
        correct=bool(raw.get("correct")),
        max_abs_err=float(raw.get("max_abs_err", 0.0)),
        max_rel_err=float(raw.get("max_rel_err", 0.0)),
        rel_l2_err=float(raw.get("rel_l2_err", 0.0)),
        tolerance=raw.get("tolerance"),
        launches=int(raw.get("launches", 0)),
        kernels=tuple(raw.get("kernels") or ()),
        sensitivity=str(raw.get("sensitivity", "")),
        bytes=int(raw.get("bytes", 0)),
        flops=int(raw.get("flops", 0)),
        dtype=str(raw.get("dtype", "")),
        timing=timed,
        autotune_choices=tuple(str(c) for c in raw.get("autotune_choices") or ()),
        launch_ints={
            str(k): {str(n): int(v) for n, v in (args or {}).items() if isinstance(v, int)}
            for k, args in (raw.get("launch_ints") or {}).items()
        },
    )


# ---------------------------------------------------------------- the executor


class Executor:
    """Runs sandboxed jobs for one device kind.

    device: 'cuda', 'cpu' or 'npu' (the worker's queue). target: the compile target of tiers
    2/3 ('sm_90', 'gfx942', 'npu:Ascend910B3'); on cpu it also decides the specialisation the
    launch recorder reproduces. python: the child's interpreter (default: per device, see
    `runner.sandbox.child_python`). limits: one `Limits` for every job, or a mapping job ->
    Limits; jobs not in it get `Limits.for_job`. cache_dir: a Triton cache shared by this
    executor's jobs (one run), so a kernel compiled by `verify` is not compiled again by `time`.
    """

    def __init__(
        self,
        device: str = "cpu",
        target: str | None = None,
        python: str | None = None,
        limits: Limits | Mapping[str, Limits] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        self.kind = devices.get(device)  # UnknownDevice, a ValueError, for an unregistered kind
        self.device = device
        self.target = target
        self.python = python
        self.limits = limits
        self.cache_dir = os.fspath(cache_dir) if cache_dir is not None else None
        self.costs: list[JobCost] = []

    # -- accounting

    @property
    def wall_seconds(self) -> float:
        return sum(c.wall_s for c in self.costs)

    @property
    def device_seconds(self) -> float:
        return sum(c.device_s for c in self.costs)

    # -- plumbing

    def limits_for(self, job: str) -> Limits:
        if isinstance(self.limits, Limits):
            return self.limits
        if self.limits is not None and job in self.limits:
            return self.limits[job]
        return Limits.for_job(job, self.device)

    def run(self, request: JobRequest) -> SandboxResponse:
        """Run one raw request in the sandbox and record its cost."""
        started_at = time.time()
        response = run_job(
            request, limits=self.limits_for(request.job), python=self.python, triton_cache_dir=self.cache_dir
        )
        phases = dict(response.phases)
        if response.elapsed_s and response.wall_s >= response.elapsed_s:
            phases["process"] = round(response.wall_s - response.elapsed_s, 3)
        self.costs.append(JobCost(request.job, request.device, response.wall_s, response.ok, phases, started_at))
        return response

    def _request(self, job: str, path: str, **kwargs: Any) -> JobRequest:
        kwargs.setdefault("target", self.target)
        if kwargs.get("candidate"):
            kwargs["candidate"] = os.path.abspath(kwargs["candidate"])
        kwargs = {k: v for k, v in kwargs.items() if v is not None}
        return JobRequest(job=job, module=os.path.abspath(path), device=self.device, **kwargs)

    def _base(self, response: SandboxResponse) -> dict[str, Any]:
        return {
            "ok": response.ok,
            "error": response.error,
            "wall_s": response.wall_s,
            "device_s": response.wall_s if self.kind.accelerator else 0.0,
            "network": response.network,
            "processes": response.processes,
        }

    # -- jobs

    def validate(self, path: str) -> ValidateOutcome:
        """Import the module, build both models, draw the inputs; run nothing."""
        response = self.run(self._request("validate", path))
        result = response.result or {}
        return ValidateOutcome(
            **self._base(response),
            names=list(result.get("names", ())),
            kernels=list(result.get("kernels", ())),
            input_cases=int(result.get("input_cases", 0)),
            verify_cases=int(result.get("verify_cases", 0)),
            case_numel=list(result.get("case_numel", ())),
            parameters=list(result.get("parameters", ())),
            num_parameters=int(result.get("num_parameters", 0)),
        )

    def capture(self, path: str, cases: Sequence[int] | None = None, *, warmup: int = 0) -> CaptureOutcome:
        """Every Triton launch of ModelNew.forward per case (recorded, not run, on cpu)."""
        options = {"warmup": warmup} if warmup else {}
        response = self.run(
            self._request("capture", path, cases=list(cases) if cases is not None else None, options=options)
        )
        result = response.result or {}
        return CaptureOutcome(
            **self._base(response),
            executed=bool(result.get("executed")),
            target=str(result.get("target", "")),
            launches=list(result.get("launches", ())),
        )

    def verify(
        self,
        parent_path: str,
        candidate_path: str | None = None,
        seeds: Sequence[int] = (0, 1, 2),
        *,
        cases: Sequence[int] | None = None,
        time: bool = True,
        options: Mapping[str, Any] | None = None,
    ) -> VerifyOutcome:
        """The verification gate of `candidate_path` (default: the parent's own ModelNew) against
        the parent's Model, then (on a device, `time=True`) timing against the parent.

        options: cpu_max_elements (cpu case size limit, default 2**16), tolerance
        ({atol, rtol, l2} override), timed_case_seeds (check the timed cases on the first N
        seeds only; verify cases always get every seed), rounds / warmup_ms / rep_ms (timing).
        """
        opts = {"time": time, **(options or {})}
        response = self.run(
            self._request(
                "verify",
                parent_path,
                candidate=candidate_path,
                seeds=list(seeds),
                cases=list(cases) if cases is not None else None,
                options=opts,
            )
        )
        result = response.result or {}
        timing = timing_comparison(result.get("timing")) if response.ok else None
        passed = response.ok and bool(result.get("passed"))
        if passed:
            outcome_verdict = timing.verdict if timing is not None else Verdict.UNTIMED
        else:
            outcome_verdict = Verdict.FAILED
        return VerifyOutcome(
            **self._base(response),
            passed=passed,
            verdict=outcome_verdict,
            reason="" if passed else (response.error.kind if response.error else "failed"),
            cases=[_case_check(c, timing) for c in result.get("cases", ())],
            checked=list(result.get("checked", ())),
            skipped=list(result.get("skipped", ())),
            input_shapes=list(result.get("input_shapes", ())),
            seeds=list(result.get("seeds", seeds)),
            timing=timing,
            faster=bool(timing and timing.faster),
            suspect=bool(timing and timing.suspect),
            speedup=timing.speedup if timing else None,
            profile=verify_profile(result, timing) if passed else None,
        )

    def time(
        self,
        parent_path: str,
        candidate_path: str | None = None,
        *,
        cases: Sequence[int] | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> TimingOutcome:
        """Median times of the parent's ModelNew, the candidate's (same process, interleaved) and
        the reference, per case; no correctness check. On cpu: `timing.timed` is False."""
        response = self.run(
            self._request(
                "time",
                parent_path,
                candidate=candidate_path,
                cases=list(cases) if cases is not None else None,
                options=dict(options or {}),
            )
        )
        timing = timing_comparison(response.result) if response.ok else None
        return TimingOutcome(**self._base(response), timing=timing)

    def profile(
        self,
        path: str,
        ncu: bool = False,
        *,
        cases: Sequence[int] | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> ProfileOutcome:
        """Tier-1 evidence: per case time, reference time, bytes, FLOPs, launches, %SOL; ncu
        counters per Triton kernel when `ncu` and the device allows it (see `profile.notes`)."""
        opts = {"ncu": ncu, **(options or {})}
        response = self.run(
            self._request("profile", path, cases=list(cases) if cases is not None else None, options=opts)
        )
        profile = None
        if response.ok and response.result is not None:
            profile = sol.fill_profile(ProfileResult.from_json(response.result))
        return ProfileOutcome(**self._base(response), profile=profile)

    def compile(
        self,
        path: str,
        target: str | None = None,
        options: Mapping[str, Any] | None = None,
        cases: Sequence[int] | None = None,
    ) -> CompileOutcome:
        """Ahead-of-time compile for `target` (default: the executor's) of the launches of the
        input `cases` (default: case 0); see runner.childlib.compile."""
        response = self.run(
            self._request(
                "compile", path, target=target or self.target, options=dict(options or {}),
                cases=list(cases) if cases else None,
            )  # fmt: skip
        )
        return CompileOutcome(**self._base(response), result=response.result)
