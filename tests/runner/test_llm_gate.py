"""LLM answers through the real gate: the round loop with the LLM proposer (scripted stand-in,
real client) and the real sandboxed cpu executor (Triton's interpreter).

Tier 0 is scripted to find one launch-config problem and no other tier runs, so each case costs
the baseline's verify job and the answer's; everything after the answer is the product's code:
the loop's reference check, the verify job in the child, the verdict. Answers that try to cheat
the gate must be refused: the comparison happens in the worker, out of the candidate's process
(runner.gate), so patching the verifier or a decoy launch cannot get a wrong answer verified.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnosis.engine import loop as loop_mod
from diagnosis.engine.evidence import Tier, TierResult
from diagnosis.engine.loop import run_loop
from diagnosis.engine.proposers.llm import LLMConfig, LLMProposer
from diagnosis.engine.records import LoopConfig, RoundRecord
from diagnosis.engine.verdict import Verdict
from runner.execute import Executor
from tests.conftest import GOOD_SOURCE, PROPOSED_SOURCE
from tests.engine.test_loop import LC, finding, sufficient
from tests.llm_standin import Reply, StandIn, answer

pytestmark = pytest.mark.slow

FORWARD = """\
class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        double_kernel[(triton.cdiv(n, 128),)](x, out, n, BLOCK=128)
        return out
"""
assert FORWARD in GOOD_SOURCE


def with_model_new(body: str, prelude: str = "") -> str:
    return GOOD_SOURCE.replace(FORWARD, prelude + body)


WRONG = GOOD_SOURCE.replace("tl.load(x_ptr + offs, mask=mask) * 2", "tl.load(x_ptr + offs, mask=mask) * 3")
EDITS_MODEL = WRONG.replace("        return x * 2\n", "        return x * 3\n", 1)
# reaches into the harness that judges it (in today's gate, the same process) and makes every
# comparison pass; its kernel is wrong
PATCHES_VERIFIER = WRONG.replace(
    "class ModelNew(nn.Module):\n",
    "class ModelNew(nn.Module):\n"
    "    def __init__(self):\n"
    "        super().__init__()\n"
    "        import sys\n\n"
    "        gate = sys.modules.get('runner.childlib.verify')\n"
    "        if gate is not None:\n"
    "            passing = gate.Comparison(True)\n"
    "            gate.compare_outputs = lambda *args, **kwargs: passing\n\n",
)
# computes once per shape and hands back the stored answer ever after
CACHES_OUTPUTS = with_model_new(
    """\
class ModelNew(nn.Module):
    def forward(self, x):
        key = tuple(x.shape)
        if key not in _ANSWERS:
            out = torch.empty_like(x)
            n = x.numel()
            double_kernel[(triton.cdiv(n, 128),)](x, out, n, BLOCK=128)
            _ANSWERS[key] = out
        return _ANSWERS[key].clone()
""",
    prelude="_ANSWERS = {}\n\n\n",
)
# the reference does the work; no kernel runs
CALLS_REFERENCE = with_model_new(
    """\
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.reference = Model()

    def forward(self, x):
        return self.reference(x)
"""
)
# a kernel runs (so a launch is recorded) but its output is thrown away; PyTorch does the work
DECOY_LAUNCH = with_model_new(
    """\
class ModelNew(nn.Module):
    def forward(self, x):
        scratch = torch.empty_like(x)
        n = x.numel()
        double_kernel[(triton.cdiv(n, 128),)](x, scratch, n, BLOCK=128)
        return x * 2
"""
)


@pytest.fixture
def one_finding(monkeypatch: pytest.MonkeyPatch) -> None:
    def run_tier(self, tier: Tier, parent, results) -> TierResult:
        if tier is Tier.TRIAGE:
            return sufficient(Tier.TRIAGE, finding(LC.code))
        return TierResult(tier)

    monkeypatch.setattr(loop_mod._Loop, "_run_tier", run_tier)


def one_round(standin: StandIn, module: str, tmp_path: Path) -> tuple[RoundRecord, Executor]:
    standin.script(Reply(answer(module, addresses=(LC.code,))))
    executor = Executor("cpu", "sm_90", cache_dir=tmp_path / "triton")
    proposer = LLMProposer(LLMConfig(base_url=standin.url, model="kernel-coder", max_retries=0))
    result = run_loop(
        GOOD_SOURCE,
        executor=executor,
        config=LoopConfig(device="cpu", target="sm_90", round_budget=1, seeds=(0,), max_tier=Tier.TRIAGE),
        proposer=proposer,
    )
    assert result.initial is not None, result.error
    assert len(standin.requests) == 1
    (record,) = result.rounds
    assert record.proposal is not None and record.proposal.proposer == "llm"
    return record, executor


def test_a_good_rewrite_passes_the_gate(llm_standin: StandIn, one_finding, tmp_path: Path) -> None:
    record, _ = one_round(llm_standin, PROPOSED_SOURCE, tmp_path)
    assert record.outcome is not None and record.outcome.correct, record.outcome
    # correct on every case; on cpu nothing is timed, so it is neither faster nor slower
    assert record.verdict is Verdict.UNTIMED


@pytest.mark.parametrize(
    ("module", "kinds"),
    [
        pytest.param(WRONG, {"incorrect"}, id="wrong"),
        pytest.param(CACHES_OUTPUTS, {"constant_output"}, id="caches-outputs"),
        pytest.param(CALLS_REFERENCE, {"no_triton_launch"}, id="calls-the-reference"),
        pytest.param(PATCHES_VERIFIER, set(), id="patches-the-verifier"),
        pytest.param(DECOY_LAUNCH, set(), id="decoy-launch"),
    ],
)
def test_wrong_and_cheating_answers_are_refused_by_the_gate(
    llm_standin: StandIn, one_finding, tmp_path: Path, module: str, kinds: set[str]
) -> None:
    record, _ = one_round(llm_standin, module, tmp_path)
    assert record.outcome is not None
    assert record.verdict is Verdict.FAILED and not record.outcome.correct, record.reason
    if kinds:
        assert record.outcome.error_kind in kinds, record.outcome


def test_an_answer_that_edits_model_is_refused_before_any_job(
    llm_standin: StandIn, one_finding, tmp_path: Path
) -> None:
    record, executor = one_round(llm_standin, EDITS_MODEL, tmp_path)
    assert record.verdict is Verdict.FAILED and record.outcome.error_kind == "reference_changed"
    assert [c.job for c in executor.costs] == ["reference", "verify"]  # the baseline's only
