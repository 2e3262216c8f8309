from __future__ import annotations

import pytest

from diagnosis.engine.evidence import Family, Severity
from tests.engine import marks, primary, src, tier0

CODES = {"T0-ATOMIC-REDUCTION"}

HEAD = """
import triton
import triton.language as tl


"""

NOOP = [
    pytest.param(
        HEAD
        + """
@triton.jit
def histogram(x_ptr, hist_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    bins = tl.load(x_ptr + offs, mask=offs < n)
    tl.atomic_add(hist_ptr + bins, 1, mask=offs < n)
""",
        id="scatter-atomics-of-ones",
    ),
    pytest.param(
        HEAD
        + """
@triton.jit
def row_sum(x_ptr, out_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
    tl.store(out_ptr + row, tl.sum(x, axis=0))
""",
        id="one-program-per-output-stores",
    ),
    pytest.param(
        HEAD
        + """
@triton.jit
def softmax_like(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.atomic_add(out_ptr + offs, x - tl.max(x, axis=0), mask=offs < n)
""",
        id="block-shaped-value-that-uses-a-reduction",
    ),
    pytest.param(
        HEAD
        + """
@triton.jit
def scatter_add(x_ptr, idx_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    idx = tl.load(idx_ptr + offs, mask=offs < n)
    tl.atomic_add(out_ptr + idx, x, mask=offs < n)
""",
        id="element-wise-scatter-add",
    ),
]

FIX = [
    pytest.param(
        HEAD
        + """
@triton.jit
def total(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.atomic_add(out_ptr, tl.sum(x))  # <- T0-ATOMIC-REDUCTION
""",
        id="atomic-add-of-a-block-sum",
    ),
    pytest.param(
        HEAD
        + """
@triton.jit
def mse(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    d = tl.load(a_ptr + offs, mask=offs < n, other=0.0) - tl.load(b_ptr + offs, mask=offs < n, other=0.0)
    partial = tl.sum(d * d, axis=0)
    scaled = partial / n
    tl.atomic_add(out_ptr, scaled)  # <- T0-ATOMIC-REDUCTION
""",
        id="reduced-scalar-through-locals",
    ),
    pytest.param(
        HEAD
        + """
@triton.jit
def mean(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    partial = tl.sum(tl.load(x_ptr + offs, mask=offs < n, other=0.0), axis=0) / n
    tl.atomic_add(out_ptr, partial)  # <- T0-ATOMIC-REDUCTION
""",
        id="axis-0-of-a-1d-block-is-a-scalar",
    ),
    pytest.param(
        HEAD
        + """
@triton.jit
def looped(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    acc = 0.0
    for off in range(0, n, BLOCK * 64):
        acc += tl.sum(tl.load(x_ptr + off + tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)), axis=0)
    tl.atomic_add(out_ptr, acc)  # <- T0-ATOMIC-REDUCTION
""",
        id="loop-carried-accumulator",
    ),
    pytest.param(
        HEAD
        + """
@triton.jit
def absmax(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.atomic_max(out_ptr, tl.max(tl.abs(x), axis=0))  # <- T0-ATOMIC-REDUCTION
""",
        id="atomic-max-of-a-block-max",
    ),
    pytest.param(
        HEAD
        + """
@triton.jit
def col_sum(x_ptr, out_ptr, n_rows, n_cols, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.arange(0, BLOCK_C)
    x = tl.load(x_ptr + rows[:, None] * n_cols + cols[None, :], mask=rows[:, None] < n_rows, other=0.0)
    tl.atomic_add(out_ptr + cols, tl.sum(x, axis=0))  # <- T0-ATOMIC-REDUCTION
""",
        id="split-column-reduction",
    ),
]


@pytest.mark.parametrize("source", NOOP)
def test_it_leaves_element_wise_atomics_alone(source: str) -> None:
    assert primary(tier0(src(source)).findings, CODES) == []


@pytest.mark.parametrize("source", FIX)
def test_it_flags_reductions_finished_with_atomics(source: str) -> None:
    source = src(source)
    assert primary(tier0(source).findings, CODES) == marks(source, CODES)


@pytest.mark.parametrize(
    ("case", "severity"),
    [
        ("atomic-add-of-a-block-sum", Severity.MEDIUM),
        ("axis-0-of-a-1d-block-is-a-scalar", Severity.MEDIUM),
        ("split-column-reduction", Severity.LOW),
    ],
)
def test_a_scalar_target_is_worse_than_a_vector_of_partials(case: str, severity: Severity) -> None:
    (source,) = [p.values[0] for p in FIX if p.id == case]
    (finding,) = [f for f in tier0(src(source)).findings if f.code in CODES]
    assert finding.severity is severity
    assert finding.family is Family.BLOCK_REDUCTION
