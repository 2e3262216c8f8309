from __future__ import annotations

import pytest

from diagnosis.engine.evidence import Family, Severity
from tests.engine import marks, primary, src, tier0

CODES = {"T0-INT32-OFFSET"}

KERNEL = """
import torch
import triton
import triton.language as tl

ROWS = {rows}


@triton.jit
def row_copy(x_ptr, y_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0){cast}
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols)  # <- T0-INT32-OFFSET
    tl.store(y_ptr + row * stride + cols, x, mask=cols < n_cols)  # <- T0-INT32-OFFSET


def get_init_inputs():
    return []
"""


def case(inputs: str, rows: int = 4096, cast: str = "") -> str:
    return KERNEL.format(rows=rows, cast=cast) + inputs


SMALL = """

def get_inputs():
    return [torch.randn(ROWS, 8192)]
"""

HUGE_CASES = """

def get_input_cases():
    return [[torch.randn(m, n, dtype=torch.float16)] for m, n in [(1024, 1024), (65536, 32768)]]
"""

NOOP = [
    pytest.param(case(SMALL), id="small-inputs"),
    pytest.param(case(""), id="sizes-unknown"),
    pytest.param(case(HUGE_CASES, cast=".to(tl.int64)"), id="program-id-cast-to-int64"),
]

FIX = [
    pytest.param(
        case(
            """

def get_inputs():
    n = 1 << 16
    return [torch.randn(n, n)]
"""
        ),
        id="sizes-from-simple-locals",
    ),
    pytest.param(case(SMALL, rows=262144), id="module-constant-size-over-2-31"),
    pytest.param(case(HUGE_CASES), id="comprehension-over-literal-shapes"),
    pytest.param(
        case(
            """

def get_inputs():
    return [torch.empty((ROWS, 1 << 20), dtype=torch.bfloat16)]
"""
        ),
        id="tuple-shape-with-shift",
    ),
]


@pytest.mark.parametrize("source", NOOP)
def test_it_stays_silent_without_a_known_huge_input(source: str) -> None:
    assert primary(tier0(src(source)).findings, CODES) == []


@pytest.mark.parametrize("source", FIX)
def test_it_flags_int32_program_offsets_over_huge_inputs(source: str) -> None:
    source = src(source)
    found = [f for f in tier0(source).findings if f.code in CODES]
    assert primary(found, CODES) == marks(source, CODES)
    assert all(f.severity is Severity.HIGH and f.family is Family.INT64_OFFSETS for f in found)
