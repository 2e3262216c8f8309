"""The round loop of DESIGN.md section 2: diagnose the best verified version, propose, verify.

`run_loop(source, executor=..., config=...)` verifies the uploaded version once (its times are
the baseline), then runs rounds on the current best verified version: tier 0 on the source,
then tiers 1-3 only while the accumulated evidence fails one of the three tests (localizes,
narrows to one family, explains); a proposal backed by that evidence is verified (correct on
every case, timed against its parent in the same process) and, when it is faster above the
noise floor and not suspect, becomes the parent of the next round. A round whose evidence
explains nothing, or whose families have no applicable rewrite, is inconclusive: the
proposer is not asked to guess. Families that failed or gave no gain on a source are not
tried again on that source (the proposer gets that history), unless the proposer says what is
left of them (`FamilyPolicy`): the rules keep a family open while one of its transforms has not
been rejected there, so an autotune that brought no gain leaves LAUNCH_CONFIG's split loop.

Three refinements keep rounds evidence-backed without giving up early:

* far from speed-of-light (the parent's best case under `LoopConfig.explore_below_sol`), an
  inconclusive decision still tries each family some actionable finding names (low severity
  included), best score first, before the round is called inconclusive;
* a counterfactual recompile that tier 3 confirmed (spills gone, async copies or MMA
  appearing, wider loads) is written into the source and verified first in a round of its
  family (`proposers.rules.overrides`);
* a round that would replay the last one (same parent, inconclusive, nothing ruled out
  since) is not run: the loop stops there.

`LoopConfig.round_time_budget_s` counts the rounds' time from the end of the baseline's
verify, whose cost (first compiles included) is `LoopResult.baseline_wall_s`.

Device time is what a run is short of, so no child job is repeated:

* the initial version gets one verify job (every seed; the gate covers what the validate job
  checks, so that job is skipped) that also times it against eager; its launches and times
  are the baseline *and* round 1's tier-1 profile (with ncu, a profile job adds counters);
* a candidate gets ONE job: the gate and the same-process timing against its parent
  (`Executor.verify(..., time=True)`); when it wins, those times are the new parent's, so no
  timing job follows a promotion;
* tier 1 profiles a parent at most once, and not at all when the parent won a round: its
  verify job's launches and times are its profile; tiers 2 and 3 share one compile job with pass dumps;
  counterfactual recompiles are cached per override; every tier result is cached per source,
  so rounds that stay on one parent re-read evidence at no cost;
* a candidate source is never verified twice; all jobs of a run share one Triton cache.

Plain Python: no Django. The Django worker persists as the loop goes through `LoopObserver`.
"""

from __future__ import annotations

import ast
import json
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from diagnosis.engine import devices
from diagnosis.engine import verdict as policy
from diagnosis.engine.errors import ProposerError, TierUnavailable, TokenBudgetExhausted
from diagnosis.engine.escalation import (
    MECHANISMS,
    Decision,
    actionable,
    choose_family,
    decide,
    for_proposer,
    score,
)
from diagnosis.engine.evidence import Family, Finding, Tier, TierResult
from diagnosis.engine.executor import (
    CaseCheck,
    Executor,
    InputCase,
    ProfileOutcome,
    VerifyOutcome,
)
from diagnosis.engine.ir import CompileResult
from diagnosis.engine.profile import DeviceSpec, ProfileCase
from diagnosis.engine.proposers.base import (
    Candidate,
    CaseShape,
    FamilyPolicy,
    ProposalContext,
    Proposer,
    RoundHistory,
    rejected_families,
)
from diagnosis.engine.proposers.rules import RulesProposer
from diagnosis.engine.proposers.rules.overrides import counterfactual_candidates
from diagnosis.engine.records import (
    CandidateOutcome,
    CaseTiming,
    DecisionRecord,
    EvidenceRef,
    Hypothesis,
    LoopConfig,
    LoopObserver,
    LoopResult,
    NullObserver,
    RoundCost,
    RoundRecord,
    StopReason,
    VersionStats,
    sha256,
)
from diagnosis.engine.tier0 import run_tier0
from diagnosis.engine.tier1 import OTHER_KERNELS, run_tier1
from diagnosis.engine.tier2 import run_tier2
from diagnosis.engine.tier3 import run_tier3
from diagnosis.engine.usage import add_usage
from diagnosis.engine.verdict import Verdict

# a tier-1 profile: the profile job's, or a timed verify job's own runs (VerifyOutcome.profile)
Profiled = ProfileOutcome | VerifyOutcome


# ---------------------------------------------------------------------------------------------
# the loop

# Module-level names the reference side of a module consists of: a candidate may rewrite
# ModelNew and its kernels, never what it is judged against (the verify job takes Model and
# the inputs from the parent, and the parent is a promoted candidate from the second win on).
REFERENCE_NAMES = ("Model", "get_inputs", "get_init_inputs", "get_input_cases", "get_verify_inputs")
# tiers 2 and 3 also compile the cases whose %SOL is under this fraction of case 0's, furthest
# below first (`_Loop._compile_cases`). At 0.5 the suite's fp16 SiLU on the H200 (run of
# 2026-11-30) never had its 2^26 + 5 case compiled: 56 %SOL against 87 for case 0, its 16-bit
# accesses (a mask bound not divisible by 16) unseen, so rounds 2 and 3 ended inconclusive. On an
# H100 (2026-12-05) the swish-clamp's 6001 x 7000 case ran at 69.7 %SOL against 91.4 (0.76).
COMPILE_WORST_BELOW = 0.8
# at most this many lagging cases join case 0 in the compile job. Not only the worst one: fla's
# softmax (first conversion, H200 2026-12-03) sizes its block by the row, and its 4096 x 32000
# case, 63.6 %SOL against 84.8 for case 0, spills 628 bytes on four warps (255 registers); the
# worst case (60.1 %SOL, rows of 256) does not, and no round saw the spills.
COMPILE_LAGGING_MOST = 3


def run_loop(
    source: str,
    *,
    executor: Executor,
    config: LoopConfig,
    observer: LoopObserver | None = None,
    proposer: Proposer | None = None,
) -> LoopResult:
    """Optimize `source` round by round (see the module docstring) and say why it stopped.

    `proposer` defaults to the one `config.proposer` names (the rules proposer). Nothing user
    code does raises out of here: failures become verdicts and stop reasons.
    """
    if proposer is None:
        proposer = default_proposer(config.proposer)
    with tempfile.TemporaryDirectory(prefix="kernelopt-loop-") as tmp:
        # One Triton cache for all of the run's jobs: a kernel compiled by the baseline is not
        # compiled again by every verification of its children (an executor's own cache wins).
        shared_cache = executor.cache_dir is None
        if shared_cache:
            executor.cache_dir = str(Path(tmp) / "triton-cache")
        try:
            return _Loop(source, executor, config, observer or NullObserver(), proposer, Path(tmp)).run()
        finally:
            if shared_cache:
                executor.cache_dir = None


def default_proposer(name: str) -> Proposer:
    if name in ("", "rules"):
        # None: the limit comes from ProposalContext.max_candidates (2: a fallback when the
        # first candidate repeats an earlier one)
        return RulesProposer(max_candidates=None)
    raise ValueError(f"proposer {name!r} needs an instance (pass proposer=...); only 'rules' has a default")


@dataclass
class _Version:
    source: str
    path: str
    stats: VersionStats

    @property
    def sha(self) -> str:
        return self.stats.sha256


class _Meter:
    """Wall and device seconds spent by the executor's jobs since the meter started."""

    def __init__(self, executor: Executor) -> None:
        self.executor = executor
        self.start = len(executor.costs)
        self.t0 = time.perf_counter()

    @property
    def device_s(self) -> float:
        return sum(c.device_s for c in self.executor.costs[self.start :])

    @property
    def wall_s(self) -> float:
        return time.perf_counter() - self.t0


class _Loop:
    def __init__(
        self,
        source: str,
        executor: Executor,
        config: LoopConfig,
        observer: LoopObserver,
        proposer: Proposer,
        workdir: Path,
    ) -> None:
        self.initial_source = source
        self.executor = executor
        self.config = config
        self.observer = observer
        self.proposer = proposer
        self.workdir = workdir
        self.timing_device = devices.get(config.device).accelerator
        # without ncu a timed verify job's own runs are the version's tier-1 profile (its
        # launches and interleaved times); with ncu the profile job runs for the counters
        self.gate_profiles = self.timing_device and not config.ncu
        self.case_shapes: tuple[CaseShape, ...] = ()  # CaseShape per input case, from the baseline's verify
        self.unverifiable = False  # the baseline found no case this device can check
        self.diagnose_only = False  # then rounds gather evidence and propose nothing
        self.baseline_skipped: tuple[str, ...] = ()  # the baseline's cases too big for this device
        # round index -> whether a round on the same evidence might end otherwise (a proposer
        # error that may pass); see `_replays`
        self.retryable = False
        self.retryable_rounds: dict[int, bool] = {}
        self.available = {Tier.TRIAGE, Tier.IR, Tier.COMPILER} | (
            {Tier.PROFILE} if self.timing_device else set()
        )
        # caches, keyed by the sha256 of a version's source
        self.tier_cache: dict[tuple[str, Tier], TierResult | None] = {}
        self.tier_notes: dict[tuple[str, Tier], str] = {}
        self.compile_cache: dict[tuple[str, str], CompileResult | TierUnavailable] = {}
        self.profile_cache: dict[str, Profiled] = {}
        self.launched: dict[str, frozenset[str]] = {}  # the kernels a version's timed cases launched
        self.history: dict[str, list[RoundHistory]] = {}  # parent sha -> RoundHistory of rounds on it
        self.no_rewrite: dict[str, set[Family]] = {}  # parent sha -> families with no applicable rewrite
        self.tried: set[str] = set()  # candidate shas already verified (never verified twice)
        self.device_spec: DeviceSpec | None = None
        self.device_name = ""
        self.tokens = 0
        self.stop_reason: StopReason | None = None  # why a proposer ended the run, when one did

    # -- files

    def _write(self, source: str) -> str:
        digest = sha256(source)
        path = self.workdir / f"v_{digest[:16]}.py"
        if not path.exists():
            path.write_text(source)
        return str(path)

    # -- the run

    def run(self) -> LoopResult:
        t0 = time.perf_counter()
        meter = _Meter(self.executor)
        base_stats, error = self._baseline()
        result = LoopResult(
            initial_source=self.initial_source,
            best_source=self.initial_source,
            initial=base_stats,
            best=base_stats,
            baseline_wall_s=meter.wall_s,
            baseline_device_s=meter.device_s,
        )
        result.skipped_cases = self.baseline_skipped
        if base_stats is None and self.unverifiable:
            # Every case is too big for the interpreter (cpu): nothing can be verified, so
            # nothing is proposed, but tiers 0, 2 and 3 need no execution and still say why
            # the kernel is slow. One round of evidence, recorded like any other; the result
            # says plainly that the kernel itself was never checked.
            parent = _Version(self.initial_source, self._write(self.initial_source),
                              VersionStats(sha256(self.initial_source), ()))  # fmt: skip
            self.diagnose_only = True
            self.observer.round_started(1, parent.source)
            record, _, _ = self._round(1, parent)
            result.rounds.append(record)
            self.observer.round_finished(1, record)
            result.stop_reason = StopReason.DIAGNOSED_ONLY
            result.unchecked = error.removeprefix("no_checkable_case: ")
            result.stop_detail = (
                f"the kernel was NOT checked for correctness on this device ({result.unchecked}); "
                "diagnosis only, nothing proposed"
            )
            return self._finish(result, meter, t0)
        if base_stats is None:
            result.stop_reason = StopReason.INITIAL_FAILED
            result.error = error
            result.stop_detail = f"the initial version failed: {error}"
            return self._finish(result, meter, t0)

        parent = _Version(self.initial_source, self._write(self.initial_source), base_stats)
        chain: list[float | None] = [1.0 if c.time_ms else None for c in base_stats.cases]
        idle = 0
        result.stop_reason = StopReason.ROUND_BUDGET
        result.stop_detail = f"used the round budget ({self.config.round_budget} rounds)"
        # the rounds' own clock: the baseline's verify (compiles, autotuning) is not charged to it
        rounds_t0 = time.perf_counter()
        budget = self.config.round_time_budget_s
        for index in range(1, self.config.round_budget + 1):
            if budget is not None and time.perf_counter() - rounds_t0 > budget:
                result.stop_reason = StopReason.TIME_BUDGET
                result.stop_detail = (
                    f"used the rounds' time budget ({budget:g} s) in {index - 1} round(s); the initial "
                    f"version's verify took {result.baseline_wall_s:.1f} s before it, not counted"
                )
                break
            if self._sol_reached(parent.stats):
                result.stop_reason = StopReason.SOL_REACHED
                result.stop_detail = (
                    f"the best version is at {parent.stats.pct_sol:.1f} %SOL "
                    f">= {100 * self.config.sol_stop_fraction:.0f} %"
                )
                break
            if self.observer.should_stop():
                result.stop_reason = StopReason.CANCELLED
                result.stop_detail = f"stopped by the caller before round {index}"
                break
            last = result.rounds[-1] if result.rounds else None
            if last is not None and self._replays(last, parent):
                # Every tier's result is cached per source and nothing was ruled out since:
                # another round would run no tier and propose nothing. It is not run (a round
                # that did nothing is no round).
                result.stop_reason = StopReason.NOTHING_LEFT
                result.stop_detail = (
                    f"nothing left to try on the best version: round {last.index} found nothing to change "
                    f"and a new round would see the same evidence ({last.reason})"
                )
                break
            self.observer.round_started(index, parent.source)
            self.retryable = False
            record, winner, stop = self._round(index, parent)
            self.retryable_rounds[record.index] = self.retryable
            result.rounds.append(record)
            self.observer.round_finished(index, record)
            if winner is not None:
                for i, s in enumerate(record.outcome.speedups if record.outcome else ()):
                    if i < len(chain) and chain[i] is not None and s is not None:
                        chain[i] *= s
                parent = winner
                result.best_source, result.best = winner.source, winner.stats
                idle = 0
            elif record.verdict is Verdict.INCONCLUSIVE:
                idle += 1
            else:
                idle = 0
            if stop:
                result.stop_reason = self.stop_reason or StopReason.NOTHING_LEFT
                result.stop_detail = stop
                break
            if idle >= self.config.patience:
                result.stop_reason = StopReason.NOTHING_LEFT
                result.stop_detail = f"{idle} consecutive rounds found nothing left to try: {record.reason}"
                break
        else:
            if self._sol_reached(parent.stats):
                result.stop_reason = StopReason.SOL_REACHED
                result.stop_detail = f"the best version is at {parent.stats.pct_sol:.1f} %SOL"
        result.speedups_over_initial = tuple(chain) if any(c is not None for c in chain) else ()
        return self._finish(result, meter, t0)

    def _finish(self, result: LoopResult, meter: _Meter, t0: float) -> LoopResult:
        result.wall_s = time.perf_counter() - t0
        result.device_s = meter.device_s
        result.tokens = self.tokens
        result.device_name = self.device_name
        return result

    def _replays(self, last: RoundRecord, parent: _Version) -> bool:
        """Whether a round on `parent` would replay `last`: it was on the same parent, found
        nothing to change (inconclusive) and no passing failure could end it otherwise. The
        tiers' results are cached per source and nothing was ruled out since, so the same
        evidence would give the same decision."""
        return (
            last.parent_sha256 == parent.sha
            and last.verdict is Verdict.INCONCLUSIVE
            and not self.retryable_rounds.get(last.index, False)
        )

    def _sol_reached(self, stats: VersionStats) -> bool:
        """At the stop fraction of speed-of-light, and no case left far behind case 0: one the
        compile tiers would single out still deserves a round (on an H100 the suite's SiLU
        stopped at 87.3 %SOL with its 2^26 + 5 case at 70.6 against 92.0)."""
        pct = stats.pct_sol
        if pct is None or pct < 100.0 * self.config.sol_stop_fraction:
            return False
        return not _lagging_cases(stats.cases)

    # -- baseline

    def _baseline(self) -> tuple[VersionStats | None, str]:
        """Verify the initial version over every seed; time it (and keep its profile for tier 1)."""
        path = self._write(self.initial_source)
        digest = sha256(self.initial_source)
        outcome = self.executor.verify(
            path, None, seeds=list(self.config.seeds), time=self.gate_profiles, options=self.config.verify_options
        )
        self.case_shapes = _with_launch_ints(_case_shapes(outcome.input_cases), outcome.cases)
        self.launched[digest] = _timed_kernels(outcome)
        self.baseline_skipped = tuple(str(s.get("label", "")) for s in outcome.skipped)
        if not (outcome.ok and outcome.passed):
            self.unverifiable = not self.timing_device and outcome.kind == "no_checkable_case"
            return None, outcome.error_text
        if not self.timing_device:
            cases = tuple(CaseTiming(c.index, None) for c in outcome.cases if c.kind == "timed")
            return VersionStats(digest, cases), ""
        prof: Profiled | None = outcome if self.gate_profiles and outcome.profile is not None else None
        if prof is None:
            # The profile job times ModelNew and the reference per case and records the
            # launches: the baseline's times, and round 1's tier-1 evidence.
            prof = self.executor.profile(path, self.config.ncu)
        self.profile_cache[digest] = prof
        if not prof.ok or prof.profile is None:
            return None, "profiling the initial version failed: " + prof.error_text
        profile = prof.profile
        if profile.device is not None:
            self.device_spec = profile.device
            self.device_name = profile.device.name
        cases = tuple(CaseTiming(c.index, c.time_ms, c.ref_time_ms, c.sol_ms) for c in profile.cases)
        if not all(c.time_ms for c in cases):
            return None, "the initial version could not be timed on every case"
        self.case_shapes = _with_sol(self.case_shapes, {c.index: (c.sol_ms, c.time_ms) for c in cases})
        return VersionStats(digest, cases), ""

    # -- one round

    def _round(self, index: int, parent: _Version) -> tuple[RoundRecord, _Version | None, str]:
        """Diagnose `parent`, propose, verify. Returns the record, the new parent if it won,
        and a reason to stop the loop ('' to carry on)."""
        t0 = time.perf_counter()
        meter = _Meter(self.executor)
        cost = RoundCost()
        record = RoundRecord(
            index=index, parent_sha256=parent.sha, tier_reached=Tier.TRIAGE, verdict=Verdict.INCONCLUSIVE
        )
        history = self.history.setdefault(parent.sha, [])
        no_rewrite = self.no_rewrite.setdefault(parent.sha, set())
        if isinstance(self.proposer, FamilyPolicy):  # e.g. the hybrid: the LLM may retry the rules' families
            failed = self.proposer.excluded_families(history)
        else:
            failed = rejected_families(history)

        results: list[TierResult] = []
        notes: list[str] = []
        stop = ""
        chosen: list[Candidate] = []
        family: Family | None = None
        attempts: list[str] = []
        explored: list[str] = []
        while True:
            excluded = failed | no_rewrite
            decision = self._climb(index, parent, results, excluded, record, cost, notes)
            family = self._family(decision, results, excluded)
            if decision.inconclusive:
                family = self._explore(parent, results, excluded)
                if family is None and not self.diagnose_only:
                    # A family is ruled out by what its proposals did; a counterfactual that
                    # showed its fix in the IR was never one of them, so it is still the candidate.
                    chosen = self._confirmed(index, parent, results, None)[: max(1, self.config.max_candidates)]
                    if chosen:
                        family = chosen[0].family
                        notes.append(
                            f"{decision.reason}{self._ruled_out(parent, results, history, no_rewrite)}; "
                            "tier 3's counterfactual showed its fix in the IR, so its rewrite is verified"
                        )
                        break
                if family is None:
                    record.reason = (
                        decision.reason + self._ruled_out(parent, results, history, no_rewrite) + _outside(results)
                    )
                    break  # no hypothesis: nothing in the evidence points at a change (never a guess)
                explored.append(str(family))
            if family is None:
                record.reason = f"{decision.reason}; the findings map to no untried rewrite family"
                break
            if self.diagnose_only:
                record.reason = (
                    f"{decision.reason}; no proposal: no case is small enough for this device to check "
                    "a rewrite's correctness"
                )
                break
            # A counterfactual that already showed the fix in the IR is the candidate; the
            # proposer is asked only for what it leaves of the round's candidate budget.
            candidates = self._confirmed(index, parent, results, family)
            error = None
            if len(candidates) < max(1, self.config.max_candidates):
                proposed, error = self._propose(index, parent, results, excluded, family, cost)
                candidates += proposed
            if error is not None:
                if error.permanent:
                    stop = f"the proposer cannot continue: {error.message}"
                    if isinstance(error, TokenBudgetExhausted):
                        self.stop_reason = StopReason.TOKEN_BUDGET
                else:
                    self.retryable = True  # an endpoint that timed out may answer next round
                if not candidates:
                    record.reason = error.message
                    break
                notes.append(f"the proposer failed ({error.message}); the counterfactual's rewrite is verified")
            codes = {f.code for r in results for f in r.findings if f.family is family}
            chosen = _pick(candidates, family, codes, self.tried | {parent.sha}, self.config.max_candidates)
            if chosen:
                break
            attempts.append(str(family))
            no_rewrite.add(family)  # try the next family the evidence supports, in this round
        record.tier_reached = max((r.tier for r in results), default=Tier.TRIAGE)
        record.findings = _dedupe([f for r in results for f in r.findings])
        record.tier_results = results
        if explored:
            best = _best_pct_sol(parent.stats)
            notes.append(
                f"far from speed-of-light (best case {best:.1f} %SOL, under "
                f"{100 * self.config.explore_below_sol:.0f} %): tried the families the findings name "
                f"although the evidence explains none: {', '.join(explored)}"
            )
        if attempts:
            notes.append("no applicable rewrite for " + ", ".join(attempts))
        if family is not None:
            record.hypothesis = Hypothesis(family, _mechanism(family), _backing(record.findings, family))
        record.evidence = _evidence(record.findings, family)

        winner: _Version | None = None
        if chosen:
            winner = self._verify_candidates(index, parent, chosen, record, cost, history)
        elif not record.reason:
            record.reason = "no candidate"
        if notes:
            record.reason = "; ".join([record.reason, *notes]) if record.reason else "; ".join(notes)
        if record.verdict is Verdict.INCONCLUSIVE:
            # the reason goes along: an LLM told that its last answer was refused, and why,
            # need not repeat the mistake
            history.append(_history(index, None, Verdict.INCONCLUSIVE, record.reason))
        cost.wall_s = time.perf_counter() - t0
        cost.device_s = meter.device_s
        record.cost = cost
        return record, winner, stop

    def _climb(
        self,
        index: int,
        parent: _Version,
        results: list[TierResult],
        excluded: set[Family],
        record: RoundRecord,
        cost: RoundCost,
        notes: list[str],
    ) -> Decision:
        """Run tiers from the lowest while the evidence fails a test; returns the last decision."""
        available = set(self.available)
        for tier in list(available):
            if self.tier_cache.get((parent.sha, tier), ...) is None:  # failed before on this source
                available.discard(tier)
        while True:
            views = [_view(r, excluded) for r in results]
            decision = decide(views, max_tier=self.config.max_tier, available=available)
            if not self.timing_device and (not decision.climb or decision.next_tier is None):
                # Nothing here can be timed, so no rewrite can be shown faster: the evidence is
                # what a run on this device delivers, and the compile tiers cost about a second
                # (no device). Gather all of it, not only what escalation would stop at.
                higher = sorted(t for t in available if t <= self.config.max_tier
                                and t > max((r.tier for r in results), default=-1))  # fmt: skip
                if higher:
                    decision = replace(decision, climb=True, next_tier=higher[0],
                                       reason=f"{decision.reason}; climbing on: no timing on this device")  # fmt: skip
            if not decision.climb or decision.next_tier is None:
                if results:  # a new decision on the same evidence (a family was ruled out)
                    rec = _decision_record(results[-1].tier, decision)
                    if not record.decisions or record.decisions[-1] != rec:
                        record.decisions.append(rec)
                return decision
            tier = decision.next_tier
            tr = self._tier(tier, parent, results, cost)
            if tr is None:
                notes.append(self.tier_notes.get((parent.sha, tier), f"tier {int(tier)} failed"))
                available.discard(tier)
                continue
            results.append(tr)
            after = decide([*views, _view(tr, excluded)], max_tier=self.config.max_tier, available=available)
            record.decisions.append(_decision_record(tier, after))
            self.observer.tier_done(index, tr, record.decisions[-1])

    def _explore(self, parent: _Version, results: list[TierResult], excluded: set[Family]) -> Family | None:
        """The next family to try when the evidence explains nothing: only far from
        speed-of-light, the best-scored family that some actionable finding (low severity
        included) names and that is not ruled out on this parent; None otherwise."""
        best = _best_pct_sol(parent.stats)
        if best is None or best >= 100.0 * self.config.explore_below_sol:
            return None
        backed = _backed_families([f for r in results for f in r.findings], excluded)
        return backed[0] if backed else None

    def _ruled_out(
        self, parent: _Version, results: list[TierResult], history: list[RoundHistory], no_rewrite: set[Family]
    ) -> str:
        """Far from speed-of-light, why the families the findings name were not tried: '' when
        the version is not far from SOL or the findings name none."""
        best = _best_pct_sol(parent.stats)
        named = _backed_families([f for r in results for f in r.findings], set())
        if best is None or best >= 100.0 * self.config.explore_below_sol or not named:
            return ""
        why = []
        for fam in named:
            tried = next((h for h in reversed(history) if h.family is fam and h.verdict.rejected), None)
            if tried is not None:
                why.append(f"{fam} ({tried.verdict} in round {tried.index})")
            elif fam in no_rewrite:
                why.append(f"{fam} (no applicable rewrite)")
        return (
            f"; far from speed-of-light (best case {best:.1f} %SOL), but every family the findings name "
            f"is ruled out on this version: {', '.join(why)}"
            if why
            else ""
        )

    def _family(self, decision: Decision, results: list[TierResult], excluded: set[Family]) -> Family | None:
        if decision.family is not None and decision.family not in excluded:
            return decision.family
        kept = [f for r in results for f in r.findings if f.family not in excluded]
        return choose_family(kept)

    # -- tiers (each cached per source: a parent is diagnosed once however many rounds it heads)

    def _tier(
        self, tier: Tier, parent: _Version, results: list[TierResult], cost: RoundCost
    ) -> TierResult | None:
        key = (parent.sha, tier)
        if key in self.tier_cache:
            return self.tier_cache[key]
        t0 = time.perf_counter()
        meter = _Meter(self.executor)
        try:
            tr = self._run_tier(tier, parent, results)
        except TierUnavailable as exc:
            tr = None
            self.tier_notes[key] = f"tier {int(tier)} unavailable: {exc}"
        self.tier_cache[key] = tr
        cost.wall_by_tier[int(tier)] = cost.wall_by_tier.get(int(tier), 0.0) + time.perf_counter() - t0
        cost.device_by_tier[int(tier)] = cost.device_by_tier.get(int(tier), 0.0) + meter.device_s
        if tr is not None:
            tr.device_s = meter.device_s
        return tr

    def _run_tier(self, tier: Tier, parent: _Version, results: list[TierResult]) -> TierResult:
        if tier is Tier.TRIAGE:
            launched = self.launched.get(parent.sha, frozenset())
            return run_tier0(parent.source, patterns=self.config.patterns, launched=launched)
        if tier is Tier.PROFILE:
            prof = self.profile_cache.get(parent.sha)
            if prof is None:
                prof = self.executor.profile(parent.path, self.config.ncu)
                self.profile_cache[parent.sha] = prof
            if not prof.ok or prof.profile is None:
                raise TierUnavailable("the profile job failed: " + prof.error_text)
            return run_tier1(prof.profile, source=parent.source)
        if tier is Tier.IR:
            return run_tier2(self._compiled(parent, dumps=self._dumps_in_tier2()), parent.source)
        if tier is Tier.COMPILER:
            compiled = self._compiled(parent, dumps=True)
            prior = [f for r in results if r.tier < Tier.COMPILER for f in r.findings]

            def recompile(overrides: dict[str, object], case: int | None = None) -> CompileResult:
                # a counterfactual compares one specialization: compile only its case
                return self._compiled(parent, dumps=False, overrides=overrides, cases=None if case is None else [case])

            return run_tier3(compiled, parent.source, recompile=recompile, prior=prior)
        raise TierUnavailable(f"unknown tier {tier!r}")

    def _dumps_in_tier2(self) -> bool:
        # One compile job with pass dumps serves tiers 2 and 3 when tier 3 may run: a second
        # job costs a process start, a torch import and the capture again, the dumps only text.
        return self.config.max_tier >= Tier.COMPILER

    def _compiled(
        self,
        parent: _Version,
        *,
        dumps: bool,
        overrides: dict[str, object] | None = None,
        cases: list[int] | None = None,
    ) -> CompileResult:
        """The compile job's result for `parent` (cached): of `cases`, by default the ones
        `_compile_cases` picks."""
        over = json.dumps(overrides or {}, sort_keys=True, default=str)
        cases = cases or self._compile_cases(parent)
        key = (parent.sha, f"dumps={dumps} overrides={over} cases={cases}")
        if key not in self.compile_cache and dumps is False and not overrides:
            key_dumps = (parent.sha, f"dumps=True overrides={over} cases={cases}")
            if key_dumps in self.compile_cache:  # a compile with dumps serves one without
                return self.compile_cache[key_dumps]
        if key in self.compile_cache:
            cached = self.compile_cache[key]
            if isinstance(cached, TierUnavailable):
                raise cached
            return cached
        options: dict[str, object] = {"pass_dumps": dumps}
        if overrides:
            options["overrides"] = overrides
        out = self.executor.compile(parent.path, self.config.target, options, cases=cases)
        if not out.ok or out.result is None:
            err = TierUnavailable("the compile job failed: " + out.error_text)
            self.compile_cache[key] = err
            raise err
        self.compile_cache[key] = out.result
        return out.result

    def _compile_cases(self, parent: _Version) -> list[int] | None:
        """The input cases whose launches tiers 2 and 3 compile: case 0, and the cases whose
        %SOL is under COMPILE_WORST_BELOW of case 0's, furthest below first, at most
        COMPILE_LAGGING_MOST of them (None: case 0 alone). Why: a kernel specializes on its
        arguments' divisibility by 16 and on its constexprs, so a case with odd strides or
        another block compiles to other code; on the H200 (run of 3eb0c9c) 01_gemm's
        3000x5000x2500 case ran at 11 %SOL against 65 % for 4096^3, with 16-bit loads and no
        cp.async pipelining that a compile of case 0 alone never showed."""
        prof = self.profile_cache.get(parent.sha)
        lagging = _lagging_cases(prof.profile.cases if prof is not None and prof.profile is not None else ())
        return [0, *lagging[:COMPILE_LAGGING_MOST]] if lagging else None

    # -- proposing

    def _propose(
        self,
        index: int,
        parent: _Version,
        results: list[TierResult],
        excluded: set[Family],
        family: Family,
        cost: RoundCost,
    ) -> tuple[list[Candidate], ProposerError | None]:
        findings = for_proposer(_dedupe([f for r in results for f in r.findings if f.family not in excluded]), family)
        context = self._context(index, parent, family)
        try:
            candidates = list(self.proposer.propose(parent.source, findings, context))
        except ProposerError as exc:
            self.tokens += exc.tokens
            cost.tokens += exc.tokens
            cost.llm = add_usage(cost.llm, exc.usage)
            return [], exc
        spent = sum(c.tokens for c in candidates)
        self.tokens += spent
        cost.tokens += spent
        for c in candidates:
            cost.llm = add_usage(cost.llm, c.usage)
        return candidates, None

    def _context(self, index: int, parent: _Version, family: Family | None = None) -> ProposalContext:
        return ProposalContext(
            cases=self.case_shapes,
            device=self.device_spec,
            device_kind=self.config.device,
            target=self.config.target,
            history=tuple(self.history.get(parent.sha, [])),
            round_index=index,
            max_candidates=max(2, self.config.max_candidates),
            family=family,
        )

    def _confirmed(
        self, index: int, parent: _Version, results: list[TierResult], family: Family | None
    ) -> list[Candidate]:
        """The rewrites of tier 3's confirmed counterfactuals of `family` (None: of any), not
        verified before."""
        findings = [f for r in results for f in r.findings]
        made = counterfactual_candidates(parent.source, findings, self._context(index, parent, family), family)
        return [c for c in made if sha256(c.source) not in self.tried]

    # -- verifying

    def _verify_candidates(
        self,
        index: int,
        parent: _Version,
        chosen: list[Candidate],
        record: RoundRecord,
        cost: RoundCost,
        history: list[RoundHistory],
    ) -> _Version | None:
        best: tuple[float, _Version, Candidate, CandidateOutcome, Verdict, str] | None = None
        last: tuple[Candidate, CandidateOutcome, Verdict, str] | None = None
        for cand in chosen:
            self.observer.proposal_made(index, cand)
            t0 = time.perf_counter()
            meter = _Meter(self.executor)
            outcome = self._verify(parent, cand)
            outcome = _replace_cost(outcome, time.perf_counter() - t0, meter.device_s)
            cost.verify_wall_s += outcome.wall_s
            cost.verify_device_s += outcome.device_s
            self.tried.add(sha256(cand.source))
            self.observer.proposal_verified(index, cand, outcome)
            verdict, why = self._judge(outcome)
            history.append(_history(index, cand, verdict, why, outcome.speedup))
            last = (cand, outcome, verdict, why)
            if verdict is Verdict.IMPROVED:
                stats = VersionStats(sha256(cand.source), outcome.cases)
                version = _Version(cand.source, self._write(cand.source), stats)
                if best is None or (outcome.speedup or 0.0) > best[0]:
                    best = (outcome.speedup or 0.0, version, cand, outcome, verdict, why)
        if best is not None:
            _, version, cand, outcome, verdict, why = best
        else:
            assert last is not None
            cand, outcome, verdict, why = last
            version = None
        record.proposal = cand
        record.outcome = outcome
        record.verdict = verdict
        record.reason = why if not record.reason else f"{why}; {record.reason}"
        if outcome.dropped_compiles and self.config.compile_timeout_s is not None:
            record.reason += (
                f"; compiles stopped after {self.config.compile_timeout_s:g} s (configs dropped): "
                + ", ".join(outcome.dropped_compiles)
            )
        return version

    def _verify(self, parent: _Version, cand: Candidate) -> CandidateOutcome:
        changed = reference_changes(self.initial_source, cand.source)
        if changed:
            return CandidateOutcome(
                correct=False,
                error_kind="reference_changed",
                message=f"the candidate changes what it is judged against: {', '.join(changed)}",
            )
        path = self._write(cand.source)
        options = dict(self.config.verify_options)
        if self.config.compile_timeout_s is not None:
            options["compile_timeout_s"] = self.config.compile_timeout_s
        # judged against the initial upload's Model and inputs, whose reference outputs the
        # executor computed once for the baseline: no promoted candidate's file is ever the reference
        out = self.executor.verify(parent.path, path, seeds=list(self.config.seeds_for_candidates()),
                                   time=self.timing_device, options=options,
                                   reference=self._write(self.initial_source))  # fmt: skip
        self.launched[sha256(cand.source)] = _timed_kernels(out)
        if self.gate_profiles and out.profile is not None:
            # the candidate's profile came with its gate: if it wins, tier 1 reads it from here
            self.profile_cache[sha256(cand.source)] = out
        timing = out.timing
        cases: tuple[CaseTiming, ...] = ()
        parent_ms: tuple[float | None, ...] = ()
        noise = None
        case_noise: tuple[float | None, ...] = ()
        case_rounds: tuple[tuple[tuple[float, ...], tuple[float, ...]], ...] = ()
        if timing is not None and timing.timed:
            cases = tuple(CaseTiming(c.index, c.candidate_ms, c.reference_ms, c.sol_ms) for c in timing.cases)
            parent_ms = tuple(c.parent_ms for c in timing.cases)
            noise = timing.noise_floor
            case_noise = tuple(c.noise_floor for c in timing.cases)
            case_rounds = tuple((tuple(c.candidate_repeats), tuple(c.parent_repeats)) for c in timing.cases)
            if timing.device is not None and not self.device_name:
                self.device_name = timing.device.name
        elif out.ok and out.passed:
            cases = tuple(CaseTiming(c.index, None) for c in out.cases if c.kind == "timed")
        return CandidateOutcome(
            correct=bool(out.ok and out.passed),
            error_kind=""
            if (out.ok and out.passed)
            else (out.reason or (out.error.kind if out.error else "failed")),
            message="" if (out.ok and out.passed) else out.error_text,
            cases=cases,
            parent_ms=parent_ms,
            noise=noise,
            case_noise=case_noise,
            case_rounds=case_rounds,
            suspect=out.suspect,
            autotune_choices=tuple((c.label, c.autotune_choices) for c in out.cases if c.autotune_choices),
            gate_notes=out.notes,
            checked=tuple(out.checked),
            skipped=tuple(str(s.get("label", "")) for s in out.skipped),
            dropped_compiles=tuple(d.describe() for d in out.compile_dropped),
        )

    def _judge(self, outcome: CandidateOutcome) -> tuple[Verdict, str]:
        """The round's verdict from the gate and the timing (diagnosis.engine.verdict's rules,
        plus the loop's minimum gain)."""
        if not outcome.correct:
            return Verdict.FAILED, f"failed verification ({outcome.error_kind}): {outcome.message}"[:600]
        if outcome.suspect:
            return Verdict.FAILED, "suspect: a case ran faster than the speed-of-light bound"
        if not outcome.timed:
            # a kernel engineer's words: the rewrite is right, its speed is unknown (not "no gain")
            return Verdict.UNTIMED, f"correct on {outcome.coverage}; speed not measured on this device"
        # each case against its own floor (the wider spread of its parent's and its own timings;
        # the largest one when the outcome has no per-case floors), never below the loop's
        # minimum gain
        noise = outcome.case_noise or (outcome.noise,) * len(outcome.cases)
        decisions = [
            policy.decide_case(p, c.time_ms, max(f or policy.MIN_NOISE_FLOOR, self.config.min_gain), c.sol_ms)
            for c, p, f in zip(outcome.cases, outcome.parent_ms, noise, strict=False)
        ]
        overall = policy.overall(True, decisions)
        floor = policy.combined_floor(decisions)
        speed = outcome.speedup or 0.0
        if overall is policy.TimingVerdict.IMPROVED:
            return Verdict.IMPROVED, f"verified: {speed:.3f}x over its parent (floor {100 * floor:.1f} %)"
        if overall is policy.TimingVerdict.SUSPECT:
            return Verdict.FAILED, "suspect: a case ran faster than the speed-of-light bound"
        slower = [c.index for c, d in zip(outcome.cases, decisions, strict=False) if d.slower]
        tail = f"; slower on case(s) {', '.join(map(str, slower))}" if slower else ""
        return (
            Verdict.NO_GAIN,
            f"correct, {speed:.3f}x over its parent: within the floor of {100 * floor:.1f} %{tail}",
        )


# --- helpers --------------------------------------------------------------------------------


def _case_shapes(inputs: Sequence[InputCase]) -> tuple[CaseShape, ...]:
    """The verify job's per-case input shapes as the proposers' CaseShape records (the inputs
    are the parent module's, so they hold for every candidate of the run)."""
    timed = [c for c in inputs if c.kind == "timed"]
    extra = [c for c in inputs if c.kind != "timed"]
    return tuple(CaseShape(i, c.shapes, c.dtypes, c.kind == "timed") for i, c in enumerate(timed + extra))


def _timed_kernels(outcome: VerifyOutcome) -> frozenset[str]:
    """The kernels the timed cases launched; none known when a timed case was not run (too big
    for the interpreter) or the gate failed."""
    timed = [c for c in outcome.cases if c.kind == "timed"]
    if not (outcome.ok and outcome.passed) or not timed or any(s.get("kind") == "timed" for s in outcome.skipped):
        return frozenset()
    return frozenset(k for c in timed for k in c.kernels)


def _with_launch_ints(shapes: tuple[CaseShape, ...], checks: Sequence[CaseCheck]) -> tuple[CaseShape, ...]:
    """The CaseShape records with the integer launch arguments the verify job recorded per case
    (a check's index counts within its kind, a CaseShape's over timed then verify cases)."""
    recorded = {  # derived cases (the gate's own odd shapes) have no CaseShape
        (c.kind == "timed", c.index): c.launch_ints for c in checks if c.launch_ints and c.kind != "derived"
    }
    n_timed = sum(1 for s in shapes if s.timed)
    out = []
    for s in shapes:
        ints = recorded.get((s.timed, s.index if s.timed else s.index - n_timed))
        if ints:
            s = replace(s, launch_ints=tuple((k, tuple(sorted(v.items()))) for k, v in sorted(ints.items())))
        out.append(s)
    return tuple(out)


def _with_sol(
    shapes: tuple[CaseShape, ...], times: dict[int, tuple[float | None, float | None]]
) -> tuple[CaseShape, ...]:
    """The timed cases' CaseShape records with the baseline's speed-of-light and measured times
    (case index -> (sol_ms, time_ms))."""
    def us(ms: float | None) -> float | None:
        return 1000.0 * ms if ms else None

    out = []
    for c in shapes:
        sol_ms, time_ms = times.get(c.index, (None, None))
        out.append(replace(c, sol_us=us(sol_ms), time_us=us(time_ms)) if c.timed and (sol_ms or time_ms) else c)
    return tuple(out)


def _replace_cost(outcome: CandidateOutcome, wall_s: float, device_s: float) -> CandidateOutcome:
    return replace(outcome, wall_s=wall_s, device_s=device_s)


def _view(result: TierResult, excluded: set[Family]) -> TierResult:
    """A tier's result as the decision sees it once some families are ruled out on this source.

    Findings of excluded families go. When the family the tier narrowed to is excluded, the
    tier no longer narrows (the next family needs evidence of its own: climb for it); it
    still localizes, and still explains if an actionable finding of another family remains.
    """
    if not excluded:
        return result
    kept = [f for f in result.findings if f.family not in excluded]
    top = choose_family(result.findings)
    narrows = result.narrows and top not in excluded and choose_family(kept) is not None
    explains = result.explains and bool(actionable(kept))
    return TierResult(
        tier=result.tier,
        findings=kept,
        localizes=result.localizes,
        narrows=narrows,
        explains=explains,
        notes=result.notes,
        data=result.data,
    )


def _decision_record(tier: Tier, decision: Decision) -> DecisionRecord:
    return DecisionRecord(
        tier=tier,
        climb=decision.climb,
        next_tier=decision.next_tier,
        reason=decision.reason,
        family=decision.family,
        failed_tests=tuple(decision.failed_tests),
    )


OUTSIDE_SHARE_PCT = 50.0  # from this share of the kernel time outside the Triton code, a stop says so


def _outside(results: list[TierResult]) -> str:
    """Where most of a case's kernel time is in kernels the module's Triton code does not
    launch (tier 1's T1-OTHER-KERNELS: the wrapper's sort, copies or torch reductions), what an
    inconclusive round says of it: the largest share, on its case."""
    shares = [f for r in results for f in r.findings if f.code == OTHER_KERNELS.code]
    top = max(shares, key=lambda f: f.args["share_pct"], default=None)
    if top is None or top.args["share_pct"] < OUTSIDE_SHARE_PCT:
        return ""
    return (
        f"; case {top.args['case']}: {top.args['share_pct']}% of the forward's kernel time is in kernels other "
        f"than the module's Triton kernels ({top.args['top']}), which no rewrite of them removes"
    )


def _best_pct_sol(stats: VersionStats) -> float | None:
    """The %SOL of the version's case closest to speed-of-light; None when nothing was timed."""
    pcts = [c.pct_sol for c in stats.cases if c.pct_sol is not None]
    return max(pcts) if pcts else None


def _lagging_cases(cases: Sequence[CaseTiming | ProfileCase]) -> list[int]:
    """The cases whose %SOL is under COMPILE_WORST_BELOW of case 0's, furthest below
    speed-of-light first; [] when there is none (or no case 0)."""
    sols = {c.index: c.pct_sol for c in cases if c.pct_sol is not None}
    if 0 not in sols:
        return []
    return sorted((i for i, p in sols.items() if p < COMPILE_WORST_BELOW * sols[0]), key=lambda i: sols[i])


def _backed_families(findings: list[Finding], excluded: set[Family]) -> list[Family]:
    """Families named by an actionable finding (any severity above info), best score first;
    ties keep the order the findings came in."""
    best: dict[Family, float] = {}
    for f in actionable(findings):
        if f.family not in excluded:
            best[f.family] = max(best.get(f.family, 0.0), score(f))
    return sorted(best, key=lambda fam: -best[fam])


def _mechanism(family: Family) -> str:
    return MECHANISMS.get(family, "no known mechanism")


def _backing(findings: list[Finding], family: Family) -> tuple[str, ...]:
    ours = sorted((f for f in findings if f.family is family), key=score, reverse=True)
    return tuple(dict.fromkeys(f.code for f in ours))


def _evidence(findings: list[Finding], family: Family | None) -> list[EvidenceRef]:
    acts = for_proposer(actionable(findings), family)
    return [
        EvidenceRef(
            code=f.code,
            tier=f.tier,
            family=f.family,
            lines=f.lines,
            kernel=f.kernel,
            artefacts=tuple(f"{e.kind}:{e.kernel}:{e.name}".rstrip(":") for e in f.evidence),
        )
        for f in acts
    ]


def _dedupe(findings: list[Finding]) -> list[Finding]:
    return list(dict.fromkeys(findings))


def _pick(
    candidates: list[Candidate], family: Family, codes: set[str], skip: set[str], limit: int
) -> list[Candidate]:
    """Candidates of the hypothesis' family, or composites that address its findings; never
    one already verified or the parent itself."""
    fresh = [c for c in candidates if sha256(c.source) not in skip]
    ours = [c for c in fresh if c.family == family or codes & set(c.findings_addressed)]
    return ours[: max(1, limit)]


def _history(
    index: int, cand: Candidate | None, verdict: Verdict, reason: str, speedup: float | None = None
) -> RoundHistory:
    return RoundHistory(
        index=index,
        family=cand.family if cand is not None else None,
        verdict=verdict,
        proposer=cand.proposer if cand is not None else "",
        findings=tuple(cand.findings_addressed) if cand is not None else (),
        speedup=speedup,
        reason=reason,
        transform=cand.transform if cand is not None else "",
    )


def reference_changes(initial: str, candidate: str) -> list[str]:
    """Names of the reference side (Model, the input functions and the module-level values
    they read) whose definition differs between the two sources; [] when none does."""
    try:
        a, b = ast.parse(initial), ast.parse(candidate)
    except SyntaxError:
        return []  # the verify job reports the syntax error with its line
    defs_a, defs_b = _top_level(a), _top_level(b)
    names = [n for n in REFERENCE_NAMES if n in defs_a]
    used: set[str] = set()
    for n in names:
        used |= {x.id for x in ast.walk(defs_a[n]) if isinstance(x, ast.Name)}
    values = sorted(n for n in used if n in defs_a and n not in REFERENCE_NAMES and not _is_def(defs_a[n]))
    changed = []
    for n in [*names, *values]:
        if n not in defs_b or ast.dump(defs_a[n]) != ast.dump(defs_b[n]):
            changed.append(n)
    return changed


def _top_level(tree: ast.Module) -> dict[str, ast.AST]:
    out: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef):
            out[node.name] = node
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    out[t.id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            out[node.target.id] = node.value
    return out


def _is_def(node: ast.AST) -> bool:
    return isinstance(node, ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef)
