"""The round loop with the real sandboxed cpu executor, the real tiers and the rules proposer.

The loop's logic is tested with a fake timing source in tests/engine/test_loop.py; these run
it end to end through `runner.execute.Executor`, so they live with the runner's tests.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnosis.engine.evidence import Family, Finding, Tier
from diagnosis.engine.loop import run_loop
from diagnosis.engine.proposers.base import Candidate, ProposalContext
from diagnosis.engine.records import LoopConfig, StopReason
from diagnosis.engine.verdict import Verdict
from runner.execute import Executor
from tests.engine.test_loop import Recorder

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_it_runs_end_to_end_with_the_real_cpu_executor(tmp_path: Path) -> None:
    source = (ROOT / "tests" / "kernels" / "vadd_unaligned.py").read_text()
    executor = Executor("cpu", "sm_90", cache_dir=tmp_path / "triton")
    obs = Recorder()
    result = run_loop(
        source,
        executor=executor,
        config=LoopConfig(device="cpu", target="sm_90", round_budget=3, seeds=(0,)),
        observer=obs,
    )
    assert result.initial is not None, result.error
    assert result.rounds, result.stop_detail
    assert result.stop_reason in (StopReason.NOTHING_LEFT, StopReason.ROUND_BUDGET)
    # no timing on cpu: nothing is ever promoted, and no round claims a win
    assert not result.improved
    assert {str(r.verdict) for r in result.rounds} <= {"untimed", "inconclusive", "failed"}
    for r in result.rounds:
        assert Tier.PROFILE not in {d.tier for d in r.decisions}
        if r.verdict is Verdict.INCONCLUSIVE:
            assert r.proposal is None
        else:
            assert r.proposal is not None and r.hypothesis is not None
    jobs = [c.job for c in executor.costs]
    assert jobs.count("compile") <= 1 + 3  # one compile per source, counterfactuals aside
    assert result.device_s == 0.0  # cpu jobs hold no device
    assert obs.events[0][0] == "round_started"


@pytest.mark.slow
def test_the_proposer_sees_every_case_shape_from_the_baseline(tmp_path: Path) -> None:
    """The rules proposer sizes autotune spaces and row limits by the cases: the baseline's
    verify job reports every case's input shapes, timed ones included (too big to run on cpu)."""

    class Recording:
        name = "rules"
        contexts: list[ProposalContext] = []

        def propose(self, source: str, findings: list[Finding], context: ProposalContext) -> list[Candidate]:
            self.contexts.append(context)
            return []

    source = (ROOT / "bench" / "suite" / "09_softmax_fp32.py").read_text()
    proposer = Recording()
    run_loop(
        source,
        executor=Executor("cpu", "sm_90", cache_dir=tmp_path / "triton"),
        config=LoopConfig(device="cpu", target="sm_90", round_budget=1, seeds=(0,)),
        proposer=proposer,
    )
    assert proposer.contexts, "the loop never asked the proposer"
    cases = proposer.contexts[0].cases
    assert [c.timed for c in cases] == [True] * 5 + [False] * 3
    assert cases[0].shapes == ((4096, 8192),) and cases[0].dtypes == ("float32",)
    assert cases[5].shapes == ((37, 129),)


VERIFY_INPUTS = '''

def get_verify_inputs():
    # small enough for the interpreter: the timed case (64 x 8192) is not
    return [[torch.randn(3, 8192)]]
'''


@pytest.mark.slow
def test_a_real_counterfactual_that_removes_the_spills_becomes_the_candidate(tmp_path: Path) -> None:
    """softmax_spills keeps an 8192-wide fp32 row in one warp: ptxas spills (sm_90, compiled on
    cpu), tier 3 recompiles with more warps and the spills go; that recompile's override,
    written at the launch, is the round's candidate, checked for correctness on cpu."""
    source = (ROOT / "tests" / "kernels" / "softmax_spills.py").read_text() + VERIFY_INPUTS
    result = run_loop(
        source,
        executor=Executor("cpu", "sm_90", cache_dir=tmp_path / "triton"),
        config=LoopConfig(device="cpu", target="sm_90", round_budget=1, seeds=(0,)),
    )
    assert result.initial is not None, result.error
    (first,) = result.rounds
    confirmed = [f for f in first.findings if f.code == "CG_COUNTERFACTUAL"]
    assert confirmed and confirmed[0].args["expect"] == "no_spills"
    warps = confirmed[0].args["overrides"]["num_warps"]
    assert first.proposal is not None and first.proposal.family is Family.LAUNCH_CONFIG
    assert f"BLOCK=8192, num_warps={warps})" in first.proposal.source
    assert "CG_COUNTERFACTUAL" in first.proposal.findings_addressed
    assert confirmed[0].args["effect"] in first.proposal.rationale  # e.g. "spills drop from 1044 to 0 bytes"
    # correct on the case the interpreter can run; its speed is not measured on cpu
    assert first.verdict is Verdict.UNTIMED, first.reason
    assert first.outcome.checked == ("verify 0",) and first.outcome.skipped == ("case 0",)
