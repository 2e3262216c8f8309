"""LAUNCH_CONFIG's split scan: a kernel whose few programs each walk a long loop carrying a
running total is split into contiguous segments over a new grid axis, a totals launch and a
scan launch (before/after and refusal tables, other projects' code styles, interpreter
correctness)."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnosis.engine.evidence import Family
from diagnosis.engine.proposers.base import CaseShape, ProposalContext, RoundHistory
from diagnosis.engine.proposers.rules import RuleInput, RulesProposer, apply_family, transforms_for
from diagnosis.engine.proposers.rules.split_scan import split_carried_scan
from diagnosis.engine.tier0 import run_tier0
from diagnosis.engine.verdict import Verdict
from tests.engine.rules_cases import harness as h
from tests.engine.rules_cases import review

SCAN = h.source("few_scan.py")


# the timed cases of few_scan.py (4, 8, 16, 2 and 32 rows of 2^17-2^21 elements)
CASES = h.fp32_cases((4, 1 << 20), (8, 1 << 19), (16, 1 << 18), (2, 1 << 21), (32, 1 << 17))
LOOP = (
    "    for start in range(0, n_cols, BLOCK):\n"
    "        cols = start + tl.arange(0, BLOCK)\n"
    "        mask = cols < n_cols\n"
    "        x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)\n"
    "        tl.store(out_ptr + row * n_cols + cols, tl.cumsum(x, axis=0) + carry, mask=mask)\n"
    "        carry += tl.sum(x, axis=0)\n"
)


def split(source: str, cases: tuple[CaseShape, ...] = CASES) -> str | None:
    rw = split_carried_scan(source, RuleInput((), ProposalContext(cases=cases)))
    return rw.source if rw is not None else None


# fla's style (chunk_global_cumsum): the chunk count computed in the kernel, a reversed scan
# chosen by a constexpr, the update under a test of the loop counter, the output scaled after
FLA_STYLE = h.variant(
    SCAN,
    ("def row_cumsum_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):",
     "def row_cumsum_kernel(x_ptr, out_ptr, n_cols, scale, BLOCK: tl.constexpr, REVERSE: tl.constexpr):"),
    (LOOP,
     "    NT = tl.cdiv(n_cols, BLOCK)\n"
     "    for i_c in range(NT):\n"
     "        i_t = NT - 1 - i_c if REVERSE else i_c\n"
     "        cols = i_t * BLOCK + tl.arange(0, BLOCK)\n"
     "        mask = cols < n_cols\n"
     "        b_s = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)\n"
     "        if REVERSE:\n"
     "            b_o = tl.cumsum(b_s, axis=0, reverse=True)\n"
     "        else:\n"
     "            b_o = tl.cumsum(b_s, axis=0)\n"
     "        b_ss = tl.sum(b_s, 0)\n"
     "        b_o += carry\n"
     "        if i_c >= 0:\n"
     "            carry += b_ss\n"
     "        b_o *= scale\n"
     "        tl.store(out_ptr + row * n_cols + cols, b_o.to(out_ptr.dtype.element_ty), mask=mask)\n"),
    ("row_cumsum_kernel[(n_rows,)](x, out, n_cols, BLOCK=1024)",
     "row_cumsum_kernel[(n_rows,)](x, out, n_cols, 1.0, BLOCK=1024, REVERSE=False)"),
)  # fmt: skip

# flag_gems' style: the launch in a module-level helper, constexprs by position, a grid lambda,
# a tile of columns carried (a 2-D scan down the rows). (An alias such as `import
# triton.language as lang` is read by the same Spelling as split_loop's tests; triton 3.6's
# interpreter does not take `lang.constexpr` annotations, so this module keeps `tl`.)
HELPER_STYLE = h.variant(
    SCAN,
    ("return x.cumsum(dim=1)", "return x.cumsum(dim=0)"),
    ("def row_cumsum_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):\n"
     "    row = tl.program_id(0)\n"
     "    carry = tl.zeros([], dtype=tl.float32)\n" + LOOP,
     "def col_cumsum_kernel(x_ptr, out_ptr, n_rows, n_cols, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):\n"
     "    cols = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)\n"
     "    carry = tl.zeros([BLOCK_C], dtype=tl.float32)\n"
     "    for start in range(0, n_rows, BLOCK_R):\n"
     "        rows = start + tl.arange(0, BLOCK_R)\n"
     "        mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)\n"
     "        x = tl.load(x_ptr + rows[:, None] * n_cols + cols[None, :], mask=mask, other=0.0)\n"
     "        tl.store(out_ptr + rows[:, None] * n_cols + cols[None, :], tl.cumsum(x, axis=0) + carry[None, :], mask=mask)\n"
     "        carry += tl.sum(x, axis=0)\n"),
    ("class ModelNew(nn.Module):\n    def forward(self, x):\n        x = x.contiguous()\n"
     "        n_rows, n_cols = x.shape\n        out = torch.empty_like(x)\n"
     "        row_cumsum_kernel[(n_rows,)](x, out, n_cols, BLOCK=1024)\n        return out\n",
     "def column_cumsum(x):\n    n_rows, n_cols = x.shape\n    out = torch.empty_like(x)\n"
     '    col_cumsum_kernel[lambda meta: (triton.cdiv(n_cols, meta["BLOCK_C"]),)](x, out, n_rows, n_cols, 64, 32)\n'
     "    return out\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"
     "        return column_cumsum(x.contiguous())\n"),
    ("_CASES = [(4, 1 << 20), (8, 1 << 19), (16, 1 << 18), (2, 1 << 21), (32, 1 << 17)]",
     "_CASES = [(1 << 16, 64), (1 << 15, 128), (1 << 17, 32), (1 << 14, 256), (1 << 18, 32)]"),
    ("[[torch.randn(3, 5000)], [torch.randn(1, 3000)], [torch.randn(2, 1000)], [torch.randn(5, 1)]]",
     "[[torch.randn(5000, 3)], [torch.randn(3000, 40)], [torch.randn(1, 70)]]"),
)  # fmt: skip
HELPER_CASES = h.fp32_cases((1 << 16, 64), (1 << 15, 128), (1 << 17, 32), (1 << 14, 256), (1 << 18, 32))

# a loop from 1 through `tl.range` (its start kept: the segment is offset by it)
ONE_BASED = h.variant(
    SCAN,
    ("    for start in range(0, n_cols, BLOCK):\n        cols = start + tl.arange(0, BLOCK)\n",
     "    for chunk in tl.range(1, tl.cdiv(n_cols, BLOCK) + 1):\n        cols = (chunk - 1) * BLOCK + tl.arange(0, BLOCK)\n"),
)  # fmt: skip

# the same kernel run reversed (fla's `reverse=True`): the segments' totals come from the
# iterations before each segment in loop order, which walk the row from its end
FLA_REVERSED = h.variant(
    FLA_STYLE,
    ("return x.cumsum(dim=1)", "return x.flip(1).cumsum(dim=1).flip(1)"),
    ("BLOCK=1024, REVERSE=False)", "BLOCK=1024, REVERSE=True)"),
)

# fla's released style: the chunk chosen by an autotuner under heuristics (a constexpr the
# launch never passes), the kernel reached through `.fn` of the heuristics' wrapper
FLA_AUTOTUNED = h.variant(
    FLA_STYLE,
    ("@triton.jit\ndef row_cumsum_kernel(",
     "@triton.heuristics({'REVERSE': lambda args: args['reverse'] != 0})\n"
     "@triton.autotune(\n"
     "    configs=[triton.Config({'BLOCK': BLOCK}, num_warps=2) for BLOCK in [256, 1024]],\n"
     "    key=['n_cols'],\n"
     ")\n"
     "@triton.jit\ndef row_cumsum_kernel("),
    ("scale, BLOCK: tl.constexpr, REVERSE: tl.constexpr):", "scale, reverse, BLOCK: tl.constexpr, REVERSE: tl.constexpr):"),
    ("row_cumsum_kernel[(n_rows,)](x, out, n_cols, 1.0, BLOCK=1024, REVERSE=False)",
     "row_cumsum_kernel[(n_rows,)](x, out, n_cols, 1.0, 0)"),
)  # fmt: skip


# the scan autotuned by its author over two blocks (LAUNCH_CONFIG's own autotune gives eight
# configs, which the interpreter check would run one by one)
AUTOTUNED = h.variant(
    SCAN,
    ("@triton.jit\ndef row_cumsum_kernel(",
     "@triton.autotune(configs=[triton.Config({'BLOCK': 512}), triton.Config({'BLOCK': 1024})], key=['n_cols'])\n"
     "@triton.jit\ndef row_cumsum_kernel("),
    ("row_cumsum_kernel[(n_rows,)](x, out, n_cols, BLOCK=1024)", "row_cumsum_kernel[(n_rows,)](x, out, n_cols)"),
)  # fmt: skip


FIX = [
    pytest.param(
        SCAN, CASES,
        ["def row_cumsum_kernel_totals(x_ptr, out_ptr, n_cols, partials_ptr, n_split, BLOCK: tl.constexpr):\n",
         "    iterations = tl.cdiv(n_cols, BLOCK)\n    split = tl.program_id(1)\n",
         "    for start in range(first * BLOCK, last * BLOCK, BLOCK):\n",
         "    tl.store(partials_ptr + split * programs + tile, carry.to(tl.float64))\n",
         "    before = tl.arange(0, 64)\n"
         "    totals = tl.load(partials_ptr + before * programs + tile, mask=before < split, other=0.0)\n"
         "    carry += tl.sum(totals, axis=0).to(carry.dtype)\n",
         "n_split = max(1, min(triton.cdiv(n_cols, 1024), 64, 2112 // n_rows)) if n_rows < 132 else 1\n",
         "row_cumsum_kernel_scan[(n_rows, n_split)](x, out, n_cols, BLOCK=1024, partials_ptr=partials, n_split=n_split)\n",
         "        else:\n            row_cumsum_kernel[(n_rows,)](x, out, n_cols, BLOCK=1024)\n"],
        id="row-cumsum-in-blocks",
    ),
    pytest.param(
        FLA_STYLE, CASES,
        ["    for i_c in range(first, last):\n",
         # the totals keep what the carry's increment reads, under its test, and nothing else
         "        b_ss = tl.sum(b_s, 0)\n        if i_c >= 0:\n            carry += b_ss\n\n    # the segment's total\n"],
        id="fla-chunk-count-in-the-kernel-reversed-by-a-constexpr",
    ),
    pytest.param(FLA_REVERSED, CASES, ["    for i_c in range(first, last):\n"], id="fla-style-run-reversed"),
    pytest.param(
        HELPER_STYLE, HELPER_CASES,
        ["    carry = tl.zeros([BLOCK_C], dtype=tl.float32)\n",
         "    lanes = tl.arange(0, BLOCK_C)\n",
         "tl.store(partials_ptr + (split * programs + tile) * BLOCK_C + lanes, carry.to(tl.float64))\n",
         "    offsets = (before[:, None] * programs + tile) * BLOCK_C + lanes[None, :]\n"
         "    totals = tl.load(partials_ptr + offsets, mask=(before < split)[:, None], other=0.0)\n",
         "    col_cumsum_kernel_scan[(triton.cdiv(n_cols, 32), n_split)](x, out, n_rows, n_cols, 64, 32, "
         "partials_ptr=partials, n_split=n_split)\n"],
        id="helper-launch-positional-constexprs-tile-carry",
    ),
    pytest.param(
        ONE_BASED, CASES,
        ["    iterations = (tl.cdiv(n_cols, BLOCK) + 1) - 1\n",
         "    for chunk in tl.range(1 + first, 1 + last):\n"],
        id="a-tl-range-from-one",
    ),
    # an autotuned kernel: its totals keep the autotuner, its scan runs at the config it chose
    # (two autotuners could choose two blocks, and the segments would not meet)
    pytest.param(
        AUTOTUNED, CASES,
        ["@triton.jit\ndef row_cumsum_kernel_scan(",
         "key=['n_cols'])\n@triton.jit\ndef row_cumsum_kernel_totals(",
         "n_split = max(1, min(64, 2112 // n_rows)) if n_rows < 132 else 1\n",
         "row_cumsum_kernel_scan[(n_rows, n_split)](x, out, n_cols, partials_ptr=partials, n_split=n_split, "
         "**row_cumsum_kernel_totals.best_config.all_kwargs())\n"],
        id="autotuned-by-its-decorator",
    ),
    pytest.param(
        FLA_AUTOTUNED, CASES,
        ["@triton.heuristics({'REVERSE': lambda args: args['reverse'] != 0})\n@triton.jit\ndef row_cumsum_kernel_scan(",
         "n_split=n_split, **row_cumsum_kernel_totals.fn.best_config.all_kwargs())\n"],
        id="fla-autotuned-under-heuristics",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("before", "cases", "present"), FIX)
def test_a_carried_scan_is_split_into_segments(
    before: str, cases: tuple[CaseShape, ...], present: list[str], tmp_path: Path
) -> None:
    after = split(before, cases)
    assert after is not None and h.parses(after)
    for text in present:
        assert text in after, text
    assert review.added([("scan", before, after)], tmp_path) == {}


def test_split_scans_are_correct_under_the_interpreter(tmp_path: Path) -> None:
    rewrites = {p.id: split(p.values[0], p.values[1]) for p in FIX}
    assert all(rewrites.values())
    h.assert_interp_ok(rewrites, tmp_path)  # type: ignore[arg-type]


NOOP = [
    pytest.param(SCAN.replace("carry += tl.sum(x, axis=0)", "carry = carry * 0.5 + tl.sum(x, axis=0)"),
                 id="the-carry-decays-not-a-sum"),
    pytest.param(SCAN.replace("carry += tl.sum(x, axis=0)", "carry += tl.sum(x, axis=0) * carry"),
                 id="the-increment-reads-the-carry"),
    pytest.param(SCAN.replace("        carry += tl.sum(x, axis=0)\n",
                              "        if carry > 0:\n            carry += tl.sum(x, axis=0)\n"),
                 id="the-update-is-under-a-test-of-the-carry"),
    pytest.param(SCAN.replace("        carry += tl.sum(x, axis=0)\n",
                              "        carry += tl.sum(x, axis=0) + last\n        last = tl.max(x, axis=0)\n")
                 .replace("    for start", "    last = 0.0\n    for start"),
                 id="a-second-name-carried"),
    pytest.param(SCAN.replace("carry = tl.zeros([], dtype=tl.float32)", "carry = tl.zeros([BLOCK, 2], dtype=tl.float32)"),
                 id="a-carry-of-rank-2"),
    pytest.param(SCAN.replace("carry = tl.zeros([], dtype=tl.float32)", "carry = 0.0"),
                 id="a-python-float-carry"),
    pytest.param(SCAN.replace("tl.store(out_ptr + row * n_cols", "tl.store(x_ptr + row * n_cols"),
                 id="a-scan-in-place"),
    pytest.param(SCAN.replace("        carry += tl.sum(x, axis=0)\n",
                              "        carry += tl.sum(x, axis=0)\n    tl.store(out_ptr + row, carry)\n"),
                 id="a-store-after-the-loop"),
    pytest.param(SCAN.replace("carry += tl.sum(x, axis=0)", "carry += tl.sum(x, axis=0)\n        tl.atomic_add(out_ptr, 0.0)"),
                 id="an-atomic"),
    pytest.param(SCAN.replace("for start in range(0, n_cols, BLOCK):", "for start in range(n_cols - BLOCK, -BLOCK, -BLOCK):"),
                 id="a-loop-counting-down"),
    # the author fixed the geometry so the running sums add in one order at every shape
    pytest.param(SCAN.replace("        row_cumsum_kernel[(n_rows,)]",
                              "        # deterministic: one program walks each whole row\n        row_cumsum_kernel[(n_rows,)]"),
                 id="geometry-fixed-for-reproducible-sums"),
    # an autotuner reached through a module handle (the copies would not be tuned) or under a
    # wrapper whose autotuner this cannot name
    pytest.param(h.variant(FLA_AUTOTUNED, ("@triton.heuristics({'REVERSE': lambda args: args['reverse'] != 0})\n"
                                           "@triton.autotune(", "@triton.heuristics({'REVERSE': lambda args: args['reverse'] != 0})\n"
                                           "@libentry()\n@triton.autotune("),
                           ("import triton\n", "import triton\n\n\ndef libentry():\n    return lambda fn: fn\n")),
                 id="autotuned-under-another-wrapper"),
    pytest.param(h.variant(FLA_AUTOTUNED, ("@triton.heuristics({'REVERSE': lambda args: args['reverse'] != 0})\n"
                                           "@triton.autotune(\n", "TUNE = dict(\n"),
                           (")\n@triton.jit\ndef row_cumsum_kernel(", ")\n\n\n@triton.jit\ndef row_cumsum_kernel("),
                           ("class ModelNew", "row_cumsum_tuned = triton.autotune(**TUNE)(triton.heuristics("
                            "{'REVERSE': lambda args: args['reverse'] != 0})(row_cumsum_kernel))\n\n\nclass ModelNew"),
                           ("row_cumsum_kernel[(n_rows,)]", "row_cumsum_tuned[(n_rows,)]")),
                 id="autotuned-through-a-handle"),
]  # fmt: skip


@pytest.mark.parametrize("before", NOOP)
def test_it_leaves_what_it_cannot_prove_alone(before: str) -> None:
    assert split(before) is None


def test_many_programs_leave_the_scan_alone() -> None:
    many = h.fp32_cases(*[(65536, 1024)] * 5)
    assert split(SCAN, many) is None


def test_it_is_tried_before_the_autotune() -> None:
    """The split comes first among LAUNCH_CONFIG's transforms: the autotune would leave the
    grid as few programs as it was (an autotuned scan is split too, rows above)."""
    assert transforms_for(Family.LAUNCH_CONFIG)[0] is split_carried_scan
    rw = apply_family(Family.LAUNCH_CONFIG, SCAN, RuleInput((), ProposalContext(cases=CASES)))
    assert rw is not None and rw.transform == "split_carried_scan"


# one program per column walking down the rows: loads strided by n_cols (COALESCE's tiled walk
# gives each program a tile of columns, and so divides the programs by the tile's width)
COLUMN_STYLE = h.variant(
    HELPER_STYLE,
    ("def col_cumsum_kernel(x_ptr, out_ptr, n_rows, n_cols, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):\n"
     "    cols = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)\n"
     "    carry = tl.zeros([BLOCK_C], dtype=tl.float32)\n",
     "def col_cumsum_kernel(x_ptr, out_ptr, n_rows, n_cols, BLOCK_R: tl.constexpr):\n"
     "    col = tl.program_id(0)\n"
     "    carry = tl.zeros([], dtype=tl.float32)\n"),
    ("        mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)\n"
     "        x = tl.load(x_ptr + rows[:, None] * n_cols + cols[None, :], mask=mask, other=0.0)\n"
     "        tl.store(out_ptr + rows[:, None] * n_cols + cols[None, :], tl.cumsum(x, axis=0) + carry[None, :], mask=mask)\n",
     "        mask = rows < n_rows\n"
     "        x = tl.load(x_ptr + rows * n_cols + col, mask=mask, other=0.0)\n"
     "        tl.store(out_ptr + rows * n_cols + col, tl.cumsum(x, axis=0) + carry, mask=mask)\n"),
    ('    col_cumsum_kernel[lambda meta: (triton.cdiv(n_cols, meta["BLOCK_C"]),)](x, out, n_rows, n_cols, 64, 32)\n',
     "    col_cumsum_kernel[(n_cols,)](x, out, n_rows, n_cols, 64)\n"),
)  # fmt: skip
# 256-4096 columns: one program per column fills the device, 32 columns per program do not
WIDE_CASES = h.fp32_cases((1 << 14, 256), (1 << 13, 512), (1 << 12, 1024), (1 << 11, 4096))
STRIDED = [h.finding(Family.COALESCE, kernel="col_cumsum_kernel"), h.finding(Family.LAUNCH_CONFIG, kernel="col_cumsum_kernel")]


def test_a_tiled_strided_scan_is_split_in_the_same_candidate(tmp_path: Path) -> None:
    """COALESCE's tile of columns leaves a few programs, each walking all the rows; the
    composition splits that walk, which the kernel as it was (one program per column) did not
    need."""
    assert split(COLUMN_STYLE, WIDE_CASES) is None  # 256 programs and more: no split alone
    cands = RulesProposer(max_candidates=3).propose(COLUMN_STYLE, STRIDED, ProposalContext(cases=WIDE_CASES))
    assert [c.transform for c in cands][:2] == ["tile_strided_walk+split_carried_scan", "tile_strided_walk"]
    composed = cands[0]
    assert composed.family is Family.COALESCE
    assert "    grid = (triton.cdiv(n_cols, 32),)\n" in composed.source
    assert "2112 // grid[0])) if grid[0] < 132 else 1\n" in composed.source
    assert "col_cumsum_kernel_scan[(*grid, n_split)](x, out, n_rows, n_cols, 64, " in composed.source
    assert "        col_cumsum_kernel[grid](x, out, n_rows, n_cols, 64, BLOCK_N_COLS=32)\n" in composed.source
    assert "carry = tl.zeros([BLOCK_N_COLS], dtype=tl.float32)" in composed.source  # the tile's carry, split
    assert review.added([("composed", COLUMN_STYLE, composed.source)], tmp_path) == {}
    # each program's totals fill a slot of whole tiles the wrapper allocates: no missing mask
    partials = "tl.store(partials_ptr + (split * programs + tile) * BLOCK_N_COLS + lanes, "
    assert partials in composed.source
    assert [f.code for f in run_tier0(composed.source).findings if f.family is Family.MASKING] == []
    h.assert_interp_ok({"composed": composed.source}, tmp_path)


def test_the_split_follows_the_tiled_walk_without_a_launch_finding() -> None:
    """An autotuned kernel has no T0-NO-AUTOTUNE: the findings name COALESCE alone (fla's
    released global cumsum). The tile still divides the programs, so the split still follows it;
    once LAUNCH_CONFIG is ruled out on the version, it does not."""
    coalesce = STRIDED[:1]
    cands = RulesProposer(max_candidates=3).propose(COLUMN_STYLE, coalesce, ProposalContext(cases=WIDE_CASES))
    assert [c.transform for c in cands] == ["tile_strided_walk+split_carried_scan", "tile_strided_walk"]
    assert [c.findings_addressed for c in cands] == [(coalesce[0].code,)] * 2
    ruled_out = [
        RoundHistory(i, Family.LAUNCH_CONFIG, Verdict.NO_GAIN, transform=fn.__name__)
        for i, fn in enumerate(transforms_for(Family.LAUNCH_CONFIG), 1)
    ]
    ctx = ProposalContext(cases=WIDE_CASES, history=tuple(ruled_out))
    assert [c.transform for c in RulesProposer(max_candidates=3).propose(COLUMN_STYLE, coalesce, ctx)] == [
        "tile_strided_walk"
    ]


def test_the_composition_takes_only_a_split_after_the_tiled_walk() -> None:
    """Where the split does not apply (a carry that is not a sum), the tiled walk is not
    followed by LAUNCH_CONFIG's autotune in the same candidate: that one stays its own."""
    decaying = COLUMN_STYLE.replace("carry += tl.sum(x, axis=0)", "carry = carry * 0.5 + tl.sum(x, axis=0)")
    cands = RulesProposer(max_candidates=3).propose(decaying, STRIDED, ProposalContext(cases=WIDE_CASES))
    assert [c.transform for c in cands] == ["tile_strided_walk", "autotune_launch_config"]
