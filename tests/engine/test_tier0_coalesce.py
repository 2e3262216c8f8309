from __future__ import annotations

import pytest

from diagnosis.engine.evidence import Family, Severity
from tests.engine import marks, primary, src, tier0

CODES = {"T0-STRIDED-ACCESS"}

HEAD = """
import torch
import triton
import triton.language as tl


"""

TILE_KERNEL = """
@triton.jit
def copy2d(x_ptr, y_ptr, M, N, stride_m, stride_n, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    x = tl.load(x_ptr + rm[:, None] * stride_m + rn[None, :] * stride_n, mask=mask)  # <- T0-STRIDED-ACCESS
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], x, mask=mask)
"""


def launch(args: str, prelude: str = "") -> str:
    return (
        HEAD
        + TILE_KERNEL
        + f"""

def copy(x):
    {prelude or "pass"}
    M, N = x.shape
    y = torch.empty((M, N), device=x.device)
    copy2d[(triton.cdiv(M, 64), triton.cdiv(N, 64))](x, y, M, N, {args}, BM=64, BN=64)
    return y
"""
    )


def column_walk(stride_arg: str) -> str:
    return (
        HEAD
        + f"""
@triton.jit
def col_sum(x_ptr, out_ptr, n_rows, stride, BLOCK: tl.constexpr):
    col = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_rows, BLOCK):
        rows = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + rows * stride + col, mask=rows < n_rows, other=0.0)  # <- T0-STRIDED-ACCESS
    tl.store(out_ptr + col, tl.sum(acc, axis=0))


def column_sums(x):
    n_rows, n_cols = x.shape
    out = torch.empty(n_cols, device=x.device)
    col_sum[(n_cols,)](x, out, n_rows, {stride_arg}, BLOCK=512)
    return out
"""
    )


NOOP = [
    pytest.param(launch("x.stride(0), x.stride(1)"), id="row-major-tile"),
    pytest.param(launch("x.stride(0), 1"), id="literal-unit-stride"),
    pytest.param(launch("x.stride(0), x.stride(-1)"), id="last-dim-stride"),
    pytest.param(
        launch("x.stride(1), x.stride(0)"),
        id="outer-axis-contiguous-is-coalesced-by-the-compiler",
    ),
    pytest.param(
        launch("x.stride(0), x.stride(1)", prelude="x = x.t()"), id="transposed-view-stride-0-is-unit"
    ),
    pytest.param(
        launch("x.stride(0), x.stride(1)", prelude="x = x.t().contiguous()"),
        id="transposed-then-made-contiguous",
    ),
    pytest.param(
        HEAD
        + """
@triton.jit
def rows(x_ptr, y_ptr, stride_row, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride_row + cols, mask=cols < n_cols)
    tl.store(y_ptr + row * stride_row + cols, x, mask=cols < n_cols)
""",
        id="row-stride-times-program-id",
    ),
    pytest.param(
        HEAD
        + """
@triton.jit
def gather(x_ptr, idx_ptr, y_ptr, stride, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    idx = tl.load(idx_ptr + offs, mask=offs < n)
    tl.store(y_ptr + offs, tl.load(x_ptr + idx * stride, mask=offs < n), mask=offs < n)
""",
        id="gather-through-loaded-indices",
    ),
    pytest.param(
        HEAD
        + """
@triton.jit
def mm(a_ptr, b_ptr, K, stride_ak, stride_bk, BM: tl.constexpr, BK: tl.constexpr):
    rm = tl.arange(0, BM)
    rk = tl.arange(0, BK)
    a_ptrs = a_ptr + rm[:, None] * K + rk[None, :]
    for k in range(0, K, BK):
        tl.store(b_ptr + rm, tl.sum(tl.load(a_ptrs), axis=1))
        a_ptrs += BK * stride_ak
""",
        id="pointer-advanced-in-a-loop",
    ),
]

FIX = [
    pytest.param(launch("x.stride(0), N"), id="size-on-every-axis"),
    pytest.param(launch("x.stride(0), 2"), id="literal-stride-2"),
    pytest.param(HEAD + TILE_KERNEL, id="no-launch-site-stride-unknown"),
    pytest.param(column_walk("x.shape[1]"), id="column-walk-by-a-size"),
    pytest.param(column_walk("x.stride(0)"), id="column-walk-by-the-row-stride"),
]


@pytest.mark.parametrize("source", NOOP)
def test_it_leaves_accesses_with_a_contiguous_dimension_alone(source: str) -> None:
    assert primary(tier0(src(source)).findings, CODES) == []


@pytest.mark.parametrize("source", FIX)
def test_it_flags_accesses_with_no_unit_stride_dimension(source: str) -> None:
    source = src(source)
    assert primary(tier0(source).findings, CODES) == marks(source, CODES)


@pytest.mark.parametrize(
    ("case", "severity", "has_gain"),
    [
        ("size-on-every-axis", Severity.HIGH, True),
        ("literal-stride-2", Severity.HIGH, True),
        ("no-launch-site-stride-unknown", Severity.LOW, False),
        ("column-walk-by-a-size", Severity.HIGH, True),
        ("column-walk-by-the-row-stride", Severity.MEDIUM, True),
    ],
)
def test_its_severity_follows_what_the_call_site_passes(
    case: str, severity: Severity, has_gain: bool
) -> None:
    (source,) = [p.values[0] for p in FIX if p.id == case]
    (finding,) = [f for f in tier0(src(source)).findings if f.code in CODES]
    assert finding.severity is severity
    assert finding.family is Family.COALESCE
    assert (finding.gain is not None) is has_gain


def test_a_local_defined_from_itself_is_not_followed_forever() -> None:
    """flag_gems' unique: `total = total + tl.sum(...)` is the local's one definition; reading the
    store's offsets followed it into itself until Python's recursion limit."""
    source = src('''
@triton.jit
def compact(x_ptr, out_ptr, total, n, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    for start in range(0, n, BLOCK):
        x = tl.load(x_ptr + start + r, mask=start + r < n, other=0)
        tl.store(out_ptr + total + r, x, mask=start + r < n)
        total = total + tl.sum(x)
''')
    result = tier0(source)
    assert result.data["rule_errors"] == []
    assert "T0-STRIDED-ACCESS" not in [f.code for f in result.findings]
