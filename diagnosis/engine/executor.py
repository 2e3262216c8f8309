"""The executor seam: what the round loop asks of whoever runs its jobs, and what comes back.

`Executor` names the calls the loop makes (verify, profile, compile), the cost record it
reads and the Triton cache it shares across a run; `runner.execute.Executor` is the one that
runs each job in a sandboxed child and builds these outcomes from the child's JSON. A failure
never raises: it comes back as an outcome with `ok=False` and the child's `JobError`.

`compare_timings` applies the verification policy (`diagnosis.engine.verdict`: medians, noise
floor, faster, suspect) and the SOL model (`diagnosis.engine.sol`) to what a child measured,
so any executor, the sandboxed one or a test's, judges timings by the same rules.

Plain Python: no Django, nothing from `runner`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from diagnosis.engine import devices, sol
from diagnosis.engine import verdict as policy
from diagnosis.engine.errors import JobError
from diagnosis.engine.ir import CompileResult
from diagnosis.engine.profile import DeviceSpec, ProfileResult
from diagnosis.engine.verdict import TimingVerdict

# Job knobs the engine passes through to the child untouched (tolerance, timing rounds, ...).
JobOptions = Mapping[str, object]


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
        """Seconds an accelerator was held: the child's whole wall time where the kind has one."""
        return self.wall_s if devices.get(self.device).accelerator else 0.0


# ---------------------------------------------------------------- outcomes


@dataclass(frozen=True)
class Outcome:
    """What every executor call returns: ok, or the child's error."""

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

    @property
    def error_text(self) -> str:
        """Why it failed, for a round's reason or a run's error: 'kind: message (line N)'."""
        return self.error.describe() if self.error else "failed"


@dataclass(frozen=True)
class ValidateOutcome(Outcome):
    names: list[str] = field(default_factory=list)  # required and optional names present
    kernels: list[str] = field(default_factory=list)  # @triton.jit (and autotuned) objects
    input_cases: int = 0
    verify_cases: int = 0
    case_numel: list[int] = field(default_factory=list)
    parameters: list[dict[str, Any]] = field(default_factory=list)  # name, shape, dtype
    num_parameters: int = 0


@dataclass(frozen=True)
class CaptureOutcome(Outcome):
    executed: bool = False  # False on cpu: recorded, not run
    target: str = ""
    launches: list[dict[str, Any]] = field(default_factory=list)  # Launch.to_json() each


@dataclass(frozen=True)
class CaseMeasurement:
    """One timed case as the child measured it: the median of every timing round, per contender."""

    index: int
    label: str
    candidate_ms: tuple[float, ...]  # ModelNew under test
    parent_ms: tuple[float, ...] = ()  # the parent's ModelNew, interleaved (empty without a parent)
    reference_ms: tuple[float, ...] = ()  # PyTorch eager
    bytes: int = 0
    flops: int = 0
    dtype: str = "float32"


@dataclass(frozen=True)
class CaseComparison:
    """One timed case judged: medians, the noise floor and the decision (diagnosis.engine.verdict)."""

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


@dataclass(frozen=True)
class TimingComparison:
    """Candidate vs parent (or vs the reference when there is no parent), all timed cases."""

    timed: bool
    reason: str = ""  # why not timed
    device: DeviceSpec | None = None  # with the datasheet peaks the SOL used
    cases: list[CaseComparison] = field(default_factory=list)
    baseline: str = "parent"  # what `speedup` is against: 'parent' or 'reference'
    speedup: float | None = None  # geometric mean over cases
    speedup_vs_reference: float | None = None
    noise_floor: float = policy.MIN_NOISE_FLOOR  # the largest case floor
    faster: bool = False
    suspect: bool = False
    verdict: TimingVerdict = TimingVerdict.UNTIMED


@dataclass(frozen=True)
class CaseCheck:
    """One checked case of the verification gate (worst over seeds), with its timing if timed."""

    label: str  # 'case 0' (timed case), 'verify 2' (get_verify_inputs case), 'derived 0'
    kind: str  # 'timed', 'verify' or 'derived' (an odd-shaped case the gate derived from case 0)
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
    timing: CaseComparison | None = None
    autotune_choices: tuple[str, ...] = ()  # the config @triton.autotune chose, per autotuned launch
    # kernel -> its integer arguments at the case's first launch of it
    launch_ints: dict[str, dict[str, int]] = field(default_factory=dict)
    # whether the output moved when what the Triton kernels wrote was perturbed (first seed,
    # verify cases): 'changes when the kernels' writes are perturbed (...)', 'not checked', ...
    launch_dependence: str = ""


@dataclass(frozen=True)
class InputCase:
    """The inputs of one case as the verify job drew them: shape and dtype per argument."""

    kind: str  # 'timed' or 'verify'
    index: int  # within its kind
    shapes: tuple[tuple[int, ...], ...]  # () for a scalar argument
    dtypes: tuple[str, ...]


@dataclass(frozen=True)
class DroppedCompile:
    """A compile of the candidate's kernels that ran past the job's compile bound and was
    stopped: an autotune config dropped from the choice, or the launch that failed the job."""

    kernel: str
    config: str  # 'BLOCK=1048576, num_warps=4, num_stages=3'
    limit_s: float

    def describe(self) -> str:
        return f"{self.kernel} ({self.config})"


@dataclass(frozen=True)
class VerifyOutcome(Outcome):
    passed: bool = False  # the correctness gate (compiles, runs, correct, launches, sensitive)
    verdict: TimingVerdict = TimingVerdict.FAILED
    reason: str = ""  # the error kind when not passed
    cases: list[CaseCheck] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)  # too large for the device (cpu)
    seeds: list[int] = field(default_factory=list)
    input_cases: tuple[InputCase, ...] = ()  # every case, timed then verify
    # what the gate did beyond the module's cases: the odd-shaped cases it derived, or why none
    notes: tuple[str, ...] = ()
    timing: TimingComparison | None = None
    faster: bool = False
    suspect: bool = False
    speedup: float | None = None
    # tier 1's profile of the version under test, from this job's own runs (its launches on
    # the first seed, its interleaved times): None unless the gate passed and it was timed
    profile: ProfileResult | None = None
    # compiles stopped by options.compile_timeout_s (runner.childlib.compile_bound)
    compile_dropped: tuple[DroppedCompile, ...] = ()


@dataclass(frozen=True)
class TimingOutcome(Outcome):
    timing: TimingComparison | None = None


@dataclass(frozen=True)
class ProfileOutcome(Outcome):
    profile: ProfileResult | None = None  # SOL, %SOL and device peaks filled in


@dataclass(frozen=True)
class CompileOutcome(Outcome):
    result: CompileResult | None = None  # the compile job's IR, launches and pass dumps


# ---------------------------------------------------------------- the seam


class Executor(Protocol):
    """What the round loop calls to run its jobs (`runner.execute.Executor` runs them sandboxed).

    `cache_dir` is the Triton cache the jobs share; the loop sets one for the run when it is
    None and clears it afterwards. `costs` lists every job run so far, in order.
    """

    cache_dir: str | None
    costs: list[JobCost]

    def verify(
        self,
        parent_path: str,
        candidate_path: str | None = None,
        seeds: Sequence[int] = (0, 1, 2),
        *,
        cases: Sequence[int] | None = None,
        time: bool = True,
        options: JobOptions | None = None,
        reference: str | None = None,
    ) -> VerifyOutcome:
        """The gate of `candidate_path` (default: the parent's own ModelNew) against the Model of
        `reference` (default: the parent) and, with `time`, its timing against the parent in the
        same process."""
        ...

    def profile(
        self,
        path: str,
        ncu: bool = False,
        *,
        cases: Sequence[int] | None = None,
        options: JobOptions | None = None,
    ) -> ProfileOutcome:
        """Tier-1 evidence: per case times, bytes, FLOPs, launches; ncu counters with `ncu`."""
        ...

    def compile(
        self,
        path: str,
        target: str | None = None,
        options: JobOptions | None = None,
        cases: Sequence[int] | None = None,
    ) -> CompileOutcome:
        """Ahead-of-time compile for `target` of the launches of the input `cases` (default: case 0)."""
        ...


# ---------------------------------------------------------------- policy on measured numbers


def compare_timings(cases: Sequence[CaseMeasurement], device: DeviceSpec) -> TimingComparison:
    """Judge what a child measured: medians, each case's floor, its speed-of-light bound and
    decision, and the overall verdict. Against the parent where the child timed one, else
    against PyTorch eager."""
    has_parent = any(c.parent_ms for c in cases)
    judged = [_judge_case(c, device, has_parent) for c in cases]
    decisions = [d for _, d in judged]
    out = [c for c, _ in judged]
    overall = policy.overall(True, decisions)
    return TimingComparison(
        timed=True,
        device=device,
        cases=out,
        baseline="parent" if has_parent else "reference",
        speedup=policy.geomean([c.speedup for c in out if c.speedup]),
        speedup_vs_reference=policy.geomean([c.speedup_vs_reference for c in out if c.speedup_vs_reference]),
        noise_floor=max((c.noise_floor for c in out), default=policy.MIN_NOISE_FLOOR),
        faster=overall is TimingVerdict.IMPROVED,
        suspect=overall is TimingVerdict.SUSPECT,
        verdict=overall,
    )


def _judge_case(
    c: CaseMeasurement, device: DeviceSpec, has_parent: bool
) -> tuple[CaseComparison, policy.CaseDecision]:
    cand, par, ref = policy.median(c.candidate_ms), policy.median(c.parent_ms), policy.median(c.reference_ms)
    floor = policy.case_floor(c.parent_ms, c.candidate_ms)
    bound = sol.sol_ms(c.bytes, c.flops, c.dtype, device)
    decision = policy.decide_case(par if has_parent else ref, cand, floor, bound)
    case = CaseComparison(
        index=c.index,
        label=c.label,
        candidate_ms=cand,
        parent_ms=par,
        reference_ms=ref,
        candidate_repeats=c.candidate_ms,
        parent_repeats=c.parent_ms,
        noise_floor=floor,
        speedup=decision.speedup,
        speedup_vs_reference=(ref / cand) if ref and cand else None,
        faster=decision.faster,
        slower=decision.slower,
        suspect=decision.suspect,
        sol_ms=bound,
        pct_sol=sol.pct_sol(cand, bound),
        bytes=c.bytes,
        flops=c.flops,
        dtype=c.dtype,
    )
    return case, decision
