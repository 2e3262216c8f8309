"""COALESCE (interleaved pairs): two accesses at `2 * i` and `2 * i + 1` become one access of the
run they cover (before/after and refusal tables, what backs it, interpreter correctness; the
compiled accesses are in tests/runner/test_rewrites_compiled.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnosis.engine.evidence import Family
from diagnosis.engine.proposers.base import ProposalContext
from diagnosis.engine.proposers.rules import RuleInput, RulesProposer, apply_family
from diagnosis.engine.proposers.rules.pairs import interleaved_pairs
from diagnosis.engine.tier0 import run_tier0
from tests.engine.rules_cases import harness as h
from tests.engine.rules_cases import styles as st

CMUL = h.source("pairs_complex.py")
CASES = h.cases_of(h.HERE / "pairs_complex.py")

LOADS = """        w_re = tl.load(w_ptr + k * 2, mask=mask, other=0.0).to(tl.float32)
        w_im = tl.load(w_ptr + k * 2 + 1, mask=mask, other=0.0).to(tl.float32)
        x_re = tl.load(x_row + k * 2, mask=mask, other=0.0).to(tl.float32)
        x_im = tl.load(x_row + k * 2 + 1, mask=mask, other=0.0).to(tl.float32)"""
STORES = """        tl.store(y_row + k * 2, y_re.to(y_ptr.dtype.element_ty), mask=mask)
        tl.store(y_row + k * 2 + 1, y_im.to(y_ptr.dtype.element_ty), mask=mask)"""
MASK = "        mask = k < n\n"

FLAT_LOADS = (
    "        k_pairs = start * 2 + tl.arange(0, BLOCK * 2)\n"
    "        mask_pairs = k_pairs < n * 2\n"
    "        w_re, w_im = tl.split(tl.reshape(tl.load(w_ptr + k_pairs, mask=mask_pairs, other=0.0)"
    ".to(tl.float32), (BLOCK, 2)))\n"
    "        x_re, x_im = tl.split(tl.reshape(tl.load(x_row + k_pairs, mask=mask_pairs, other=0.0)"
    ".to(tl.float32), (BLOCK, 2)))\n"
)
FLAT_STORE = "        tl.store(y_row + k_pairs, tl.interleave(y_re, y_im).to(y_ptr.dtype.element_ty), mask=mask_pairs)\n"

# the pairs of each head row under a branch per tensor (q and k of a rotary embedding, in the
# shape of liger's llama4 rope): the flat offsets are named once, where the index is bound
BRANCHES = h.variant(
    CMUL,
    (
        "def cmul_rows_kernel(x_ptr, w_ptr, y_ptr, n, stride_row, BLOCK: tl.constexpr):",
        "def cmul_rows_kernel(x_ptr, w_ptr, y_ptr, n, stride_row, BLOCK: tl.constexpr, CONJ: tl.constexpr = False):",
    ),
    (
        LOADS + "\n",
        """        w_re = tl.load(w_ptr + k * 2, mask=mask, other=0.0).to(tl.float32)
        w_im = tl.load(w_ptr + k * 2 + 1, mask=mask, other=0.0).to(tl.float32)
        if CONJ:
            w_im = -w_im
        if row >= 0:
            x_re = tl.load(x_row + k * 2, mask=mask, other=0.0).to(tl.float32)
            x_im = tl.load(x_row + k * 2 + 1, mask=mask, other=0.0).to(tl.float32)
""",
    ),
)

FIX = [
    pytest.param(CMUL, [FLAT_LOADS, FLAT_STORE], id="flat-run-mask-named-after-the-mask"),
    pytest.param(
        h.variant(
            CMUL,
            (LOADS, LOADS.replace("k * 2", "2 * k").replace("mask=mask", "mask")),
            (STORES, STORES.replace("mask=mask)", "mask)")),
        ),
        [FLAT_LOADS, FLAT_STORE],
        id="two-times-i-and-a-positional-mask",
    ),
    pytest.param(
        h.variant(
            CMUL,
            (MASK, MASK + "        even = k * 2\n        odd = even + 1\n"),
            (LOADS, LOADS.replace("k * 2 + 1", "odd").replace("k * 2", "even")),
            (STORES, STORES.replace("k * 2 + 1", "odd").replace("k * 2", "even")),
        ),
        [FLAT_LOADS, FLAT_STORE],
        id="even-and-odd-offsets-named",
    ),
    pytest.param(
        h.variant(CMUL, (MASK, "        mask = k <= n - 1\n")),
        [
            "        k = start + tl.arange(0, BLOCK)\n"
            "        k_pairs = k[:, None] * 2 + tl.arange(0, 2)[None, :]\n"
            "        mask = k <= n - 1\n",
            "        w_re, w_im = tl.split(tl.load(w_ptr + k_pairs, mask=mask[:, None], other=0.0).to(tl.float32))\n",
            "        tl.store(y_row + k_pairs, tl.join(y_re, y_im).to(y_ptr.dtype.element_ty), mask=mask[:, None])\n",
        ],
        id="a-mask-not-of-the-flat-run-keeps-the-pair-tile",
    ),
    pytest.param(
        h.variant(
            CMUL,
            (STORES, STORES.replace("y_re.to(y_ptr.dtype.element_ty)", "y_re")),
        ),
        [
            "        tl.store(y_row + k_pairs, tl.interleave(y_re, y_im.to(y_ptr.dtype.element_ty)), mask=mask_pairs)\n"
        ],
        id="values-converted-differently-stay-as-written",
    ),
    pytest.param(
        h.variant(
            CMUL,
            (MASK, ""),
            (LOADS, LOADS.replace(", mask=mask, other=0.0", "")),
            (STORES, STORES.replace(", mask=mask", "")),
            # whole blocks only: every row length a multiple of BLOCK
            (
                "[_make(3, 100), _make(5, 256), _make(1, 1000, torch.float32)]",
                "[_make(3, 256), _make(5, 512), _make(1, 1024, torch.float32)]",
            ),
        ),
        [
            "        k_pairs = start * 2 + tl.arange(0, BLOCK * 2)\n"
            "        w_re, w_im = tl.split(tl.reshape(tl.load(w_ptr + k_pairs).to(tl.float32), (BLOCK, 2)))\n",
            "        tl.store(y_row + k_pairs, tl.interleave(y_re, y_im).to(y_ptr.dtype.element_ty))\n",
        ],
        id="unmasked-whole-blocks",
    ),
    pytest.param(
        BRANCHES,
        [
            "    for start in range(0, n, BLOCK):\n        k_pairs = start * 2 + tl.arange(0, BLOCK * 2)\n"
            "        mask_pairs = k_pairs < n * 2\n",
            "        if row >= 0:\n            x_re, x_im = tl.split(tl.reshape(tl.load(x_row + k_pairs, mask=mask_pairs,",
        ],
        id="accesses-under-branches-share-one-name",
    ),
]

# code styles of other projects' kernels: every import alias
STYLES = [
    pytest.param(fn(CMUL), [fn(FLAT_LOADS), fn(FLAT_STORE)], id=f"cmul-{style}")
    for style, fn in st.IMPORT_STYLES.items()
]

NOOP = [
    pytest.param(
        h.variant(
            CMUL,
            (
                "        w_im = tl.load(w_ptr + k * 2 + 1",
                "        tl.store(y_row + k * 2, w_re, mask=mask)\n        w_im = tl.load(w_ptr + k * 2 + 1",
            ),
            (
                "        x_im = tl.load(x_row + k * 2 + 1",
                "        tl.store(y_row + k * 2 + 1, w_im, mask=mask)\n        x_im = tl.load(x_row + k * 2 + 1",
            ),
            (STORES, STORES.replace("mask=mask)", "mask=mask & (k > 0))", 1)),
        ),
        id="a-store-between-each-pair-and-masks-that-differ",
    ),
    pytest.param(
        h.variant(CMUL, ("k * 2 + 1", "k * 2 + 2")),
        id="two-apart-is-not-a-pair",
    ),
    pytest.param(
        h.variant(CMUL, ("k * 2", "k * 3")),
        id="triples",
    ),
    pytest.param(
        h.variant(
            CMUL,
            (
                "        w_im = tl.load(w_ptr + k * 2 + 1, mask=mask, other=0.0)",
                "        w_im = tl.load(w_ptr + k * 2 + 1, mask=mask, other=w_re)",
            ),
            ("x_im = tl.load(x_row + k * 2 + 1", "x_im = tl.load(x_row + w_re.to(tl.int32) + k * 2 + 1"),
            (STORES, STORES.replace("y_row + k * 2", "y_row + k[:, None] * 2")),
        ),
        id="another-other-a-loaded-term-and-a-2-d-index",
    ),
    pytest.param(
        h.variant(
            CMUL,
            ("        k = start + tl.arange(0, BLOCK)\n", "        k = pair_index(start, BLOCK)\n"),
            (
                "@triton.jit\ndef cmul",
                "@triton.jit\ndef pair_index(s, B: tl.constexpr):\n    return s + tl.arange(0, B)\n\n\n@triton.jit\ndef cmul",
            ),
        ),
        id="an-index-from-a-helper-has-no-known-shape",
    ),
]


@pytest.mark.parametrize(("before", "present"), FIX + STYLES)
def test_it_merges_each_pair_into_one_access(before: str, present: list[str]) -> None:
    rw = apply_family(Family.COALESCE, before, h.rule_input(CASES))
    assert rw is not None and rw.transform == "interleaved_pairs"
    assert h.parses(rw.source)
    for text in present:
        assert text in rw.source, text
    assert "* 2 + 1" not in rw.source and "odd" not in rw.source


@pytest.mark.parametrize("before", NOOP)
def test_it_refuses_what_it_cannot_prove(before: str) -> None:
    assert interleaved_pairs(before, h.rule_input(CASES)) is None


def test_a_pair_tile_smaller_than_the_threads_is_left_alone() -> None:
    """64 pairs per program on 4 warps: one element of the tile per thread, where `tl.split` needs
    both of a pair (H200: liger's llama4 rope in that shape ran 0.90x); on one warp it applies."""
    small = h.variant(CMUL, ("BLOCK=256)", "BLOCK=64)"))
    assert interleaved_pairs(small, h.rule_input(CASES)) is None
    assert interleaved_pairs(small, h.rule_input()) is not None  # no launch values: nothing known
    one_warp = h.variant(small, ("BLOCK=64)", "BLOCK=64, num_warps=1)"))
    assert interleaved_pairs(one_warp, h.rule_input(CASES)) is not None


def test_the_block_is_read_through_a_helper_launch_by_position() -> None:
    """The block and the warps reach the check wherever the launch is: a module-level helper
    that ModelNew calls, every argument positional, the block computed from the shape."""
    helper = h.variant(
        CMUL,
        (
            "class ModelNew(nn.Module):",
            "def cmul_rows(x, w, y):\n"
            "    rows, n, _ = x.shape\n"
            "    block = min(triton.next_power_of_2(n), 64)\n"
            "    cmul_rows_kernel[(rows,)](x, w, y, n, x.stride(0), block)\n\n\n"
            "class ModelNew(nn.Module):",
        ),
        (
            "        cmul_rows_kernel[(rows,)](x, w, y, n, x.stride(0), BLOCK=256)\n",
            "        cmul_rows(x, w, y)\n",
        ),
    )
    assert interleaved_pairs(helper, h.rule_input(CASES)) is None  # 64 pairs on 4 warps
    wide = h.variant(helper, ("triton.next_power_of_2(n), 64)", "triton.next_power_of_2(n), 256)"))
    rw = interleaved_pairs(wide, h.rule_input(CASES))
    assert rw is not None and FLAT_LOADS in rw.source


def test_findings_on_other_lines_leave_the_pairs_alone() -> None:
    lines = CMUL.splitlines()
    load = next(i for i, t in enumerate(lines, 1) if "x_im = tl.load" in t)
    other = next(i for i, t in enumerate(lines, 1) if "y_re = " in t)
    on = RuleInput((h.finding(Family.COALESCE, "cmul_rows_kernel", line=load),), ProposalContext(cases=CASES))
    off = RuleInput(
        (h.finding(Family.COALESCE, "cmul_rows_kernel", line=other),), ProposalContext(cases=CASES)
    )
    assert interleaved_pairs(CMUL, off) is None
    rw = interleaved_pairs(CMUL, on)
    assert rw is not None
    assert "x_re, x_im = tl.split(" in rw.source and "w_im = tl.load(w_ptr + k * 2 + 1" in rw.source


def test_tier0_leads_the_proposer_to_the_rewrite() -> None:
    findings = [f for f in run_tier0(CMUL).findings if f.family is Family.COALESCE]
    assert {f.code for f in findings} == {"T0-STRIDED-ACCESS"}
    cands = RulesProposer().propose(CMUL, findings, ProposalContext(cases=CASES))
    assert cands and cands[0].family is Family.COALESCE and cands[0].transform == "interleaved_pairs"
    assert not [f for f in run_tier0(cands[0].source).findings if f.code == "T0-STRIDED-ACCESS"]


def test_merged_modules_are_correct_under_the_interpreter(tmp_path: Path) -> None:
    """Verify inputs of 100, 256 and 1000 pairs per row: a partial block, whole blocks, float32."""
    rewrites = {p.id: apply_family(Family.COALESCE, p.values[0], h.rule_input(CASES)) for p in FIX}
    assert all(rw is not None for rw in rewrites.values())
    h.assert_interp_ok({name: rw.source for name, rw in rewrites.items()}, tmp_path)
