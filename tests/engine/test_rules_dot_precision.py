"""DOT_PRECISION: an fp32 tl.dot asking for ieee precision gets tf32 (before/after tables)."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnosis.engine.evidence import Family
from diagnosis.engine.proposers.base import ProposalContext
from diagnosis.engine.proposers.rules import RulesProposer, apply_family
from tests.engine.rules_cases import harness as h
from tests.engine.rules_cases import styles as st

MATMUL = h.source("matmul.py")
DOT = "acc += tl.dot(a, b)"
IEEE_KERNEL = (Path(__file__).resolve().parents[1] / "kernels" / "dot_fp32_ieee.py").read_text()
FP32_MATMUL = MATMUL.replace("torch.float16", "torch.float32").replace("tl.float16", "tl.float32")


def with_dot(text: str, source: str = FP32_MATMUL) -> str:
    assert DOT in source
    return source.replace(DOT, text)


FIX = [
    pytest.param(
        with_dot('acc += tl.dot(a, b, input_precision="ieee")'),
        ['acc += tl.dot(a, b, input_precision="tf32")'],
        ["ieee"],
        id="keyword-literal",
    ),
    pytest.param(
        with_dot("acc += tl.dot(a, b, input_precision='ieee')"),
        ["acc += tl.dot(a, b, input_precision='tf32')"],
        ["ieee"],
        id="single-quotes-kept",
    ),
    pytest.param(
        with_dot('acc = tl.dot(a, b, acc, "ieee")'),
        ['acc = tl.dot(a, b, acc, "tf32")'],
        ["ieee"],
        id="fourth-positional",
    ),
    pytest.param(
        with_dot("acc += tl.dot(a, b, allow_tf32=False)"),
        ['acc += tl.dot(a, b, input_precision="tf32")'],
        ["allow_tf32"],
        id="allow-tf32-false",
    ),
    pytest.param(
        IEEE_KERNEL,
        # the module constant stays (something else may read it); the launch passes tf32
        ['PRECISION = "ieee"', 'BLOCK_K=32, PRECISION="tf32")', "input_precision=PRECISION)"],
        ["PRECISION=PRECISION)"],
        id="constexpr-from-module-constant",
    ),
    pytest.param(
        IEEE_KERNEL.replace("PRECISION: tl.constexpr)", 'PRECISION: tl.constexpr = "ieee")').replace(
            ", PRECISION=PRECISION)", ")"
        ),
        ['PRECISION: tl.constexpr = "tf32")'],
        ['tl.constexpr = "ieee"'],
        id="constexpr-default",
    ),
    pytest.param(
        IEEE_KERNEL.replace(
            "        bmm_kernel[(batch,)](",
            '        prec = "ieee"\n        bmm_kernel[(batch,)](',
        ).replace("PRECISION=PRECISION)", "PRECISION=prec)"),
        ['PRECISION="tf32")'],
        ["PRECISION=prec)", "prec = "],  # the local read by nothing else goes
        id="constexpr-from-local",
    ),
]

NOOP = [
    pytest.param(FP32_MATMUL, id="no-precision-stated-default-is-tf32"),
    pytest.param(with_dot('acc += tl.dot(a, b, input_precision="tf32x3")'), id="tf32x3-chosen"),
    pytest.param(with_dot("acc += tl.dot(a, b, allow_tf32=True)"), id="allow-tf32-true"),
    pytest.param(IEEE_KERNEL.replace('PRECISION = "ieee"', 'PRECISION = "tf32"'), id="constexpr-already-tf32"),
    pytest.param(
        IEEE_KERNEL.replace("PRECISION=PRECISION)", "PRECISION=self.precision)"), id="constexpr-from-attribute"
    ),
    pytest.param(
        IEEE_KERNEL.replace('PRECISION = "ieee"', 'PRECISION = "ieee"\nPRECISION = "tf32"'),
        id="module-constant-bound-twice",
    ),
    pytest.param(
        IEEE_KERNEL.replace("PRECISION: tl.constexpr)", "PRECISION)"),
        id="runtime-parameter-not-constexpr",
    ),
]


@pytest.mark.parametrize(("before", "present", "absent"), FIX)
def test_it_turns_ieee_dots_into_tf32(before: str, present: list[str], absent: list[str]) -> None:
    rw = apply_family(Family.DOT_PRECISION, before, h.rule_input())
    assert rw is not None
    assert h.parses(rw.source)
    assert rw.family is Family.DOT_PRECISION
    for text in present:
        assert text in rw.source, text
    for text in absent:
        assert text not in rw.source, text
    # nothing but the precision changed: the rest of the module is the same text (less a local
    # that only held "ieee" for the launch)
    dead = 1 if 'prec = "ieee"' in before else 0
    assert len(rw.source.splitlines()) == len(before.splitlines()) - dead


@pytest.mark.parametrize("before", NOOP)
def test_it_leaves_other_dots_alone(before: str) -> None:
    assert apply_family(Family.DOT_PRECISION, before, h.rule_input()) is None


def test_it_only_touches_the_kernels_the_findings_name() -> None:
    before = with_dot('acc += tl.dot(a, b, input_precision="ieee")')
    assert apply_family(Family.DOT_PRECISION, before, h.rule_input(kernels=frozenset({"other"}))) is None
    assert apply_family(Family.DOT_PRECISION, before, h.rule_input(kernels=frozenset({"matmul_kernel"})))


def test_a_launch_that_keeps_ieee_blocks_the_rewrite() -> None:
    """Two launches, one binding the constexpr to tf32 already and one to a value it cannot read:
    every launch must bind ieee, or the dot's precision is not the rule's to change."""
    mixed = IEEE_KERNEL.replace(
        "        return c\n",
        "        bmm_kernel[(batch,)](a, b, c, k, BLOCK_M=m, BLOCK_N=n, BLOCK_K=32, PRECISION=choose())\n"
        "        return c\n",
    )
    assert apply_family(Family.DOT_PRECISION, mixed, h.rule_input()) is None


def test_the_proposer_cites_the_finding_and_the_tier3_reason() -> None:
    before = with_dot('acc += tl.dot(a, b, input_precision="ieee")')
    finding = h.finding(Family.DOT_PRECISION, kernel="matmul_kernel", line=35)
    cands = RulesProposer().propose(before, [finding], ProposalContext())
    assert len(cands) == 1
    c = cands[0]
    assert c.family is Family.DOT_PRECISION
    assert '-        acc += tl.dot(a, b, input_precision="ieee")' in c.diff
    assert '+        acc += tl.dot(a, b, input_precision="tf32")' in c.diff
    assert "tensor cores" in c.rationale and "(line 35)" in c.rationale


# --- code styles ---------------------------------------------------------------------------------

FAMILY = Family.DOT_PRECISION
MATMUL_2D = st.source("matmul_2d.py")
BY_PARAMETER = MATMUL_2D.replace(
    "BLOCK_K: tl.constexpr):", "BLOCK_K: tl.constexpr, PRECISION: tl.constexpr):"
).replace('input_precision="ieee"', "input_precision=PRECISION").replace(
    "c.stride(1), 32, 32, 32)", 'c.stride(1), 32, 32, 32, "ieee")'
)

STYLES = [
    st.row(MATMUL_2D, "matmul_2d.py", ['        acc += tl.dot(a, b, input_precision="tf32")\n'], id="literal-precision"),
    st.row(BY_PARAMETER, "matmul_2d.py", ['c.stride(1), 32, 32, 32, "tf32")'],
           id="precision-constexpr-passed-by-position"),
    *st.import_rows("matmul_2d.py", ['input_precision="tf32"']),
]


@pytest.mark.parametrize("case", STYLES)
def test_it_relaxes_every_code_style(case: st.StyleCase) -> None:
    st.rewrite(FAMILY, case)
