"""The round loop (diagnosis.engine.loop).

Loop-logic tests (promotion, stop rules, history, budget, SOL stop, cost accounting) use
`FakeTimingExecutor`, a FAKE TIMING SOURCE: it reads each module's times from a
`# fake-ms:` comment instead of running anything, and hands them to the real policy code
(diagnosis.engine.executor.compare_timings, diagnosis.engine.verdict, diagnosis.engine.sol).
The tiers are scripted (`scripted_tiers`) so the tests do not depend on how the real tiers
score a kernel. tests/runner/test_loop_on_cpu.py runs the loop with the real sandboxed cpu
executor, the real tiers and the rules proposer.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from diagnosis.engine import loop as loop_mod
from diagnosis.engine import serialize, sol
from diagnosis.engine.errors import JobError, ProposerError
from diagnosis.engine.evidence import Family, Finding, Severity, Tier, TierResult, register_code
from diagnosis.engine.executor import (
    CaseCheck,
    CaseMeasurement,
    CompileOutcome,
    DroppedCompile,
    InputCase,
    JobCost,
    ProfileOutcome,
    TimingComparison,
    VerifyOutcome,
    compare_timings,
)
from diagnosis.engine.ir import CompileResult
from diagnosis.engine.loop import reference_changes, run_loop
from diagnosis.engine.profile import DeviceSpec, LaunchInfo, ProfileCase, ProfileResult
from diagnosis.engine.proposers.base import Candidate, ProposalContext, RoundHistory, unified_diff
from diagnosis.engine.proposers.rules import excluded_families, failed_transforms
from diagnosis.engine.records import (
    CandidateOutcome,
    DecisionRecord,
    LoopConfig,
    LoopResult,
    NullObserver,
    RoundRecord,
    StopReason,
    sha256,
)
from diagnosis.engine.verdict import TimingVerdict, Verdict

ROOT = Path(__file__).resolve().parents[2]
H200_BW = 4800e9  # datasheet bytes/s the SOL model uses for an H200
N_CASES = 3
JOB_S = 1.5  # what every fake job "costs"

LC = register_code("TEST-LOOP-LC", Tier.TRIAGE, Family.LAUNCH_CONFIG, "test: launch config {n}")
HI = register_code("TEST-LOOP-HINTS", Tier.IR, Family.HINTS, "test: hints {n}")
SP = register_code("TEST-LOOP-SP", Tier.PROFILE, Family.SINGLE_PASS, "test: single pass {n}")

BASE = """\
import torch
import torch.nn as nn
import triton
import triton.language as tl

# fake-ms: {ms}
# fake-sol-ms: {sol}


class Model(nn.Module):
    def forward(self, x):
        return x * 2


@triton.jit
def k(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        k[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out


def get_inputs():
    return [torch.randn(4096)]


def get_init_inputs():
    return []
"""


CHOSEN = "k: BLOCK=256, num_warps=8, num_stages=3"  # what the fake autotuner 'chose'


def module(ms: float = 2.0, sol: float = 0.1) -> str:
    return BASE.format(ms=ms, sol=sol)


def fake_ms(source: str) -> float:
    return float(re.search(r"# fake-ms: ([\d.]+)", source).group(1))


def with_ms(source: str, ms: float, extra: str = "") -> str:
    return re.sub(r"# fake-ms: [\d.]+", f"# fake-ms: {ms}", source) + extra


# ---------------------------------------------------------------------------------------------
# the fake timing source


class FakeTimingExecutor:
    """FAKE TIMING SOURCE for loop-logic tests ONLY: nothing runs.

    Each module states its time per case (`# fake-ms: 2.0`) and its speed-of-light time
    (`# fake-sol-ms: 0.1`); `# fake-incorrect` makes the gate fail. The numbers go through
    the real policy (timing_comparison: medians, noise floor, SOL, suspect). Every job
    records a JobCost of JOB_S seconds on 'cuda', so device seconds are countable.
    """

    def __init__(self, device: str = "cuda") -> None:
        self.device = device
        self.cache_dir: str | None = None
        self.costs: list[JobCost] = []
        self.calls: list[tuple[str, str, str | None]] = []  # (job, module sha, candidate sha)
        self.compiled_cases: list[list[int] | None] = []  # the cases each compile job was given
        self.verify_options: list[dict] = []  # the options each verify job was given

    def _record(self, job: str, path: str, candidate: str | None = None) -> None:
        self.costs.append(JobCost(job, self.device, JOB_S, True))
        cand = sha256(Path(candidate).read_text()) if candidate else None
        self.calls.append((job, sha256(Path(path).read_text()), cand))

    def count(self, job: str) -> int:
        return sum(1 for c in self.calls if c[0] == job)

    def _measured(self, source: str, parent: str | None) -> list[CaseMeasurement]:
        sol = float(re.search(r"# fake-sol-ms: ([\d.]+)", source).group(1))
        cases = []
        slow = re.search(r"# fake-slow-case: (\d+) ([\d.]+)", source)  # one case slower by a factor
        for i in range(N_CASES):
            ms = fake_ms(source) * (float(slow.group(2)) if slow and int(slow.group(1)) == i else 1.0)
            parent_ms: list[float] = []
            if parent is not None:
                parent_ms = [fake_ms(parent)] * 3
                noisy = re.search(r"# fake-noisy-case: (\d+) ([\d.]+)", parent)
                if noisy and int(noisy.group(1)) == i:  # one slow repeat: the case's floor
                    parent_ms[1] *= 1 + float(noisy.group(2))
            cases.append(
                CaseMeasurement(i, f"case {i}", (ms,) * 3, tuple(parent_ms), (3.0,),
                                bytes=int(sol * 1e-3 * H200_BW))  # fmt: skip
            )
        return cases

    def _timing(self, source: str, parent: str | None) -> TimingComparison:
        if self.device == "cpu":
            return TimingComparison(timed=False, reason="cpu")
        return compare_timings(self._measured(source, parent), sol.device_spec("NVIDIA H200", sm_count=132, l2_mb=60.0))

    def verify(self, parent_path: str, candidate_path: str | None = None, seeds=(0, 1, 2), *, cases=None,
               time: bool = True, options=None, reference: str | None = None) -> VerifyOutcome:  # fmt: skip
        self._record("verify", parent_path, candidate_path)
        self.verify_options.append(dict(options or {}))
        source = Path(candidate_path or parent_path).read_text()
        if "# fake-incorrect" in source:
            return VerifyOutcome(ok=False, error=JobError("incorrect", "case 0, seed 0: wrong values"),
                                 reason="incorrect", seeds=list(seeds))  # fmt: skip
        if "# fake-too-big" in source:  # every case over the interpreter's limit, no verify input
            return VerifyOutcome(
                ok=False, error=JobError("no_checkable_case", "no case is small enough to check on this device "
                                         "(limit 65536 elements); add get_verify_inputs() with small shapes"),
                reason="no_checkable_case", seeds=list(seeds),
                skipped=[{"label": f"case {i}", "kind": "timed", "index": i, "numel": 1 << 20} for i in range(N_CASES)],
            )  # fmt: skip
        checks = [
            CaseCheck(
                f"case {i}",
                "timed",
                i,
                4096,
                tuple(seeds),
                True,
                0.0,
                0.0,
                0.0,
                None,
                1,
                ("k",),
                "changes with input",
                0,
                0,
                "float32",
                autotune_choices=(CHOSEN,) if "launch_config applied" in source else (),
                launch_ints={"k": {"n": 4096 + i}},
            )  # fmt: skip
            for i in range(N_CASES)
        ]
        timing = None
        if time:
            parent = Path(parent_path).read_text() if candidate_path else None
            timing = self._timing(source, parent)
        shapes = tuple(InputCase("timed", i, ((4096,),), ("float32",)) for i in range(N_CASES))
        return VerifyOutcome(
            ok=True, passed=True, verdict=timing.verdict if timing else TimingVerdict.UNTIMED, cases=checks,
            checked=[c.label for c in checks], seeds=list(seeds), timing=timing, faster=bool(timing and timing.faster),
            suspect=bool(timing and timing.suspect), speedup=timing.speedup if timing else None,
            input_cases=shapes,
            # like the real executor: a timed gate's own runs are the version's profile
            profile=self._profile(source) if timing and timing.timed else None,
            # `# fake-slow-compile`: the child's compile bound stopped one autotune config
            compile_dropped=(DroppedCompile("k", "BLOCK=1048576, num_warps=4, num_stages=3", 60.0),)
            if "# fake-slow-compile" in source else (),
        )  # fmt: skip

    def profile(self, path: str, ncu: bool = False, *, cases=None, options=None) -> ProfileOutcome:
        self._record("profile", path)
        return ProfileOutcome(ok=True, profile=self._profile(Path(path).read_text()))

    def _profile(self, source: str) -> ProfileResult:
        profile = ProfileResult(
            device=DeviceSpec(name="NVIDIA H200", kind="cuda", sm_count=132, peak_bw_gbs=0.0),
            cases=tuple(
                ProfileCase(
                    index=c.index,
                    time_ms=c.candidate_ms[0],
                    ref_time_ms=3.0,
                    bytes=c.bytes,
                    flops=0,
                    launches=(LaunchInfo("k", (4, 1, 1)),),
                )  # fmt: skip
                for c in self._measured(source, None)
            ),
        )
        return sol.fill_profile(profile)

    def compile(self, path: str, target: str | None = None, options=None, cases=None) -> CompileOutcome:
        self._record("compile", path)
        self.compiled_cases.append(cases)
        return CompileOutcome(
            ok=True, result=CompileResult.from_json({"target": "sm_90", "backend": "cuda", "arch": "90", "kernels": []})
        )


# ---------------------------------------------------------------------------------------------
# scripted tiers and proposer


def finding(code: str, n: int = 0, severity: Severity = Severity.HIGH, gain: float = 2.0) -> Finding:
    return Finding(code, severity, {"n": n}, lines=(17,), kernel="k", gain=gain)


def sufficient(tier: Tier, *findings: Finding) -> TierResult:
    return TierResult(tier, list(findings), localizes=True, narrows=True, explains=True)


Script = dict[Tier, Callable[[str], TierResult]]


def install_script(monkeypatch: pytest.MonkeyPatch, script: Script) -> list[tuple[Tier, str]]:
    """Replace the real tiers by a script tier -> (source -> TierResult); returns the run log.

    Jobs stay as the real tiers make them: tier 1 profiles a parent once, tiers 2/3 compile.
    """
    log: list[tuple[Tier, str]] = []

    def run_tier(self: Any, tier: Tier, parent: Any, results: list[TierResult]) -> TierResult:
        log.append((tier, parent.sha))
        if tier is Tier.PROFILE and parent.sha not in self.profile_cache:
            self.profile_cache[parent.sha] = self.executor.profile(parent.path)
        if tier in (Tier.IR, Tier.COMPILER):
            self._compiled(parent, dumps=True)
        if tier not in script:
            return TierResult(tier)
        return script[tier](parent.source)

    monkeypatch.setattr(loop_mod._Loop, "_run_tier", run_tier)
    return log


@pytest.fixture
def scripted_tiers(monkeypatch: pytest.MonkeyPatch) -> Callable[[Script], list[tuple[Tier, str]]]:
    return lambda script: install_script(monkeypatch, script)


class ScriptedProposer:
    """Proposes, per family in the findings, the parent with its fake time scaled by a factor."""

    name = "rules"

    def __init__(self, factors: dict[Family, float], incorrect: set[Family] = frozenset()) -> None:
        self.factors = factors
        self.incorrect = incorrect
        self.contexts: list[ProposalContext] = []

    def propose(self, source: str, findings: list[Finding], context: ProposalContext) -> list[Candidate]:
        self.contexts.append(context)
        out = []
        skip = context.failed_families()
        for fam in dict.fromkeys(f.family for f in findings):
            if fam not in self.factors or fam in skip:
                continue
            extra = f"\n# {fam} applied in round {context.round_index}\n"
            if fam in self.incorrect:
                extra += "# fake-incorrect\n"
            new = with_ms(source, round(fake_ms(source) * self.factors[fam], 6), extra)
            codes = tuple(f.code for f in findings if f.family is fam)
            out.append(
                Candidate(
                    new, unified_diff(source, new), fam, f"scaled by {self.factors[fam]}", codes, "rules"
                )
            )
        return out


class Recorder(NullObserver):
    def __init__(self, stop_after: int | None = None) -> None:
        self.events: list[tuple] = []
        self.stop_after = stop_after

    def round_started(self, index: int, parent_source: str) -> None:
        self.events.append(("round_started", index, sha256(parent_source)))

    def tier_done(self, index: int, tier_result: TierResult, decision: DecisionRecord) -> None:
        self.events.append(("tier_done", index, int(tier_result.tier), decision.climb))

    def proposal_made(self, index: int, candidate: Candidate) -> None:
        self.events.append(("proposal_made", index, str(candidate.family)))

    def proposal_verified(self, index: int, candidate: Candidate, outcome: CandidateOutcome) -> None:
        self.events.append(("proposal_verified", index, outcome.correct))

    def round_finished(self, index: int, record: RoundRecord) -> None:
        self.events.append(("round_finished", index, str(record.verdict)))

    def should_stop(self) -> bool:
        done = sum(1 for e in self.events if e[0] == "round_finished")
        return self.stop_after is not None and done >= self.stop_after


def run(source: str, proposer: Any, executor: Any = None, observer: Any = None, **config: Any) -> LoopResult:
    config.setdefault("device", "cuda")
    config.setdefault("round_budget", 15)
    return run_loop(source, executor=executor or FakeTimingExecutor(), config=LoopConfig(**config),
                    observer=observer, proposer=proposer)  # fmt: skip


# ---------------------------------------------------------------------------------------------
# promotion, history, stop rules


def test_it_promotes_each_verified_improvement_to_the_parent_of_the_next_round(scripted_tiers) -> None:
    scripted_tiers({Tier.TRIAGE: lambda s: sufficient(Tier.TRIAGE, finding(LC.code))})
    ex = FakeTimingExecutor()
    result = run(module(2.0), ScriptedProposer({Family.LAUNCH_CONFIG: 0.5}), ex, round_budget=3)

    assert [str(r.verdict) for r in result.rounds] == ["improved", "improved", "improved"]
    assert fake_ms(result.best_source) == pytest.approx(0.25)
    # each round's parent is the previous round's winner
    assert result.rounds[0].parent_sha256 == sha256(module(2.0))
    for prev, nxt in zip(result.rounds, result.rounds[1:], strict=False):
        assert nxt.parent_sha256 == sha256(prev.proposal.source)
    assert result.speedups_over_initial == pytest.approx((8.0,) * N_CASES)
    assert result.speedup_over_initial == pytest.approx(8.0)
    assert result.speedup_over_eager == pytest.approx(3.0 / 0.25)
    assert result.winning_tiers == [Tier.TRIAGE] * 3
    assert result.stop_reason is StopReason.ROUND_BUDGET


def test_it_never_retries_a_family_that_failed_or_gave_no_gain_on_the_same_source(scripted_tiers) -> None:
    scripted_tiers(
        {Tier.TRIAGE: lambda s: sufficient(Tier.TRIAGE, finding(LC.code), finding(HI.code, gain=1.5))}
    )
    proposer = ScriptedProposer({Family.LAUNCH_CONFIG: 1.0, Family.HINTS: 0.99})
    result = run(module(2.0), proposer, round_budget=5)

    families = [str(r.proposal.family) if r.proposal else None for r in result.rounds]
    verdicts = [str(r.verdict) for r in result.rounds]
    assert families[:2] == ["launch_config", "hints"]
    assert verdicts[:2] == ["no-gain", "no-gain"]  # 1.0x, and 1.01x is inside the 2 % minimum gain
    assert verdicts[2:] == ["inconclusive"]  # a fourth round would replay the third: not run
    assert result.stop_reason is StopReason.NOTHING_LEFT
    # the proposer was told what failed on this source
    assert proposer.contexts[1].failed_families() == {Family.LAUNCH_CONFIG}
    assert not result.improved and result.speedup_over_initial == pytest.approx(1.0)


class TwoTransforms(ScriptedProposer):
    """LAUNCH_CONFIG with two transforms, as the rules have it: an autotune that does not help
    (1.0x), then a split that halves the time; the rules' family policy decides what is left."""

    def excluded_families(self, history: Sequence[RoundHistory]) -> set[Family]:
        return excluded_families(history)

    def propose(self, source: str, findings: list[Finding], context: ProposalContext) -> list[Candidate]:
        self.contexts.append(context)
        failed = failed_transforms(context.history).get(Family.LAUNCH_CONFIG, set())
        left = [(n, f) for n, f in (("autotune_launch_config", 1.0), ("split_long_loop", 0.5)) if n not in failed]
        if not left:
            return []
        name, factor = left[0]
        new = with_ms(source, round(fake_ms(source) * factor, 6), f"\n# {name} in round {context.round_index}\n")
        return [Candidate(new, unified_diff(source, new), Family.LAUNCH_CONFIG, name, (LC.code,), "rules",
                          transform=name)]  # fmt: skip


def test_a_family_whose_first_transform_brought_no_gain_tries_its_next(scripted_tiers) -> None:
    scripted_tiers({Tier.TRIAGE: lambda s: sufficient(Tier.TRIAGE, finding(LC.code))})
    result = run(module(2.0), TwoTransforms({}), round_budget=2)

    assert [(str(r.verdict), r.proposal.transform) for r in result.rounds] == [
        ("no-gain", "autotune_launch_config"),
        ("improved", "split_long_loop"),
    ]
    assert result.rounds[1].parent_sha256 == result.rounds[0].parent_sha256  # the same version
    assert fake_ms(result.best_source) == pytest.approx(1.0)


def test_a_family_with_nothing_left_ends_the_version(scripted_tiers) -> None:
    """Both transforms rejected on one version: the third round finds the family ruled out."""
    scripted_tiers({Tier.TRIAGE: lambda s: sufficient(Tier.TRIAGE, finding(LC.code))})

    class Neither(TwoTransforms):
        def propose(self, source, findings, context):
            return [replace(c, source=with_ms(c.source, fake_ms(source)), diff="") for c in super().propose(
                source, findings, context)]  # fmt: skip

    result = run(module(2.0), Neither({}), round_budget=4)
    assert [str(r.verdict) for r in result.rounds] == ["no-gain", "no-gain", "inconclusive"]
    assert result.stop_reason is StopReason.NOTHING_LEFT


def test_a_new_parent_starts_with_a_clean_history(scripted_tiers) -> None:
    scripted_tiers({Tier.TRIAGE: lambda s: sufficient(Tier.TRIAGE, finding(LC.code))})

    class OnceThenAgain(ScriptedProposer):
        def propose(self, source, findings, context):  # the second parent may retry launch_config
            return super().propose(source, findings, context)

    result = run(module(2.0), OnceThenAgain({Family.LAUNCH_CONFIG: 0.5}), round_budget=2)
    assert [str(r.proposal.family) for r in result.rounds] == ["launch_config", "launch_config"]


def test_an_incorrect_candidate_fails_and_is_never_promoted(scripted_tiers) -> None:
    scripted_tiers({Tier.TRIAGE: lambda s: sufficient(Tier.TRIAGE, finding(LC.code))})
    result = run(module(2.0), ScriptedProposer({Family.LAUNCH_CONFIG: 0.1}, incorrect={Family.LAUNCH_CONFIG}))

    first = result.rounds[0]
    assert first.verdict is Verdict.FAILED and first.outcome.error_kind == "incorrect"
    assert result.best_source == result.initial_source
    assert result.stop_reason is StopReason.NOTHING_LEFT


def test_a_time_below_speed_of_light_is_suspect_not_a_win(scripted_tiers) -> None:
    scripted_tiers({Tier.TRIAGE: lambda s: sufficient(Tier.TRIAGE, finding(LC.code))})
    result = run(module(2.0, sol=0.5), ScriptedProposer({Family.LAUNCH_CONFIG: 0.1}), round_budget=1)
    assert result.rounds[0].verdict is Verdict.FAILED
    assert result.rounds[0].outcome.suspect
    assert "suspect" in result.rounds[0].reason
    assert not result.improved


def test_it_stops_at_the_sol_fraction(scripted_tiers) -> None:
    scripted_tiers({Tier.TRIAGE: lambda s: sufficient(Tier.TRIAGE, finding(LC.code))})
    # 2.0 ms at 1.0 ms SOL is 50 %SOL; one 0.5x win gives 100 % > 85 %
    result = run(module(2.0, sol=0.95), ScriptedProposer({Family.LAUNCH_CONFIG: 0.5}))
    assert len(result.rounds) == 1
    assert result.stop_reason is StopReason.SOL_REACHED
    assert result.pct_sol == pytest.approx(95.0)


def test_an_initial_version_already_near_sol_runs_no_round(scripted_tiers) -> None:
    log = scripted_tiers({})
    result = run(module(1.0, sol=0.9), ScriptedProposer({}))
    assert result.rounds == [] and log == []
    assert result.stop_reason is StopReason.SOL_REACHED


def test_a_case_far_behind_case_0_keeps_the_loop_going_past_the_sol_fraction(scripted_tiers) -> None:
    """At 85.8 %SOL overall, but case 2 at 70 against 95 for the others: a round runs for it."""
    scripted_tiers({})
    near = module(1.0, sol=0.95)
    assert run(near, ScriptedProposer({})).stop_reason is StopReason.SOL_REACHED
    result = run(near + "# fake-slow-case: 2 1.357\n", ScriptedProposer({}))
    assert result.pct_sol == pytest.approx(85.8, abs=0.1)
    assert result.rounds and result.stop_reason is not StopReason.SOL_REACHED


def test_a_round_that_would_replay_the_last_ones_evidence_is_not_run(scripted_tiers) -> None:
    """Issue 17: rounds that did nothing appeared as rounds. Tier results are cached per source,
    so a second round on the same parent after an inconclusive one would run no tier and
    propose nothing: the loop stops instead, whatever its patience."""
    scripted_tiers({Tier.TRIAGE: lambda s: sufficient(Tier.TRIAGE, finding(LC.code))})
    obs = Recorder()
    result = run(module(2.0), ScriptedProposer({}), observer=obs, patience=3)
    assert [str(r.verdict) for r in result.rounds] == ["inconclusive"]
    assert [e for e in obs.events if e[0] == "round_started"] == [("round_started", 1, sha256(module(2.0)))]
    assert result.stop_reason is StopReason.NOTHING_LEFT
    assert result.stop_detail.startswith("nothing left to try on the best version: round 1 found nothing")


def test_after_a_proposer_error_that_may_pass_the_next_round_asks_again(scripted_tiers) -> None:
    scripted_tiers({Tier.TRIAGE: lambda s: sufficient(Tier.TRIAGE, finding(LC.code))})

    class FlakyOnce(ScriptedProposer):
        def propose(self, source, findings, context):
            if not self.contexts:
                self.contexts.append(context)
                raise ProposerError("the endpoint timed out", permanent=False)
            return super().propose(source, findings, context)

    result = run(module(2.0), FlakyOnce({Family.LAUNCH_CONFIG: 0.5}), round_budget=2)
    assert [str(r.verdict) for r in result.rounds] == ["inconclusive", "improved"]
    assert "timed out" in result.rounds[0].reason


def test_it_stops_when_the_observer_asks(scripted_tiers) -> None:
    scripted_tiers({Tier.TRIAGE: lambda s: sufficient(Tier.TRIAGE, finding(LC.code))})
    obs = Recorder(stop_after=2)
    result = run(module(2.0), ScriptedProposer({Family.LAUNCH_CONFIG: 0.9}), observer=obs)
    assert len(result.rounds) == 2
    assert result.stop_reason is StopReason.CANCELLED


def test_an_incorrect_initial_version_stops_before_any_round(scripted_tiers) -> None:
    log = scripted_tiers({})
    ex = FakeTimingExecutor()
    result = run(module(2.0) + "# fake-incorrect\n", ScriptedProposer({}), ex)
    assert result.stop_reason is StopReason.INITIAL_FAILED
    assert result.initial is None and result.rounds == [] and log == []
    assert result.error.startswith("incorrect")
    assert result.device_s == pytest.approx(JOB_S)


def test_a_permanent_proposer_error_ends_the_run(scripted_tiers) -> None:
    scripted_tiers({Tier.TRIAGE: lambda s: sufficient(Tier.TRIAGE, finding(LC.code))})

    class Broken:
        name = "llm"

        def propose(self, source, findings, context):
            raise ProposerError("bad credentials", permanent=True, tokens=7)

    result = run(module(2.0), Broken())
    assert len(result.rounds) == 1 and result.rounds[0].verdict is Verdict.INCONCLUSIVE
    assert result.stop_reason is StopReason.NOTHING_LEFT and "bad credentials" in result.stop_detail
    assert result.tokens == 7 and result.rounds[0].cost.tokens == 7


def test_a_candidate_that_changes_the_reference_fails_without_a_job(scripted_tiers) -> None:
    scripted_tiers({Tier.TRIAGE: lambda s: sufficient(Tier.TRIAGE, finding(LC.code))})

    class Cheat(ScriptedProposer):
        def propose(self, source, findings, context):
            new = with_ms(source.replace("return x * 2", "return x * 3"), 0.5)
            return [
                Candidate(new, unified_diff(source, new), Family.LAUNCH_CONFIG, "cheat", (LC.code,), "llm")
            ]

    ex = FakeTimingExecutor()
    result = run(module(2.0), Cheat({}), ex, round_budget=1)
    assert result.rounds[0].verdict is Verdict.FAILED
    assert result.rounds[0].outcome.error_kind == "reference_changed"
    assert ex.count("verify") == 1  # the baseline only


@pytest.mark.parametrize(
    ("before", "after", "changed"),
    [
        pytest.param("", "", [], id="same"),
        pytest.param("", "\nBLOCK = 256\n", [], id="new-constant"),
        pytest.param(
            "", "\n\ndef get_inputs():\n    return [torch.randn(8)]\n", ["get_inputs"], id="redefined-inputs"
        ),
        pytest.param("SHAPE = (8,)\n", "SHAPE = (9,)\n", ["SHAPE"], id="value-read-by-inputs"),
    ],
)
def test_reference_changes(before: str, after: str, changed: list[str]) -> None:
    src = (
        "import torch\n"
        + before
        + "\nclass Model:\n    pass\n\n\ndef get_inputs():\n    return [torch.randn(*SHAPE)]\n"
    )
    cand = src.replace(before, after) if before else src + after
    assert reference_changes(src, cand) == changed


# ---------------------------------------------------------------------------------------------
# efficiency: jobs are not repeated


def test_each_parent_is_profiled_and_compiled_once_and_each_candidate_verified_once(scripted_tiers) -> None:
    # tier 0 narrows but explains nothing; tier 1 explains: every round climbs to tier 1
    log = scripted_tiers(
        {
            Tier.TRIAGE: lambda s: TierResult(Tier.TRIAGE, [finding(LC.code)], narrows=True),
            Tier.PROFILE: lambda s: TierResult(Tier.PROFILE, [], localizes=True, explains=True),
        }
    )
    ex = FakeTimingExecutor()
    result = run(module(2.0), ScriptedProposer({Family.LAUNCH_CONFIG: 1.0}), ex, patience=3)

    # round 1: no gain. Round 2, same parent, launch_config ruled out: it climbs to tiers 2
    # and 3 for evidence of another family (one compile) and finds none; a third round would
    # repeat it from the caches, and is not run.
    assert [str(r.verdict) for r in result.rounds] == ["no-gain", "inconclusive"]
    assert ex.count("profile") == 0  # the baseline's verify job is round 1's tier-1 profile
    assert ex.count("verify") == 2  # the baseline and the one candidate
    assert ex.count("compile") == 1  # tiers 2 and 3 share it, later rounds reuse it
    assert [t for t, _ in log] == [Tier.TRIAGE, Tier.PROFILE, Tier.IR, Tier.COMPILER]
    assert [r.tier_reached for r in result.rounds] == [Tier.PROFILE, Tier.COMPILER]
    assert result.rounds[0].cost.device_s == pytest.approx(JOB_S)
    assert result.rounds[0].cost.verify_device_s == pytest.approx(JOB_S)
    assert result.rounds[1].cost.device_by_tier == {
        2: pytest.approx(JOB_S),
        3: 0.0,
    }  # cached tiers cost nothing
    assert result.baseline_device_s == pytest.approx(JOB_S)
    assert result.device_s == pytest.approx(3 * JOB_S)


def test_a_promoted_candidate_reuses_its_verification_times(scripted_tiers) -> None:
    scripted_tiers({Tier.TRIAGE: lambda s: sufficient(Tier.TRIAGE, finding(LC.code))})
    ex = FakeTimingExecutor()
    result = run(module(2.0), ScriptedProposer({Family.LAUNCH_CONFIG: 0.5}), ex, round_budget=2)
    # no timing job and no profile job for the new parents: their gates timed and profiled them
    assert ex.count("profile") == 0 and ex.count("verify") == 3
    assert [c.time_ms for c in result.best.cases] == pytest.approx([0.5] * N_CASES)


def test_with_ncu_the_profile_job_still_runs_for_its_counters(scripted_tiers) -> None:
    scripted_tiers({Tier.TRIAGE: lambda s: sufficient(Tier.TRIAGE, finding(LC.code))})
    ex = FakeTimingExecutor()
    calls = []
    profile = ex.profile
    ex.profile = lambda path, ncu=False, **kw: calls.append(ncu) or profile(path, ncu, **kw)  # type: ignore[method-assign]
    run(module(2.0), ScriptedProposer({Family.LAUNCH_CONFIG: 0.5}), ex, round_budget=1, ncu=True)
    assert calls == [True]  # the baseline's profile: the verify job does not run ncu
    assert ex.calls[0][0] == "verify" and ex.calls[1][0] == "profile"


def test_a_gate_without_a_profile_falls_back_to_the_profile_job(scripted_tiers) -> None:
    scripted_tiers({Tier.PROFILE: lambda s: sufficient(Tier.PROFILE, finding(LC.code))})
    ex = FakeTimingExecutor()
    verify = ex.verify
    ex.verify = lambda *a, **kw: replace(verify(*a, **kw), profile=None)  # type: ignore[method-assign]
    result = run(module(2.0), ScriptedProposer({Family.LAUNCH_CONFIG: 0.5}), ex, round_budget=2)
    # the baseline and the promoted candidate each need one
    assert ex.count("profile") == 2
    assert result.improved and [r.tier_reached for r in result.rounds] == [Tier.PROFILE, Tier.PROFILE]


def test_one_compile_serves_tiers_2_and_3(scripted_tiers) -> None:
    scripted_tiers({Tier.COMPILER: lambda s: sufficient(Tier.COMPILER, finding(HI.code))})
    ex = FakeTimingExecutor()
    result = run(module(2.0), ScriptedProposer({Family.HINTS: 0.5}), ex, round_budget=1)
    assert result.rounds[0].tier_reached is Tier.COMPILER
    assert ex.count("compile") == 1


# ---------------------------------------------------------------------------------------------
# what a round records, and the observer


def test_a_round_records_hypothesis_evidence_proposal_verdict_and_cost(scripted_tiers) -> None:
    scripted_tiers({Tier.TRIAGE: lambda s: sufficient(Tier.TRIAGE, finding(LC.code, 3))})
    result = run(module(2.0), ScriptedProposer({Family.LAUNCH_CONFIG: 0.5}), round_budget=1)
    r = result.rounds[0]
    assert r.index == 1 and r.parent_sha256 == sha256(module(2.0))
    assert r.tier_reached is Tier.TRIAGE
    assert r.hypothesis.family is Family.LAUNCH_CONFIG and r.hypothesis.findings == (LC.code,)
    assert "launch_config" in r.hypothesis.text and LC.code in r.hypothesis.text
    assert [e.code for e in r.evidence] == [LC.code] and r.evidence[0].lines == (17,)
    assert r.proposal.family is Family.LAUNCH_CONFIG and r.proposal.diff.startswith("---")
    assert r.verdict is Verdict.IMPROVED and r.speedup == pytest.approx(2.0)
    assert r.cost.wall_s > 0 and r.cost.device_s == pytest.approx(JOB_S)
    assert r.decisions[-1].climb is False
    # the verify job's per-case autotune choices reach the round and its JSON
    labels = [f"case {i}" for i in range(N_CASES)]
    assert r.outcome.autotune_choices == tuple((label, (CHOSEN,)) for label in labels)
    assert serialize.outcome_json(r.outcome)["autotune_choices"] == {label: [CHOSEN] for label in labels}


def test_the_observer_sees_every_step_in_order(scripted_tiers) -> None:
    scripted_tiers({Tier.TRIAGE: lambda s: sufficient(Tier.TRIAGE, finding(LC.code))})
    obs = Recorder()
    run(module(2.0), ScriptedProposer({Family.LAUNCH_CONFIG: 0.5}), observer=obs, round_budget=1)
    assert [e[0] for e in obs.events] == [
        "round_started",
        "tier_done",
        "proposal_made",
        "proposal_verified",
        "round_finished",
    ]
    assert obs.events[-1] == ("round_finished", 1, "improved")


def test_on_cpu_a_correct_candidate_is_correct_untimed_and_never_promoted(scripted_tiers) -> None:
    log = scripted_tiers({Tier.TRIAGE: lambda s: sufficient(Tier.TRIAGE, finding(LC.code))})
    ex = FakeTimingExecutor(device="cpu")
    result = run(module(2.0), ScriptedProposer({Family.LAUNCH_CONFIG: 0.5}), ex, device="cpu", round_budget=3)
    first = result.rounds[0]
    # never "no gain": it is correct and its speed is unknown here
    assert first.verdict is Verdict.UNTIMED and first.verdict.label == "correct, speed not measured"
    assert first.reason.startswith("correct on every case; speed not measured on this device")
    assert first.outcome.checked == tuple(f"case {i}" for i in range(N_CASES)) and first.outcome.skipped == ()
    assert not result.improved and ex.count("profile") == 0
    assert Tier.PROFILE not in [t for t, _ in log]
    assert result.speedups_over_initial == ()


def test_a_device_that_cannot_time_gathers_every_compile_tier(scripted_tiers) -> None:
    """On cpu nothing can be shown faster, so the round climbs to tier 3 even when tier 0's
    evidence would have sufficed on a device."""
    log = scripted_tiers({Tier.TRIAGE: lambda s: sufficient(Tier.TRIAGE, finding(LC.code))})
    run(module(2.0), ScriptedProposer({Family.LAUNCH_CONFIG: 0.5}), FakeTimingExecutor(device="cpu"),
        device="cpu", round_budget=1)  # fmt: skip
    assert [t for t, _ in log] == [Tier.TRIAGE, Tier.IR, Tier.COMPILER]


def test_on_a_timing_device_sufficient_tier0_evidence_stops_the_climb(scripted_tiers) -> None:
    log = scripted_tiers({Tier.TRIAGE: lambda s: sufficient(Tier.TRIAGE, finding(LC.code))})
    run(module(2.0), ScriptedProposer({Family.LAUNCH_CONFIG: 0.5}), FakeTimingExecutor(), round_budget=1)
    assert [t for t, _ in log] == [Tier.TRIAGE]



def test_the_proposer_sees_each_timed_cases_speed_of_light_from_the_baseline(scripted_tiers) -> None:
    """LAUNCH_CONFIG keeps the fixed launch for launch-bound sizes: it reads which cases those
    are from the baseline profile's SOL times, and sizes from the recorded launches."""
    scripted_tiers({Tier.TRIAGE: lambda s: sufficient(Tier.TRIAGE, finding(LC.code))})
    proposer = ScriptedProposer({Family.LAUNCH_CONFIG: 0.5})
    run(module(2.0, sol=0.25), proposer, FakeTimingExecutor(), round_budget=1)
    cases = proposer.contexts[0].cases
    assert [c.timed for c in cases] == [True] * N_CASES
    assert [c.sol_us for c in cases] == pytest.approx([250.0] * N_CASES, rel=1e-3)
    # the baseline's measured times too: with SOL they tell how much tuning could win per case
    assert [c.time_us for c in cases] == pytest.approx([fake_ms(module(2.0, sol=0.25)) * 1000.0] * N_CASES)
    # and the integer arguments of each case's launches, as the baseline's verify job saw them
    assert [c.ints("k") for c in cases] == [{"n": 4096 + i} for i in range(N_CASES)]
    assert cases[0].ints("other_kernel") == {}


def test_a_noisy_case_does_not_set_the_bar_for_the_others(scripted_tiers) -> None:
    """Case 0's parent timings spread by 40 %, the others' by nothing: a 1.3x candidate clears
    the combined floor (geomean of 1 + each case's floor, 13.4 %), where the largest floor alone
    (40 %) would have called it noise."""
    scripted_tiers({Tier.TRIAGE: lambda s: sufficient(Tier.TRIAGE, finding(LC.code))})
    noisy = module(2.0) + "# fake-noisy-case: 0 0.4\n"
    result = run(noisy, ScriptedProposer({Family.LAUNCH_CONFIG: 1 / 1.3}), FakeTimingExecutor(), round_budget=1)
    first = result.rounds[0]
    assert first.outcome is not None
    assert first.outcome.case_noise == pytest.approx((0.4, 0.01, 0.01))
    # the rounds behind the floor are kept: the parent's slow second round in case 0
    cand_rounds, parent_rounds = first.outcome.case_rounds[0]
    assert parent_rounds == pytest.approx((2.0, 2.8, 2.0)) and cand_rounds == pytest.approx((2.0 / 1.3,) * 3)
    rounds_json = serialize.loop_result_json(result, sources=False, rounds=True)["rounds"][0]["outcome"]["case_rounds"]
    assert rounds_json[0]["parent_ms"] == [2.0, 2.8, 2.0] and len(rounds_json) == len(first.outcome.cases)
    assert first.verdict is Verdict.IMPROVED, first.reason
    assert "floor 13.4 %" in first.reason  # (1.40 * 1.02 * 1.02) ** (1/3) - 1: floors of at least the 2 % minimum gain


def test_recorded_launch_sizes_go_to_the_case_of_the_same_kind_and_index() -> None:
    from types import SimpleNamespace

    from diagnosis.engine.proposers.base import CaseShape

    shapes = (CaseShape(0, ((8,),), ("float32",)), CaseShape(1, ((9,),), ("float32",)),
              CaseShape(2, ((3,),), ("float32",), timed=False))  # fmt: skip
    checks = [
        SimpleNamespace(kind="timed", index=1, launch_ints={"k": {"n": 9}}),
        SimpleNamespace(kind="verify", index=0, launch_ints={"k": {"n": 3}}),
    ]
    out = loop_mod._with_launch_ints(shapes, checks)
    assert [c.ints("k") for c in out] == [{}, {"n": 9}, {"n": 3}]


@pytest.mark.parametrize(
    ("pct_sol", "expected"),
    [
        # 01_gemm on the H200 (run of 3eb0c9c): the 3000x5000x2500 case at 11.3 %SOL
        pytest.param([64.8, 58.9, 57.5, 12.9, 11.3], [0, 4, 3], id="odd-cases-far-below-case-0"),
        # 08_silu_fp16 on the H200 (2026-11-30): 2^26 + 5 elements, every access 16-bit
        pytest.param([86.6, 88.0, 56.1, 86.2, 83.8], [0, 2], id="an-odd-length-well-below-case-0"),
        # 28_swish_clamp_fp16 autotuned, on an H100 (2026-12-05): 6001 x 7000, also 16-bit
        pytest.param([91.4, 92.4, 70.5, 91.5, 69.7], [0, 4, 2], id="an-odd-size-a-fifth-below-case-0"),
        # fla's softmax (first conversion, H200 2026-12-03): case 2's 32000-wide rows spill, the
        # worst case's 256-wide ones do not
        pytest.param([84.8, 85.9, 63.6, 83.1, 60.1], [0, 4, 2], id="every-lagging-case-not-only-the-worst"),
        pytest.param([80.0, 10.0, 20.0, 30.0, 40.0, 50.0], [0, 1, 2, 3], id="at-most-three-lagging-cases"),
        pytest.param([75.0, 74.0, 70.0, 72.0, 61.0], None, id="cases-alike"),
        pytest.param([20.0, 60.0, 70.0], None, id="case-0-is-the-worst"),
        pytest.param([64.8, None, 20.0], [0, 2], id="an-untimed-case-is-left-out"),
        pytest.param([64.8], None, id="one-case"),
    ],
)
def test_tiers_2_and_3_also_compile_the_cases_far_below_case_0(
    tmp_path: Path, pct_sol: list[float | None], expected: list[int] | None
) -> None:
    from diagnosis.engine.loop import _Loop, _Version
    from diagnosis.engine.records import VersionStats

    loop = _Loop("x = 1\n", FakeTimingExecutor(), LoopConfig(device="cuda"), None, None, tmp_path)
    (tmp_path / "k.py").write_text("x = 1\n")
    version = _Version("x = 1\n", str(tmp_path / "k.py"), VersionStats(sha256="s"))
    cases = tuple(ProfileCase(i, 1.0, 1.0, 0, 0, pct_sol=p) for i, p in enumerate(pct_sol))
    loop.profile_cache["s"] = ProfileOutcome(ok=True, profile=ProfileResult(device=None, cases=cases))
    assert loop._compile_cases(version) == expected
    loop._compiled(version, dumps=True)
    assert loop.executor.compiled_cases == [expected]


# ---------------------------------------------------------------------------------------------
# exploration far from speed-of-light


def row_sum_tiers(source: str, tier: Tier) -> TierResult:
    """The H200 row sum at 8.7 %SOL: tier 0 names an atomic reduction (whose family has no
    rewrite for its 2-D grid) and, at low severity, a fixed launch; nothing deeper explains."""
    if tier is Tier.TRIAGE:
        findings = [
            Finding("T0-ATOMIC-REDUCTION", Severity.MEDIUM, {}, lines=(17,), kernel="k"),
            Finding("T0-NO-AUTOTUNE", Severity.LOW, {}, lines=(15,), kernel="k"),
        ]
        return TierResult(tier, findings, localizes=True, narrows=True, explains=False)
    if tier is Tier.PROFILE:
        return TierResult(tier, [Finding("T1-MEMORY-BOUND", Severity.MEDIUM, {}, kernel="k")], localizes=True)
    return TierResult(tier)


EXPLORATION = [
    # best case at 8.7 %SOL: block_reduction has no rewrite, so the launch config is tried
    pytest.param(0.174, row_sum_tiers, Family.LAUNCH_CONFIG, id="row-sum-far-from-sol-tries-launch-config"),
    # the same evidence at 60 %SOL: nothing explains a change, so nothing is guessed
    pytest.param(1.2, row_sum_tiers, None, id="row-sum-near-sol-is-inconclusive"),
    # far from SOL but no finding names a family: inconclusive keeps its meaning
    pytest.param(0.174, lambda s, t: TierResult(t, localizes=True), None, id="far-from-sol-without-findings"),
]


@pytest.mark.parametrize(("sol_ms", "tiers", "family"), EXPLORATION)
def test_far_from_sol_every_backed_family_is_tried_before_inconclusive(
    scripted_tiers, sol_ms: float, tiers: Callable[[str, Tier], TierResult], family: Family | None
) -> None:
    scripted_tiers({t: (lambda s, t=t: tiers(s, t)) for t in Tier})
    proposer = ScriptedProposer({Family.LAUNCH_CONFIG: 0.5})
    result = run(module(2.0, sol=sol_ms), proposer, round_budget=1)
    first = result.rounds[0]
    assert first.tier_reached is Tier.COMPILER  # every tier ran first: exploration follows the evidence
    if family is None:
        assert first.verdict is Verdict.INCONCLUSIVE and first.proposal is None and first.hypothesis is None
        assert "far from speed-of-light" not in first.reason
        return
    assert first.proposal.family is family and first.verdict is Verdict.IMPROVED
    assert first.hypothesis.family is family and first.hypothesis.findings == ("T0-NO-AUTOTUNE",)
    # both families the findings name were tried, best-scored first, in the one round
    assert len(proposer.contexts) == 2
    assert "best case 8.7 %SOL" in first.reason and "block_reduction, launch_config" in first.reason
    assert "no applicable rewrite for block_reduction" in first.reason


def test_exploration_ends_inconclusive_once_every_backed_family_is_ruled_out(scripted_tiers) -> None:
    scripted_tiers({t: (lambda s, t=t: row_sum_tiers(s, t)) for t in Tier})
    result = run(module(2.0, sol=0.174), ScriptedProposer({Family.LAUNCH_CONFIG: 1.0}), round_budget=3)
    verdicts = [str(r.verdict) for r in result.rounds]
    assert verdicts[0] == "no-gain" and result.rounds[0].proposal.family is Family.LAUNCH_CONFIG
    assert verdicts[1] == "inconclusive" and result.rounds[1].proposal is None
    # the round says that the families the findings name are ruled out here, and why
    assert "block_reduction (no applicable rewrite)" in result.rounds[1].reason
    assert "launch_config (no-gain in round 1)" in result.rounds[1].reason


# ---------------------------------------------------------------------------------------------
# a confirmed counterfactual becomes the candidate


def spill_counterfactual(effect: str) -> tuple[Finding, Finding]:
    """Tier 3's spill cause and its confirmed counterfactual: num_warps=16 and `effect`."""
    cause = Finding("CG_SPILL_CAUSE", Severity.HIGH, {"kernel": "k", "reason": "a 2^15-element row in 4 warps"},
                    lines=(17,), kernel="k")  # fmt: skip
    cf = Finding(
        "CG_COUNTERFACTUAL", Severity.MEDIUM,
        {"hypothesis": "num_warps=16", "overrides": {"num_warps": 16}, "expect": "no_spills",
         "tests": "CG_SPILL_CAUSE", "effect": effect},
        kernel="k", family_override=Family.LAUNCH_CONFIG,
    )  # fmt: skip
    return cause, cf


def test_a_counterfactual_that_showed_the_fix_is_the_candidate(scripted_tiers) -> None:
    """Tier 3 recompiled with num_warps=16 and every spill went: that rewrite is verified,
    whether or not the proposer has one for the family (here it has none)."""
    cause, cf = spill_counterfactual("spills drop from 1240 to 0 bytes (registers 255 -> 128)")
    scripted_tiers(
        {
            Tier.TRIAGE: lambda s: TierResult(Tier.TRIAGE, [finding(LC.code, severity=Severity.LOW)], narrows=True),
            Tier.COMPILER: lambda s: sufficient(Tier.COMPILER, cause, cf),
        }
    )
    proposer = ScriptedProposer({})
    result = run(module(2.0), proposer, round_budget=1)
    first = result.rounds[0]
    assert first.tier_reached is Tier.COMPILER and first.proposal is not None
    assert "BLOCK=1024, num_warps=16)" in first.proposal.source
    assert first.proposal.family is Family.LAUNCH_CONFIG and first.proposal.proposer == "rules"
    assert first.proposal.findings_addressed == ("CG_COUNTERFACTUAL", "CG_SPILL_CAUSE")
    assert "spills drop from 1240 to 0 bytes" in first.proposal.rationale
    assert first.outcome is not None and first.outcome.correct
    assert proposer.contexts == []  # the counterfactual filled the round's one candidate


def test_a_counterfactual_is_verified_after_its_familys_rewrite_brought_no_gain(scripted_tiers) -> None:
    """The H200 cross entropy (liger, first conversion): round 1's autotune of the launch brought
    no gain, which ruled LAUNCH_CONFIG out; round 2 climbed to tier 3, whose recompile with
    num_warps=16 removed every spill, and ended inconclusive. The counterfactual was never
    proposed: it is the round's candidate, and once verified it is not proposed again."""
    cause, cf = spill_counterfactual("spills drop from 220 to 0 bytes (registers 255 -> 85)")
    scripted_tiers(
        {
            Tier.TRIAGE: lambda s: sufficient(Tier.TRIAGE, finding(LC.code)),
            Tier.COMPILER: lambda s: TierResult(Tier.COMPILER, [cause, cf], localizes=True),
        }
    )
    proposer = ScriptedProposer({Family.LAUNCH_CONFIG: 1.0})
    result = run(module(2.0), proposer, round_budget=3)
    first, second, third = result.rounds
    assert first.verdict is Verdict.NO_GAIN and first.tier_reached is Tier.TRIAGE
    assert second.tier_reached is Tier.COMPILER and second.proposal is not None
    assert "BLOCK=1024, num_warps=16)" in second.proposal.source
    assert second.proposal.family is Family.LAUNCH_CONFIG and second.hypothesis.family is Family.LAUNCH_CONFIG
    assert "spills drop from 220 to 0 bytes" in second.proposal.rationale
    assert "launch_config (no-gain in round 1)" in second.reason and "counterfactual showed its fix" in second.reason
    assert len(proposer.contexts) == 1  # the proposer was not asked again for a ruled-out family
    assert third.verdict is Verdict.INCONCLUSIVE and third.proposal is None


# ---------------------------------------------------------------------------------------------
# budgets that survive slow compiles


class SlowBaselineExecutor(FakeTimingExecutor):
    """The initial version's verify takes `baseline_s` (its first compile, say two minutes on
    the H200 for a 2^20-element block): the rounds' time budget must not pay for it."""

    def __init__(self, baseline_s: float) -> None:
        super().__init__()
        self.baseline_s = baseline_s

    def verify(self, parent_path: str, candidate_path: str | None = None, *args: Any, **kwargs: Any) -> VerifyOutcome:
        if candidate_path is None and self.count("verify") == 0:
            time.sleep(self.baseline_s)
        return super().verify(parent_path, candidate_path, *args, **kwargs)


class SlowProposer(ScriptedProposer):
    def propose(self, source, findings, context):
        time.sleep(0.2)  # each round costs at least this
        return super().propose(source, findings, context)


def test_the_rounds_time_budget_starts_after_the_initial_versions_verify(scripted_tiers) -> None:
    scripted_tiers({Tier.TRIAGE: lambda s: sufficient(Tier.TRIAGE, finding(LC.code))})
    ex = SlowBaselineExecutor(baseline_s=0.6)
    result = run(module(2.0), SlowProposer({Family.LAUNCH_CONFIG: 0.9}), ex, round_time_budget_s=0.3)
    assert result.baseline_wall_s >= 0.6  # its cost is recorded apart
    # a baseline longer than the whole budget still leaves the rounds theirs
    assert 1 <= len(result.rounds) < 15
    assert result.stop_reason is StopReason.TIME_BUDGET
    assert "time budget (0.3 s)" in result.stop_detail and "not counted" in result.stop_detail


def test_a_config_whose_compile_ran_past_the_bound_is_named_in_the_round(scripted_tiers) -> None:
    scripted_tiers({Tier.TRIAGE: lambda s: sufficient(Tier.TRIAGE, finding(LC.code))})

    class SlowCompile(ScriptedProposer):
        def propose(self, source, findings, context):
            return [replace(c, source=c.source + "# fake-slow-compile\n") for c in super().propose(source, findings, context)]

    ex = FakeTimingExecutor()
    result = run(module(2.0), SlowCompile({Family.LAUNCH_CONFIG: 0.5}), ex, round_budget=1, compile_timeout_s=60.0)
    first = result.rounds[0]
    # the bound reaches the candidate's verify job only: the baseline is measured as uploaded
    assert [o.get("compile_timeout_s") for o in ex.verify_options] == [None, 60.0]
    assert first.outcome.dropped_compiles == ("k (BLOCK=1048576, num_warps=4, num_stages=3)",)
    assert "compiles stopped after 60 s (configs dropped): k (BLOCK=1048576" in first.reason
    assert first.verdict is Verdict.IMPROVED  # the other configs still won
    stored = serialize.outcome_json(first.outcome)
    assert serialize.outcome_from_json(stored).dropped_compiles == first.outcome.dropped_compiles


def test_a_kernel_no_case_of_which_could_be_checked_says_it_was_not_checked(scripted_tiers) -> None:
    """Issue 17: a doubled output ended 'done, Best v1' on cpu: its inputs were too big for the
    interpreter and it had no verify inputs. The run says the kernel was NOT checked."""
    scripted_tiers({Tier.TRIAGE: lambda s: sufficient(Tier.TRIAGE, finding(LC.code))})
    proposer = ScriptedProposer({Family.LAUNCH_CONFIG: 0.5})
    ex = FakeTimingExecutor(device="cpu")
    result = run(module(2.0) + "# fake-too-big\n", proposer, ex, device="cpu")
    assert result.stop_reason is StopReason.DIAGNOSED_ONLY and not result.checked
    assert result.stop_detail.startswith("the kernel was NOT checked for correctness on this device")
    assert result.unchecked.startswith("no case is small enough") and result.initial is None
    assert result.skipped_cases == tuple(f"case {i}" for i in range(N_CASES))
    (only,) = result.rounds  # evidence only: nothing proposed, nothing verified
    assert only.proposal is None and proposer.contexts == [] and ex.count("verify") == 1
    assert "no case is small enough for this device to check a rewrite's correctness" in only.reason
    summary = serialize.summary_json(result, best_proposal_id=None, attempt=1)
    assert summary["checked"] is False and summary["unchecked"] == result.unchecked


def test_tier0_is_told_which_kernels_each_parents_timed_cases_launched(monkeypatch) -> None:
    """A library module launches different kernels per shape; tier 0 leaves out findings on
    the ones no timed case ran (the baseline's gate, then each promoted candidate's)."""
    told: list[frozenset[str]] = []

    def tier0(source: str, **kw: Any) -> TierResult:
        told.append(kw["launched"])
        return sufficient(Tier.TRIAGE, finding(LC.code))

    monkeypatch.setattr(loop_mod, "run_tier0", tier0)
    result = run(module(2.0), ScriptedProposer({Family.LAUNCH_CONFIG: 0.5}), FakeTimingExecutor(), round_budget=2)
    assert [str(r.verdict) for r in result.rounds] == ["improved", "improved"]
    assert told == [frozenset({"k"}), frozenset({"k"})]
