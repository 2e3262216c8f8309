"""T0-STRIDED-WALK: a strided access whose contiguous neighbour is the next program's element."""

from __future__ import annotations

import pytest

from diagnosis.engine.evidence import Family, Severity
from tests.engine import marks, primary, src, tier0

CODES = {"T0-STRIDED-WALK"}

HEAD = """
import torch
import triton
import triton.language as tl


"""


def column_sum(
    address: str, launch: str = "col_sum[(n_cols,)](x, out, n_rows, n_cols, x.stride(0), BLOCK=256)"
) -> str:
    return src(
        HEAD
        + f"""
@triton.jit
def col_sum(x_ptr, out_ptr, n_rows, n_cols, stride, BLOCK: tl.constexpr):
    col = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_rows, BLOCK):
        rows = start + tl.arange(0, BLOCK)
        acc += tl.load({address}, mask=rows < n_rows, other=0.0)
    tl.store(out_ptr + col, tl.sum(acc, axis=0))


def column_sums(x):
    n_rows, n_cols = x.shape
    out = torch.empty(n_cols, device=x.device)
    {launch}
    return out
"""
    )


FIX = [
    pytest.param(
        column_sum("x_ptr + rows * stride + col").replace("other=0.0)", "other=0.0)  # <- T0-STRIDED-WALK"),
        id="column-sum-one-program-per-column",
    ),
    pytest.param(
        src(
            HEAD
            + """
@triton.jit
def transpose(x_ptr, y_ptr, M, N, BLOCK: tl.constexpr):
    pid = tl.program_id(axis=0)
    offs = tl.arange(0, BLOCK)
    col = tl.load(x_ptr + offs * N + pid, mask=offs < M)  # <- T0-STRIDED-WALK
    tl.store(y_ptr + pid * M + offs, col, mask=offs < M)
"""
        ),
        id="transpose-reading-a-column-with-the-size-as-stride",
    ),
    pytest.param(
        src(
            HEAD
            + """
@triton.jit
def transpose(x_ptr, y_ptr, M, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    vals = tl.load(x_ptr + row * N + offs, mask=offs < N)
    tl.store(y_ptr + offs * M + row, vals, mask=offs < N)  # <- T0-STRIDED-WALK
"""
        ),
        id="transpose-writing-a-column",
    ),
    # the program index split into digits: the heads of [B, T, H] are the contiguous axis
    pytest.param(
        src(
            HEAD
            + """
@triton.jit
def head_sums(x_ptr, out_ptr, T, H: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    b, h = pid // H, pid % H
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, T, BLOCK):
        t = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + (b * T + t) * H + h, mask=t < T, other=0.0)  # <- T0-STRIDED-WALK
    tl.store(out_ptr + pid, tl.sum(acc, axis=0))


def head_sums_of(x):
    B, T, H = x.shape
    out = torch.empty(B * H, device=x.device)
    head_sums[(B * H,)](x, out, T, H=H, BLOCK=256)
    return out
"""
        ),
        id="heads-of-a-program-index-split-by-floordiv-and-mod",
    ),
    pytest.param(
        src(
            HEAD
            + """
@triton.jit
def split_pid(n: tl.constexpr):
    q = tl.program_id(0)
    return q % n, q // n


@triton.jit
def chunk_copy(x_ptr, y_ptr, T, H: tl.constexpr, CHUNK: tl.constexpr):
    bh, c = split_pid(2 * H)
    b, h = bh // H, bh % H
    t = c * CHUNK + tl.arange(0, CHUNK)
    offs = (b * T + t) * H + h  # <- T0-STRIDED-WALK, T0-STRIDED-WALK (the load and the store)
    v = tl.load(x_ptr + offs, mask=t < T)
    tl.store(y_ptr + offs, v, mask=t < T)


def chunk_copy_of(x):
    B, T, H = x.shape
    y = torch.empty_like(x)
    chunk_copy[(triton.cdiv(T, 64) * B * H,)](x, y, T, H=H, CHUNK=64)
    return y
"""
        ),
        id="heads-split-by-a-jit-helper-in-a-local-offset",
    ),
]

NOOP = [
    pytest.param(
        src(
            HEAD
            + """
@triton.jit
def row_max(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=float("-inf"))
    tl.store(out_ptr + row, tl.max(x, axis=0))
"""
        ),
        id="row-walk-is-contiguous",
    ),
    pytest.param(column_sum("x_ptr + rows * stride + col * 2"), id="program-index-with-a-stride"),
    pytest.param(
        column_sum("x_ptr + rows * stride + col", "col_sum[(n_cols,)](x, out, n_rows, n_cols, 1, BLOCK=256)"),
        id="unit-row-stride-is-not-strided",
    ),
    pytest.param(
        src(
            HEAD
            + """
@triton.jit
def col_sum(x_ptr, out_ptr, n_rows, n_cols, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    acc = tl.zeros([BLOCK_C], dtype=tl.float32)
    for start in range(0, n_rows, BLOCK_R):
        rows = start + tl.arange(0, BLOCK_R)
        x = tl.load(x_ptr + rows[:, None] * n_cols + cols[None, :], mask=rows[:, None] < n_rows, other=0.0)
        acc += tl.sum(x, axis=0)
    tl.store(out_ptr + cols, acc, mask=cols < n_cols)
"""
        ),
        id="already-tiled",
    ),
    pytest.param(
        src(
            HEAD
            + """
@triton.jit
def head_rows(x_ptr, out_ptr, T, H: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    b, h = pid // H, pid % H
    t = tl.arange(0, BLOCK)
    v = tl.load(x_ptr + (b * H + h) * T + t, mask=t < T)
    tl.store(out_ptr + (b * H + h) * T + t, v, mask=t < T)


def head_rows_of(x):
    B, H, T = x.shape
    out = torch.empty_like(x)
    head_rows[(B * H,)](x, out, T, H=H, BLOCK=1024)
    return out
"""
        ),
        id="head-major-rows-are-contiguous",
    ),
]


@pytest.mark.parametrize("source", FIX)
def test_it_flags_a_column_walked_one_element_per_program(source: str) -> None:
    assert primary(tier0(source).findings, CODES) == marks(source, CODES)


@pytest.mark.parametrize("source", NOOP)
def test_it_leaves_contiguous_and_tiled_accesses_alone(source: str) -> None:
    assert primary(tier0(source).findings, CODES) == []


def test_a_known_stride_is_high_with_the_sector_gain_and_an_unknown_one_low() -> None:
    (known,) = [f for f in tier0(FIX[0].values[0]).findings if f.code in CODES]
    assert known.severity is Severity.HIGH and known.gain == 4.5 and known.family is Family.COALESCE
    assert known.kernel == "col_sum" and known.args["pid"] == "col" and known.args["stride"] == "stride"
    unknown = column_sum(
        "x_ptr + rows * stride + col", "col_sum[(n_cols,)](x, out, n_rows, n_cols, s, BLOCK=256)"
    )
    (found,) = [f for f in tier0(unknown).findings if f.code in CODES]
    assert found.severity is Severity.LOW and found.gain is None
