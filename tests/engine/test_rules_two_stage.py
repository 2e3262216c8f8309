"""TWO_STAGE: a whole-tensor reduction in one program becomes per-program partials and a
one-program combine (before/after and refusal tables, tier 0 to the rewrite, interpreter
correctness; the compiled grids are in tests/runner/test_compile_families.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnosis.engine.evidence import Family
from diagnosis.engine.proposers.base import ProposalContext
from diagnosis.engine.proposers.rules import RulesProposer, apply_family
from diagnosis.engine.tier0 import run_tier0
from tests.engine.rules_cases import harness as h

SUM_LOOP = h.source("whole_sum_loop.py")
MEAN_BLOCK = h.source("whole_mean_block.py")
MAX_LOOP = h.source("whole_max_loop.py")


# an L2 norm through locals after the loop, with a loop over block indices
NORM_LOOP = h.variant(
    SUM_LOOP,
    ("return x.sum()", "return torch.linalg.vector_norm(x)"),
    (
        "    for start in range(0, n_elements, BLOCK_SIZE):\n        offsets = start + tl.arange(0, BLOCK_SIZE)\n"
        "        acc += tl.load(x_ptr + offsets, mask=offsets < n_elements, other=0.0)\n"
        "    tl.store(out_ptr, tl.sum(acc, axis=0))\n",
        "    for i in range(tl.cdiv(n_elements, BLOCK_SIZE)):\n        offsets = i * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)\n"
        "        x = tl.load(x_ptr + offsets, mask=offsets < n_elements, other=0.0)\n        acc = acc + x * x\n"
        "    squares = tl.sum(acc, axis=0)\n    norm = tl.sqrt(squares)\n    tl.store(out_ptr, norm)\n",
    ),
)

FIX = [
    pytest.param(
        SUM_LOOP,
        [
            "def sum_kernel_partials(x_ptr, partials_ptr, n_elements, BLOCK_SIZE: tl.constexpr):\n",
            "    for start in range(tl.program_id(0) * BLOCK_SIZE, n_elements, tl.num_programs(0) * BLOCK_SIZE):\n",
            "    tl.store(partials_ptr + tl.program_id(0), tl.sum(acc, axis=0))\n",
            "    total = tl.sum(acc, axis=0)\n    tl.store(out_ptr, total)\n",
            "        n_partials = max(1, min(triton.cdiv(x.numel(), 1024), 528))\n"
            "        partials = torch.empty((n_partials,), device=out.device, dtype=torch.float32)\n"
            "        sum_kernel_partials[(n_partials,)](x, partials, x.numel(), BLOCK_SIZE=1024)\n"
            "        sum_kernel_combine[(1,)](partials, out, n_partials, BLOCK_SIZE=1024)\n",
        ],
        id="sum-loop-keyword-launch",
    ),
    pytest.param(
        MEAN_BLOCK,
        [
            "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n",
            "    tl.store(partials_ptr + tl.program_id(0), tl.sum(x, axis=0))\n",
            "def mean_kernel_combine(partials_ptr, out_ptr, n_partials, n, BLOCK_SIZE: tl.constexpr):\n",
            "    tl.atomic_add(out_ptr, total / n)\n",
            "    block_size = triton.next_power_of_2(n)\n    n_partials = triton.cdiv(block_size, 4096)\n",
            "    mean_kernel_partials[(n_partials,)](x, partials, n, min(block_size, 4096))\n"
            "    mean_kernel_combine[(1,)](partials, out, n_partials, n, BLOCK_SIZE=1024)\n",
        ],
        id="mean-one-block-positional-launch-in-a-helper-with-a-grid-lambda",
    ),
    pytest.param(
        MAX_LOOP,
        [
            "    for base in lang.range(lang.program_id(0) * BLOCK, numel, lang.num_programs(0) * BLOCK):\n",
            "    lang.store(partials_ptr + lang.program_id(0), best)\n",
            '    acc = lang.full([BLOCK_SIZE], float("-inf"), dtype=lang.float32)\n',
            "def amax_kernel_combine(partials_ptr, out_ptr, n_partials, BLOCK_SIZE: constexpr):\n",
            "    total = lang.max(acc, axis=0)\n    lang.store(out_ptr, total)\n",
        ],
        id="max-scalar-accumulator-lang-alias-named-grid",
    ),
    pytest.param(
        NORM_LOOP,
        [
            "    for i in range(tl.program_id(0), tl.cdiv(n_elements, BLOCK_SIZE), tl.num_programs(0)):\n",
            "    tl.store(partials_ptr + tl.program_id(0), tl.sum(acc, axis=0))\n",
            "    tl.store(out_ptr, tl.sqrt(total))\n",
            "        n_partials = max(1, min(triton.cdiv(x.numel(), 1024), 528))\n",
        ],
        id="norm-through-locals-loop-over-block-indices",
    ),
]

NOOP = [
    pytest.param((h.SUITE / "19_mse_loss_fp32.py").read_text(), id="already-two-stages"),
    pytest.param(h.source("mean_atomic.py"), id="many-programs"),
    pytest.param(
        h.variant(
            SUM_LOOP,
            (
                "acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)",
                "acc = tl.full([BLOCK_SIZE], 1.0, tl.float32)",
            ),
        ),
        id="accumulator-not-neutral",
    ),
    pytest.param(
        h.variant(SUM_LOOP, ("acc += tl.load(", "acc = acc * tl.load(")), id="update-not-associative-here"
    ),
    pytest.param(
        h.variant(
            SUM_LOOP, ("tl.store(out_ptr, tl.sum(acc, axis=0))", "tl.store(out_ptr, tl.max(acc, axis=0))")
        ),
        id="finish-reduction-does-not-match-the-update",
    ),
    pytest.param(
        h.variant(
            SUM_LOOP,
            ("tl.store(out_ptr, tl.sum(acc, axis=0))", "tl.store(out_ptr, tl.sum(acc, axis=0) / start)"),
        ),
        id="finish-reads-a-loop-local",
    ),
    pytest.param(
        h.variant(
            SUM_LOOP,
            (
                "        acc += tl.load(",
                "        tl.store(x_ptr + offsets, 0.0, mask=offsets < n_elements)\n        acc += tl.load(",
            ),
        ),
        id="loop-stores",
    ),
    pytest.param(
        h.variant(
            MEAN_BLOCK,
            (
                "tl.atomic_add(out_ptr, tl.sum(x, axis=0) / n)",
                "tl.atomic_add(out_ptr, tl.sum(x, axis=0) / tl.max(x, axis=0))",
            ),
        ),
        id="two-reductions-in-one-block",
    ),
    pytest.param(h.variant(MEAN_BLOCK, ("other=0.0)", "other=0.0) * BLOCK")), id="block-size-read-as-a-value"),
    pytest.param(h.variant(SUM_LOOP, ("sum_kernel[(1,)]", "sum_kernel[(2,)]")), id="two-programs"),
]


@pytest.mark.parametrize(("before", "present"), FIX)
def test_it_spreads_the_reduction_over_many_programs(before: str, present: list[str]) -> None:
    rw = apply_family(Family.TWO_STAGE, before, h.rule_input())
    assert rw is not None and h.parses(rw.source)
    for text in present:
        assert text in rw.source, text
    assert "grid = " not in rw.source  # a grid local the one-program launch read is dead and gone


@pytest.mark.parametrize("before", NOOP)
def test_it_refuses_what_it_cannot_prove(before: str) -> None:
    assert apply_family(Family.TWO_STAGE, before, h.rule_input()) is None


def test_tier0_leads_the_proposer_to_the_rewrite() -> None:
    findings = run_tier0(SUM_LOOP).findings
    ours = [f for f in findings if f.family is Family.TWO_STAGE]
    assert [f.code for f in ours] == ["T0-ONE-PROGRAM-REDUCTION"]
    cands = RulesProposer().propose(SUM_LOOP, ours, ProposalContext())
    assert [c.family for c in cands] == [Family.TWO_STAGE]
    after = run_tier0(cands[0].source).findings
    assert not [f for f in after if f.code in ("T0-ONE-PROGRAM-REDUCTION", "T0-GRID-SMALL")]


def test_two_stage_modules_are_correct_under_the_interpreter(tmp_path: Path) -> None:
    """Verify inputs below one block, over several blocks and of odd sizes; negative maxima."""
    rewrites = {p.id: apply_family(Family.TWO_STAGE, p.values[0], h.rule_input()) for p in FIX}
    assert all(rw is not None for rw in rewrites.values())
    h.assert_interp_ok({name: rw.source for name, rw in rewrites.items()}, tmp_path)
