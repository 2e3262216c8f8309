"""FUSION: element-wise launches joined by a temporary become one kernel."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnosis.engine.evidence import Family
from diagnosis.engine.proposers.rules import apply_family
from diagnosis.engine.proposers.rules.fusion import fuse_elementwise_pairs
from tests.engine.rules_cases import harness as h
from tests.engine.rules_cases import styles as st

CHAIN = h.source("ew_chain.py")
MUL_LAUNCH = "        out = torch.empty_like(x)\n        mul_kernel[grid](r, y, out, n, BLOCK_SIZE=BLOCK_SIZE)\n"
PAIR = CHAIN.replace(MUL_LAUNCH, "").replace("        return out\n", "        return r\n", 1)
FP16_TMP = CHAIN.replace("        s = torch.empty_like(x)\n", "        s = torch.empty_like(x, dtype=torch.float16)\n")

FIX = [
    pytest.param(
        PAIR,
        [
            "def add_relu_kernel(x_ptr, y_ptr, out_ptr, n_elements, out_ptr_1, BLOCK_SIZE: tl.constexpr):",
            "    s_vals = (x + y).to(out_ptr.dtype.element_ty)\n"
            "    tl.store(out_ptr_1 + offsets, tl.maximum(s_vals, 0.0), mask=mask)\n",
            "        s = torch.empty_like(x)\n        r = torch.empty_like(x)\n"
            "        add_relu_kernel[grid](x, y, s, n, r, BLOCK_SIZE=BLOCK_SIZE)\n        return r\n",
        ],
        ["def add_kernel(", "def relu_kernel("],
        id="pair",
    ),
    pytest.param(
        CHAIN,
        [
            "def add_relu_mul_kernel(x_ptr, y_ptr, out_ptr, n_elements, out_ptr_1, out_ptr_2, BLOCK_SIZE: tl.constexpr):",
            # y is an input of add and of mul: passed once, loaded once, into add's own name
            "    y = tl.load(y_ptr + offsets, mask=mask)\n",
            "    r_vals = tl.maximum(s_vals, 0.0).to(out_ptr_1.dtype.element_ty)\n"
            "    tl.store(out_ptr_2 + offsets, r_vals * y, mask=mask)\n",
            "        add_relu_mul_kernel[grid](x, y, s, n, r, out, BLOCK_SIZE=BLOCK_SIZE)\n",
        ],
        ["def mul_kernel(", "add_kernel[grid]", "relu_kernel[grid]", "y_vals", " = y\n"],
        id="chain-of-three-with-a-shared-input",
    ),
    pytest.param(
        FP16_TMP,
        ["    s_vals = (x + y).to(out_ptr.dtype.element_ty)\n"],
        [],
        id="temporary-dtype-kept-by-the-cast",
    ),
]

NOOP = [
    pytest.param(PAIR.replace("        return r\n", "        return r + s\n", 1), id="temporary-read-later"),
    pytest.param(
        PAIR.replace("relu_kernel[grid](s, r, n,", "relu_kernel[(triton.cdiv(n, 128),)](s, r, n,"), id="different-grid"
    ),
    pytest.param(PAIR.replace("relu_kernel[grid](s, r, n,", "relu_kernel[grid](s, r, n - 1,"), id="different-size"),
    pytest.param(
        PAIR.replace("        r = torch.empty_like(x)\n", "        r = torch.empty_like(x)\n        x.add_(1)\n"),
        id="statement-between-mutates-an-input",
    ),
    pytest.param(
        PAIR.replace("        r = torch.empty_like(x)\n", "        y = y * 2\n        r = torch.empty_like(x)\n"),
        id="statement-between-rebinds-an-input",
    ),
    pytest.param(h.source("softmax_loops.py"), id="row-kernel"),
    pytest.param(
        PAIR.replace("relu_kernel[grid](s, r, n,", "relu_kernel[grid](s, x, n,").replace("return r\n", "return x\n"),
        id="output-is-an-input-of-the-pair",
    ),
    pytest.param(
        PAIR.replace("tl.store(out_ptr + offsets, tl.maximum(x, 0.0), mask=mask)",
                     "tl.store(out_ptr + offsets, tl.maximum(x, 0.0) + tl.sum(x, axis=0) * 0, mask=mask)"),
        id="second-kernel-reduces",
    ),
]


@pytest.mark.parametrize(("before", "present", "absent"), FIX)
def test_it_fuses_element_wise_launches(before: str, present: list[str], absent: list[str]) -> None:
    rw = apply_family(Family.FUSION, before, h.rule_input())
    assert rw is not None
    assert h.parses(rw.source)
    for text in present:
        assert text in rw.source
    for text in absent:
        assert text not in rw.source


@pytest.mark.parametrize("before", NOOP)
def test_it_leaves_unsafe_sequences_alone(before: str) -> None:
    """Not as a pair (some of these still fuse as a prologue: test_rules_fusion_prologue.py)."""
    assert fuse_elementwise_pairs(before, h.rule_input()) is None


def test_fused_modules_are_correct(tmp_path: Path) -> None:
    fused = apply_family(Family.FUSION, CHAIN, h.rule_input())
    assert fused is not None
    tuned = apply_family(Family.LAUNCH_CONFIG, fused.source, h.rule_input())
    assert tuned is not None
    paths = []
    for name, text in (("fused.py", fused.source), ("fused_tuned.py", tuned.source)):
        path = tmp_path / name
        path.write_text(text)
        paths.append(path)
    results = h.interp_check(paths)
    for path in paths:
        assert results[str(path)]["ok"], results[str(path)]["message"]


# --- code styles ---------------------------------------------------------------------------------

FAMILY = Family.FUSION
CHAIN_FORWARD = """class ModelNew(nn.Module):
    def forward(self, x, y):
        n = x.numel()
        BLOCK_SIZE = 256
        grid = (triton.cdiv(n, BLOCK_SIZE),)
        s = torch.empty_like(x)
        add_kernel[grid](x, y, s, n, BLOCK_SIZE=BLOCK_SIZE)
        r = torch.empty_like(x)
        relu_kernel[grid](s, r, n, BLOCK_SIZE=BLOCK_SIZE)
        out = torch.empty_like(x)
        mul_kernel[grid](r, y, out, n, BLOCK_SIZE=BLOCK_SIZE)
        return out
"""
HELPER = CHAIN.replace(CHAIN_FORWARD, """def relu_mul(x, y):
    n = x.numel()
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)  # noqa: E731
    s = torch.empty_like(x)
    add_kernel[grid](x, y, s, n, 256)
    r = torch.empty_like(x)
    relu_kernel[grid](s, r, n, 256)
    out = torch.empty_like(x)
    mul_kernel[grid](r, y, out, n, 256)
    return out


class ModelNew(nn.Module):
    def forward(self, x, y):
        return relu_mul(x, y)
""")

STYLES = [
    # launched from a helper, the block by position (it stays after the fused kernel's new
    # parameters), the grid a lambda over meta
    st.row(HELPER, "../ew_chain.py",
           ["def add_relu_mul_kernel(x_ptr, y_ptr, out_ptr, n_elements, out_ptr_1, out_ptr_2, BLOCK_SIZE: tl.constexpr):",
            "    add_relu_mul_kernel[grid](x, y, s, n, r, out, 256)\n    return out\n"],
           id="helper-positional-block-grid-lambda"),
    *st.import_rows("../ew_chain.py", ["add_relu_mul_kernel[grid](x, y, s, n, r, out, BLOCK_SIZE=BLOCK_SIZE)"]),
    # the pair's blocks differ, so the pair does not fuse; add still goes into relu's loads (each
    # element from its inputs alone), relu's block by position passed by keyword after it
    st.row(HELPER.replace("relu_kernel[grid](s, r, n, 256)", "relu_kernel[grid](s, r, n, 512)"), "../ew_chain.py",
           ["    relu_kernel[grid](s, r, n, BLOCK_SIZE=512, add_x_ptr=x, add_y_ptr=y)\n"],
           id="prologue-where-the-pair-blocks-differ"),
]

PAIR_REFUSALS = [
    st.row(HELPER.replace("relu_kernel[grid](s, r, n, 256)", "relu_kernel[grid](s, r, n, 512)"),
           "../ew_chain.py", id="blocks-differ-by-position"),
]


@pytest.mark.parametrize("case", STYLES)
def test_it_fuses_every_code_style(case: st.StyleCase) -> None:
    st.rewrite(FAMILY, case)


@pytest.mark.parametrize("case", PAIR_REFUSALS)
def test_the_pair_refuses_launches_that_cover_other_elements(case: st.StyleCase) -> None:
    assert fuse_elementwise_pairs(case.source, st.rule_input(case)) is None
