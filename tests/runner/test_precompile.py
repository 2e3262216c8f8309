"""An autotuner's configs compiled side by side in forks before it benchmarks them
(runner/childlib/precompile.py), with real compiles for sm_90 on the CPU.

`JITFunction.run` asks the GPU driver for the device, its stream and its target; here a stand-in
driver answers those three (device 0, stream 0, sm_90), and nothing else of the driver is used:
with `warmup=True` the JIT binds, specializes and compiles but launches nothing. The end-to-end
test of a verify job on a device is in tests/gpu/test_compile_bound_gpu.py.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.runtime import jit as triton_jit
from triton.runtime.autotuner import Autotuner
from triton.runtime.jit import JITFunction

from runner.childlib import compile_bound, launches
from runner.childlib.compile_bound import CompileTimeout, bounded_compiles, run_forks
from runner.childlib.precompile import compile_side_by_side, pending_compiles, precompile
from tests.runner.test_compile_bound import row_sum

TARGET = GPUTarget("cuda", 90, 32)
CONFIGS = [triton.Config({"BLOCK": b}, num_warps=w) for b in (256, 1024) for w in (2, 4)]


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    from triton import knobs

    monkeypatch.setattr(knobs.cache, "dir", str(tmp_path / "cache"))
    active = SimpleNamespace(get_current_device=lambda: 0, get_current_stream=lambda device=None: 0,
                             get_current_target=lambda: TARGET)  # fmt: skip
    monkeypatch.setattr(triton_jit, "driver", SimpleNamespace(active=active))
    row_sum.device_caches.clear()  # the binder and the kernel cache of the stand-in target
    yield tmp_path / "cache"
    row_sum.device_caches.clear()


def tuner(configs: list[triton.Config] = CONFIGS) -> Autotuner:
    t = Autotuner(row_sum, row_sum.arg_names, configs, ["n"], None, None)
    t.nargs = dict(zip(row_sum.arg_names, ARGS, strict=False))
    return t


ARGS = (torch.zeros(1024), torch.zeros(1), 1000)
LAUNCH = {"grid": (1,), "warmup": False}


def cubins(cache: Path) -> dict[Path, int]:
    return {p: p.stat().st_mtime_ns for p in cache.rglob("*.cubin")}


def test_each_config_is_one_pending_compile_and_nothing_is_compiled_in_this_process(cache: Path) -> None:
    pending = pending_compiles(tuner(), ARGS, LAUNCH, CONFIGS)
    assert [(p.constexprs[(3,)], p.options.num_warps) for p in pending] == [
        (256, 2),
        (256, 4),
        (1024, 2),
        (1024, 4),
    ]
    assert cubins(cache) == {} and not any(c[0] for c in row_sum.device_caches.values())
    assert JITFunction._do_compile is inspect.unwrap(JITFunction._do_compile)  # the JIT's own again


def test_the_forks_fill_the_cache_and_the_autotuners_compiles_are_cache_hits(cache: Path) -> None:
    t = tuner()
    assert precompile(t, ARGS, LAUNCH, CONFIGS) == 4
    written = cubins(cache)
    assert len(written) == 4  # one kernel per config, compiled by the forks
    for config in CONFIGS:  # what the autotuner's benchmarking compiles, in this process
        kernel = row_sum.run(*ARGS, **{**LAUNCH, "warmup": True}, **config.all_kwargs())
        assert kernel.metadata.num_warps == config.num_warps
    assert cubins(cache) == written  # nothing compiled again
    assert pending_compiles(t, ARGS, LAUNCH, CONFIGS) == []  # all in the JIT's own cache now


def test_a_config_already_compiled_is_not_compiled_again(cache: Path) -> None:
    row_sum.run(*ARGS, **{**LAUNCH, "warmup": True}, **CONFIGS[0].all_kwargs())
    assert len(pending_compiles(tuner(), ARGS, LAUNCH, CONFIGS)) == 3
    # one compile left is the autotuner's own business
    assert precompile(tuner(), ARGS, LAUNCH, CONFIGS[:2]) == 0


def test_a_config_that_cannot_bind_is_left_for_the_autotuner(cache: Path) -> None:
    bad = triton.Config({"BLOCK": 256, "NOT_A_PARAMETER": 1}, num_warps=4)
    pending = pending_compiles(tuner(), ARGS, LAUNCH, [bad, *CONFIGS[:2]])
    assert len(pending) == 2


def test_under_the_bound_a_fork_past_it_drops_its_config_and_the_rest_are_not_forked_again(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    configs = [triton.Config({"BLOCK": 1 << 20}, num_warps=4), *CONFIGS[:2]]  # 2^20: minutes to compile
    with bounded_compiles(3.0, [row_sum.fn.__code__.co_filename]) as bound:
        started = time.monotonic()
        finished = compile_side_by_side(pending_compiles(tuner(configs), ARGS, LAUNCH, configs))
        assert finished == [False, True, True]
        assert time.monotonic() - started < 10.0
        assert bound.dropped == [{"kernel": "row_sum", "config": "BLOCK=1048576, num_warps=4, num_stages=3",
                                  "limit_s": 3.0}]  # fmt: skip
        assert len(bound.warm) == 2
        monkeypatch.setattr(compile_bound, "run_bounded", None)  # a second fork would fail here
        with pytest.raises(CompileTimeout):  # the autotuner's compile of it: stopped at once
            row_sum.run(*ARGS, **{**LAUNCH, "warmup": True}, **configs[0].all_kwargs())
        for config in configs[1:]:  # the others: cache hits, no second fork
            assert row_sum.run(*ARGS, **{**LAUNCH, "warmup": True}, **config.all_kwargs()) is not None


def test_forks_run_side_by_side_each_under_its_own_limit(tmp_path: Path) -> None:
    def sleeper(seconds: float, name: str):
        def run() -> None:
            time.sleep(seconds)
            (tmp_path / name).write_text("done")

        return run

    started = time.monotonic()
    finished = run_forks([sleeper(1.0, "a"), sleeper(1.0, "b"), sleeper(30.0, "c"), sleeper(1.0, "d")],
                         [None, 5.0, 2.0, None], workers=4)  # fmt: skip
    took = time.monotonic() - started
    assert finished == [True, True, False, True]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "d"]
    assert took < 3.5, took  # one after the other: more than 3 s before the hang's 2 s


def test_the_autotuner_times_each_config_briefly_unless_the_kernel_chose_its_benchmark() -> None:
    seen = {}

    def run(t: Autotuner, *args: object, **kwargs: object) -> None:
        seen["do_bench"] = t.do_bench

    recorder = SimpleNamespace(paused=0)
    plain = Autotuner(row_sum, row_sum.arg_names, CONFIGS, ["n"], None, None)
    launches._run_unrecorded_benchmarks(plain, run, recorder, ARGS, LAUNCH)
    assert seen["do_bench"] is launches.AUTOTUNE_BENCH
    assert "do_bench" not in plain.__dict__  # Triton's own again after the run
    own = lambda fn, quantiles: [1.0, 1.0, 1.0]  # noqa: E731
    chosen = Autotuner(row_sum, row_sum.arg_names, CONFIGS, ["n"], None, None, do_bench=own)
    launches._run_unrecorded_benchmarks(chosen, run, recorder, ARGS, LAUNCH)
    assert seen["do_bench"] is own


@pytest.mark.parametrize("benchmarks", [True, False], ids=["benchmarked", "timings-from-the-disk-cache"])
def test_the_configs_are_compiled_once_before_the_first_benchmark_and_only_then(
    benchmarks: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Autotuner.run prunes, then benchmarks unless its timings come from the disk cache
    (`cache_results`): the side-by-side compiles wait for the first benchmark."""
    events: list[object] = []
    monkeypatch.setattr(
        launches, "precompile", lambda t, a, kw, configs: events.append(("precompile", len(configs)))
    )
    t = Autotuner(
        row_sum, row_sum.arg_names, CONFIGS, ["n"], None, None, do_bench=lambda fn, quantiles: [1.0] * 3
    )
    monkeypatch.setattr(
        t, "_bench", lambda *a, config, **kw: events.append(("bench", config.kwargs["BLOCK"]))
    )

    def run(tuner: Autotuner, *args: object, **kwargs: object) -> None:  # Autotuner.run's order
        configs = tuner.prune_configs(kwargs)
        if benchmarks:
            for config in configs:
                tuner._bench(*args, config=config, **kwargs)

    launches._run_unrecorded_benchmarks(t, run, SimpleNamespace(paused=0), ARGS, LAUNCH)
    expected = [("precompile", 4), ("bench", 256), ("bench", 256), ("bench", 1024), ("bench", 1024)]
    assert events == (expected if benchmarks else [])
