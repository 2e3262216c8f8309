"""COALESCE (tiled strided walk): a column walked one element per program becomes a tile with
the program index along its contiguous axis (before/after and refusal tables, tier 0 to the
rewrite, interpreter correctness; the compiled accesses are in tests/runner/test_compile_families.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnosis.engine.evidence import Family
from diagnosis.engine.proposers.base import ProposalContext
from diagnosis.engine.proposers.rules import RulesProposer, apply_family
from diagnosis.engine.tier0 import run_tier0
from tests.engine.rules_cases import harness as h

COLSUM = h.source("strided_colsum.py")
TRANSPOSE = h.source("strided_transpose.py")
COLMAX = h.source("strided_colmax.py")


# the other direction: program `row` reads its row of x and writes it as a column of y
TRANSPOSE_BY_ROWS = h.variant(
    TRANSPOSE,
    (
        """    for start in range(0, n_rows, BLOCK_SIZE):
        offsets = start + tl.arange(0, BLOCK_SIZE)
        mask = offsets < n_rows
        column = tl.load(x_ptr + offsets * n_cols + pid, mask=mask)
        tl.store(y_ptr + pid * n_rows + offsets, column, mask=mask)""",
        """    for start in range(0, n_cols, BLOCK_SIZE):
        offsets = start + tl.arange(0, BLOCK_SIZE)
        mask = offsets < n_cols
        row = tl.load(x_ptr + pid * n_cols + offsets, mask=mask)
        tl.store(y_ptr + offsets * n_rows + pid, row, mask=mask)""",
    ),
    ("grid = lambda meta: (n_cols,)", "grid = lambda meta: (n_rows,)"),
)

FIX = [
    pytest.param(
        COLSUM,
        [
            "def colsum_kernel(x_ptr, out_ptr, M, N, stride_xm, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):\n"
            "    col = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)\n"
            "    col_mask = col < N\n"
            "    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)\n",
            "        x = tl.load(x_ptr + rows[:, None] * stride_xm + col[None, :], "
            "mask=(rows[:, None] < M) & col_mask[None, :], other=0.0)\n",
            "    tl.store(out_ptr + col, tl.sum(acc, axis=0), mask=col_mask)\n",
            "colsum_kernel[(triton.cdiv(N, 16),)](x, out, M, N, x.stride(0), BLOCK_M=256, BLOCK_N=16)",
        ],
        id="column-sum-keyword-launch",
    ),
    pytest.param(
        TRANSPOSE,
        [
            "    pid = tl.program_id(axis=0) * BLOCK_N_COLS + tl.arange(0, BLOCK_N_COLS)\n    pid_mask = pid < n_cols\n",
            "        column = tl.load(x_ptr + offsets[:, None] * n_cols + pid[None, :], "
            "mask=mask[:, None] & pid_mask[None, :])\n",
            "        tl.store(y_ptr + pid[None, :] * n_rows + offsets[:, None], column, "
            "mask=mask[:, None] & pid_mask[None, :])\n",
            'grid = lambda meta: (triton.cdiv(n_cols, meta["BLOCK_N_COLS"]),)',
            "transpose_kernel[grid](x, y, n_rows, n_cols, 128, BLOCK_N_COLS=32)",
        ],
        id="transpose-positional-launch-in-a-helper-with-a-grid-lambda",
    ),
    pytest.param(
        TRANSPOSE_BY_ROWS,
        [
            "        row = tl.load(x_ptr + pid[None, :] * n_cols + offsets[:, None], "
            "mask=mask[:, None] & pid_mask[None, :])\n",
            "        tl.store(y_ptr + offsets[:, None] * n_rows + pid[None, :], row, mask=mask[:, None] & pid_mask[None, :])\n",
            'grid = lambda meta: (triton.cdiv(n_rows, meta["BLOCK_N_ROWS"]),)',
        ],
        id="transpose-writing-columns",
    ),
    pytest.param(
        COLMAX,
        [
            "def col_max_kernel(inp, out, rows, cols, row_stride, BLOCK: constexpr, BLOCK_COLS: constexpr):\n",
            "    c = lang.program_id(0) * BLOCK_COLS + lang.arange(0, BLOCK_COLS)\n    c_mask = c < cols\n",
            '    acc = lang.full([BLOCK_COLS], float("-inf"), dtype=lang.float32)\n',
            "        acc = lang.maximum(acc, lang.max(vals, axis=0))\n",
            "    lang.store(out + c, acc, mask=c_mask)\n",
            "        grid = (triton.cdiv(cols, 8),)\n        col_max_kernel[grid](x, out, rows, cols, x.stride(0), "
            "BLOCK=512, BLOCK_COLS=8)\n",
        ],
        id="column-max-scalar-accumulator-lang-alias-named-grid",
    ),
    pytest.param(
        h.variant(
            COLSUM,
            ("    acc = tl.zeros([BLOCK_M], dtype=tl.float32)\n", "    acc = 0.0\n"),
            ("        acc += x\n", "        acc += tl.sum(x)\n"),
            ("tl.sum(acc, axis=0)", "acc"),
        ),
        [
            "    acc = tl.zeros([BLOCK_N], dtype=tl.float32)\n",
            "        acc += tl.sum(x, axis=0)\n",
            "    tl.store(out_ptr + col, acc, mask=col_mask)\n",
        ],
        id="reduction-without-axis-gets-axis-0",
    ),
]

NOOP = [
    pytest.param((h.ROOT / "tests" / "kernels" / "colsum_tiled.py").read_text(), id="already-tiled"),
    pytest.param((h.SUITE / "15_max_dim_fp32.py").read_text(), id="row-walk-is-contiguous"),
    pytest.param((h.SUITE / "18_transpose_fp32.py").read_text(), id="two-dimensional-grid"),
    pytest.param(
        h.variant(COLSUM, ("colsum_kernel[(N,)](x, out, M, N,", "colsum_kernel[(x.shape[1],)](x, out, M, N,")),
        id="grid-not-passed-as-an-argument",
    ),
    pytest.param(h.variant(COLSUM, ("BLOCK_M=256", "BLOCK_M=2048")), id="tile-too-large-for-registers"),
    pytest.param(
        h.variant(COLSUM, ("        acc += x\n", "        if start > 0:\n            acc += x\n")),
        id="a-branch",
    ),
    pytest.param(
        h.variant(COLSUM, ("range(0, M, BLOCK_M)", "range(0, col + 1, BLOCK_M)")), id="loop-bound-per-program"
    ),
    pytest.param(
        h.variant(
            COLSUM,
            (
                "    acc = tl.zeros([BLOCK_M], dtype=tl.float32)\n",
                "    acc = tl.load(out_ptr + tl.arange(0, BLOCK_M))\n",
            ),
        ),
        id="accumulator-starting-from-a-block-load",
    ),
    pytest.param(
        h.variant(
            COLSUM,
            (
                "    tl.store(out_ptr + col, tl.sum(acc, axis=0))",
                "    tl.atomic_add(out_ptr + col, tl.sum(acc, axis=0))",
            ),
        ),
        id="atomics",
    ),
    pytest.param(
        h.variant(
            COLSUM,
            (
                "@triton.jit\n",
                "@triton.autotune(configs=[triton.Config({}, num_warps=4)], key=['M'])\n@triton.jit\n",
            ),
        ),
        id="autotuned",
    ),
]


@pytest.mark.parametrize(("before", "present"), FIX)
def test_it_tiles_the_program_axis_into_the_block(before: str, present: list[str]) -> None:
    rw = apply_family(Family.COALESCE, before, h.rule_input())
    assert rw is not None
    assert h.parses(rw.source)
    for text in present:
        assert text in rw.source, text
    assert "tl.program_id(0))" not in rw.source  # the old one-column program is gone


@pytest.mark.parametrize("before", NOOP)
def test_it_refuses_what_it_cannot_prove(before: str) -> None:
    assert apply_family(Family.COALESCE, before, h.rule_input()) is None


def test_the_tile_width_follows_the_block_from_the_shape_cases() -> None:
    """A block computed in the wrapper is read from the shape cases: the largest decides."""
    source = h.variant(
        COLSUM,
        (
            "        colsum_kernel[(N,)]",
            "        BLOCK = min(triton.next_power_of_2(M), 1024)\n        colsum_kernel[(N,)]",
        ),
        ("BLOCK_M=256)", "BLOCK_M=BLOCK)"),
    )
    assert apply_family(Family.COALESCE, source, h.rule_input()) is None  # nothing known about M
    cases = h.cases_of(h.HERE / "strided_colsum.py")
    rw = apply_family(Family.COALESCE, source, h.rule_input(cases))
    assert rw is not None and "BLOCK_M=BLOCK, BLOCK_N=8)" in rw.source


def test_tier0_leads_the_proposer_to_the_rewrite() -> None:
    findings = run_tier0(COLSUM).findings
    walk = [f for f in findings if f.code == "T0-STRIDED-WALK"]
    assert [f.family for f in walk] == [Family.COALESCE]
    cands = RulesProposer().propose(
        COLSUM, [f for f in findings if f.family is Family.COALESCE], ProposalContext()
    )
    assert [c.family for c in cands] == [Family.COALESCE]
    assert "T0-STRIDED-WALK" in cands[0].findings_addressed
    assert not [
        f for f in run_tier0(cands[0].source).findings if f.code in ("T0-STRIDED-WALK", "T0-STRIDED-ACCESS")
    ]


def test_tiled_modules_are_correct_under_the_interpreter(tmp_path: Path) -> None:
    """Verify inputs with column counts below, at and above one tile, and a single row."""
    paths = []
    for p in FIX:
        rw = apply_family(Family.COALESCE, p.values[0], h.rule_input())
        assert rw is not None
        path = tmp_path / f"{p.id}.py"
        path.write_text(rw.source)
        paths.append(path)
    results = h.interp_check(paths)
    for path in paths:
        assert results[str(path)]["ok"], results[str(path)]["message"]
