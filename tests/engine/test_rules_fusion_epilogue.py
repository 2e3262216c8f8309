"""FUSION (epilogue): an element-wise kernel over a temporary moves into its producer's store."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnosis.engine.evidence import Family
from diagnosis.engine.proposers.rules import apply_family
from tests.engine.rules_cases import harness as h

ALPHA_INIT = "    def __init__(self, alpha=0.5):\n        super().__init__()\n        self.alpha = alpha\n\n"
EPILOGUE_KERNEL = '''@triton.jit
def scaled_relu_kernel(x_ptr, out_ptr, n_elements, alpha, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    tl.store(out_ptr + offsets, (tl.maximum(x, 0.0) * alpha).to(tl.float16), mask=mask)


'''


def _gemm_then_scaled_relu() -> str:
    """rules_cases/matmul.py with a scaled ReLU after the GEMM, as its own element-wise kernel
    over the product (and the same in the reference)."""
    text = h.source("matmul.py")
    edits = [
        ("class Model(nn.Module):\n", "class Model(nn.Module):\n" + ALPHA_INIT),
        ("        return torch.matmul(a, b)\n", "        return torch.relu(torch.matmul(a, b)) * self.alpha\n"),
        ("class ModelNew(nn.Module):\n", EPILOGUE_KERNEL + "class ModelNew(nn.Module):\n" + ALPHA_INIT),
        (
            "        return c\n",
            "        out = torch.empty_like(c)\n        n = c.numel()\n"
            "        scaled_relu_kernel[(triton.cdiv(n, 1024),)](c, out, n, self.alpha, BLOCK_SIZE=1024)\n"
            "        return out\n",
        ),
    ]
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


GEMM = _gemm_then_scaled_relu()
SUITE = Path(__file__).resolve().parents[2] / "bench" / "suite"
ROW = (SUITE / "23_layernorm_gelu_fp32.py").read_text() if SUITE.is_dir() else ""

FIX = [
    pytest.param(
        GEMM,
        [
            # P's parameters, then the consumer's output and scalar, before the constexprs
            "    stride_cm, stride_cn,\n    out_ptr, alpha,\n    BLOCK_M: tl.constexpr,",
            "def matmul_scaled_relu_kernel(",
            # the stored value kept as the temporary's dtype, then the consumer's statements
            "    c_vals = acc.to(tl.float16).to(c_ptr.dtype.element_ty)\n"
            "    x = c_vals.to(tl.float32)\n",
            # the store goes to out at the product's address (the local pointer inlined) and mask
            "    tl.store(out_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, "
            "(tl.maximum(x, 0.0) * alpha).to(tl.float16), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))",
            # one launch, at the consumer's place, after out is allocated
            # the consumer's size went with its launch
            "        out = torch.empty_like(c)\n        matmul_scaled_relu_kernel[grid](",
            "            BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, out_ptr=out, alpha=self.alpha,\n        )\n        return out\n",
        ],
        ["scaled_relu_kernel[(triton.cdiv", "def scaled_relu_kernel(", "def matmul_kernel(", "tl.store(c_ptrs"],
        id="gemm-with-a-local-pointer-and-a-scalar",
    ),
    pytest.param(
        ROW,
        [
            "def layernorm_gelu_kernel(x_ptr, w_ptr, b_ptr, y_ptr, n_cols, stride, eps, y_ptr_1, BLOCK_SIZE: tl.constexpr):",
            "    normed_vals = (diff * rstd * w + b).to(y_ptr.dtype.element_ty)\n"
            "    y = 0.5 * normed_vals * (1.0 + tl.erf(normed_vals * 0.7071067811865476))\n",
            "    tl.store(y_ptr_1 + row * stride + cols, y, mask=mask)\n",
            "            BLOCK_SIZE=triton.next_power_of_2(n_cols),\n            y_ptr_1=out,\n        )\n",
        ],
        ["gelu_kernel[(triton.cdiv", "def gelu_kernel("],
        id="row-kernel-names-renamed-apart",
    ),
]

NOOP = [
    pytest.param(GEMM.replace("        return out\n", "        return out + c\n"), id="temporary-read-later"),
    pytest.param(
        GEMM.replace("out = torch.empty_like(c)", "out = torch.empty((M, N), device=a.device, dtype=torch.float16)"),
        id="output-not-shaped-like-the-temporary",
    ),
    pytest.param(GEMM.replace("scaled_relu_kernel[(triton.cdiv(n, 1024),)](c, out, n,",
                              "scaled_relu_kernel[(triton.cdiv(n, 1024),)](c, out, n // 2,"), id="covers-part"),  # fmt: skip
    pytest.param(
        GEMM.replace("(tl.maximum(x, 0.0) * alpha).to(tl.float16)", "(tl.maximum(x, 0.0) * alpha + offsets).to(tl.float16)"),
        id="consumer-uses-its-offsets",
    ),
    pytest.param(
        GEMM.replace("x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)",
                     "x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32) + tl.load(x_ptr + offsets // 2, mask=mask)"),
        id="consumer-reads-other-elements",
    ),  # fmt: skip
    pytest.param(
        GEMM.replace("    tl.store(c_ptrs, acc", "    tl.store(c_ptrs, acc * 0, mask=offs_m[:, None] < 0)\n    tl.store(c_ptrs, acc"),
        id="producer-stores-twice",
    ),  # fmt: skip
    pytest.param(
        GEMM.replace("        out = torch.empty_like(c)\n", "        out = torch.empty_like(c)\n        c = c * 2\n"),
        id="temporary-rebound-between",
    ),
]


@pytest.mark.parametrize(("before", "present", "absent"), FIX)
def test_it_moves_the_element_wise_kernel_into_the_store(before: str, present: list[str], absent: list[str]) -> None:
    if not before:
        pytest.skip("bench/suite is absent")
    rw = apply_family(Family.FUSION, before, h.rule_input())
    assert rw is not None
    assert h.parses(rw.source)
    assert "element-wise epilogue" in rw.mechanism
    for text in present:
        assert text in rw.source, text
    for text in absent:
        assert text not in rw.source, text


@pytest.mark.parametrize("before", NOOP)
def test_it_leaves_unsafe_sequences_alone(before: str) -> None:
    assert before != GEMM  # the variant really differs from the fusable module
    assert apply_family(Family.FUSION, before, h.rule_input()) is None


def test_the_fused_gemm_is_correct_under_the_interpreter_for_every_config(tmp_path: Path) -> None:
    original = tmp_path / "gemm_relu.py"
    original.write_text(GEMM)
    fused = apply_family(Family.FUSION, GEMM, h.rule_input(h.cases_of(original)))
    assert fused is not None
    tuned = apply_family(Family.LAUNCH_CONFIG, fused.source, h.rule_input(h.cases_of(original)))
    assert tuned is not None and "@triton.autotune" in tuned.source
    paths = [original]
    for name, text in (("gemm_relu_fused.py", fused.source), ("gemm_relu_fused_tuned.py", tuned.source)):
        path = tmp_path / name
        path.write_text(text)
        paths.append(path)
    results = h.interp_check(paths)
    for path in paths:
        assert results[str(path)]["ok"], results[str(path)]["message"]
