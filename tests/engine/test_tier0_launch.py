from __future__ import annotations

import pytest

from diagnosis.engine.evidence import Family, Severity
from tests.engine import marks, primary, src, tier0

CODES = {"T0-TINY-BLOCK", "T0-SMALL-TILE", "T0-ONE-WARP", "T0-NO-AUTOTUNE", "T0-GRID-SMALL", "T0-GRID-LARGE"}

ADD_KERNEL = """
import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)
"""

AUTOTUNED_ADD = """
import triton
import triton.language as tl


@triton.autotune(
    configs=[triton.Config({"BLOCK_SIZE": b}, num_warps=w) for b, w in [(1024, 4), (2048, 8), (4096, 8)]],
    key=["n"],
)
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def add(x, y):
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)](x, y, out, n)
    return out
"""

GEMM = """
import torch
import triton
import triton.language as tl


@triton.jit
def mm(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
       BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * sam + (k + rk)[None, :] * sak, mask=rm[:, None] < M)
        b = tl.load(b_ptr + (k + rk)[:, None] * sbk + rn[None, :] * sbn, mask=rn[None, :] < N)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))
"""


def _launch(body: str) -> str:
    return ADD_KERNEL + src(body)


NOOP = [
    pytest.param(
        _launch(
            """
            def add(x, y):
                out = torch.empty_like(x)
                n = x.numel()
                add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK_SIZE=triton.next_power_of_2(n))
                return out
            """
        ),
        id="shape-dependent-block",
    ),
    pytest.param(AUTOTUNED_ADD, id="autotuned-large-blocks"),
    pytest.param(
        _launch(
            """
            def add(x, y):
                out = torch.empty_like(x)
                add_kernel[(4,)](x, y, out, 256, BLOCK_SIZE=64, num_warps=1)
                return out


            def get_inputs():
                return [torch.randn(256), torch.randn(256)]
            """
        ),
        id="tiny-problem-tiny-grid-one-warp-small-block-is-right-sized",
    ),
    pytest.param(
        GEMM
        + src(
            """
            def matmul(a, b):
                M, K = a.shape
                K, N = b.shape
                c = torch.empty((M, N), device=a.device)
                grid = (triton.cdiv(M, 128), triton.cdiv(N, 128))
                mm[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                         c.stride(0), c.stride(1), BM=128, BN=128, BK=64)
                return c
            """
        ),
        id="gemm-128x128x64",
    ),
    pytest.param(
        src(
            """
            import torch
            import triton
            import triton.language as tl


            @triton.jit
            def partial_sums(x_ptr, partial_ptr, n, BLOCK: tl.constexpr):
                offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
                tl.store(partial_ptr + tl.program_id(0), tl.sum(tl.load(x_ptr + offs, mask=offs < n, other=0.0)))


            @triton.jit
            def finish(partial_ptr, out_ptr, n_partials, BLOCK: tl.constexpr):
                acc = tl.zeros([BLOCK], dtype=tl.float32)
                for start in range(0, n_partials, BLOCK):
                    offs = start + tl.arange(0, BLOCK)
                    acc += tl.load(partial_ptr + offs, mask=offs < n_partials, other=0.0)
                tl.store(out_ptr, tl.sum(acc, axis=0))


            def total(x):
                n_blocks = triton.cdiv(x.numel(), 1024)
                partials = torch.empty((n_blocks,), device=x.device)
                out = torch.empty((), device=x.device)
                partial_sums[(n_blocks,)](x, partials, x.numel(), BLOCK=1024)
                finish[(1,)](partials, out, n_blocks, BLOCK=1024)
                return out
            """
        ),
        id="single-program-second-stage-of-a-reduction",
    ),
    pytest.param(
        _launch(
            """
            BLOCK = 4096


            def add(x, y):
                out = torch.empty_like(x)
                add_kernel[(1024,)](x, y, out, x.numel(), BLOCK_SIZE=BLOCK)
                return out
            """
        ),
        id="literal-grid-fills-device",
    ),
]

FIX = [
    pytest.param(
        _launch(
            """
            def add(x, y):
                out = torch.empty_like(x)
                n = x.numel()
                add_kernel[(triton.cdiv(n, 64),)](x, y, out, n, BLOCK_SIZE=64)  # <- T0-TINY-BLOCK, T0-NO-AUTOTUNE
                return out
            """
        ),
        id="tiny-literal-block",
    ),
    pytest.param(
        _launch(
            """
            BLOCK = 32


            def add(x, y):
                out = torch.empty_like(x)
                n = x.numel()
                grid = lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)
                add_kernel[grid](x, y, out, n, BLOCK_SIZE=BLOCK)  # <- T0-TINY-BLOCK, T0-NO-AUTOTUNE
                return out
            """
        ),
        id="tiny-block-from-module-constant",
    ),
    pytest.param(
        src(
            """
            import triton
            import triton.language as tl


            @triton.autotune(configs=[triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64})], key=["n"])  # <- T0-TINY-BLOCK
            @triton.jit
            def relu(x_ptr, n, BLOCK: tl.constexpr):
                offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
                tl.store(x_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=offs < n), 0.0), mask=offs < n)
            """
        ),
        id="autotune-space-only-tiny-blocks",
    ),
    pytest.param(
        _launch(
            """
            def add(x, y):
                out = torch.empty_like(x)
                n = x.numel()
                add_kernel[(triton.cdiv(n, 2048),)](x, y, out, n, BLOCK_SIZE=2048, num_warps=1)  # <- T0-ONE-WARP, T0-NO-AUTOTUNE
                return out
            """
        ),
        id="one-warp-for-2048-elements",
    ),
    pytest.param(
        _launch(
            """
            def add(x, y):
                out = torch.empty_like(x)
                add_kernel[(1,)](x, y, out, x.numel(), BLOCK_SIZE=1024)  # <- T0-GRID-SMALL, T0-NO-AUTOTUNE
                return out


            def get_inputs():
                return [torch.randn(4096, 4096), torch.randn(4096, 4096)]
            """
        ),
        id="single-program-grid",
    ),
    pytest.param(
        _launch(
            """
            def add(x, y):
                out = torch.empty_like(x)
                add_kernel[(4, 100000)](x, y, out, 16, BLOCK_SIZE=1024)  # <- T0-GRID-LARGE
                return out
            """
        ),
        id="grid-axis-1-over-65535",
    ),
    pytest.param(
        GEMM
        + src(
            """
            def matmul(a, b):
                M, K = a.shape
                K, N = b.shape
                c = torch.empty((M, N), device=a.device)
                grid = (triton.cdiv(M, 32), triton.cdiv(N, 32))
                mm[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),  # <- T0-SMALL-TILE, T0-NO-AUTOTUNE
                         c.stride(0), c.stride(1), BM=32, BN=32, BK=16)
                return c
            """
        ),
        id="gemm-32x32x16",
    ),
]


@pytest.mark.parametrize("source", NOOP)
def test_it_leaves_good_launch_configs_alone(source: str) -> None:
    # A fixed good configuration is still a fixed one: T0-NO-AUTOTUNE has its own table.
    assert primary(tier0(src(source)).findings, CODES - {"T0-NO-AUTOTUNE"}) == []


NO_AUTOTUNE_NOOP = [
    pytest.param(AUTOTUNED_ADD, id="autotuned"),
    NOOP[0],  # the block follows the shape
    NOOP[2],  # every size is a literal: one configuration is all there is
]


@pytest.mark.parametrize("source", NO_AUTOTUNE_NOOP)
def test_it_does_not_ask_for_autotune_when_nothing_is_fixed_over_shapes(source: str) -> None:
    assert primary(tier0(src(source)).findings, {"T0-NO-AUTOTUNE"}) == []


@pytest.mark.parametrize("source", FIX)
def test_it_flags_launch_configs_at_the_launch(source: str) -> None:
    source = src(source)
    assert primary(tier0(source).findings, CODES) == marks(source, CODES)


def test_it_estimates_tiny_block_gain_from_bytes_in_flight() -> None:
    source = src(
        _launch(
            """
            def add(x, y):
                out = torch.empty_like(x)
                add_kernel[(triton.cdiv(x.numel(), 32),)](x, y, out, x.numel(), BLOCK_SIZE=32)
                return out
            """
        )
    )
    (finding,) = [f for f in tier0(source).findings if f.code == "T0-TINY-BLOCK"]
    assert finding.severity is Severity.HIGH
    assert finding.family is Family.LAUNCH_CONFIG
    assert finding.kernel == "add_kernel"
    # 16 resident programs x 32 elements x 4 bytes x 2 loads = 4 KiB in flight: 4x short, halved.
    assert finding.args["in_flight_kib"] == 4.0
    assert finding.gain == 2.5


def test_it_names_the_fixed_constexprs_when_autotune_is_missing() -> None:
    source = src(
        _launch(
            """
            def add(x, y):
                out = torch.empty_like(x)
                add_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, out, x.numel(), BLOCK_SIZE=1024, num_warps=4)
                return out
            """
        )
    )
    (finding,) = [f for f in tier0(source).findings if f.code == "T0-NO-AUTOTUNE"]
    assert finding.args["constexprs"] == "BLOCK_SIZE, num_warps"
    assert finding.args["sizes"] == "n"


ONE_CONFIG_ADD = AUTOTUNED_ADD.replace(
    'configs=[triton.Config({"BLOCK_SIZE": b}, num_warps=w) for b, w in [(1024, 4), (2048, 8), (4096, 8)]],',
    "configs={configs},",
)


@pytest.mark.parametrize(
    ("configs", "flagged"),
    [
        pytest.param('[triton.Config({"BLOCK_SIZE": 1024}, num_warps=4)]', True, id="literal-one"),
        pytest.param("make_configs()[:1]", True, id="computed-cut-to-one"),
        pytest.param("[c for c in make_configs() if c.num_warps == 4][0:1]", True, id="filtered-cut-to-one"),
        pytest.param("make_configs()", False, id="computed"),
        pytest.param("make_configs()[:2]", False, id="cut-to-two"),
    ],
)
def test_an_autotune_over_one_config_is_a_fixed_launch(configs: str, flagged: bool) -> None:
    # the key names the sizes that vary when the wrapper's values cannot be followed
    findings = tier0(src(ONE_CONFIG_ADD.format(configs=configs))).findings
    found = [f for f in findings if f.code == "T0-ONE-CONFIG"]
    assert bool(found) == flagged
    if flagged:
        (finding,) = found
        assert finding.family is Family.LAUNCH_CONFIG and finding.kernel == "add_kernel"
        assert finding.args["sizes"] == "n" and finding.lines == (5,)  # the decorator
    assert not [f for f in findings if f.code == "T0-NO-AUTOTUNE"]
