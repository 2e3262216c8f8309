"""run_tier0 as a whole: discovery, the three tests, clean kernels, robustness."""

from __future__ import annotations

import pytest

from diagnosis.engine.evidence import Family, Finding, Severity, Tier, all_codes, code_info
from diagnosis.engine.tier0 import _idle_kernels, assess, rule_codes, rules, run_tier0
from diagnosis.engine.tier0.registry import rule
from diagnosis.engine.tier0.source import parse_module
from tests.engine import src, tier0

SOFTMAX = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.autotune(
    configs=[triton.Config({}, num_warps=w) for w in (4, 8, 16)],
    key=["n_cols"],
)
@triton.jit
def softmax_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    den = tl.sum(num, axis=0)
    tl.store(out_ptr + row * out_row_stride + cols, num / den, mask=mask)


def softmax(x):
    n_rows, n_cols = x.shape
    out = torch.empty_like(x)
    BLOCK_SIZE = triton.next_power_of_2(n_cols)
    softmax_kernel[(n_rows,)](out, x, x.stride(0), out.stride(0), n_cols, BLOCK_SIZE=BLOCK_SIZE)
    return out


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


class ModelNew(nn.Module):
    def forward(self, x):
        return softmax(x)


batch, dim = 4096, 8192


def get_inputs():
    return [torch.randn(batch, dim)]


def get_input_cases():
    return [[torch.randn(m, n)] for m, n in [(1024, 1024), (4096, 8192), (8192, 16384)]]


def get_init_inputs():
    return []
"""

GEMM = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.autotune(
    configs=[
        triton.Config({"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 256, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 8},
                      num_stages=3, num_warps=8),
        triton.Config({"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 256, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8},
                      num_stages=4, num_warps=4),
        triton.Config({"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8},
                      num_stages=4, num_warps=4),
        triton.Config({"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8},
                      num_stages=5, num_warps=2),
    ],
    key=["M", "N", "K"],
)
@triton.jit
def matmul_kernel(
    a_ptr, b_ptr, c_ptr,
    M, N, K,
    stride_am, stride_ak,
    stride_bk, stride_bn,
    stride_cm, stride_cn,
    BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
    GROUP_SIZE_M: tl.constexpr,
):
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    offs_am = (pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)) % M
    offs_bn = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)

    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_SIZE_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_SIZE_K, other=0.0)
        accumulator = tl.dot(a, b, accumulator)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    c = accumulator.to(tl.float16)

    offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    tl.store(c_ptrs, c, mask=c_mask)


def matmul(a, b):
    assert a.shape[1] == b.shape[0], "incompatible dimensions"
    M, K = a.shape
    K, N = b.shape
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    grid = lambda META: (triton.cdiv(M, META["BLOCK_SIZE_M"]) * triton.cdiv(N, META["BLOCK_SIZE_N"]),)
    matmul_kernel[grid](
        a, b, c,
        M, N, K,
        a.stride(0), a.stride(1),
        b.stride(0), b.stride(1),
        c.stride(0), c.stride(1),
    )
    return c


class Model(nn.Module):
    def forward(self, a, b):
        return a @ b


class ModelNew(nn.Module):
    def forward(self, a, b):
        return matmul(a, b)


def get_inputs():
    return [torch.randn(4096, 4096, dtype=torch.float16), torch.randn(4096, 4096, dtype=torch.float16)]


def get_input_cases():
    return [[torch.randn(s, s, dtype=torch.float16), torch.randn(s, s, dtype=torch.float16)]
            for s in (512, 1024, 2048, 4096, 8192)]


def get_init_inputs():
    return []
"""

SLOW_SOFTMAX = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax3(out_ptr, in_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    row_ptr = in_ptr + row * stride
    m = -float("inf")
    for off in range(0, n_cols, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        m = tl.maximum(m, tl.max(tl.load(row_ptr + cols, mask=cols < n_cols, other=-float("inf")), axis=0))
    d = 0.0
    for off in range(0, n_cols, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        d += tl.sum(tl.exp(tl.load(row_ptr + cols, mask=cols < n_cols, other=-float("inf")) - m), axis=0)
    for off in range(0, n_cols, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        x = tl.load(row_ptr + cols, mask=cols < n_cols)
        tl.store(out_ptr + row * stride + cols, tl.exp(x - m) / d, mask=cols < n_cols)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        softmax3[(x.shape[0],)](out, x, x.stride(0), x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
        return out


def get_inputs():
    return [torch.randn(4096, 8192)]
"""


@pytest.mark.parametrize(
    "source", [pytest.param(SOFTMAX, id="softmax"), pytest.param(GEMM, id="grouped-gemm")]
)
def test_tuned_kernels_give_no_warning(source: str) -> None:
    result = tier0(src(source))
    assert [(f.code, f.lines) for f in result.findings if f.severity is not Severity.INFO] == []
    assert result.data["rule_errors"] == []
    assert not result.narrows and not result.explains


def test_a_three_pass_softmax_is_localized_narrowed_and_explained() -> None:
    result = tier0(src(SLOW_SOFTMAX))
    assert [f.code for f in result.findings if f.severity is not Severity.INFO] == ["T0-MULTI-PASS"]
    assert (result.localizes, result.narrows, result.explains) == (True, True, True)
    assert result.tier is Tier.TRIAGE
    assert result.wall_s < 1.0


def test_every_rule_module_is_discovered() -> None:
    modules = {r.name.split(".")[0] for r in rules()}
    assert modules >= {
        "launch",
        "multipass",
        "atomics",
        "dot",
        "coalesce",
        "index_math",
        "fusion",
        "masking",
        "int64",
    }


def test_every_declared_code_is_a_registered_triage_code() -> None:
    for code in rule_codes():
        assert code in all_codes()
        assert code_info(code).tier is Tier.TRIAGE
        assert code.startswith("T0-")


def test_a_module_that_does_not_parse_gives_one_finding_at_its_line() -> None:
    result = run_tier0("import triton\n\ndef broken(:\n    pass\n")
    assert [(f.code, f.lines) for f in result.findings] == [("T0-SYNTAX-ERROR", (3,))]
    assert (result.localizes, result.narrows, result.explains) == (False, False, False)


def test_a_crashing_rule_is_recorded_not_raised_unless_strict(monkeypatch: pytest.MonkeyPatch) -> None:
    from diagnosis.engine.tier0 import registry

    def explode(ctx: object) -> list[Finding]:
        raise RuntimeError("boom")

    monkeypatch.setattr(registry, "_RULES", [*registry._RULES])
    rule("T0-TINY-BLOCK")(explode)
    result = run_tier0(src(SOFTMAX))
    assert any("boom" in e for e in result.data["rule_errors"])
    assert any("boom" in n for n in result.notes)
    with pytest.raises(RuntimeError, match="boom"):
        run_tier0(src(SOFTMAX), strict=True)


def test_a_rule_emitting_an_undeclared_code_always_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    from diagnosis.engine.tier0 import registry
    from diagnosis.engine.tier0.errors import UndeclaredCode

    def liar(ctx: object) -> list[Finding]:
        return [Finding("T0-MULTI-PASS", Severity.LOW)]

    monkeypatch.setattr(registry, "_RULES", [*registry._RULES])
    rule("T0-TINY-BLOCK")(liar)
    with pytest.raises(UndeclaredCode):
        run_tier0(src(SOFTMAX))


def test_a_rule_must_declare_registered_codes() -> None:
    with pytest.raises(ValueError, match="unregistered"):
        rule("T0-NOT-A-CODE")


def _f(
    code: str,
    severity: Severity,
    *,
    kernel: str = "k",
    lines: tuple[int, ...] = (3,),
    gain: float | None = None,
    family: Family | None = None,
) -> Finding:
    return Finding(code, severity, {}, lines=lines, kernel=kernel, gain=gain, family_override=family)


ASSESS = [
    pytest.param([], (False, False, False), id="nothing"),
    pytest.param([_f("T0-NEEDLESS-MASK", Severity.INFO)], (False, False, False), id="info-only"),
    pytest.param(
        [_f("T0-NO-AUTOTUNE", Severity.LOW)], (False, True, False), id="low-narrows-but-neither-localizes"
    ),
    pytest.param(
        [_f("T0-MULTI-PASS", Severity.MEDIUM, gain=1.5)], (True, True, True), id="one-medium-with-gain"
    ),
    pytest.param(
        [_f("T0-MULTI-PASS", Severity.MEDIUM, kernel="", gain=1.5)], (False, True, True), id="no-kernel"
    ),
    pytest.param(
        [_f("T0-ATOMIC-REDUCTION", Severity.MEDIUM)], (True, True, False), id="no-gain-does-not-explain"
    ),
    pytest.param(
        [_f("T0-MULTI-PASS", Severity.MEDIUM, gain=1.5), _f("T0-SUM-NOT-DOT", Severity.MEDIUM, gain=2.5)],
        (True, False, True),
        id="two-families-at-the-top-severity",
    ),
    pytest.param(
        [_f("T0-MISSING-MASK", Severity.HIGH), _f("T0-MULTI-PASS", Severity.MEDIUM, gain=1.5)],
        (True, True, False),
        id="top-severity-decides-narrowing",
    ),
    pytest.param(
        [_f("T0-DIV-MOD-IN-LOOP", Severity.MEDIUM, family=Family.HOIST)],
        (True, True, False),
        id="family-override-counts",
    ),
]


@pytest.mark.parametrize(("findings", "expected"), ASSESS)
def test_assess_applies_the_three_tests(findings: list[Finding], expected: tuple[bool, bool, bool]) -> None:
    assert assess(findings) == expected


TWO_PATHS = """
import torch
import triton
import triton.language as tl


@triton.jit
def small_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


@triton.jit
def large_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def copy(x):
    out = torch.empty_like(x)
    n = x.numel()
    if n < 4096:
        small_kernel[(triton.cdiv(n, 64),)](x, out, n, BLOCK=64)
    else:
        large_kernel[(triton.cdiv(n, 32),)](x, out, n, BLOCK=32)
    return out
"""


def test_findings_on_a_kernel_no_timed_case_launched_are_left_out_with_a_note():
    everything = run_tier0(TWO_PATHS, strict=True)
    assert {"small_kernel", "large_kernel"} <= {f.kernel for f in everything.findings}

    timed = run_tier0(TWO_PATHS, strict=True, launched=frozenset({"large_kernel"}))
    assert {f.kernel for f in timed.findings if f.kernel} == {"large_kernel"}
    assert [f for f in timed.findings if f.kernel == "large_kernel"] == [
        f for f in everything.findings if f.kernel == "large_kernel"
    ]
    assert "findings on small_kernel left out: no timed case launches it" in timed.notes


def test_a_jit_helper_is_never_idle_it_runs_inside_its_caller():
    source = TWO_PATHS.replace(
        "@triton.jit\ndef large_kernel",
        "@triton.jit\ndef _twice(v):\n    return v + v\n\n\n@triton.jit\ndef large_kernel",
    )
    module = parse_module(source)
    assert "_twice" in module.kernels
    assert _idle_kernels(module, frozenset({"large_kernel"})) == {"small_kernel"}
    assert _idle_kernels(module, frozenset()) == frozenset()
