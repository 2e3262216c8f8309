"""FUSION (prologue): an element-wise kernel whose output a later kernel reads moves into that
kernel's loads."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnosis.engine.evidence import Family
from diagnosis.engine.proposers.rules import apply_family
from diagnosis.engine.proposers.rules.fusion_prologue import fuse_elementwise_prologue
from tests.engine.rules_cases import harness as h

SUITE = Path(__file__).resolve().parents[2] / "bench" / "suite"
ADD_LN = (SUITE / "30_add_layernorm_fp32.py").read_text() if SUITE.is_dir() else ""

HEADER = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


class Model(nn.Module):
    def __init__(self, alpha=0.5):
        super().__init__()
        self.alpha = alpha

    def forward(self, x, y):
        h = x * self.alpha + y
        return h / h.abs().sum(dim=1, keepdim=True).clamp_min(1e-3)


@triton.jit
def axpy_kernel(x_ptr, y_ptr, out_ptr, n_elements, alpha, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    t = x * alpha
    tl.store(out_ptr + offsets, t + y, mask=mask)


@triton.jit
def l1_rows_kernel(h_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    v = tl.load(h_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
    total = tl.maximum(tl.sum(tl.abs(v), axis=0), 1e-3)
    tl.store(out_ptr + row * stride + cols, v / total, mask=cols < n_cols)


class ModelNew(nn.Module):
    def __init__(self, alpha=0.5):
        super().__init__()
        self.alpha = alpha

    def forward(self, x, y):
'''

WRAPPER = '''        n = x.numel()
        h = torch.empty_like(x)
        axpy_kernel[(triton.cdiv(n, 1024),)](x, y, h, n, self.alpha, BLOCK_SIZE=1024)
        out = torch.empty_like(h)
        l1_rows_kernel[(h.shape[0],)](h, out, h.shape[1], h.stride(0), BLOCK=triton.next_power_of_2(h.shape[1]))
        return out


def get_init_inputs():
    return [0.5]


def get_inputs():
    return [torch.randn(64, 300), torch.randn(64, 300)]


def get_input_cases():
    return [[torch.randn(r, c), torch.randn(r, c)] for r, c in ((64, 300), (8, 2048), (100, 64), (1, 5), (33, 333))]


def get_verify_inputs():
    return [[torch.randn(37, 129), torch.randn(37, 129)], [torch.randn(3, 1000), torch.randn(3, 1000)]]
'''

AXPY_L1 = HEADER + WRAPPER

FIX = [
    pytest.param(
        AXPY_L1,
        [
            # the producer's pointers and scalar, named after it, before the constexprs
            "def l1_rows_kernel(h_ptr, out_ptr, n_cols, stride, axpy_x_ptr, axpy_y_ptr, axpy_alpha, BLOCK: tl.constexpr):",
            # the load of the temporary is the producer's value at the consumer's address, cast as
            # the store would have, and `other` where the consumer's mask is off
            "    v = tl.where(cols < n_cols, ((tl.load(axpy_x_ptr + row * stride + cols, mask=cols < n_cols) * axpy_alpha)"
            " + tl.load(axpy_y_ptr + row * stride + cols, mask=cols < n_cols)).to(h_ptr.dtype.element_ty), 0.0)\n",
            "l1_rows_kernel[(h.shape[0],)](h, out, h.shape[1], h.stride(0), "
            "BLOCK=triton.next_power_of_2(h.shape[1]), axpy_x_ptr=x, axpy_y_ptr=y, axpy_alpha=self.alpha)\n",
        ],
        ["def axpy_kernel", "axpy_kernel["],
        id="axpy-into-a-row-kernel",
    ),
    pytest.param(
        ADD_LN,
        [
            # through the reshaped alias `h2d`, in both passes of the LayerNorm
            "(tl.load(add_x_ptr + row_start + cols, mask=cols < n_cols) + tl.load(add_y_ptr + row_start + cols, "
            "mask=cols < n_cols)).to(x_ptr.dtype.element_ty), 0.0)",
            "x = tl.where(mask, (tl.load(add_x_ptr + row_start + cols, mask=mask) + tl.load(add_y_ptr + row_start"
            " + cols, mask=mask)).to(x_ptr.dtype.element_ty), 0.0)",
            "add_x_ptr=x, add_y_ptr=r",
            "h2d = h.reshape(-1, self.hidden)",  # still allocated and viewed: its pointer types the cast
        ],
        ["add_kernel"],
        id="residual-add-into-a-two-pass-layernorm",
    ),
]

LOGSUMEXP = (SUITE / "32_logsumexp_rows_fp32.py").read_text() if SUITE.is_dir() else ""

FIX.append(
    pytest.param(
        LOGSUMEXP,
        [
            # exp(x - m[offs // n_cols]) at the row kernel's element offset: the row-broadcast load
            # of the row max reads at (that offset) // n_cols, exactly the producer's index, or,
            # where the launch finds the rows dense (stride == n_cols), at the row itself
            "tl.load(sub_exp_m_ptr + (row + 0 * cols if SUB_EXP_DENSE_ROWS else "
            "(((row * stride) + cols) // sub_exp_n_cols)), mask=cols < n_cols, other=0.0)",
            "BLOCK_SIZE: tl.constexpr, SUB_EXP_DENSE_ROWS: tl.constexpr = False):",
            "tl.load(sub_exp_x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)",
            "sub_exp_x_ptr=x, sub_exp_m_ptr=m, sub_exp_n_cols=n_cols, SUB_EXP_DENSE_ROWS=e.stride(0) == n_cols)",
        ],
        ["def sub_exp_kernel", "sub_exp_kernel["],
        id="row-broadcast-producer-into-a-row-sum",
    )
)

NOOP = [
    pytest.param(AXPY_L1.replace("        return out\n", "        return out + h\n"), id="temporary-read-later"),
    pytest.param(
        AXPY_L1.replace("l1_rows_kernel[(h.shape[0],)](h, out,", "l1_rows_kernel[(h.shape[0],)](h, x,"),
        id="consumer-writes-a-producer-input",
    ),
    pytest.param(
        AXPY_L1.replace(
            "    v = tl.load(h_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)\n",
            "    row_ptr = h_ptr + row * stride\n    v = tl.load(row_ptr + cols, mask=cols < n_cols, other=0.0)\n",
        ),
        id="temporary-pointer-through-a-local",
    ),
    pytest.param(
        AXPY_L1.replace("    y = tl.load(y_ptr + offsets, mask=mask)\n", "    y = tl.load(y_ptr + pid, mask=mask)\n"),
        id="producer-address-from-its-program-id",
    ),
    pytest.param(
        AXPY_L1.replace("    y = tl.load(y_ptr + offsets, mask=mask)\n", "    y = tl.load(y_ptr + offsets, mask=offsets < 5)\n"),
        id="producer-load-under-another-mask",
    ),
    pytest.param(
        AXPY_L1.replace(
            "        out = torch.empty_like(h)\n", "        out = torch.empty_like(h)\n        x = x * 2\n"
        ),
        id="producer-input-rebound-between",
    ),
    pytest.param(
        AXPY_L1.replace(
            "    v = tl.load(h_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)\n",
            "    v = tl.load(h_ptr + row * stride + cols, mask=cols < n_cols, other=0.0, eviction_policy='evict_last')\n",
        ),
        id="load-option-it-cannot-carry",
    ),
]


@pytest.mark.parametrize(("before", "present", "absent"), FIX)
def test_it_moves_the_element_wise_kernel_into_the_loads(before: str, present: list[str], absent: list[str]) -> None:
    if not before:
        pytest.skip("bench/suite is absent")
    rw = fuse_elementwise_prologue(before, h.rule_input())
    assert rw is not None and h.parses(rw.source)
    for text in present:
        assert text in rw.source, text
    for text in absent:
        assert text not in rw.source, text


@pytest.mark.parametrize(
    ("old", "new"),
    [
        # the row kernel's columns bounded by something else than the producer's divisor
        ("row_sum_kernel[(n_rows,)](e, s, n_cols,", "row_sum_kernel[(n_rows,)](e, s, n_cols - 1,"),
        # columns that may start below 0
        ("def row_sum_kernel(x_ptr, out_ptr, n_cols, stride, BLOCK_SIZE: tl.constexpr):\n    row = tl.program_id(0)\n"
         "    cols = tl.arange(0, BLOCK_SIZE)",
         "def row_sum_kernel(x_ptr, out_ptr, n_cols, stride, BLOCK_SIZE: tl.constexpr):\n    row = tl.program_id(0)\n"
         "    cols = tl.arange(0, BLOCK_SIZE) - 1"),
        # a row index that is not a program id
        ("def row_sum_kernel(x_ptr, out_ptr, n_cols, stride, BLOCK_SIZE: tl.constexpr):\n    row = tl.program_id(0)",
         "def row_sum_kernel(x_ptr, out_ptr, n_cols, stride, BLOCK_SIZE: tl.constexpr):\n    row = tl.program_id(0) - 1"),
    ],
    ids=["columns-bounded-by-another-value", "columns-not-from-zero", "row-not-a-program-id"],
)
def test_the_division_stays_where_the_row_cannot_be_proved(old: str, new: str) -> None:
    if not LOGSUMEXP:
        pytest.skip("bench/suite is absent")
    assert old in LOGSUMEXP
    rw = fuse_elementwise_prologue(LOGSUMEXP.replace(old, new), h.rule_input())
    assert rw is not None and h.parses(rw.source)
    assert "// sub_exp_n_cols)" in rw.source and "DENSE_ROWS" not in rw.source


@pytest.mark.parametrize("before", NOOP)
def test_it_leaves_unsafe_sequences_alone(before: str) -> None:
    assert fuse_elementwise_prologue(before, h.rule_input()) is None


def test_the_fusion_family_tries_pairs_and_epilogues_first() -> None:
    """Two element-wise kernels fuse as a pair (fusion.py), not as a prologue."""
    pair = (SUITE / "26_add_relu_mul_fp32.py").read_text() if SUITE.is_dir() else ""
    if not pair:
        pytest.skip("bench/suite is absent")
    rw = apply_family(Family.FUSION, pair, h.rule_input())
    assert rw is not None and "prologue" not in rw.mechanism


def test_fused_modules_are_correct_under_the_interpreter(tmp_path: Path) -> None:
    paths = []
    broadcast = AXPY_L1.replace(  # y read at offsets // 3 in both the kernel and the reference
        "    y = tl.load(y_ptr + offsets, mask=mask)\n", "    y = tl.load(y_ptr + offsets // 3, mask=mask)\n"
    ).replace(
        "        h = x * self.alpha + y\n",
        "        h = x * self.alpha + y.flatten()[torch.arange(x.numel()) // 3].reshape(x.shape)\n",
    )
    cases = (("axpy_l1.py", AXPY_L1), ("add_ln.py", ADD_LN), ("logsumexp.py", LOGSUMEXP), ("bcast.py", broadcast))
    for name, before in cases:
        if not before:
            continue
        rw = fuse_elementwise_prologue(before, h.rule_input())
        assert rw is not None
        path = tmp_path / name
        path.write_text(rw.source)
        paths.append(path)
        if "=e.stride(0) == n_cols" in rw.source:  # the division branch too, as a padded e would take
            path = tmp_path / f"division_{name}"
            path.write_text(rw.source.replace("=e.stride(0) == n_cols", "=False"))
            paths.append(path)
    results = h.interp_check(paths, jobs=2)
    for path in paths:
        assert results[str(path)]["ok"], results[str(path)]["message"]


def test_a_fused_prologue_then_single_pass_is_proposed_first() -> None:
    """A multi-pass LayerNorm after a residual add: fusing first, then making the row kernel
    single-pass (the other order cannot fuse: the single-pass launch sits under a size guard)."""
    if not ADD_LN:
        pytest.skip("bench/suite is absent")
    from diagnosis.engine.proposers.base import ProposalContext
    from diagnosis.engine.proposers.rules import RulesProposer

    findings = [h.finding(Family.SINGLE_PASS, "layernorm_kernel"), h.finding(Family.FUSION, "")]
    cands = RulesProposer().propose(ADD_LN, findings, ProposalContext(cases=h.cases_of(SUITE / "30_add_layernorm_fp32.py")))
    assert cands and cands[0].rationale.startswith("[fusion + single_pass]")
    assert "def add_kernel" not in cands[0].source
    assert "def layernorm_kernel_single_pass(" in cands[0].source
    assert "add_x_ptr=x, add_y_ptr=r" in cands[0].source
