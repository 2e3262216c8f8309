from __future__ import annotations

import pytest

from diagnosis.engine.evidence import Family, Severity
from diagnosis.engine.tier0.source import parse_module
from tests.engine import marks, primary, src, tier0

SUM_CODES = {"T0-SUM-NOT-DOT"}
FP32_CODES = {"T0-DOT-FP32-PRECISION"}

HEAD = """
import torch
import triton
import triton.language as tl


"""

MATVEC = """
@triton.jit
def matvec(a_ptr, x_ptr, y_ptr, M, N, stride_am, BM: tl.constexpr, BN: tl.constexpr):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    acc = tl.zeros((BM,), dtype=tl.float32)
    for n0 in range(0, N, BN):
        cols = n0 + tl.arange(0, BN)
        a = tl.load(a_ptr + rows[:, None] * stride_am + cols[None, :], mask=(rows[:, None] < M) & (cols[None, :] < N))
        x = tl.load(x_ptr + cols, mask=cols < N)
        acc += tl.sum(a * x[None, :], axis=1)
    tl.store(y_ptr + rows, acc, mask=rows < M)
"""

ROW_DOT = """
@triton.jit
def cosine(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    a = tl.load(a_ptr + row * n + cols, mask=cols < n, other=0.0)
    b = tl.load(b_ptr + row * n + cols, mask=cols < n, other=0.0)
    tl.store(out_ptr + row, tl.sum(a * b, axis=0))
"""

DOT_GEMM = """
@triton.jit
def mm(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
        acc += tl.dot(a, b{precision})  # <- T0-DOT-FP32-PRECISION
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)
"""


def inputs(dtype: str) -> str:
    return f"""

def get_inputs():
    return [torch.randn(1024, 1024{dtype}), torch.randn(1024, 1024{dtype})]
"""


SUM_NOOP = [
    pytest.param(HEAD + MATVEC, id="matrix-vector"),
    pytest.param(HEAD + ROW_DOT, id="row-wise-dot-products"),
    pytest.param(HEAD + DOT_GEMM.format(precision=""), id="already-tl-dot"),
]

SUM_FIX = [
    pytest.param(
        HEAD
        + """
@triton.jit
def mm3(a_ptr, b_ptr, c_ptr, K, N, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
        acc += tl.sum(a[:, :, None] * b[None, :, :], axis=1)  # <- T0-SUM-NOT-DOT
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)
""",
        id="3d-broadcast-product",
    ),
    pytest.param(
        HEAD
        + """
@triton.jit
def mm3(a_ptr, b_ptr, c_ptr, K, N, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rk = tl.arange(0, BK)
    rn = tl.arange(0, BN)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    prod = a[:, :, None] * b[None, :, :]
    c = tl.sum(prod, axis=1)  # <- T0-SUM-NOT-DOT
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], c)
""",
        id="3d-product-through-a-local",
    ),
    pytest.param(
        HEAD
        + """
@triton.jit
def naive_mm(a_ptr, b_ptr, c_ptr, M, N, K, BK: tl.constexpr):
    i = tl.program_id(0)
    j = tl.program_id(1)
    acc = 0.0
    for k in range(0, K, BK):
        ks = k + tl.arange(0, BK)
        a = tl.load(a_ptr + i * K + ks, mask=ks < K, other=0.0)
        b = tl.load(b_ptr + ks * N + j, mask=ks < K, other=0.0)
        acc += tl.sum(a * b)  # <- T0-SUM-NOT-DOT
    tl.store(c_ptr + i * N + j, acc)
""",
        id="one-output-per-program-gemm",
    ),
]

FP32_NOOP = [
    pytest.param(HEAD + DOT_GEMM.format(precision="") + inputs(", dtype=torch.float16"), id="fp16-inputs"),
    pytest.param(
        HEAD + DOT_GEMM.format(precision=', input_precision="tf32"') + inputs(""), id="precision-stated"
    ),
    pytest.param(HEAD + DOT_GEMM.format(precision=", allow_tf32=False") + inputs(""), id="legacy-allow-tf32"),
    pytest.param(HEAD + DOT_GEMM.format(precision=""), id="dtype-unknown"),
    pytest.param(
        HEAD
        + DOT_GEMM.format(precision="").replace("tl.dot(a, b", "tl.dot(a.to(tl.float16), b.to(tl.float16)")
        + inputs(""),
        id="operands-cast-to-fp16",
    ),
]

FP32_FIX = [
    pytest.param(HEAD + DOT_GEMM.format(precision="") + inputs(""), id="randn-default-float32"),
    pytest.param(
        HEAD
        + DOT_GEMM.format(precision="")
        + inputs(", dtype=torch.float32").replace("torch.randn", "torch.rand"),
        id="explicit-float32",
    ),
    pytest.param(
        HEAD
        + DOT_GEMM.format(precision="").replace("tl.dot(a, b", "tl.dot(a.to(tl.float32), b.to(tl.float32)"),
        id="operands-cast-to-fp32",
    ),
]


@pytest.mark.parametrize("source", SUM_NOOP)
def test_it_leaves_matrix_vector_and_row_dots_alone(source: str) -> None:
    assert primary(tier0(src(source)).findings, SUM_CODES) == []


@pytest.mark.parametrize("source", SUM_FIX)
def test_it_flags_matrix_products_computed_with_sum(source: str) -> None:
    source = src(source)
    assert primary(tier0(source).findings, SUM_CODES) == marks(source, SUM_CODES)


@pytest.mark.parametrize("source", FP32_NOOP)
def test_it_leaves_dots_with_a_known_precision_alone(source: str) -> None:
    assert primary(tier0(src(source)).findings, FP32_CODES) == []


@pytest.mark.parametrize("source", FP32_FIX)
def test_it_flags_fp32_dots_without_a_precision_choice(source: str) -> None:
    source = src(source)
    found = [f for f in tier0(source).findings if f.code in FP32_CODES]
    assert primary(found, FP32_CODES) == marks(source, FP32_CODES)
    assert all(f.severity is Severity.LOW and f.family is Family.DOT_PRECISION for f in found)


def test_the_3d_product_is_high_severity_with_a_tensor_core_gain() -> None:
    (source,) = [p.values[0] for p in SUM_FIX if p.id == "3d-broadcast-product"]
    (finding,) = [f for f in tier0(src(source)).findings if f.code in SUM_CODES]
    assert finding.severity is Severity.HIGH
    assert finding.family is Family.USE_DOT
    assert finding.gain == 2.5


IEEE_CODES = {"T0-DOT-IEEE"}
LAUNCH_WITH = """

def launch(a, b, c):
    mm[(8, 8)](a, b, c, 1024, 1024, 1024, BM=64, BN=64, BK=32{extra})
"""

IEEE_FIX = [
    pytest.param(', input_precision="ieee"', "", "input_precision='ieee'", id="keyword"),
    pytest.param(", acc, 'ieee'", "", "input_precision='ieee'", id="fourth-positional"),
    pytest.param(", allow_tf32=False", "", "allow_tf32=False", id="legacy-allow-tf32-false"),
    pytest.param(
        ", input_precision=PREC", ', PREC="ieee"', "input_precision=PREC, which every launch sets to 'ieee'",
        id="constexpr-set-at-launch",
    ),
]

IEEE_NOOP = [
    pytest.param(', input_precision="tf32"', "", id="tf32"),
    pytest.param(', input_precision="tf32x3"', "", id="tf32x3"),
    pytest.param(", allow_tf32=True", "", id="allow-tf32-true"),
    pytest.param("", "", id="no-choice-is-the-low-finding"),
    pytest.param(", input_precision=PREC", ', PREC="tf32"', id="constexpr-set-to-tf32"),
]


def _ieee_source(precision: str, extra: str) -> str:
    gemm = DOT_GEMM.replace("  # <- T0-DOT-FP32-PRECISION", "")
    if "PREC" in precision:
        gemm = gemm.replace("BK: tl.constexpr):", "BK: tl.constexpr, PREC: tl.constexpr):")
    if ", acc," in precision:
        gemm = gemm.replace("acc += tl.dot(a, b{precision})", "acc = tl.dot(a, b{precision})")
    return HEAD + gemm.format(precision=precision) + inputs("") + LAUNCH_WITH.format(extra=extra)


@pytest.mark.parametrize(("precision", "extra", "spelling"), IEEE_FIX)
def test_it_flags_fp32_dots_that_ask_for_ieee(precision: str, extra: str, spelling: str) -> None:
    source = _ieee_source(precision, extra)
    found = [f for f in tier0(source).findings if f.code in IEEE_CODES]
    assert len(found) == 1
    f = found[0]
    assert f.family is Family.DOT_PRECISION and f.severity is Severity.MEDIUM and f.gain == 2.5
    assert f.args["spelling"] == spelling
    assert f.lines == (source.splitlines().index(next(ln for ln in source.splitlines() if "tl.dot(" in ln)) + 1,)


@pytest.mark.parametrize(("precision", "extra"), IEEE_NOOP)
def test_it_leaves_other_precisions_to_other_findings(precision: str, extra: str) -> None:
    assert [f for f in tier0(_ieee_source(precision, extra)).findings if f.code in IEEE_CODES] == []


@pytest.mark.parametrize(
    ("dtype", "cast"),
    [
        pytest.param(", dtype=torch.float16", "", id="fp16-inputs"),
        pytest.param(", dtype=torch.bfloat16", "", id="bf16-inputs"),
        pytest.param("", ".to(tl.float16)", id="operands-cast-to-fp16"),
    ],
)
def test_ieee_on_half_precision_operands_is_not_flagged(dtype: str, cast: str) -> None:
    """allow_tf32=False changes nothing for fp16/bf16 operands (flag_gems' addmm on fp16)."""
    gemm = DOT_GEMM.replace("  # <- T0-DOT-FP32-PRECISION", "").format(precision=", allow_tf32=False")
    if cast:
        gemm = gemm.replace("tl.dot(a, b,", f"tl.dot(a{cast}, b{cast},")
    source = HEAD + gemm + inputs(dtype) + LAUNCH_WITH.format(extra="")
    assert [f for f in tier0(source).findings if f.code in IEEE_CODES] == []


HELPER_INPUTS = """

def _make_inputs(m, n, k, dtype={dtype}):
    return [torch.randn(n, dtype=dtype), torch.randn(m, k, dtype=dtype) / 8, torch.randn(k, n, dtype=dtype) / 8]


_CASES = [(4096, 4096, 4096), (8192, 8192, 4096)]


def get_inputs():
    return _make_inputs(*_CASES[0])


def get_input_cases():
    return [_make_inputs(*case) for case in _CASES]
"""


def _helper_source(dtype: str) -> str:
    """flag_gems' addmm harness: allow_tf32=False on a dot whose inputs a helper builds."""
    gemm = DOT_GEMM.replace("  # <- T0-DOT-FP32-PRECISION", "").format(precision=", allow_tf32=False")
    return HEAD + gemm + HELPER_INPUTS.format(dtype=dtype) + LAUNCH_WITH.format(extra="")


@pytest.mark.parametrize("dtype", ["torch.float16", "torch.bfloat16"])
def test_ieee_is_not_flagged_when_a_helper_builds_half_precision_inputs(dtype: str) -> None:
    source = _helper_source(dtype)
    assert {t.dtype for t in parse_module(source).inputs} == {dtype.removeprefix("torch.")}
    assert [f for f in tier0(source).findings if f.code in IEEE_CODES] == []


def test_ieee_is_flagged_when_a_helper_builds_fp32_inputs() -> None:
    source = _helper_source("torch.float32")
    assert parse_module(source).input_dtypes() == {"float32"}
    (finding,) = [f for f in tier0(source).findings if f.code in IEEE_CODES]
    assert finding.args["spelling"] == "allow_tf32=False"
