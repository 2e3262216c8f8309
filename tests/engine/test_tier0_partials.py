"""T0-STATS-THROUGH-MEMORY and T0-INTERMEDIATE-RELOADED: partial results kept in global memory
between passes over a row."""

from __future__ import annotations

import pytest

from diagnosis.engine.evidence import Family
from tests.engine import marks, primary, src, tier0
from tests.engine.rules_cases import harness as h

CODES = {"T0-STATS-THROUGH-MEMORY", "T0-INTERMEDIATE-RELOADED"}

HEAD = """
import torch
import triton
import triton.language as tl


"""

RELOAD_IN_BLOCK = src(
    HEAD
    + """
@triton.jit
def center(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n + cols, mask=cols < n, other=0.0)
    tl.store(y_ptr + row * n + cols, x - tl.sum(x, axis=0) / n, mask=cols < n)
    c = tl.load(y_ptr + row * n + cols, mask=cols < n, other=0.0)  # <- T0-INTERMEDIATE-RELOADED
    tl.store(y_ptr + row * n + cols, c * 2.0, mask=cols < n)
"""
)

NOOP = [
    pytest.param(
        src(
            HEAD
            + """
@triton.jit
def copy_twice(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    tl.store(y_ptr + cols, tl.load(x_ptr + cols, mask=cols < n), mask=cols < n)
"""
        ),
        id="store-without-reload",
    ),
    pytest.param(
        src(
            HEAD
            + """
@triton.jit
def accumulate(y_ptr, n, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    y = tl.load(y_ptr + cols, mask=cols < n)
    tl.store(y_ptr + cols, y + 1.0, mask=cols < n)
"""
        ),
        id="load-then-store-in-place",
    ),
    pytest.param(
        h.source("stats_softmax.py")
        .replace('x = tl.load(x_ptr + row * stride + cols, mask=mask, other=float("-inf"))', "x = 0.0")
        .replace("tl.exp(x - m) / s", "x + m / s"),
        id="second-kernel-reads-only-the-statistics",
    ),
    pytest.param(
        h.source("stats_softmax.py").replace("normalize_kernel[(n_rows,)]", "normalize_kernel[(n_rows, 1)]"),
        id="different-grids",
    ),
]


def test_it_flags_row_statistics_read_back_with_the_row() -> None:
    source = h.source("stats_softmax.py")
    (f,) = [f for f in tier0(source).findings if f.code in CODES]
    lines = source.splitlines()
    assert f.code == "T0-STATS-THROUGH-MEMORY" and f.family is Family.FUSION
    assert (
        f.kernel == "row_stats_kernel" and f.args["shared"] == "x" and f.args["tensor"] == "row_max, row_sum"
    )
    assert lines[f.lines[0] - 1].strip() == "tl.store(max_ptr + row, row_max)"
    assert lines[f.lines[1] - 1].strip() == "m = tl.load(max_ptr + row)"
    assert f.gain == 1.25  # x read twice, y written: 3 tensors moved -> 2, halved


@pytest.mark.parametrize(
    "source",
    [
        pytest.param(RELOAD_IN_BLOCK, id="reload-in-one-block"),
        pytest.param(
            h.source("reload_softmax.py").replace(
                "        num = tl.load(y_row + cols, mask=mask)\n",
                "        num = tl.load(y_row + cols, mask=mask)  # <- T0-INTERMEDIATE-RELOADED\n",
            ),
            id="reload-in-a-later-loop",
        ),
    ],
)
def test_it_flags_an_intermediate_loaded_back(source: str) -> None:
    assert primary(tier0(source).findings, CODES) == marks(source, CODES)


@pytest.mark.parametrize("source", NOOP)
def test_it_leaves_other_memory_traffic_alone(source: str) -> None:
    assert primary(tier0(source).findings, CODES) == []
