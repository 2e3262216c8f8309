from __future__ import annotations

import pytest

from diagnosis.engine.evidence import Family
from tests.engine import marks, primary, src, tier0

CODES = {"T0-MULTI-PASS"}

NOOP = [
    pytest.param(
        """
        import triton
        import triton.language as tl


        @triton.jit
        def softmax(out_ptr, in_ptr, stride, n_cols, BLOCK: tl.constexpr):
            row = tl.program_id(0)
            cols = tl.arange(0, BLOCK)
            x = tl.load(in_ptr + row * stride + cols, mask=cols < n_cols, other=-float("inf"))
            x = tl.exp(x - tl.max(x, axis=0))
            tl.store(out_ptr + row * stride + cols, x / tl.sum(x, axis=0), mask=cols < n_cols)
        """,
        id="single-pass-softmax",
    ),
    pytest.param(
        """
        import triton
        import triton.language as tl


        @triton.jit
        def two_rows(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
            acc = 0.0
            for off in range(0, n, BLOCK):
                acc += tl.sum(tl.load(a_ptr + off + tl.arange(0, BLOCK)), axis=0)
            for off in range(0, n, BLOCK):
                acc += tl.sum(tl.load(b_ptr + off + tl.arange(0, BLOCK)), axis=0)
            tl.store(out_ptr, acc)
        """,
        id="sibling-loops-over-different-pointers",
    ),
    pytest.param(
        """
        import triton
        import triton.language as tl


        @triton.jit
        def ranges(x_ptr, out_ptr, n, m, BLOCK: tl.constexpr):
            acc = 0.0
            for off in range(0, n, BLOCK):
                acc += tl.sum(tl.load(x_ptr + off + tl.arange(0, BLOCK)), axis=0)
            for off in range(0, m, BLOCK):
                tl.store(out_ptr + off + tl.arange(0, BLOCK), tl.load(x_ptr + off + tl.arange(0, BLOCK)) / acc)
        """,
        id="loops-over-different-ranges",
    ),
]

FIX = [
    pytest.param(
        """
        import triton
        import triton.language as tl


        @triton.jit
        def online_softmax(out_ptr, in_ptr, stride, n_cols, BLOCK: tl.constexpr):
            row = tl.program_id(0)
            m = -float("inf")
            d = 0.0
            for off in range(0, n_cols, BLOCK):  # <- T0-MULTI-PASS
                cols = off + tl.arange(0, BLOCK)
                x = tl.load(in_ptr + row * stride + cols, mask=cols < n_cols, other=-float("inf"))
                m_new = tl.maximum(m, tl.max(x, axis=0))
                d = d * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
                m = m_new
            for off in range(0, n_cols, BLOCK):
                cols = off + tl.arange(0, BLOCK)
                x = tl.load(in_ptr + row * stride + cols, mask=cols < n_cols, other=-float("inf"))
                tl.store(out_ptr + row * stride + cols, tl.exp(x - m) / d, mask=cols < n_cols)
        """,
        id="two-pass-online-softmax-still-reads-the-row-twice",
    ),
    pytest.param(
        """
        import triton
        import triton.language as tl


        @triton.jit
        def softmax3(out_ptr, in_ptr, stride, n_cols, BLOCK: tl.constexpr):
            row = tl.program_id(0)
            row_ptr = in_ptr + row * stride
            m = -float("inf")
            for off in range(0, n_cols, BLOCK):  # <- T0-MULTI-PASS
                cols = off + tl.arange(0, BLOCK)
                m = tl.maximum(m, tl.max(tl.load(row_ptr + cols, mask=cols < n_cols, other=-float("inf")), axis=0))
            d = 0.0
            for off in range(0, n_cols, BLOCK):
                cols = off + tl.arange(0, BLOCK)
                d += tl.sum(tl.exp(tl.load(row_ptr + cols, mask=cols < n_cols, other=-float("inf")) - m), axis=0)
            for off in range(0, n_cols, BLOCK):
                cols = off + tl.arange(0, BLOCK)
                x = tl.load(row_ptr + cols, mask=cols < n_cols)
                tl.store(out_ptr + row * stride + cols, tl.exp(x - m) / d, mask=cols < n_cols)
        """,
        id="three-pass-softmax",
    ),
    pytest.param(
        """
        import triton
        import triton.language as tl


        @triton.jit
        def layernorm(x_ptr, y_ptr, w_ptr, stride, n, eps, BLOCK: tl.constexpr):
            row = tl.program_id(0)
            mean = 0.0
            for off in tl.range(0, n, BLOCK):  # <- T0-MULTI-PASS
                cols = off + tl.arange(0, BLOCK)
                mean += tl.sum(tl.load(x_ptr + row * stride + cols, mask=cols < n, other=0.0), axis=0)
            mean = mean / n
            var = 0.0
            for off in tl.range(0, n, BLOCK):
                cols = off + tl.arange(0, BLOCK)
                x = tl.load(x_ptr + row * stride + cols, mask=cols < n, other=0.0) - mean
                var += tl.sum(x * x, axis=0)
            rstd = 1 / tl.sqrt(var / n + eps)
            for off in tl.range(0, n, BLOCK):
                cols = off + tl.arange(0, BLOCK)
                x = tl.load(x_ptr + row * stride + cols, mask=cols < n, other=0.0)
                w = tl.load(w_ptr + cols, mask=cols < n)
                tl.store(y_ptr + row * stride + cols, (x - mean) * rstd * w, mask=cols < n)
        """,
        id="three-pass-layernorm-tl-range",
    ),
    pytest.param(
        """
        import triton
        import triton.language as tl


        @triton.jit
        def persistent(x_ptr, y_ptr, n_rows, n_cols, BLOCK: tl.constexpr):
            for row in range(tl.program_id(0), n_rows, tl.num_programs(0)):
                s = 0.0
                for off in range(0, n_cols, BLOCK):  # <- T0-MULTI-PASS
                    s += tl.sum(tl.load(x_ptr + row * n_cols + off + tl.arange(0, BLOCK)), axis=0)
                for off in range(0, n_cols, BLOCK):
                    c = off + tl.arange(0, BLOCK)
                    tl.store(y_ptr + row * n_cols + c, tl.load(x_ptr + row * n_cols + c) / s)
        """,
        id="two-passes-nested-in-a-persistent-loop",
    ),
]


@pytest.mark.parametrize("source", NOOP)
def test_it_leaves_single_passes_alone(source: str) -> None:
    assert primary(tier0(src(source)).findings, CODES) == []


@pytest.mark.parametrize("source", FIX)
def test_it_flags_multi_pass_row_loops_at_the_first_loop(source: str) -> None:
    source = src(source)
    assert primary(tier0(source).findings, CODES) == marks(source, CODES)


def test_it_estimates_the_gain_from_the_number_of_passes() -> None:
    (softmax3,) = [p.values[0] for p in FIX if p.id == "three-pass-softmax"]
    (finding,) = [f for f in tier0(src(softmax3)).findings if f.code == "T0-MULTI-PASS"]
    assert finding.family is Family.SINGLE_PASS
    assert finding.args["passes"] == 3
    assert finding.args["pointers"] == "in_ptr"
    assert len(finding.lines) == 3
    # 3 reads + 1 write against 1 + 1: a 2x bound, halved.
    assert finding.gain == 1.5
