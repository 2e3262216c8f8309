"""The per-compile bound of verify jobs (runner/childlib/compile_bound.py), with real compiles.

The launch path (`JITFunction._do_compile`) needs a GPU driver, so its end-to-end test is in
tests/gpu/test_compile_bound_gpu.py; here the fork that carries the bound compiles ahead of
time for sm_90 on the CPU, as tier 2 does, and Triton's own autotuner is shown dropping a
config that raises the bound's exception.
"""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.runtime.autotuner import Autotuner
from triton.runtime.jit import JITFunction

from runner.childlib.compile_bound import (
    CompileTimeout,
    bounded_compiles,
    describe_config,
    run_bounded,
)
from runner.errors import KINDS, classify_exception

TARGET = GPUTarget("cuda", 90, 32)


@triton.jit
def row_sum(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr, tl.sum(x, axis=0))


@triton.jit
def broken(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, n)  # a runtime bound: Triton refuses to compile it
    tl.store(x_ptr + offs, offs)


def source(fn: JITFunction, block: int) -> ASTSource:
    sig = {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
    if fn is broken:
        sig = {"x_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
    return ASTSource(fn, sig, constexprs={"BLOCK": block})


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    from triton import knobs

    monkeypatch.setattr(knobs.cache, "dir", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.mark.slow
def test_a_compile_past_the_bound_is_killed_mid_stage(cache: Path) -> None:
    """A 2^20-element block: on this CPU its `llir` stage alone ran 232 s in one C++ call, which
    no timer in the compiling process can interrupt; the fork is killed at the bound."""
    t0 = time.monotonic()
    finished = run_bounded(lambda: triton.compile(source(row_sum, 1 << 20), target=TARGET), limit_s=3.0)
    took = time.monotonic() - t0
    assert finished is False
    assert 3.0 <= took < 10.0, took


def test_a_compile_within_the_bound_leaves_its_result_in_the_cache(cache: Path) -> None:
    src = source(row_sum, 1024)
    assert run_bounded(lambda: triton.compile(src, target=TARGET), limit_s=120.0) is True
    written = sorted(p.suffix for p in cache.rglob("*") if p.is_file())
    assert ".cubin" in written and ".ptx" in written  # the fork's compile, kept for this process
    before = {p: p.stat().st_mtime_ns for p in cache.rglob("*.cubin")}
    kernel = triton.compile(src, target=TARGET)  # a cache hit: nothing is written again
    assert kernel.asm["cubin"] and {p: p.stat().st_mtime_ns for p in cache.rglob("*.cubin")} == before


def test_a_compile_error_in_the_fork_is_left_for_the_process_to_raise(cache: Path) -> None:
    src = source(broken, 1024)
    assert run_bounded(lambda: triton.compile(src, target=TARGET), limit_s=120.0) is True
    with pytest.raises(triton.CompilationError):
        triton.compile(src, target=TARGET)


def test_the_autotuner_drops_a_config_whose_compile_was_stopped() -> None:
    """Triton's Autotuner._bench turns an OutOfResources into an infinite time; the bound's
    exception is one, so the config loses the choice instead of failing the job."""

    def kernel_py(x_ptr, BLOCK):  # what the autotuner walks down to for its name
        pass

    class Stopped:
        def __init__(self) -> None:
            self.fn = kernel_py

        def run(self, *args, **kwargs):
            raise CompileTimeout("k", "BLOCK=1048576, num_warps=4", 60.0)

    config = triton.Config({"BLOCK": 1 << 20}, num_warps=4)
    tuner = Autotuner(Stopped(), ["x_ptr", "BLOCK"], [config], [], None, None,
                      do_bench=lambda fn, quantiles: (fn(), [1.0] * 3)[1])  # fmt: skip
    tuner.nargs = {"x_ptr": None}
    assert tuner._bench(None, config=config) == [float("inf")] * 3


def test_a_stopped_compile_is_its_own_error_kind_with_the_kernel_and_config() -> None:
    exc = CompileTimeout("row_sum", "BLOCK=1048576, num_warps=4, num_stages=3", 60.0)
    assert classify_exception(exc) == "compile_timeout" and "compile_timeout" in KINDS
    assert "row_sum (BLOCK=1048576, num_warps=4, num_stages=3) ran past 60 s" in str(exc)


def test_a_config_is_described_by_its_constexprs_and_launch_options() -> None:
    options = SimpleNamespace(num_warps=8, num_stages=2)
    assert describe_config(row_sum, {(3,): 4096}, options) == "BLOCK=4096, num_warps=8, num_stages=2"


@pytest.mark.parametrize(
    ("limit_s", "files", "patched"),
    [
        pytest.param(60.0, ["cand.py"], True, id="bound-and-candidate"),
        pytest.param(None, ["cand.py"], False, id="no-bound"),
        pytest.param(60.0, [], False, id="no-candidate-file"),
    ],
)
def test_the_launch_path_is_patched_only_while_a_bound_applies(
    limit_s: float | None, files: list[str], patched: bool
) -> None:
    original = JITFunction._do_compile
    with bounded_compiles(limit_s, files) as bound:
        assert (JITFunction._do_compile is not original) is patched
        assert bound.dropped == []
    assert JITFunction._do_compile is original
    # the bound covers the candidate's kernels only (the parent's came from the shared cache)
    assert bound.applies(row_sum) is False
