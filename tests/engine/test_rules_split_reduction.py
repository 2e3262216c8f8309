"""BLOCK_REDUCTION (split reduction): a reduction split over a 2-D grid and finished with
atomics is collapsed into a loop (when the kept axis fills the GPU) or finished in two stages
(before/after and refusal tables, tier 0 to the rewrite, interpreter correctness)."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnosis.engine.evidence import Family
from diagnosis.engine.proposers.base import CaseShape, ProposalContext
from diagnosis.engine.proposers.rules import RulesProposer, apply_family
from diagnosis.engine.proposers.rules.split_reduction import finish_split_reduction
from diagnosis.engine.tier0 import run_tier0
from tests.engine.rules_cases import harness as h

ROWSUM = h.source("split_rowsum.py")
COLSUM = h.source("split_colsum.py")
ROWMEAN = h.source("split_rowmean.py")
# two timed cases of 4096 x 4096: 4096 rows fill an H200 (2 programs per SM on 132 SMs)
TALL = tuple(CaseShape(i, ((4096, 4096),), ("float32",), True) for i in range(2))
# 2^20 columns: 16384 column blocks of 64
WIDE = tuple(CaseShape(i, ((64, 1 << 20),), ("float32",), True) for i in range(2))


# the kept axis second: program_id(1) is the row, the grid (column blocks, rows)
ROWSUM_SWAPPED = h.variant(
    ROWSUM,
    (
        "    row = tl.program_id(0)\n    block = tl.program_id(1)\n",
        "    block = tl.program_id(0)\n    row = tl.program_id(1)\n",
    ),
    (
        "row_sum_kernel[(n_rows, triton.cdiv(n_cols, BLOCK_SIZE))]",
        "row_sum_kernel[(triton.cdiv(n_cols, BLOCK_SIZE), n_rows)]",
    ),
)

TWO_STAGES = [
    pytest.param(
        ROWSUM,
        [
            "def row_sum_kernel(x_ptr, partials_ptr, n_cols, stride_row, n_out, BLOCK_SIZE: tl.constexpr):\n",
            "    tl.store(partials_ptr + block * n_out + row, tl.sum(x, axis=0))\n",
            "        out = torch.empty(n_rows, device=x.device, dtype=torch.float32)\n",
            "        n_split = triton.cdiv(n_cols, BLOCK_SIZE)\n        n_out = out.numel()\n"
            "        partials = torch.zeros((n_split, n_out), device=out.device, dtype=torch.float32)\n"
            "        row_sum_kernel[(n_rows, triton.cdiv(n_cols, BLOCK_SIZE))](\n"
            "            x, partials, n_cols, x.stride(0), BLOCK_SIZE=BLOCK_SIZE, n_out=n_out\n        )\n"
            "        row_sum_kernel_sum_splits[(triton.cdiv(n_out, 1024),)](partials, out, n_out, n_split, "
            "BLOCK_SIZE=1024)\n",
            "    tl.store(out_ptr + offs, acc.to(out_ptr.dtype.element_ty), mask=mask)\n",
        ],
        id="row-sum-fresh-zeros-stored",
    ),
    pytest.param(
        COLSUM,
        [
            "def col_sum_kernel(x_ptr, partials_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, n_out):\n",
            "    tl.store(partials_ptr + pid_m * n_out + cols, tl.sum(tile, axis=0), mask=cols < N)\n",
            "    n_split = triton.cdiv(M, 32)\n",
            "    col_sum_kernel[grid](x, partials, M, N, 32, 64, n_out=n_out)\n",
        ],
        id="column-sum-positional-launch-in-a-helper-with-a-grid-lambda",
    ),
    pytest.param(
        ROWMEAN,
        [
            "    lang.store(partials_ptr + lang.program_id(1) * n_out + r, lang.sum(vals, axis=0) / width)\n",
            "def row_mean_kernel_sum_splits(partials_ptr, out_ptr, n_out, n_split, BLOCK_SIZE: constexpr):\n",
            "    prior = lang.load(out_ptr + offs, mask=mask).to(lang.float32)\n"
            "    lang.store(out_ptr + offs, (prior + acc).to(out_ptr.dtype.element_ty), mask=mask)\n",
            "        out = torch.ones(rows, device=x.device, dtype=torch.float32)\n",
        ],
        id="row-mean-lang-alias-inline-program-id-adds-to-prior-contents",
    ),
]

COLLAPSE = [
    pytest.param(
        ROWSUM,
        TALL,
        [
            "    row = tl.program_id(0)\n    total = 0.0\n    for block in range(tl.cdiv(n_cols, BLOCK_SIZE)):\n"
            "        cols = block * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)\n",
            "        total += tl.sum(x, axis=0)\n    tl.atomic_add(out_ptr + row, total)\n",
            "        row_sum_kernel[(n_rows,)](\n",
        ],
        id="row-sum-loop-over-column-blocks",
    ),
    pytest.param(
        ROWSUM_SWAPPED,
        TALL,
        ["    row = tl.program_id(0)\n    total = 0.0\n", "row_sum_kernel[(n_rows,)]"],
        id="kept-axis-second-becomes-axis-0",
    ),
    pytest.param(
        ROWMEAN,
        TALL,
        [
            "    r = lang.program_id(0)\n    total = 0.0\n    for split in range(lang.cdiv(width, BLOCK)):\n"
            "        c = split * BLOCK + lang.arange(0, BLOCK)\n",
            "        total += lang.sum(vals, axis=0) / width\n    lang.atomic_add(dst + r, total)\n",
            "        grid = (rows,)\n",
        ],
        id="row-mean-inline-program-id-becomes-the-loop-index",
    ),
    pytest.param(
        COLSUM,
        WIDE,
        [
            "    pid_n = tl.program_id(0)\n    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)\n"
            "    total = tl.zeros([BLOCK_N], dtype=tl.float32)\n    for pid_m in range(tl.cdiv(M, BLOCK_M)):\n",
            "        total += tl.sum(tile, axis=0)\n    tl.atomic_add(out_ptr + cols, total, mask=cols < N)\n",
            'grid = lambda meta: (triton.cdiv(N, meta["BLOCK_N"]),)',
        ],
        id="column-sum-vector-accumulator-wide",
    ),
]

NOOP = [
    pytest.param(h.source("mean_atomic.py"), id="one-grid-axis-is-block-reductions-case"),
    pytest.param(
        h.variant(ROWSUM, ("tl.atomic_add(out_ptr + row, ", "tl.atomic_add(out_ptr + row + block, ")),
        id="address-depends-on-both-axes",
    ),
    pytest.param(
        h.variant(
            ROWSUM,
            (
                "tl.atomic_add(out_ptr + row, tl.sum(x, axis=0))",
                "tl.atomic_add(out_ptr + row, tl.sum(x, axis=0), mask=block < 4)",
            ),
        ),
        id="mask-depends-on-the-split",
    ),
    pytest.param(
        h.variant(
            ROWSUM,
            (
                "    tl.atomic_add(out_ptr + row, tl.sum(x, axis=0))\n",
                "    tl.atomic_add(out_ptr + row, tl.sum(x, axis=0))\n    tl.store(x_ptr, 0.0)\n",
            ),
        ),
        id="statement-after-the-atomic",
    ),
    pytest.param(
        h.variant(
            ROWSUM,
            ("    cols = block", "    if block >= tl.num_programs(1):\n        return\n    cols = block"),
        ),
        id="early-return-and-num-programs",
    ),
    pytest.param(
        h.variant(
            ROWSUM,
            (
                "    tl.atomic_add(out_ptr + row, tl.sum(x, axis=0))\n",
                "    tl.atomic_add(out_ptr + row, tl.sum(x, axis=0))\n    tl.atomic_add(out_ptr + row, 1.0)\n",
            ),
        ),
        id="two-atomics",
    ),
    pytest.param(
        h.variant(
            ROWSUM,
            ("(n_rows, triton.cdiv(n_cols, BLOCK_SIZE))", "(n_rows, triton.cdiv(n_cols, BLOCK_SIZE), 1)"),
        ),
        id="three-dimensional-grid",
    ),
    pytest.param(
        h.variant(
            ROWSUM,
            ("out = torch.zeros(n_rows, device=x.device, dtype=torch.float32)", "out = x.new_zeros(n_rows)"),
        ),
        id="two-stages-need-an-output-the-wrapper-allocates",
    ),
]


@pytest.mark.parametrize(("before", "present"), TWO_STAGES)
def test_few_programs_per_output_get_two_stages(before: str, present: list[str]) -> None:
    rw = apply_family(Family.BLOCK_REDUCTION, before, h.rule_input())
    assert rw is not None and h.parses(rw.source)
    for text in present:
        assert text in rw.source, text
    assert "atomic_add(" not in rw.source


@pytest.mark.parametrize(("before", "cases", "present"), COLLAPSE)
def test_outputs_that_fill_the_gpu_get_the_split_as_a_loop(
    before: str, cases: tuple[CaseShape, ...], present: list[str]
) -> None:
    rw = apply_family(Family.BLOCK_REDUCTION, before, h.rule_input(cases))
    assert rw is not None and h.parses(rw.source)
    for text in present:
        assert text in rw.source, text
    assert rw.source.count("atomic_add(") == 1 and "program_id(1)" not in rw.source


@pytest.mark.parametrize("before", NOOP)
def test_it_refuses_what_it_cannot_prove(before: str) -> None:
    assert finish_split_reduction(before, h.rule_input()) is None


def test_the_shape_cases_choose_between_the_two() -> None:
    """The row sum's own cases all have 1024 rows or more: the loop; a case of 8 rows: two stages."""
    rows = apply_family(Family.BLOCK_REDUCTION, ROWSUM, h.rule_input(h.cases_of(h.HERE / "split_rowsum.py")))
    assert rows is not None and "for block in range(" in rows.source
    few = (*TALL, CaseShape(2, ((8, 1 << 20),), ("float32",), True))
    staged = apply_family(Family.BLOCK_REDUCTION, ROWSUM, h.rule_input(few))
    assert staged is not None and "_sum_splits" in staged.source


def test_tier0_leads_the_proposer_to_the_rewrite() -> None:
    findings = run_tier0(ROWSUM).findings
    ours = [f for f in findings if f.family is Family.BLOCK_REDUCTION]
    assert {f.code for f in ours} == {"T0-ATOMIC-REDUCTION", "T0-SPLIT-ATOMIC-REDUCTION"}
    cands = RulesProposer().propose(ROWSUM, ours, ProposalContext(cases=TALL))
    assert [c.family for c in cands] == [Family.BLOCK_REDUCTION]
    assert "T0-SPLIT-ATOMIC-REDUCTION" in cands[0].findings_addressed
    assert not [f for f in run_tier0(cands[0].source).findings if f.code == "T0-SPLIT-ATOMIC-REDUCTION"]


def test_finished_modules_are_correct_under_the_interpreter(tmp_path: Path) -> None:
    """Both rewrites of every case module, on verify inputs of one row or column and odd sizes."""
    paths = []
    rows = [(p.id, p.values[0], ()) for p in TWO_STAGES] + [
        (p.id, p.values[0], p.values[1]) for p in COLLAPSE
    ]
    for name, before, cases in rows:
        rw = apply_family(Family.BLOCK_REDUCTION, before, h.rule_input(cases))
        assert rw is not None
        path = tmp_path / f"{name}.py"
        path.write_text(rw.source)
        paths.append(path)
    results = h.interp_check(paths)
    for path in paths:
        assert results[str(path)]["ok"], results[str(path)]["message"]
