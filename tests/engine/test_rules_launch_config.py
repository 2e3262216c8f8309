"""LAUNCH_CONFIG: fixed block sizes and warps become an @triton.autotune space."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnosis.engine.evidence import Family
from diagnosis.engine.proposers.base import CaseShape
from diagnosis.engine.proposers.rules import apply_family
from tests.engine.rules_cases import harness as h

HEADER = "import torch\nimport triton\nimport triton.language as tl\n\n\n"

ELEMENTWISE_KERNEL = '''@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


'''

ROW_KERNEL = '''@triton.jit
def row_kernel(x_ptr, out_ptr, n_cols, stride, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
    tl.store(out_ptr + row * stride + cols, x / tl.sum(x, axis=0), mask=cols < n_cols)


'''

TWO_KERNELS = ELEMENTWISE_KERNEL + ELEMENTWISE_KERNEL.replace("copy_kernel", "copy2_kernel")


def wrapper(body: str) -> str:
    lines = "\n".join("        " + line for line in body.strip().splitlines())
    return f"class ModelNew:\n    def forward(self, x):\n{lines}\n"


FIX = [
    pytest.param(
        h.source("vec_add.py"),
        [
            '@triton.autotune(\n    configs=[\n        triton.Config({"BLOCK_SIZE": 1024}, num_warps=4),',
            'triton.Config({"BLOCK_SIZE": 8192}, num_warps=8),\n    ],\n    key=["n_elements"],\n)\n@triton.jit',
            'grid = lambda meta: (triton.cdiv(n_elements, meta["BLOCK_SIZE"]),)',
            "add_kernel[grid](x, y, out, n_elements)\n",
        ],
        ["BLOCK_SIZE = 1024", "BLOCK_SIZE=BLOCK_SIZE"],
        id="elementwise-local-block-and-num-warps",
    ),
    pytest.param(
        h.source("matmul.py"),
        [
            'triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64}, num_warps=8, num_stages=3)',
            'key=["M", "N", "K"]',
            'grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]), triton.cdiv(N, meta["BLOCK_N"]))',
            "c.stride(0), c.stride(1),\n        )",
        ],
        ["BLOCK_M=64"],
        id="gemm-equal-literals-told-apart-by-grid-axis",
    ),
    pytest.param(
        HEADER + ROW_KERNEL + wrapper('''
n_rows, n_cols = x.shape
out = torch.empty_like(x)
BLOCK_SIZE = triton.next_power_of_2(n_cols)
row_kernel[(n_rows,)](x, out, n_cols, x.stride(0), BLOCK_SIZE=BLOCK_SIZE, num_warps=4)
return out
'''),
        # the grid's row count is no argument of the kernel: it becomes one, read by the key only
        ["triton.Config({}, num_warps=16)", 'key=["n_cols", "n_rows"]',
         "def row_kernel(x_ptr, out_ptr, n_cols, stride, n_rows, BLOCK_SIZE: tl.constexpr):",
         "row_kernel[(n_rows,)](x, out, n_cols, x.stride(0), BLOCK_SIZE=BLOCK_SIZE, n_rows=n_rows)\n"],
        ["num_warps=4)\n        return"],
        id="row-block-from-next-power-of-2-tunes-warps-only",
    ),
    pytest.param(
        HEADER + ROW_KERNEL + wrapper('''
out = torch.empty_like(x)
row_kernel[(x.shape[0],)](
    x, out, x.shape[1], x.stride(0),
    BLOCK_SIZE=triton.next_power_of_2(x.shape[1]),
)
return out
'''),
        # an expression, not a name: the argument is named after the grid axis, on its own line
        ['key=["n_cols", "grid_size_0"]',
         "def row_kernel(x_ptr, out_ptr, n_cols, stride, grid_size_0, BLOCK_SIZE: tl.constexpr):",
         "BLOCK_SIZE=triton.next_power_of_2(x.shape[1]),\n            grid_size_0=x.shape[0],\n        )"],
        [],
        id="grid-size-expression-becomes-a-key-argument",
    ),
    pytest.param(
        h.source("matmul.py"),
        ['key=["M", "N", "K"]'],
        ["grid_size", "M=M"],  # both grid axes are cdiv(M | N, block): the key already sees them
        id="grid-sizes-already-in-the-key-add-nothing",
    ),
    pytest.param(
        HEADER + TWO_KERNELS + wrapper('''
n = x.numel()
BLOCK = 1024
grid = (triton.cdiv(n, BLOCK),)
tmp = torch.empty_like(x)
copy_kernel[grid](x, tmp, n, BLOCK_SIZE=BLOCK)
out = torch.empty_like(x)
copy2_kernel[grid](tmp, out, n, BLOCK_SIZE=BLOCK)
return out
'''),
        [
            'copy_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)](x, tmp, n)',
            'copy2_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)](tmp, out, n)',
        ],
        ["BLOCK = 1024", "grid = ("],
        id="grid-shared-by-two-launches-gets-a-lambda-per-launch",
    ),
    pytest.param(
        HEADER + ELEMENTWISE_KERNEL + wrapper('''
n = x.numel()
out = torch.empty_like(x)
copy_kernel[(triton.cdiv(n, 1024),)](
    x, out, n,
    BLOCK_SIZE=1024,
)
return out
'''),
        ['copy_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)](\n            x, out, n,\n        )'],
        ["1024,\n"],
        id="inline-grid-literal-multi-line-call",
    ),
]

FLAGGED_KERNEL = ELEMENTWISE_KERNEL.replace(
    "n, BLOCK_SIZE: tl.constexpr):", "n, BLOCK_SIZE: tl.constexpr, SCALE: tl.constexpr):"
).replace("tl.load(x_ptr + offs, mask=offs < n)", "tl.load(x_ptr + offs, mask=offs < n) * SCALE")

FIX.append(
    pytest.param(
        HEADER + FLAGGED_KERNEL + wrapper('''
n = x.numel()
out = torch.empty_like(x)
copy_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK_SIZE=1024, SCALE=2)
return out
'''),
        ['copy_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)](x, out, n, SCALE=2)'],
        ['"SCALE"'],
        id="constexpr-that-is-not-a-block-keeps-its-value",
    )
)

NOOP = [
    pytest.param(
        HEADER + "@triton.autotune(configs=[triton.Config({'BLOCK_SIZE': 1024})], key=['n'])\n"
        + ELEMENTWISE_KERNEL + wrapper('''
out = torch.empty_like(x)
copy_kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK_SIZE"]),)](x, out, x.numel())
return out
'''),
        id="already-autotuned",
    ),
    pytest.param(h.source("mean_atomic.py"), id="atomics-would-accumulate-while-benchmarking"),
    pytest.param(
        HEADER + ELEMENTWISE_KERNEL.replace("out_ptr + offs", "x_ptr + offs", 1) + wrapper('''
n = x.numel()
copy_kernel[(triton.cdiv(n, 1024),)](x, x, n, BLOCK_SIZE=1024)
return x
'''),
        id="in-place-kernel",
    ),
    pytest.param(
        HEADER + ELEMENTWISE_KERNEL + wrapper('''
n = x.numel()
BLOCK = 1024
n_blocks = triton.cdiv(n, BLOCK)
partials = torch.empty(n_blocks)
copy_kernel[(n_blocks,)](x, partials, n, BLOCK_SIZE=BLOCK)
return partials
'''),
        id="block-also-sizes-a-buffer",
    ),
    pytest.param(
        HEADER + ELEMENTWISE_KERNEL + wrapper('''
n = x.numel()
out = torch.empty_like(x)
copy_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK_SIZE=1024)
copy_kernel[(triton.cdiv(n, 1024),)](out, out, n, BLOCK_SIZE=1024)
return out
'''),
        id="two-launch-sites",
    ),
    pytest.param(
        HEADER + ELEMENTWISE_KERNEL + wrapper('''
n = x.numel()
out = torch.empty_like(x)
copy_kernel[make_grid(n)](x, out, n, BLOCK_SIZE=1024)
return out
'''),
        id="grid-from-a-helper",
    ),
    pytest.param(
        HEADER + ELEMENTWISE_KERNEL + wrapper('''
n = x.numel()
out = torch.empty_like(x)
copy_kernel[(triton.cdiv(n, 1024),)](x, out, n, 1024)
return out
'''),
        id="block-passed-positionally",
    ),
    pytest.param(
        HEADER + ELEMENTWISE_KERNEL + wrapper('''
n = x.numel()
out = torch.empty_like(x)
copy_kernel[(n // 1000,)](x, out, n, BLOCK_SIZE=1024)
return out
'''),
        id="grid-does-not-follow-the-block",
    ),
    pytest.param(
        HEADER + ROW_KERNEL + wrapper('''
n_rows, n_cols = x.shape
out = torch.empty_like(x)
row_kernel[(n_rows,)](x, out, n_cols, x.stride(0), BLOCK_SIZE=triton.next_power_of_2(n_cols))
n_rows = 0
return out
'''),
        id="grid-size-rebound-after-the-launch",
    ),
]


@pytest.mark.parametrize(("before", "present", "absent"), FIX)
def test_it_adds_an_autotune_space(before: str, present: list[str], absent: list[str]) -> None:
    rw = apply_family(Family.LAUNCH_CONFIG, before, h.rule_input())
    assert rw is not None
    assert h.parses(rw.source)
    for text in present:
        assert text in rw.source
    for text in absent:
        assert text not in rw.source


@pytest.mark.parametrize("before", NOOP)
def test_it_leaves_unsafe_launches_alone(before: str) -> None:
    assert apply_family(Family.LAUNCH_CONFIG, before, h.rule_input()) is None


def test_it_prunes_gemm_tiles_larger_than_every_case() -> None:
    small = tuple(CaseShape(i, ((m, 64), (64, 64)), ("float16", "float16")) for i, m in enumerate((64, 50)))
    rw = apply_family(Family.LAUNCH_CONFIG, h.source("matmul.py"), h.rule_input(small))
    assert rw is not None
    assert '"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64' in rw.source
    assert '"BLOCK_M": 128' not in rw.source


def test_it_takes_the_fp32_tile_set_for_fp32_operands() -> None:
    cases = (CaseShape(0, ((512, 512), (512, 512)), ("float32", "float32")),)
    rw = apply_family(Family.LAUNCH_CONFIG, h.source("matmul.py"), h.rule_input(cases))
    assert rw is not None
    assert '"BLOCK_K": 64' not in rw.source


def test_it_only_touches_the_kernels_the_findings_name() -> None:
    before = HEADER + TWO_KERNELS + wrapper('''
n = x.numel()
tmp = torch.empty_like(x)
copy_kernel[(triton.cdiv(n, 1024),)](x, tmp, n, BLOCK_SIZE=1024)
copy2_kernel[(triton.cdiv(n, 1024),)](tmp, x, n, BLOCK_SIZE=1024)
return x
''')
    rw = apply_family(Family.LAUNCH_CONFIG, before, h.rule_input(kernels=frozenset({"copy2_kernel"})))
    assert rw is not None and rw.kernels == ("copy2_kernel",)
    assert rw.source.count("@triton.autotune") == 1
    assert "copy_kernel[(triton.cdiv(n, 1024),)](x, tmp, n, BLOCK_SIZE=1024)" in rw.source


def test_rewritten_modules_are_correct_for_every_config(tmp_path: Path) -> None:
    paths = []
    for name in ("vec_add.py", "matmul.py", "softmax_loops.py"):
        rw = apply_family(Family.LAUNCH_CONFIG, h.source(name), h.rule_input())
        assert rw is not None
        path = tmp_path / name
        path.write_text(rw.source)
        paths.append(path)
    results = h.interp_check(paths)
    for path in paths:
        r = results[str(path)]
        assert r["ok"], r["message"]
        assert r["configs"] >= 6


def test_the_parents_own_config_stays_in_the_space() -> None:
    """The autotuner may then never pick something slower than the parent on any shape."""
    path = Path(__file__).resolve().parents[2] / "bench/suite/01_gemm_fp16.py"
    rw = apply_family(Family.LAUNCH_CONFIG, path.read_text(), h.rule_input(h.cases_of(path)))
    assert rw is not None
    assert '"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}, num_warps=4)' in rw.source
    assert '"BLOCK_M": 128, "BLOCK_N": 256' in rw.source


def test_the_parents_warps_from_a_module_constant_stay_in_the_space() -> None:
    before = "NUM_WARPS = 2\n" + h.source("vec_add.py").replace("num_warps=4", "num_warps=NUM_WARPS")
    rw = apply_family(Family.LAUNCH_CONFIG, before, h.rule_input())
    assert rw is not None
    assert 'triton.Config({"BLOCK_SIZE": 1024}, num_warps=2),' in rw.source
