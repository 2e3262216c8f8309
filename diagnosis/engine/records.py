"""The round loop's records: its configuration, what each round and the whole run recorded,
and the observer it reports to as it goes.

Everything the loop hands to the worker (`runner.persist`), the reports
(`diagnosis.engine.report`, `bench/run.py`) and the JSON encoders (`diagnosis.engine.serialize`)
is one of these: small dataclasses, frozen where nothing fills them in later. A round's
`Verdict` is `diagnosis.engine.verdict`'s, shared with the proposers' history and the stored
rows.

Plain Python: no Django.
"""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass, field
from typing import Protocol

from diagnosis.engine.evidence import Family, Finding, Tier, TierResult
from diagnosis.engine.patterns import PatternSpec
from diagnosis.engine.proposers.base import Candidate
from diagnosis.engine.usage import LLMUsage
from diagnosis.engine.verdict import Verdict, geomean

__all__ = [
    "CandidateOutcome",
    "CaseTiming",
    "DecisionRecord",
    "EvidenceRef",
    "Hypothesis",
    "LoopConfig",
    "LoopObserver",
    "LoopResult",
    "NullObserver",
    "RoundCost",
    "RoundRecord",
    "StopReason",
    "VersionStats",
    "sha256",
]


def sha256(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


class StopReason(enum.StrEnum):
    ROUND_BUDGET = "round_budget"  # every round of the budget was used
    SOL_REACHED = "sol_reached"  # the best version is within the set fraction of speed-of-light
    NOTHING_LEFT = "nothing_left"  # K consecutive rounds found nothing left to try
    CANCELLED = "cancelled"  # the observer asked to stop
    INITIAL_FAILED = "initial_failed"  # the uploaded version does not validate or is incorrect
    DIAGNOSED_ONLY = "diagnosed_only"  # no case fits this device's correctness check: evidence only
    TOKEN_BUDGET = "token_budget"  # the run's LLM token cap leaves too little for another request
    TIME_BUDGET = "time_budget"  # the rounds used LoopConfig.round_time_budget_s


@dataclass(frozen=True)
class LoopConfig:
    """What one run may spend and where it runs.

    Seeds: the initial version is verified over `seeds` on every case (once per run). A
    candidate is verified over `candidate_seeds` (default: the first of `seeds`) on every timed
    case and every verify input, in the same child job that times it against its parent. The
    child draws *all* cases for every seed on the CPU, so each extra seed costs a full set of
    big inputs plus a reference and a candidate run per case; one seed per candidate keeps a
    round to one job, while odd shapes are covered by the verify inputs, the sensitivity check
    draws a second input set, and the best version gets a final check on fresh seeds
    (bench/run.py). Set `candidate_seeds` to `seeds` for the stricter gate.
    """

    round_budget: int = 15
    sol_stop_fraction: float = 0.85  # stop when the best version's %SOL (geomean of cases) >= 85
    max_tier: Tier = Tier.COMPILER
    device: str = "cpu"  # cuda, npu, cpu
    target: str | None = None  # compile target for tiers 2/3 (sm_90, gfx942, npu:...); None: the executor's
    seeds: tuple[int, ...] = (0, 1, 2)
    candidate_seeds: tuple[int, ...] | None = None  # None: (seeds[0],)
    proposer: str = "rules"
    patience: int = 2  # stop after this many consecutive rounds with nothing left to try
    min_gain: float = 0.02  # a win must also beat 1 + min_gain on the geomean, whatever the measured floor
    max_candidates: int = 1  # candidates verified per round
    ncu: bool = False  # hardware counters in tier 1 (slow: one more process and kernel replays)
    # Far from speed-of-light (the parent's best case below this fraction of SOL) every finding's
    # family counts as backed, low severity included, before a round is called inconclusive:
    # there is much to win and the evidence names these families, even if it explains none.
    explore_below_sol: float = 0.5
    patterns: tuple[PatternSpec, ...] = ()  # the pattern library tier 0 matches
    # Seconds the rounds may take, counted from the end of the initial version's verify (whose
    # cost, compile included, is LoopResult.baseline_wall_s, apart): no round starts after that.
    # A kernel whose first compile takes minutes then still gets its rounds. None: no limit.
    round_time_budget_s: float | None = None
    # Seconds each compile of a candidate's kernels may take in its verify job (each autotune
    # config's, each launch's); one that runs past is stopped and its config dropped, with the
    # reason in the round (runner.childlib.compile_bound). None: no bound but the job's own.
    compile_timeout_s: float | None = None
    # Passed to every verify job: timed_case_seeds (the big timed cases on the first N seeds
    # only; verify inputs always get every seed), rounds / warmup_ms / rep_ms (timing), tolerance.
    verify_options: dict[str, object] = field(default_factory=dict)

    def seeds_for_candidates(self) -> tuple[int, ...]:
        if self.candidate_seeds:
            return tuple(self.candidate_seeds)
        return tuple(self.seeds[:1]) or (0,)


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
class CandidateOutcome:
    """What verifying (and timing, where the device allows) one candidate against its parent gave."""

    correct: bool
    error_kind: str = ""  # compile_error, exception, incorrect, no_launch, constant_output, timeout, ...
    message: str = ""
    cases: tuple[CaseTiming, ...] = ()  # the candidate's times (with eager and SOL)
    parent_ms: tuple[float | None, ...] = ()  # the parent's times in the same process, per case
    noise: float | None = None  # measured relative noise of the comparison (the largest case's)
    case_noise: tuple[float | None, ...] = ()  # each case's noise floor, in case order
    # per case, the medians of every timing round: (candidate's, parent's); what a noisy
    # case's floor and verdict came from
    case_rounds: tuple[tuple[tuple[float, ...], tuple[float, ...]], ...] = ()
    suspect: bool = False  # a time below the speed-of-light bound
    wall_s: float = 0.0
    device_s: float = 0.0
    # (case label, what @triton.autotune chose there): evidence for a launch-config rewrite
    autotune_choices: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # what the gate checked beyond the module's cases: the odd-shaped cases it derived, or why
    # none could be (VerifyOutcome.notes)
    gate_notes: tuple[str, ...] = ()
    # the labels of the cases the gate checked ('case 0', 'verify 1') and of those it left out as
    # too big for this device (cpu: the interpreter); empty on outcomes stored before they were kept
    checked: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()
    # compiles of the candidate's kernels stopped at LoopConfig.compile_timeout_s, e.g.
    # 'k (BLOCK=1048576, num_warps=4, num_stages=3)': autotune configs dropped from the choice
    # (or, when the gate failed with compile_timeout, the launch that failed it)
    dropped_compiles: tuple[str, ...] = ()

    @property
    def timed(self) -> bool:
        return bool(self.cases) and all(c.time_ms for c in self.cases) and all(self.parent_ms)

    @property
    def speedups(self) -> tuple[float | None, ...]:
        return tuple(
            (p / c.time_ms) if (p and c.time_ms) else None
            for c, p in zip(self.cases, self.parent_ms, strict=False)
        )

    @property
    def coverage(self) -> str:
        """Which cases the gate checked, in words: 'every case', or 'the 3 cases small enough
        for this device (5 left out)'."""
        if not self.skipped:
            return "every case"
        n = len(self.checked)
        left = ", ".join(self.skipped[:4]) + (", ..." if len(self.skipped) > 4 else "")
        return f"the {n} case{'s' if n != 1 else ''} small enough for this device ({len(self.skipped)} too big: {left})"

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
    llm: LLMUsage | None = None  # the round's LLM requests (None: no LLM was asked)


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
    proposal: Candidate | None = None
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
    # Per case, the product of the same-process speedups of the accepted rounds: each win is
    # measured against its own parent in one child, so the chain never compares times taken in
    # different processes. 1.0 per case when no round won; () when nothing was timed.
    speedups_over_initial: tuple[float | None, ...] = ()
    wall_s: float = 0.0
    device_s: float = 0.0
    tokens: int = 0
    baseline_wall_s: float = 0.0
    baseline_device_s: float = 0.0
    device_name: str = ""
    error: str = ""  # why the initial version failed, when it did
    # Why the initial version's correctness could NOT be checked on this device ('' when it
    # was): every case too big for the interpreter and no small get_verify_inputs() case. Such
    # a run is evidence only; nothing it shows is verified.
    unchecked: str = ""
    # the initial version's cases too big for this device, left out of its check (cpu: the
    # interpreter); it was checked on the others
    skipped_cases: tuple[str, ...] = ()

    @property
    def improved(self) -> bool:
        return self.best_source != self.initial_source

    @property
    def checked(self) -> bool:
        """The initial version's correctness was checked (on some case at least; it may have
        failed): False only when this device could check no case of it."""
        return not self.unchecked

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


class LoopObserver(Protocol):
    """Called as the loop goes, so the worker can persist each step (and cancel the run)."""

    def round_started(self, index: int, parent_source: str) -> None: ...

    def tier_done(self, index: int, tier_result: TierResult, decision: DecisionRecord) -> None: ...

    def proposal_made(self, index: int, candidate: Candidate) -> None: ...

    def proposal_verified(self, index: int, candidate: Candidate, outcome: CandidateOutcome) -> None: ...

    def round_finished(self, index: int, record: RoundRecord) -> None: ...

    def should_stop(self) -> bool: ...


class NullObserver:
    """An observer that records nothing and never stops the loop; subclass and override."""

    def round_started(self, index: int, parent_source: str) -> None:
        pass

    def tier_done(self, index: int, tier_result: TierResult, decision: DecisionRecord) -> None:
        pass

    def proposal_made(self, index: int, candidate: Candidate) -> None:
        pass

    def proposal_verified(self, index: int, candidate: Candidate, outcome: CandidateOutcome) -> None:
        pass

    def round_finished(self, index: int, record: RoundRecord) -> None:
        pass

    def should_stop(self) -> bool:
        return False
