"""The round loop of DESIGN.md section 2: diagnose the best verified version, propose, verify.

`run_loop(source, executor=..., config=...)` validates and verifies the uploaded version once
(its times are the baseline), then runs rounds on the current best verified version: tier 0
on the source, then tiers 1-3 only while the accumulated evidence fails one of the three tests
(localizes, narrows to one family, explains); a proposal backed by that evidence is verified
(correct on every case, timed against its parent in the same process) and, when it is faster
above the noise floor and not suspect, becomes the parent of the next round.

Plain Python: no Django. The Django worker persists as the loop goes through `LoopObserver`.
"""

from __future__ import annotations

import enum
import hashlib
import math
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from diagnosis.engine.evidence import Family, Finding, Tier, TierResult


def sha256(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


def geomean(values: list[float] | tuple[float, ...]) -> float | None:
    vals = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


class Verdict(enum.StrEnum):
    IMPROVED = "improved"  # verified: correct everywhere, faster than its parent above the noise floor
    NO_GAIN = "no-gain"  # correct, but not faster above the noise floor (or no timing on this device)
    FAILED = "failed"  # did not compile, crashed, wrong answer, launches no Triton kernel, suspect time
    INCONCLUSIVE = "inconclusive"  # the deepest evidence explains nothing, or no rewrite applies


class StopReason(enum.StrEnum):
    ROUND_BUDGET = "round_budget"  # every round of the budget was used
    SOL_REACHED = "sol_reached"  # the best version is within the set fraction of speed-of-light
    NOTHING_LEFT = "nothing_left"  # K consecutive rounds found nothing left to try
    CANCELLED = "cancelled"  # the observer asked to stop
    INITIAL_FAILED = "initial_failed"  # the uploaded version does not validate or is incorrect


@dataclass
class LoopConfig:
    """What one run may spend and where it runs.

    Seeds: correctness is checked over `seeds` on the verify inputs and the main case (cheap,
    small), while the big timed cases are checked with one seed (`timed_case_seeds`): a wrong
    kernel is wrong on any random input of a shape, and each extra seed on a large case costs
    a full reference and candidate run. The design's 'several seeds' is thus met where shapes
    are odd (verify inputs) and on the main case; timing itself uses one input set per case.
    """

    round_budget: int = 15
    sol_stop_fraction: float = 0.85  # stop when the best version's %SOL (geomean of cases) >= 85
    max_tier: Tier = Tier.COMPILER
    device: str = "cpu"  # cuda, npu, cpu
    target: str | None = None  # compile target for tiers 2/3 (sm_90, gfx942, npu:...); None: the device's
    seeds: tuple[int, ...] = (0, 1, 2)
    timed_case_seeds: int = 1
    proposer: str = "rules"
    patience: int = 2  # stop after this many consecutive rounds with nothing left to try
    noise_floor: float = 0.02  # minimum relative gain counted as faster (raised to the measured noise)
    max_candidates: int = 1  # candidates verified per round


@dataclass(frozen=True)
class CaseTiming:
    """One timed case of one version: its time, PyTorch eager's and the speed-of-light bound."""

    index: int
    time_ms: float | None
    ref_ms: float | None = None
    sol_ms: float | None = None

    @property
    def pct_sol(self) -> float | None:
        if self.time_ms and self.sol_ms:
            return 100.0 * self.sol_ms / self.time_ms
        return None

    @property
    def speedup_over_eager(self) -> float | None:
        if self.time_ms and self.ref_ms:
            return self.ref_ms / self.time_ms
        return None


@dataclass(frozen=True)
class VersionStats:
    """A verified version and its measured times (None times: no timing on this device)."""

    sha256: str
    cases: tuple[CaseTiming, ...] = ()

    @property
    def timed(self) -> bool:
        return bool(self.cases) and all(c.time_ms for c in self.cases)

    @property
    def pct_sol(self) -> float | None:
        return geomean([c.pct_sol for c in self.cases if c.pct_sol is not None])

    @property
    def speedup_over_eager(self) -> float | None:
        return geomean([c.speedup_over_eager for c in self.cases if c.speedup_over_eager is not None])


@dataclass(frozen=True)
class EvidenceRef:
    """One finding behind a round's hypothesis, with the artefacts it points at."""

    code: str
    tier: Tier
    family: Family
    lines: tuple[int, ...] = ()
    kernel: str = ""
    artefacts: tuple[str, ...] = ()  # "kind:name" of each ArtefactRef, e.g. "ptx:softmax_kernel"


@dataclass(frozen=True)
class Hypothesis:
    """What the round believes: the rewrite family, the mechanism, and the findings behind it."""

    family: Family
    mechanism: str
    findings: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        backing = ", ".join(self.findings) if self.findings else "no finding"
        return f"{self.family}: {self.mechanism} (backed by {backing})"


@dataclass(frozen=True)
class DecisionRecord:
    """The escalation decision taken after one tier."""

    tier: Tier
    climb: bool
    next_tier: Tier | None
    reason: str
    family: Family | None = None
    failed_tests: tuple[str, ...] = ()


@dataclass(frozen=True)
class ProposalRecord:
    source: str
    diff: str
    family: Family
    rationale: str
    proposer: str
    findings_addressed: tuple[str, ...] = ()
    tokens: int = 0

    @property
    def sha256(self) -> str:
        return sha256(self.source)


@dataclass(frozen=True)
class CandidateOutcome:
    """What verifying (and timing, where the device allows) one candidate against its parent gave."""

    correct: bool
    error_kind: str = ""  # compile_error, exception, incorrect, no_launch, constant_output, timeout, ...
    message: str = ""
    cases: tuple[CaseTiming, ...] = ()  # the candidate's times (with eager and SOL)
    parent_ms: tuple[float | None, ...] = ()  # the parent's times in the same process, per case
    noise: float | None = None  # measured relative noise of the comparison
    suspect: bool = False  # a time below the speed-of-light bound
    wall_s: float = 0.0
    device_s: float = 0.0

    @property
    def timed(self) -> bool:
        return bool(self.cases) and all(c.time_ms for c in self.cases) and all(self.parent_ms)

    @property
    def speedups(self) -> tuple[float | None, ...]:
        return tuple(
            (p / c.time_ms) if (p and c.time_ms) else None for c, p in zip(self.cases, self.parent_ms, strict=False)
        )

    @property
    def speedup(self) -> float | None:
        """Geomean over cases of parent time / candidate time."""
        return geomean([s for s in self.speedups if s is not None])


@dataclass
class RoundCost:
    wall_s: float = 0.0
    device_s: float = 0.0
    tokens: int = 0
    wall_by_tier: dict[int, float] = field(default_factory=dict)
    device_by_tier: dict[int, float] = field(default_factory=dict)
    verify_wall_s: float = 0.0
    verify_device_s: float = 0.0


@dataclass
class RoundRecord:
    """Everything DESIGN.md says a round records."""

    index: int
    parent_sha256: str
    tier_reached: Tier
    verdict: Verdict
    reason: str = ""
    hypothesis: Hypothesis | None = None
    evidence: list[EvidenceRef] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    decisions: list[DecisionRecord] = field(default_factory=list)
    proposal: ProposalRecord | None = None
    outcome: CandidateOutcome | None = None
    cost: RoundCost = field(default_factory=RoundCost)
    tier_results: list[TierResult] = field(default_factory=list, repr=False)

    @property
    def speedup(self) -> float | None:
        return self.outcome.speedup if self.outcome else None


@dataclass
class LoopResult:
    initial_source: str
    best_source: str
    initial: VersionStats | None  # None when the initial version failed
    best: VersionStats | None
    rounds: list[RoundRecord] = field(default_factory=list)
    stop_reason: StopReason = StopReason.ROUND_BUDGET
    stop_detail: str = ""
    wall_s: float = 0.0
    device_s: float = 0.0
    tokens: int = 0
    baseline_wall_s: float = 0.0
    baseline_device_s: float = 0.0
    error: str = ""  # why the initial version failed, when it did

    @property
    def improved(self) -> bool:
        return self.best_source != self.initial_source

    @property
    def speedups_over_initial(self) -> tuple[float | None, ...]:
        if not self.initial or not self.best:
            return ()
        return tuple(
            (a.time_ms / b.time_ms) if (a.time_ms and b.time_ms) else None
            for a, b in zip(self.initial.cases, self.best.cases, strict=False)
        )

    @property
    def speedup_over_initial(self) -> float | None:
        return geomean([s for s in self.speedups_over_initial if s is not None])

    @property
    def speedups_over_eager(self) -> tuple[float | None, ...]:
        return tuple(c.speedup_over_eager for c in self.best.cases) if self.best else ()

    @property
    def speedup_over_eager(self) -> float | None:
        return self.best.speedup_over_eager if self.best else None

    @property
    def pct_sol(self) -> float | None:
        return self.best.pct_sol if self.best else None

    @property
    def winning_rounds(self) -> list[RoundRecord]:
        return [r for r in self.rounds if r.verdict is Verdict.IMPROVED]

    @property
    def winning_tiers(self) -> list[Tier]:
        return [r.tier_reached for r in self.winning_rounds]


@runtime_checkable
class LoopObserver(Protocol):
    """Called as the loop goes, so the worker can persist each step (and cancel the run)."""

    def round_started(self, index: int, parent_source: str) -> None: ...

    def tier_done(self, index: int, tier_result: TierResult, decision: Any) -> None: ...

    def proposal_made(self, index: int, candidate: Any) -> None: ...

    def proposal_verified(self, index: int, candidate: Any, outcome: CandidateOutcome) -> None: ...

    def round_finished(self, index: int, record: RoundRecord) -> None: ...

    def should_stop(self) -> bool: ...


class NullObserver:
    """An observer that records nothing and never stops the loop; subclass and override."""

    def round_started(self, index: int, parent_source: str) -> None:
        pass

    def tier_done(self, index: int, tier_result: TierResult, decision: Any) -> None:
        pass

    def proposal_made(self, index: int, candidate: Any) -> None:
        pass

    def proposal_verified(self, index: int, candidate: Any, outcome: CandidateOutcome) -> None:
        pass

    def round_finished(self, index: int, record: RoundRecord) -> None:
        pass

    def should_stop(self) -> bool:
        return False


def run_loop(
    source: str,
    *,
    executor: Any,
    config: LoopConfig,
    observer: LoopObserver | None = None,
    proposer: Any = None,
) -> LoopResult:
    """Optimize `source` round by round (see the module docstring). Not yet implemented."""
    raise NotImplementedError("run_loop lands with the executor; the types above are stable")
