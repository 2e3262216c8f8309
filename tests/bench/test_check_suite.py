"""bench/check_suite.py --compat: what the Triton 3.6 interpreter does differently from the compiler.

Each case is a small module written the way other projects write kernels; under the plain
interpreter it fails (or is wrong), with --compat it is correct. The suite's own modules are
checked without --compat in tests/test_bench_suite.py.
"""

from __future__ import annotations

import concurrent.futures
import importlib.util
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str):
    """bench/<name>.py as a module of its own (bench/ is not a package)."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}_compat", ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


check_suite = _load("check_suite")
check_pool = _load("check_pool")

HARNESS = """
class Model(nn.Module):
    def forward(self, x):
        return REF


class ModelNew(nn.Module):
    def forward(self, x):
        return launch(x)


def get_init_inputs():
    return []


def get_inputs():
    return [torch.randn(4096, 512)]


def get_input_cases():
    return [[torch.randn(4096, 512)] for _ in range(5)]


def get_verify_inputs():
    return [[torch.randn(7, 100)], [torch.randn(3, 33)]]
"""

PRELUDE = "import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n"

CASES = [
    pytest.param(
        """
        @triton.jit
        def k(x_ptr, y_ptr, n, eps, BLOCK: tl.constexpr):
            row = tl.program_id(0)
            cols = tl.arange(0, BLOCK)
            x = tl.load(x_ptr + row * n + cols, mask=cols < n, other=0.0)
            eps = eps.to(tl.float32)
            tl.store(y_ptr + row * n + cols, x / (tl.sum(x * x, 0) / n + eps), mask=cols < n)


        def launch(x):
            y = torch.empty_like(x)
            k[(x.shape[0],)](x, y, x.shape[1], 1e-6, BLOCK=triton.next_power_of_2(x.shape[1]))
            return y
        """,
        "x / (x.pow(2).mean(-1, keepdim=True) + 1e-6)",
        "no attribute 'to'",
        id="float-scalar-to",
    ),
    pytest.param(
        """
        from triton.language.extra.libdevice import rsqrt


        @triton.jit
        def k(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
            row = tl.program_id(0)
            cols = tl.arange(0, BLOCK)
            x = tl.load(x_ptr + row * n + cols, mask=cols < n, other=1.0)
            tl.store(y_ptr + row * n + cols, rsqrt(x * x + 1.0), mask=cols < n)


        def launch(x):
            y = torch.empty_like(x)
            k[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
            return y
        """,
        "torch.rsqrt(x * x + 1.0)",
        "NoneType",
        id="libdevice",
    ),
    pytest.param(
        """
        @triton.jit
        def k(x_ptr, y_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
            rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
            cols = tl.arange(0, BLOCK_N)
            mask = rows[:, None] < M and cols[None, :] < N
            offs = rows[:, None] * N + cols[None, :]
            tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)


        def launch(x):
            y = torch.zeros(x.shape[0] + 64, x.shape[1])  # rows past M would land here
            k[(triton.cdiv(x.shape[0], 64),)](x, y, x.shape[0], x.shape[1], BLOCK_M=64, BLOCK_N=128)
            return y[: x.shape[0]], y[x.shape[0] :]
        """,
        "x * 2, torch.zeros(64, x.shape[1])",
        "",
        id="and-between-masks",
    ),
    pytest.param(
        """
        @triton.jit
        def k(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
            keep = not (x < 0.0)
            tl.store(y_ptr + offs, tl.where(keep, x, 0.0), mask=offs < n)


        def launch(x):
            y = torch.empty_like(x)
            k[(triton.cdiv(x.numel(), 128),)](x, y, x.numel(), BLOCK=128)
            return y
        """,
        "torch.relu(x)",
        "",
        id="not-of-a-mask",
    ),
    pytest.param(
        """
        @triton.autotune(configs=[triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})], key=["n"])
        @triton.jit
        def k(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)


        def launch(x):
            y = torch.empty_like(x)
            k[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, y, x.numel())
            return y
        """,
        "x + 1",
        "active drivers",
        id="autotune",
    ),
    pytest.param(
        """
        @triton.jit
        def lowest(dtype):
            if dtype.value.is_floating():
                return float("-inf")
            return 0


        @triton.jit
        def k(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
            row = tl.program_id(0)
            cols = tl.arange(0, BLOCK)
            x = tl.load(x_ptr + row * n + cols, mask=cols < n, other=lowest(x_ptr.dtype.element_ty))
            tl.store(y_ptr + row, tl.max(x, 0))


        def launch(x):
            y = torch.empty(x.shape[0])
            k[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
            return y
        """,
        "x.max(dim=1).values",
        "value",
        id="dtype-to-jit-helper",
    ),
]


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[dict, dict]]:
    """Every case checked by the plain and by the --compat interpreter: one check_pool child
    each, taking the cases one after another (one torch import per mode, not per case)."""
    folder = tmp_path_factory.mktemp("compat")
    paths = {}
    for case in CASES:
        kernel, ref, _ = case.values
        path = folder / f"m_{case.id.replace('-', '_')}.py"
        path.write_text(PRELUDE + textwrap.dedent(kernel) + HARNESS.replace("REF", ref))
        paths[case.id] = str(path.resolve())
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        plain = pool.submit(check_pool.check_modules, list(paths.values()), 1, 300)
        compat = pool.submit(check_pool.check_modules, list(paths.values()), 1, 300, compat=True)
        plain, compat = plain.result(), compat.result()
    return {case: (plain[path], compat[path]) for case, path in paths.items()}


@pytest.mark.parametrize(("kernel", "ref", "plain_error"), CASES)
def test_compat_runs_what_the_plain_interpreter_cannot(
    kernel: str,
    ref: str,
    plain_error: str,
    checked: dict[str, tuple[dict, dict]],
    request: pytest.FixtureRequest,
) -> None:
    plain, compat = checked[request.node.callspec.id]
    assert not plain["ok"]
    assert plain_error in plain["message"]
    assert compat["ok"], compat["message"]
    assert compat["cases"] == 2


def test_a_compat_check_in_its_own_child_agrees_with_the_pool(tmp_path: Path) -> None:
    # check_module (a fresh child per module), the way bench/check_suite.py --compat runs
    kernel, ref, plain_error = CASES[0].values
    path = tmp_path / "m.py"
    path.write_text(PRELUDE + textwrap.dedent(kernel) + HARNESS.replace("REF", ref))
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        plain = pool.submit(check_suite.check_module, path, 300, meta_cases=True)
        compat = pool.submit(check_suite.check_module, path, 300, compat=True, meta_cases=True)
        plain, compat = plain.result(), compat.result()
    assert not plain["ok"] and plain_error in plain["message"]
    assert compat["ok"] and compat["cases"] == 2, compat["message"]


def test_the_h200_properties_appear_only_without_cuda(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text(
        PRELUDE
        + textwrap.dedent(
            """
            @triton.jit
            def k(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
                offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
                tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


            def launch(x):
                sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
                y = torch.empty_like(x)
                block = triton.next_power_of_2(triton.cdiv(x.numel(), sms))
                k[(triton.cdiv(x.numel(), block),)](x, y, x.numel(), BLOCK=block)
                return y
            """
        )
        + HARNESS.replace("REF", "x.clone()")
    )
    result = check_suite.check_module(path, 300, compat=True, meta_cases=True)
    assert result["ok"], result["message"]


MEMO_PROBE = '''
import sys
import numpy as np
import torch
import triton
import triton.language as tl
from triton.runtime import interpreter

sys.path.insert(0, {bench!r})
import check_suite

check_suite._patch_interpreter()


@triton.jit
def _square(x):
    return x * x


@triton.jit
def kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + cols, mask=cols < n, other=0.0)
    total = tl.sum(tl.where(cols < n, tl.math.exp(_square(x)), 0.0), axis=0)
    tl.store(out_ptr + cols, x.to(tl.float32) * 0 + total, mask=cols < n)


x = torch.linspace(-1, 1, 5)
want = float(torch.exp(x * x).sum())
for block in (8, 16):  # two launches: the second patches from the names found by the first
    out = torch.empty_like(x)
    kernel[(1,)](x, out, 5, BLOCK=block)
    print(bool(np.allclose(out.numpy(), want, rtol=1e-5)))
restored = all(tl.core.is_builtin(f) for f in (tl.arange, tl.load, tl.where, tl.math.exp, tl.tensor.to))
print(restored, interpreter._patch_builtin.memoized)
'''


def test_the_interpreter_finds_each_modules_builtins_once_and_restores_them(tmp_path: Path) -> None:
    """`_memoize_builtin_names`: launches after the first patch the builtins of tl, tl.math, the
    tensor class and a device function's calls from the names found once, and every launch
    still puts the modules' own members back when it ends."""
    import subprocess
    import sys

    probe = tmp_path / "probe.py"
    probe.write_text(MEMO_PROBE.format(bench=str(ROOT / "bench")))
    env = {"PATH": "/usr/bin:/bin", "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(probe)], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "True", "True", "True"]
