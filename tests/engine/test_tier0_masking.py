from __future__ import annotations

import pytest

from diagnosis.engine.evidence import Family, Severity
from tests.engine import marks, primary, src, tier0

MISSING = {"T0-MISSING-MASK"}
NEEDLESS = {"T0-NEEDLESS-MASK"}

HEAD = """
import torch
import triton
import triton.language as tl


"""

UNMASKED = """
@triton.jit
def scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)  # <- T0-MISSING-MASK
    tl.store(y_ptr + offs, x * 2)  # <- T0-MISSING-MASK
"""

# Each program sums its rows' tile of columns and stores it in its own slot of a scratch buffer
# the wrapper allocates with the block as a dimension: a buffer of whole blocks, in bounds.
SCRATCH = """
@triton.jit
def col_partials(x_ptr, part_ptr, n_rows, n_cols, BLOCK: tl.constexpr):
    split = tl.program_id(1)
    lanes = tl.arange(0, BLOCK)
    cols = tl.program_id(0) * BLOCK + lanes
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for row in range(split, n_rows, tl.num_programs(1)):
        acc += tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
    tl.store(part_ptr + (split * tl.num_programs(0) + tl.program_id(0)) * BLOCK + lanes, acc){mark}


def col_sums(x):
    n_rows, n_cols = x.shape
    grid = (triton.cdiv(n_cols, 32), 8)
    {alloc}
    col_partials[grid](x, part, n_rows, n_cols, BLOCK=32)
    return part.sum(0).flatten()[:n_cols]
"""

MISSING_NOOP = [
    pytest.param(
        HEAD
        + """
@triton.jit
def scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask)
""",
        id="masked-positional-store",
    ),
    pytest.param(
        HEAD
        + UNMASKED
        + """

def run(x):
    n = x.numel()
    assert n % 1024 == 0, "n must be a multiple of the block"
    y = torch.empty_like(x)
    scale[(n // 1024,)](x, y, n, BLOCK=1024)
    return y
""",
        id="wrapper-asserts-divisibility",
    ),
    pytest.param(
        HEAD
        + """
@triton.jit
def rows(x_ptr, y_ptr, M, N, BM: tl.constexpr):
    rm = (tl.program_id(0) * BM + tl.arange(0, BM)) % M
    tl.store(y_ptr + rm, tl.load(x_ptr + rm))
""",
        id="offsets-wrapped-with-modulo",
    ),
    pytest.param(
        HEAD
        + """
@triton.heuristics({"EVEN": lambda args: args["n"] % args["BLOCK"] == 0})
@triton.jit
def scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        tl.store(y_ptr + offs, tl.load(x_ptr + offs) * 2)
    else:
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)
""",
        id="heuristic-even-branch",
    ),
    pytest.param(
        HEAD
        + """
@triton.jit
def tile(x_ptr, y_ptr, stride, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    tl.store(y_ptr + cols, tl.load(x_ptr + cols))
""",
        id="fixed-offsets-no-program-id",
    ),
    pytest.param(
        HEAD
        + """
@triton.jit
def block_ptrs(x_ptr, y_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    src = tl.make_block_ptr(x_ptr, (M, N), (N, 1), (tl.program_id(0) * BM, 0), (BM, BN), (1, 0))
    tl.store(y_ptr + tl.program_id(0) * BM + tl.arange(0, BM), tl.sum(tl.load(src, boundary_check=(0, 1)), axis=1),
             mask=tl.arange(0, BM) < M)
""",
        id="block-pointer-with-boundary-check",
    ),
    pytest.param(
        HEAD + SCRATCH.format(alloc="part = torch.empty((8, grid[0], 32), device=x.device)", mark=""),
        id="scratch-buffer-of-whole-blocks",
    ),
    pytest.param(
        HEAD + SCRATCH.format(alloc="part = x.new_zeros(8, grid[0], 32)", mark=""),
        id="scratch-buffer-from-a-tensor-method",
    ),
]

EXACT_TILES = """
@triton.jit
def bmm(a_ptr, b_ptr, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid = tl.program_id(0)
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + pid * BM * K + rm[:, None] * K + (k + rk)[None, :])  # <- T0-MISSING-MASK
        b = tl.load(b_ptr + pid * K * BN + (k + rk)[:, None] * BN + rn[None, :])  # <- T0-MISSING-MASK
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + pid * BM * BN + rm[:, None] * BN + rn[None, :], acc)


def bmm_launch(a, b):
    batch, m, k = a.shape
    n = b.shape[2]
    c = torch.empty((batch, m, n))
    bmm[(batch,)](a, b, c, k, BM=m, BN=n, BK=32)
    return c
"""

MISSING_FIX = [
    pytest.param(HEAD + EXACT_TILES, id="k-loop-unmasked-while-exact-tiles-are-in-bounds"),
    pytest.param(HEAD + UNMASKED, id="element-wise-without-masks"),
    pytest.param(
        HEAD
        + """
@triton.jit
def row_sum(x_ptr, y_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = 0.0
    for off in range(0, n_cols, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        acc += tl.sum(tl.load(x_ptr + row * stride + cols), axis=0)  # <- T0-MISSING-MASK
    tl.store(y_ptr + row, acc)
""",
        id="row-loop-without-a-tail-mask",
    ),
    pytest.param(
        HEAD
        + SCRATCH.format(
            alloc="part = torch.empty(8 * n_cols, device=x.device)", mark="  # <- T0-MISSING-MASK"
        ),
        id="a-buffer-sized-by-the-tensor-not-the-block",
    ),
    # unsloth jits its kernels by rebinding their names: the kernel is read all the same
    pytest.param(
        HEAD + UNMASKED.replace("@triton.jit\n", "") + "\n\nscale = triton.jit(scale)\n",
        id="a-kernel-jitted-by-a-call",
    ),
]

NEEDLESS_NOOP = [
    pytest.param(HEAD + MISSING_NOOP[0].values[0].removeprefix(HEAD), id="real-bound"),
]

NEEDLESS_FIX = [
    pytest.param(
        HEAD
        + """
@triton.jit
def tile(x_ptr, y_ptr, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    tl.store(y_ptr + cols, tl.load(x_ptr + cols, mask=cols < BLOCK), mask=cols < BLOCK)  # <- T0-NEEDLESS-MASK
""",
        id="arange-below-its-own-bound",
    ),
    pytest.param(
        HEAD
        + """
@triton.jit
def scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)  # <- T0-NEEDLESS-MASK


def run(x):
    n = x.numel()
    assert n % 1024 == 0
    y = torch.empty_like(x)
    scale[(n // 1024,)](x, y, n, BLOCK=1024)
    return y
""",
        id="size-asserted-divisible",
    ),
]


@pytest.mark.parametrize("source", MISSING_NOOP)
def test_it_accepts_masked_or_provably_in_bounds_accesses(source: str) -> None:
    assert primary(tier0(src(source)).findings, MISSING) == []


@pytest.mark.parametrize("source", MISSING_FIX)
def test_it_flags_unmasked_accesses_moved_by_the_program_id(source: str) -> None:
    source = src(source)
    found = [f for f in tier0(source).findings if f.code in MISSING]
    assert primary(found, MISSING) == marks(source, MISSING)
    assert all(f.severity is Severity.HIGH and f.family is Family.MASKING for f in found)


@pytest.mark.parametrize("source", NEEDLESS_NOOP)
def test_it_keeps_masks_that_can_be_false(source: str) -> None:
    assert primary(tier0(src(source)).findings, NEEDLESS) == []


@pytest.mark.parametrize("source", NEEDLESS_FIX)
def test_it_notes_masks_that_are_always_true(source: str) -> None:
    source = src(source)
    found = [f for f in tier0(source).findings if f.code in NEEDLESS]
    # One finding per masked access; both sit on the marked line.
    assert sorted({(f.code, f.lines[0]) for f in found}) == marks(source, NEEDLESS)
    assert all(f.severity is Severity.INFO for f in found)
