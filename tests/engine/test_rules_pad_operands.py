"""HINTS (padded operands): dot kernels on sizes or row strides that are not multiples of 16
run, for those calls, on zero-padded copies."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from diagnosis.engine.evidence import Family, Finding, Severity
from diagnosis.engine.proposers.base import ProposalContext
from diagnosis.engine.proposers.rules import RuleInput, apply_family
from diagnosis.engine.proposers.rules.pad_operands import padded_operands
from tests.engine.rules_cases import harness as h

SUITE = Path(__file__).resolve().parents[2] / "bench" / "suite"


def suite(name: str) -> str:
    path = SUITE / name
    if not path.is_file():
        pytest.skip("bench/suite is absent")
    return path.read_text()


def blocked(kernel: str, *args: str) -> RuleInput:
    """Tier 3's finding for the odd case: these arguments keep the loads one element wide."""
    finding = Finding(
        code=h.code_for(Family.HINTS),
        severity=Severity.HIGH,
        args={"line": 1, "blockers": [{"arg": a, "role": "mask" if a.isupper() else "offset"} for a in args]},
        kernel=kernel,
    )
    return RuleInput((finding,), ProposalContext())


GEMM_BLOCKERS = ("stride_am", "K", "M", "stride_bk", "N")


def test_a_gemm_runs_odd_calls_on_padded_copies() -> None:
    rw = padded_operands(suite("01_gemm_fp16.py"), blocked("matmul_kernel", *GEMM_BLOCKERS))
    assert rw is not None and h.parses(rw.source) and rw.family is Family.HINTS
    src = rw.source
    assert "if any(v % 16 for v in (M, N, K)) or any(s % 16 for t in (a, b, c) for s in t.stride()[:-1]):" in src
    assert "M_p16, N_p16, K_p16 = (M + 15) // 16 * 16, (N + 15) // 16 * 16, (K + 15) // 16 * 16" in src
    assert "a_p16 = pad16(a)" in src and "b_p16 = pad16(b)" in src and "c_p16 = pad16(c, fill=False)" in src
    assert "a_p16, b_p16, c_p16," in src and "a_p16.stride(0), a_p16.stride(1)," in src
    assert "c.copy_(c_p16[tuple(slice(0, s) for s in c.shape)])" in src
    assert "\n\ndef pad16(t, fill=True):" in src
    # the aligned calls keep the original launch, in the else branch
    assert re.search(r"else:\n\s+matmul_kernel\[grid\]\(\n\s+a, b, c,\n\s+M, N, K,", src)


def test_every_launch_of_a_size_dispatched_gemm_is_guarded() -> None:
    """After LAUNCH_CONFIG the kernel has a fixed launch and an autotuned alias's launch."""
    from diagnosis.engine import sol

    context = ProposalContext(cases=h.cases_of(SUITE / "01_gemm_fp16.py"), device=sol.lookup("NVIDIA H200").spec)
    tuned = apply_family(Family.LAUNCH_CONFIG, suite("01_gemm_fp16.py"), RuleInput((), context))
    assert tuned is not None and "matmul_kernel_tuned[" in tuned.source
    rw = padded_operands(tuned.source, blocked("matmul_kernel", *GEMM_BLOCKERS))
    assert rw is not None
    assert rw.source.count("c.copy_(c_p16[") == 2
    assert "triton.cdiv(M_p16, meta[\"BLOCK_M\"])" in rw.source  # the grid sees the padded sizes


def test_a_batched_gemm_pads_the_matrices_not_the_batch() -> None:
    rw = padded_operands(suite("03_bmm_fp16.py"), blocked("bmm_kernel", "stride_am", "K", "stride_bk", "N"))
    assert rw is not None
    assert "M_p16, N_p16, K_p16 =" in rw.source and "batch_p16" not in rw.source


def test_a_linear_layer_pads_its_weight_and_bias() -> None:
    """N comes from `weight.shape[0]` (rank 2 from the strides passed); the bias, a vector of N,
    is padded with the rest."""
    src = suite("20_linear_bias_relu_fp16.py")
    kernel = re.search(r"def (\w+)\(", src[src.index("@triton.jit"):]).group(1)  # type: ignore[union-attr]
    rw = padded_operands(src, blocked(kernel, "stride_xm", "K", "N"))
    if rw is None:  # the module names its strides otherwise: take them from its signature
        params = re.search(rf"def {kernel}\(([^)]*)\)", src, re.S).group(1)  # type: ignore[union-attr]
        strides = [p.strip() for p in params.split(",") if p.strip().startswith("stride")]
        rw = padded_operands(src, blocked(kernel, strides[0], "K", "N"))
    assert rw is not None
    assert "bias_p16 = pad16(bias)" in rw.source and "weight_p16 = pad16(weight)" in rw.source


def test_a_kernel_that_reduces_over_a_tile_is_left_alone() -> None:
    """A row max over the accumulator would see the padded columns."""
    src = suite("01_gemm_fp16.py").replace(
        "    c_ptrs = c_ptr + offs_m[:, None] * stride_cm",
        "    acc = acc - tl.max(acc, axis=1)[:, None]\n    c_ptrs = c_ptr + offs_m[:, None] * stride_cm",
    )
    assert "tl.max(acc, axis=1)" in src
    assert padded_operands(src, blocked("matmul_kernel", *GEMM_BLOCKERS)) is None


def test_a_gemm_followed_by_a_softmax_kernel_is_padded_alone() -> None:
    """35_matmul_softmax: the GEMM kernel writes c back unpadded, the softmax kernel reads it."""
    rw = padded_operands(suite("35_matmul_softmax_fp16.py"), blocked("matmul_kernel", *GEMM_BLOCKERS))
    assert rw is not None and "softmax_kernel" not in rw.kernels


def test_nothing_without_a_finding_that_names_what_blocks() -> None:
    assert padded_operands(suite("01_gemm_fp16.py"), RuleInput((), ProposalContext())) is None


def test_a_size_whose_origin_is_unknown_is_not_padded_and_then_nothing_is() -> None:
    """K computed from numel: nothing shows it is a dimension of the operands, and a blocker
    that cannot be made a multiple of 16 means no rewrite."""
    src = suite("01_gemm_fp16.py").replace("        M, K = a.shape\n", "        M = a.shape[0]\n        K = a.numel() // M\n")
    assert "K = a.numel() // M" in src
    assert padded_operands(src, blocked("matmul_kernel", *GEMM_BLOCKERS)) is None


def test_padded_modules_are_correct_under_the_interpreter(tmp_path: Path) -> None:
    """The verify inputs are odd sizes (37 x 129 x 77 ...), so the padded branch is what runs."""
    cases = {
        "gemm.py": ("01_gemm_fp16.py", "matmul_kernel", GEMM_BLOCKERS),
        "bmm.py": ("03_bmm_fp16.py", "bmm_kernel", ("stride_am", "K", "stride_bk", "N")),
        # B given as (N, K): both of its dimensions are padded sizes
        "gemm_bt.py": ("04_gemm_bt_fp16.py", "matmul_bt_kernel", ("stride_am", "K", "stride_bn", "N")),
        # a weight and a bias vector, padded with the input
        "linear.py": ("20_linear_bias_relu_fp16.py", "linear_bias_relu_kernel", ("stride_xm", "K", "stride_wn", "N")),
        # a residual read in the epilogue at the output's offsets, padded like the output
        "residual.py": ("22_gemm_scale_residual_fp16.py", "gemm_scale_residual_kernel", GEMM_BLOCKERS),
        # the GEMM padded, the softmax kernel after it reading the copied-back output
        "softmax.py": ("35_matmul_softmax_fp16.py", "matmul_kernel", GEMM_BLOCKERS),
    }
    paths = []
    for out, (name, kernel, args) in cases.items():
        rw = padded_operands(suite(name), blocked(kernel, *args))
        assert rw is not None
        (tmp_path / out).write_text(rw.source)
        paths.append(tmp_path / out)
    results = h.interp_check(paths, jobs=2)
    for path in paths:
        assert results[str(path)]["ok"], results[str(path)]["message"]
        assert "_p16" in path.read_text()
