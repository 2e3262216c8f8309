"""T0-SPLIT-ATOMIC-REDUCTION: a reduction split over a grid axis its atomic's address ignores."""

from __future__ import annotations

import pytest

from diagnosis.engine.evidence import Family, Severity
from tests.engine import marks, primary, src, tier0

CODES = {"T0-SPLIT-ATOMIC-REDUCTION"}

HEAD = """
import torch
import triton
import triton.language as tl


"""

FIX = [
    pytest.param(
        src(
            HEAD
            + """
@triton.jit
def row_sum(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
    tl.atomic_add(out_ptr + row, tl.sum(x, axis=0))  # <- T0-SPLIT-ATOMIC-REDUCTION


def row_sums(x):
    out = torch.zeros(x.shape[0], device=x.device)
    row_sum[(x.shape[0], 8)](x, out, x.shape[1], BLOCK=512)
    return out
"""
        ),
        id="row-sum-over-column-blocks",
    ),
    pytest.param(
        src(
            HEAD
            + """
@triton.jit
def col_sum(x_ptr, out_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m * BM + tl.arange(0, BM)
    cols = pid_n * BN + tl.arange(0, BN)
    x = tl.load(x_ptr + rows[:, None] * N + cols[None, :], mask=rows[:, None] < M, other=0.0)
    partial = tl.sum(x, axis=0)
    tl.atomic_add(out_ptr + cols, partial, mask=cols < N)  # <- T0-SPLIT-ATOMIC-REDUCTION
"""
        ),
        id="column-sum-over-row-blocks-through-a-local",
    ),
]

NOOP = [
    pytest.param(
        src(
            HEAD
            + """
@triton.jit
def total(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.atomic_add(out_ptr, tl.sum(tl.load(x_ptr + offs, mask=offs < n, other=0.0)))
"""
        ),
        id="one-grid-axis-is-t0-atomic-reduction-only",
    ),
    pytest.param(
        src(
            HEAD
            + """
@triton.jit
def scatter(x_ptr, out_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    tl.atomic_add(out_ptr + row * N + cols, tl.load(x_ptr + row * N + cols), mask=cols < N)
"""
        ),
        id="element-wise-atomics-on-a-2d-grid",
    ),
    pytest.param(
        src(
            HEAD
            + """
@triton.jit
def tiles(x_ptr, out_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    blk = tl.program_id(1)
    cols = blk * BLOCK + tl.arange(0, BLOCK)
    tl.atomic_add(out_ptr + row * 64 + blk, tl.sum(tl.load(x_ptr + row * N + cols), axis=0))
"""
        ),
        id="one-address-per-program",
    ),
]


@pytest.mark.parametrize("source", FIX)
def test_it_flags_split_reductions_finished_with_atomics(source: str) -> None:
    assert primary(tier0(source).findings, CODES) == marks(source, CODES)


@pytest.mark.parametrize("source", NOOP)
def test_it_leaves_other_atomics_alone(source: str) -> None:
    assert primary(tier0(source).findings, CODES) == []


def test_it_names_the_split_axis_and_the_programs_contending() -> None:
    (row,) = [f for f in tier0(FIX[0].values[0]).findings if f.code in CODES]
    assert row.severity is Severity.HIGH and row.family is Family.BLOCK_REDUCTION
    assert row.args["axis"] == 1 and row.args["programs"] == "8" and row.kernel == "row_sum"
    (col,) = [f for f in tier0(FIX[1].values[0]).findings if f.code in CODES]
    assert col.severity is Severity.MEDIUM and col.args["axis"] == 0
