"""COALESCE (tiled strided walk): a column walked one element per program becomes a tile with
the program index along its contiguous axis (before/after and refusal tables, tier 0 to the
rewrite, interpreter correctness; the compiled accesses are in tests/runner/test_compile_families.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnosis.engine.evidence import Family
from diagnosis.engine.proposers.base import ProposalContext
from diagnosis.engine.proposers.rules import RuleInput, RulesProposer, apply_family
from diagnosis.engine.tier0 import run_tier0
from tests.engine.rules_cases import harness as h
from tests.engine.rules_cases import styles as st

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
        h.variant(
            COLSUM,
            (
                "@triton.jit\n",
                "@triton.autotune(\n"
                "    configs=[triton.Config({'BLOCK_M': bm}, num_warps=w) for bm in [64, 128, 256] for w in [4, 8]],\n"
                "    key=['M'],\n)\n@triton.jit\n",
            ),
            (", BLOCK_M=256)", ")"),
        ),
        [
            "    col = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)\n",
            "    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)\n",
            "colsum_kernel[(triton.cdiv(N, 16),)](x, out, M, N, x.stride(0), BLOCK_N=16)",
        ],
        id="autotune-chooses-the-walked-block-its-largest-sizes-the-tile",
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
    pytest.param(
        h.variant(
            COLSUM,
            (
                "@triton.jit\n",
                "@triton.autotune(configs=[triton.Config({}, num_warps=4)], key=['M'])\n@triton.jit\n",
            ),
        ),
        [
            "@triton.autotune(configs=[triton.Config({}, num_warps=4)], key=['M'])\n@triton.jit\n"
            "def colsum_kernel(x_ptr, out_ptr, M, N, stride_xm, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):\n",
            "colsum_kernel[(triton.cdiv(N, 16),)](x, out, M, N, x.stride(0), BLOCK_M=256, BLOCK_N=16)",
        ],
        id="autotuned-on-warps",
    ),
]

NOOP = [
    pytest.param((h.ROOT / "tests" / "kernels" / "colsum_tiled.py").read_text(), id="already-tiled"),
    pytest.param((h.SUITE / "15_max_dim_fp32.py").read_text(), id="row-walk-is-contiguous"),
    pytest.param((h.SUITE / "18_transpose_fp32.py").read_text(), id="two-dimensional-grid"),
    pytest.param(
        h.variant(
            COLSUM, ("colsum_kernel[(N,)](x, out, M, N,", "colsum_kernel[(x.shape[1],)](x, out, M, N,")
        ),
        id="grid-not-passed-as-an-argument",
    ),
    pytest.param(h.variant(COLSUM, ("BLOCK_M=256", "BLOCK_M=2048")), id="tile-too-large-for-registers"),
    pytest.param(
        h.variant(COLSUM, ("        acc += x\n", "        if col > 0:\n            acc += x\n")),
        id="a-branch-on-the-program-index",
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
                "SIZES = [64, 128, 256]\n\n\n"
                "@triton.autotune(configs=[triton.Config({'BLOCK_M': bm}) for bm in SIZES], key=['M'])\n"
                "@triton.jit\n",
            ),
            (", BLOCK_M=256)", ")"),
        ),
        id="autotune-chooses-the-walked-block-from-configs-it-cannot-read",
    ),
]


# A program index split into digits by `%` and `//` (the heads of [B, T, H] the contiguous
# axis): both modules take the same shape cases, which size the chunk a wrapper passes.
SCAN = h.source("strided_heads_scan.py")
CHUNKS = h.source("strided_heads_chunks.py")
HEADS = h.rule_input(h.cases_of(h.HERE / "strided_heads_chunks.py"))

# fla's style: the walked block chosen by an autotuner whose configs a comprehension writes
AUTOTUNED_SCAN = h.variant(
    SCAN,
    (
        "@triton.jit\n",
        "@triton.autotune(\n"
        "    configs=[\n"
        "        triton.Config({'BLOCK_T': BT}, num_warps=num_warps, num_stages=num_stages)\n"
        "        for BT in [32, 64, 128, 256]\n"
        "        for num_warps in [2, 4, 8]\n"
        "        for num_stages in [1, 2, 3]\n"
        "    ],\n"
        "    key=['H', 'REVERSE'],\n"
        ")\n"
        "@triton.jit\n",
    ),
    ("BLOCK_T=128, ", ""),
)

SPLIT_FIX = [
    pytest.param(
        SCAN,
        [
            "    pid = tl.program_id(0).to(tl.int64)\n"
            "    b, h = pid // tl.cdiv(H, BLOCK_H), (pid % tl.cdiv(H, BLOCK_H)) * BLOCK_H + tl.arange(0, BLOCK_H)\n"
            "    h_mask = h < H\n    start = b * T * H + h\n",
            "    carry = tl.zeros([BLOCK_H], dtype=tl.float32)\n",
            "        blk = n_blocks - 1 - i if REVERSE else i\n",
            "        vals = tl.load(x + start[None, :] + t[:, None] * H, mask=keep[:, None] & h_mask[None, :], "
            "other=0.0).to(tl.float32)\n",
            "            out = tl.cumsum(vals, axis=0, reverse=True) + carry[None, :]\n",
            "        carry += tl.sum(vals, 0)\n",
            "        tl.store(y + start[None, :] + t[:, None] * H, out.to(y.dtype.element_ty), "
            "mask=keep[:, None] & h_mask[None, :])\n",
            "running_sum_kernel[(B * triton.cdiv(H, 32),)](x, y, T, H=H, BLOCK_T=128, REVERSE=False, BLOCK_H=32)",
        ],
        HEADS,
        id="digits-by-floordiv-and-mod-scalar-carry-constexpr-branches",
    ),
    pytest.param(
        AUTOTUNED_SCAN,
        [
            "    carry = tl.zeros([BLOCK_H], dtype=tl.float32)\n",
            "running_sum_kernel[(B * triton.cdiv(H, 16),)](x, y, T, H=H, REVERSE=False, BLOCK_H=16)",
        ],
        HEADS,
        id="fla-autotuned-walked-block",
    ),
    pytest.param(
        CHUNKS,
        [
            "    bh, chunk = digits_of_program(B * tl.cdiv(H, BLOCK_H))\n"
            "    b, h = bh // tl.cdiv(H, BLOCK_H), (bh % tl.cdiv(H, BLOCK_H)) * BLOCK_H + tl.arange(0, BLOCK_H)\n"
            "    h_mask = h < H\n",
            "    offs = (b * T + steps[:, None]) * H + h[None, :]\n",
            "    # [CHUNK, BLOCK_H]\n    g = tl.load(src + offs, mask=inside[:, None] & h_mask[None, :], other=0.0)\n",
            "    if SCALED:\n        acc *= scale\n",
            "    chunk_cumsum_kernel[(n_chunks * B * triton.cdiv(H, 32),)](\n",
            "        REVERSE=False, SCALED=scale is not None, BLOCK_H=32,\n    )\n",
        ],
        HEADS,
        id="digits-from-a-jit-helper-keyword-launch",
    ),
    pytest.param(
        h.variant(CHUNKS, ("    b, h = bh // H, bh % H\n", "    b = bh // H\n    h = bh % H\n")),
        [
            "    b = bh // tl.cdiv(H, BLOCK_H)\n    h = (bh % tl.cdiv(H, BLOCK_H)) * BLOCK_H + tl.arange(0, BLOCK_H)\n"
        ],
        HEADS,
        id="digits-one-per-statement",
    ),
]

SPLIT_NOOP = [
    pytest.param(
        h.variant(CHUNKS, ("(B * H)", "(B * 32)"), ("[(n_chunks * B * H,)]", "[(n_chunks * B * 32,)]")),
        id="a-divisor-without-the-heads",
    ),
    pytest.param(
        h.variant(CHUNKS, ("[(n_chunks * B * H,)]", "[(n_chunks * g.numel() // T,)]")),
        id="grid-not-a-product",
    ),
    pytest.param(
        h.variant(CHUNKS, ("return q % inner, q // inner", "return (q + 1) % inner, q // inner")),
        id="a-helper-that-shifts-the-index",
    ),
    pytest.param(
        h.variant(CHUNKS, ("if middle is None:", "if middle is not None:")),
        id="helper-takes-the-other-branch",
    ),
    pytest.param(
        h.variant(CHUNKS, ("    b, h = bh // H, bh % H\n", "    b, h = bh // H, bh % H\n    h = h + 0\n")),
        id="the-head-rebound",
    ),
    pytest.param(
        h.variant(CHUNKS, ("    if SCALED:\n", "    if h > 0:\n")),
        id="a-branch-on-the-head",
    ),
    pytest.param(
        h.variant(
            CHUNKS,
            (
                "    tl.store(dst + offs, acc, mask=inside)",
                "    tl.store(dst + offs + bh - bh, acc, mask=inside)",
            ),
        ),
        id="the-undivided-index-read-after-the-split",
    ),
    pytest.param(
        h.variant(SCAN, ("    b, h = pid // H, pid % H\n", "    b = pid // 4\n    h = b % H\n")),
        id="the-heads-above-another-digit",
    ),
    pytest.param(
        h.variant(
            SCAN,
            ("        carry += tl.sum(vals, 0)\n", "        carry += tl.sum(vals, 0)\n        T = T + h\n"),
        ),
        id="a-loop-bound-rebound-per-head",
    ),
]


# Every import style (`import triton as tr`, `from triton import jit`, `triton.language as lang`,
# `from triton.language import constexpr`) on a whole program index and on a split one; the
# expected texts are written in that style too.
STYLES = [
    pytest.param(fn(before), [fn(t) for t in present], inp, id=f"{name}-{style}")
    for style, fn in st.IMPORT_STYLES.items()
    for name, before, present, inp in (
        (
            "column-sum",
            COLSUM,
            [
                "    col = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)\n",
                "colsum_kernel[(triton.cdiv(N, 16),)](x, out, M, N, x.stride(0), BLOCK_M=256, BLOCK_N=16)",
            ],
            h.rule_input(),
        ),
        (
            "heads-split-by-a-helper",
            CHUNKS,
            [
                "    bh, chunk = digits_of_program(B * tl.cdiv(H, BLOCK_H))\n",
                "    chunk_cumsum_kernel[(n_chunks * B * triton.cdiv(H, 32),)](\n",
            ],
            HEADS,
        ),
    )
]


@pytest.mark.parametrize(("before", "present", "inp"), SPLIT_FIX + STYLES)
def test_it_tiles_every_split_and_import_style(before: str, present: list[str], inp: RuleInput) -> None:
    rw = apply_family(Family.COALESCE, before, inp)
    assert rw is not None
    assert h.parses(rw.source)
    for text in present:
        assert text in rw.source, text


@pytest.mark.parametrize("before", SPLIT_NOOP)
def test_it_refuses_a_split_it_cannot_prove(before: str) -> None:
    assert apply_family(Family.COALESCE, before, HEADS) is None


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


@pytest.mark.parametrize(
    ("source", "context", "transforms"),
    [
        pytest.param(COLSUM, ProposalContext(), ["tile_strided_walk"], id="column-sum"),
        # an autotuned scan has no launch finding; its tile of heads leaves fewer programs than
        # SMs on these cases, so the split follows the tile first (the composition's `follows`)
        pytest.param(
            AUTOTUNED_SCAN,
            HEADS.context,
            ["tile_strided_walk+split_carried_scan", "tile_strided_walk"],
            id="autotuned-heads-scan",
        ),
    ],
)
def test_tier0_leads_the_proposer_to_the_rewrite(
    source: str, context: ProposalContext, transforms: list[str]
) -> None:
    findings = run_tier0(source).findings
    walk = [f for f in findings if f.code == "T0-STRIDED-WALK"]
    assert walk and {f.family for f in walk} == {Family.COALESCE}
    cands = RulesProposer().propose(source, [f for f in findings if f.family is Family.COALESCE], context)
    assert [(c.family, c.transform) for c in cands] == [(Family.COALESCE, t) for t in transforms]
    for cand in cands:
        assert "T0-STRIDED-WALK" in cand.findings_addressed
        assert not [
            f for f in run_tier0(cand.source).findings if f.code in ("T0-STRIDED-WALK", "T0-STRIDED-ACCESS")
        ]


def test_tiled_modules_are_correct_under_the_interpreter(tmp_path: Path) -> None:
    """Verify inputs with column (head) counts below, at and above one tile, and a single row."""
    rewrites = {
        p.id: apply_family(Family.COALESCE, p.values[0], HEADS if p in SPLIT_FIX else h.rule_input())
        for p in FIX + SPLIT_FIX
    }
    assert all(rw is not None for rw in rewrites.values())
    h.assert_interp_ok({name: rw.source for name, rw in rewrites.items()}, tmp_path)
