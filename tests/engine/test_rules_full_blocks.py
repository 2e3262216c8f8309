"""MASKING (full blocks): a 1-D kernel's accesses go without their `offs < n` mask in every block
but the last (before/after and refusal tables, what backs it, interpreter correctness; the
compiled accesses are in tests/runner/test_rewrites_compiled.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnosis.engine.evidence import Family, Finding, Severity
from diagnosis.engine.proposers.base import ProposalContext
from diagnosis.engine.proposers.rules import RuleInput, apply_family
from diagnosis.engine.proposers.rules.full_blocks import unmasked_full_blocks
from diagnosis.engine.tier0 import run_tier0
from tests.engine.rules_cases import harness as h
from tests.engine.rules_cases import styles as st

# the suite's fp16 SiLU: its 2^26 + 5 case is the odd one (on the H200, 56 %SOL against 87)
SILU = (h.SUITE / "08_silu_fp16.py").read_text()
CASES = h.cases_of(h.SUITE / "08_silu_fp16.py")
ADD = st.source("add_tutorial.py")
ADD_CASES = h.cases_of(st.HERE / "add_tutorial.py")

ACCESSES = """    x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    y = x * tl.sigmoid(x)
    tl.store(out_ptr + offsets, y.to(tl.float16), mask=mask)
"""
BRANCHES = """    # a full block: its accesses need no mask, so they vectorize
    if pid * BLOCK_SIZE <= n_elements - BLOCK_SIZE:
        x = tl.load(x_ptr + offsets).to(tl.float32)
        y = x * tl.sigmoid(x)
        tl.store(out_ptr + offsets, y.to(tl.float16))
    else:
        x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
        y = x * tl.sigmoid(x)
        tl.store(out_ptr + offsets, y.to(tl.float16), mask=mask)
"""
AUTOTUNE = """@triton.autotune(
    configs=[triton.Config({"BLOCK_SIZE": 1024}, num_warps=4), triton.Config({"BLOCK_SIZE": 4096}, num_warps=8)],
    key=["n_elements"],
)
@triton.jit
def silu_kernel("""

FIX = [
    pytest.param(SILU, CASES, [BRANCHES], id="silu-first-conversion"),
    pytest.param(
        h.variant(
            SILU,
            ("mask=mask, other=0.0)", "mask, 0.0)"),
            ("y.to(tl.float16), mask=mask)", "y.to(tl.float16), mask)"),
        ),
        CASES,
        [
            "        x = tl.load(x_ptr + offsets).to(tl.float32)\n",
            "        tl.store(out_ptr + offsets, y.to(tl.float16))\n    else:\n",
            "        x = tl.load(x_ptr + offsets, mask, 0.0).to(tl.float32)\n",
        ],
        id="mask-and-other-by-position",
    ),
    pytest.param(
        h.variant(
            SILU,
            ("@triton.jit\ndef silu_kernel(", AUTOTUNE),
            (
                "silu_kernel[(triton.cdiv(n, BLOCK_SIZE),)](x, out, n, BLOCK_SIZE=BLOCK_SIZE)",
                'silu_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)](x, out, n)',
            ),
        ),
        CASES,
        [BRANCHES],
        id="autotuned-block-and-grid-lambda",
    ),
    pytest.param(
        ADD,
        ADD_CASES,
        [
            "    mask = offsets < n_elements\n"
            "    # a full block: its accesses need no mask, so they vectorize\n"
            "    if block_start <= n_elements - BLOCK_SIZE:\n"
            "        x = tl.load(x_ptr + offsets)\n"
            "        y = tl.load(y_ptr + offsets)\n"
            "        output = x + y\n"
            "        tl.store(output_ptr + offsets, output)\n"
            "    else:\n"
            "        x = tl.load(x_ptr + offsets, mask=mask)\n",
        ],
        id="tutorial-block-start-and-helper-launch",
    ),
    # liger's and fla's program index: `tl.program_id(0).to(tl.int64)`
    pytest.param(
        h.variant(SILU, ("    pid = tl.program_id(0)\n", "    pid = tl.program_id(0).to(tl.int64)\n")),
        CASES,
        [BRANCHES],
        id="program-id-cast-to-int64",
    ),
    pytest.param(
        h.variant(SILU, (ACCESSES, "    one = 1.0\n" + ACCESSES.replace("y = x * ", "y = one * x * "))),
        CASES,
        ["    one = 1.0\n    # a full block: its accesses need no mask"],
        id="statements-before-the-first-access-stay-before-the-branch",
    ),
]

# code styles of other projects' kernels: every import alias
STYLES = [
    pytest.param(fn(SILU), CASES, [fn(BRANCHES)], id=f"silu-{style}")
    for style, fn in st.IMPORT_STYLES.items()
]

NOOP = [
    pytest.param(
        h.variant(
            SILU, ("    y = x * tl.sigmoid(x)\n", "    mask = mask & (x > 0)\n    y = x * tl.sigmoid(x)\n")
        ),
        CASES,
        id="a-mask-bound-twice",
    ),
    pytest.param(
        h.variant(
            SILU,
            ("    pid = tl.program_id(0)\n", "    n_elements = n_elements - 1\n    pid = tl.program_id(0)\n"),
        ),
        CASES,
        id="a-bound-the-kernel-rebinds",
    ),
    pytest.param(
        h.variant(SILU, ("offsets = pid * BLOCK_SIZE + tl.arange", "offsets = pid * 1000 + tl.arange")),
        CASES,
        id="a-block-that-is-not-the-stride",
    ),
    pytest.param(
        h.variant(SILU, ("mask = offsets < n_elements", "mask = offsets <= n_elements - 1")),
        CASES,
        id="another-comparison",
    ),
    pytest.param(SILU, h.cases_of(st.HERE / "add_tutorial.py")[:2], id="every-timed-length-a-multiple-of-16"),
    pytest.param(SILU, (), id="no-case-and-no-finding-says-the-length-is-odd"),
    # suite 05's matvec: its loads' masks combine the row mask with the column mask; a branch
    # that dropped the mask of its store alone would copy the loop for nothing
    pytest.param(
        h.variant(SILU, ("y.to(tl.float16), mask=mask)", "y.to(tl.float16), mask=mask & (y > 0))")),
        CASES,
        id="a-mask-combined-with-another",
    ),
    pytest.param(
        h.variant(SILU, ("y.to(tl.float16), mask=mask)", "y.to(tl.float16), mask=offsets < n_elements)")),
        CASES,
        id="an-access-under-another-mask",
    ),
]


@pytest.mark.parametrize(("before", "cases", "present"), FIX + STYLES)
def test_full_blocks_access_without_the_mask(before: str, cases: tuple, present: list[str]) -> None:
    rw = apply_family(Family.MASKING, before, h.rule_input(cases))
    assert rw is not None and rw.transform == "unmasked_full_blocks"
    assert h.parses(rw.source)
    for text in present:
        assert text in rw.source, rw.source
    assert unmasked_full_blocks(rw.source, h.rule_input(cases)) is None  # done once
    # the unmasked accesses are guarded by the branch: tier 0 reports no missing mask
    assert not [f for f in run_tier0(rw.source).findings if f.code == "T0-MISSING-MASK"]


@pytest.mark.parametrize(("before", "cases"), NOOP)
def test_it_refuses_what_it_cannot_prove(before: str, cases: tuple) -> None:
    assert unmasked_full_blocks(before, h.rule_input(cases)) is None


def _blocked(bound: str) -> Finding:
    blocker = {
        "arg": bound,
        "role": "mask",
        "value": 67108869,
        "why": f"the mask bound `{bound}` is not divisible by 16",
    }
    return Finding(
        "CG_VECTORIZATION_BLOCKED", Severity.HIGH, {"blockers": [blocker]}, lines=(20,), kernel="silu_kernel"
    )


def test_tier_3s_finding_backs_it_whatever_the_cases_say() -> None:
    """The finding that names the mask bound backs the rewrite (the cases need not be known);
    one that names another argument does not."""
    named = RuleInput((_blocked("n_elements"),), ProposalContext(cases=()))
    assert unmasked_full_blocks(SILU, named) is not None
    other = RuleInput((_blocked("stride"),), ProposalContext(cases=CASES))
    assert unmasked_full_blocks(SILU, other) is None


def test_it_comes_before_the_guarded_copy_which_serves_no_odd_length() -> None:
    """Both answer a mask bound that blocks vectorization; the guarded copy only where the
    length is a multiple of 8, which no case of the SiLU's is but for those already multiples of
    16: the full blocks are tried first, and here they are the only answer."""
    blocked = RuleInput((_blocked("n_elements"),), ProposalContext(cases=CASES))
    rw = apply_family(Family.MASKING, SILU, blocked)
    assert rw is not None and rw.transform == "unmasked_full_blocks"
    assert apply_family(Family.MASKING, SILU, blocked, skip={"unmasked_full_blocks"}) is None


def test_rewrites_are_correct_under_the_interpreter(tmp_path: Path) -> None:
    """The SiLU's verify inputs of 37 x 129, 3000 and 2 x 7 x 13 elements: partial and full blocks."""
    rewrites = {p.id: apply_family(Family.MASKING, p.values[0], h.rule_input(p.values[1])) for p in FIX}
    assert all(rw is not None for rw in rewrites.values())
    h.assert_interp_ok({name: st.for_interpreter(rw.source) for name, rw in rewrites.items()}, tmp_path)
