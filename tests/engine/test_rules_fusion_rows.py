"""FUSION (row broadcast): a row kernel's per-row result, read by a later element-wise kernel
at `offs // n_cols`, stays in registers and the element-wise body runs in the row kernel."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnosis.engine.evidence import Family
from diagnosis.engine.proposers.rules import apply_family
from diagnosis.engine.proposers.rules.fusion_rows import fuse_row_broadcast
from tests.engine.rules_cases import harness as h

SUITE = Path(__file__).resolve().parents[2] / "bench" / "suite"
MEAN_CENTER = (SUITE / "37_mean_center_scale_fp32.py").read_text() if SUITE.is_dir() else ""

ABSMAX_SCALE = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x / x.abs().amax(dim=1, keepdim=True).clamp_min(1e-3) + 1.0


@triton.jit
def row_absmax_kernel(x_ptr, s_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        v = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
        acc = tl.maximum(acc, tl.abs(v))
    tl.store(s_ptr + row, tl.maximum(tl.max(acc, axis=0), 1e-3))


@triton.jit
def scale_rows_kernel(x_ptr, s_ptr, out_ptr, n_elements, n_cols, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    s = tl.load(s_ptr + offsets // n_cols, mask=mask, other=1.0)
    tl.store(out_ptr + offsets, x / s + 1.0, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        n_rows, n_cols = x.shape
        s = torch.empty((n_rows,), device=x.device, dtype=x.dtype)
        row_absmax_kernel[(n_rows,)](x, s, n_cols, x.stride(0), BLOCK=128)
        out = torch.empty_like(x)
        n = x.numel()
        scale_rows_kernel[(triton.cdiv(n, 256),)](x, s, out, n, n_cols, BLOCK_SIZE=256)
        return out


def get_init_inputs():
    return []


def get_inputs():
    return [torch.randn(64, 300)]


def get_input_cases():
    return [[torch.randn(r, c)] for r, c in ((64, 300), (8, 2048), (100, 64), (1, 5), (33, 333))]


def get_verify_inputs():
    return [[torch.randn(37, 129)], [torch.randn(3, 1000)]]
'''

FUSED_DEF = (
    "def row_absmax_scale_rows_kernel(x_ptr, s_ptr, n_cols, stride, x_ptr_1, out_ptr, n_cols_1, "
    "BLOCK: tl.constexpr, SCALE_ROWS_BLOCK: tl.constexpr = 1024):"
)


def test_the_element_wise_body_runs_per_row_with_the_row_result_in_registers() -> None:
    rw = fuse_row_broadcast(ABSMAX_SCALE, h.rule_input())
    assert rw is not None and h.parses(rw.source)
    assert rw.family is Family.FUSION and rw.kernels == ("row_absmax_scale_rows_kernel",)
    for text in [
        FUSED_DEF,
        # the row's result, cast as the store would, is stored as before and kept
        "    s_row = tl.maximum(tl.max(acc, axis=0), 1e-3).to(s_ptr.dtype.element_ty)\n"
        "    tl.store(s_ptr + row, s_row)\n",
        # the element-wise body over the row's columns, in the consumer's blocks
        "    for col_start in range(0, n_cols_1, SCALE_ROWS_BLOCK):\n"
        "        cols_1 = col_start + tl.arange(0, SCALE_ROWS_BLOCK)\n"
        "        offsets = row * n_cols_1 + cols_1\n"
        "        mask_1 = cols_1 < n_cols_1\n"
        "        x = tl.load(x_ptr_1 + offsets, mask=mask_1)\n"
        "        tl.store(out_ptr + offsets, x / s_row + 1.0, mask=mask_1)\n",
        # launched where the consumer was, when the flat size is whole rows; else both as before
        "        if n == n_rows * n_cols:\n"
        "            row_absmax_scale_rows_kernel[(n_rows,)](x, s, n_cols, x.stride(0), BLOCK=128, x_ptr_1=x, "
        "out_ptr=out, n_cols_1=n_cols, SCALE_ROWS_BLOCK=256)\n"
        "        else:\n"
        "            row_absmax_kernel[(n_rows,)](x, s, n_cols, x.stride(0), BLOCK=128)\n"
        "            scale_rows_kernel[(triton.cdiv(n, 256),)](x, s, out, n, n_cols, BLOCK_SIZE=256)\n"
        "        return out\n",
    ]:
        assert text in rw.source, text
    # the row launch moved past the allocations into the guard
    assert "        row_absmax_kernel[(n_rows,)](x, s, n_cols, x.stride(0), BLOCK=128)\n        out =" not in rw.source


def test_the_fusion_family_joins_the_element_wise_pair_first_then_the_row_broadcast() -> None:
    """37_mean_center_scale: subtract and multiply fuse as a pair (fusion.py); the next FUSION
    proposal runs the fused pair per row inside the row-mean kernel."""
    if not MEAN_CENTER:
        pytest.skip("bench/suite is absent")
    first = apply_family(Family.FUSION, MEAN_CENTER, h.rule_input())
    assert first is not None and "fused element-wise launches" in first.mechanism
    second = apply_family(Family.FUSION, first.source, h.rule_input())
    assert second is not None and second.kernels == ("row_mean_sub_row_mul_col_kernel",)
    # the consumer reads the row's mean kept in registers directly, no `m = mean_row` copy
    assert "        centered_vals = (x - mean_row).to(out_ptr.dtype.element_ty)\n" in second.source
    assert " = mean_row\n" not in second.source
    assert "if n == n_rows * n_cols:" in second.source
    assert apply_family(Family.FUSION, second.source, h.rule_input()) is None


NOOP = [
    pytest.param(
        ABSMAX_SCALE.replace("s_ptr + offsets // n_cols, mask=mask", "s_ptr + offsets, mask=mask"),
        id="read-at-the-offsets-not-a-row-broadcast",
    ),
    pytest.param(
        ABSMAX_SCALE.replace("s_ptr + offsets // n_cols, mask=mask", "s_ptr + offsets // 3, mask=mask"),
        id="broadcast-by-a-literal",
    ),
    pytest.param(
        ABSMAX_SCALE.replace("scale_rows_kernel[(triton.cdiv(n, 256),)](x, s, out,", "scale_rows_kernel[(triton.cdiv(n, 256),)](x, s, x,"),
        id="consumer-writes-the-row-kernel-input",
    ),
    pytest.param(
        ABSMAX_SCALE.replace("        out = torch.empty_like(x)\n", "        out = x[:, :]\n"),
        id="consumer-output-not-allocated",
    ),
    pytest.param(
        ABSMAX_SCALE.replace("    tl.store(s_ptr + row, tl.maximum(tl.max(acc, axis=0), 1e-3))\n",
                             "    tl.store(s_ptr + row, tl.maximum(tl.max(acc, axis=0), 1e-3), mask=row < 10)\n"),
        id="masked-row-store",
    ),
    pytest.param(
        ABSMAX_SCALE.replace("    tl.store(out_ptr + offsets, x / s + 1.0, mask=mask)\n",
                             "    tl.store(out_ptr + offsets, x / s + pid, mask=mask)\n"),
        id="consumer-body-reads-its-program-id",
    ),
    pytest.param(
        ABSMAX_SCALE.replace("        out = torch.empty_like(x)\n", "        out = torch.empty_like(x)\n        x = x * 2\n"),
        id="row-kernel-input-rebound-between",
    ),
    pytest.param(
        ABSMAX_SCALE.replace("        out = torch.empty_like(x)\n", "        out = torch.empty_like(x)\n        s.add_(1)\n"),
        id="a-statement-between-that-is-not-an-allocation",
    ),
    pytest.param(
        ABSMAX_SCALE.replace("BLOCK_SIZE=256)\n", "BLOCK_SIZE=256, num_warps=8)\n"),
        id="consumer-launch-option-it-cannot-carry",
    ),
]

BY_POSITION = ABSMAX_SCALE.replace("(x, s, n_cols, x.stride(0), BLOCK=128)", "(x, s, n_cols, x.stride(0), 128)")


def test_a_row_kernel_constexpr_passed_by_position_is_passed_by_keyword() -> None:
    """The consumer's parameters go before the row kernel's constexprs: the block the launch
    gave by position binds by keyword in the fused launch."""
    rw = fuse_row_broadcast(BY_POSITION, h.rule_input())
    assert rw is not None
    assert "row_absmax_scale_rows_kernel[(n_rows,)](x, s, n_cols, x.stride(0), BLOCK=128, x_ptr_1=x," in rw.source
    assert "row_absmax_kernel[(n_rows,)](x, s, n_cols, x.stride(0), 128)\n" in rw.source  # the else branch


@pytest.mark.parametrize("before", NOOP)
def test_it_leaves_unsafe_sequences_alone(before: str) -> None:
    assert fuse_row_broadcast(before, h.rule_input()) is None


def test_fused_modules_are_correct_under_the_interpreter(tmp_path: Path) -> None:
    """The fused launch on every case and verify input (odd rows, a row shorter than a block),
    and the guard's other branch forced, as a flat size of partial rows would take it."""
    sources = [("absmax_scale.py", ABSMAX_SCALE), ("absmax_scale_by_position.py", BY_POSITION)]
    if MEAN_CENTER:
        first = apply_family(Family.FUSION, MEAN_CENTER, h.rule_input())
        assert first is not None
        sources.append(("mean_center.py", first.source))
    paths = []
    for name, before in sources:
        rw = fuse_row_broadcast(before, h.rule_input())
        assert rw is not None
        guard = next(line.strip() for line in rw.source.splitlines() if line.strip().startswith("if n == "))
        for prefix, text in (("", rw.source), ("unfused_", rw.source.replace(guard, "if False:"))):
            path = tmp_path / f"{prefix}{name}"
            path.write_text(text)
            paths.append(path)
    results = h.interp_check(paths, jobs=2)
    for path in paths:
        assert results[str(path)]["ok"], results[str(path)]["message"]


ROW_INDEX_MATH = [
    pytest.param("w = tl.load(w_ptr + offs % d, mask=m)", "w = tl.load(w_ptr + cols, mask=m)", id="masked-column-load"),
    pytest.param("w = tl.load(w_ptr + offs % d)", "w = tl.load(w_ptr + offs % d)", id="unmasked-load-keeps-the-modulo"),
    pytest.param(
        "w = tl.load(w_ptr + offs % d, mask=other_mask)", "w = tl.load(w_ptr + offs % d, mask=other_mask)",
        id="another-mask-keeps-the-modulo",
    ),
    pytest.param("c = (offs % d).to(tl.float32)", "c = cols.to(tl.float32)", id="value-use"),
    pytest.param(
        "v = tl.load(v_ptr + offs // d, mask=m)", "v = tl.load(v_ptr + (row + 0 * cols), mask=m)",
        id="row-index-of-another-per-row-tensor",
    ),
    pytest.param("c = offs % e", "c = offs % e", id="another-divisor"),
    pytest.param("c = (offs + 1) % d", "c = (offs + 1) % d", id="another-dividend"),
]


@pytest.mark.parametrize(("before", "after"), ROW_INDEX_MATH)
def test_row_and_column_index_math_uses_row_and_cols(before: str, after: str) -> None:
    from diagnosis.engine.proposers.rules import cst_util as cu
    from diagnosis.engine.proposers.rules.fusion_rows import _row_index_math

    out = _row_index_math(cu.stmt(before), "offs", "d", "m", "row", "cols")
    assert cu.code(out).strip() == after


@pytest.mark.skipif(not MEAN_CENTER, reason="bench/suite not present")
def test_the_fused_mean_center_reads_its_scale_by_column_without_a_modulo() -> None:
    first = apply_family(Family.FUSION, MEAN_CENTER, h.rule_input())
    assert first is not None
    rw = fuse_row_broadcast(first.source, h.rule_input())
    assert rw is not None
    loop = rw.source.split("row by row")[1].split("\n\n")[0]
    assert "%" not in loop and "//" not in loop
    assert "tl.load(scale_ptr + cols" in loop
