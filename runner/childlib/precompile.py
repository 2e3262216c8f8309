"""Compile an autotuner's configs side by side before it benchmarks them.

Runs inside the sandbox child (standard library and triton), on a device only: the interpreter
compiles nothing.

Why: `@triton.autotune` compiles each config the first time it benchmarks it, one after the
other, in the job's one process. fla's activation kernels carry 30 configs (`B` of 512-8192
times 1-32 warps) and their key names the row width `D`, a constexpr: every case of another
width compiles all 30 again. On a CPU here the 30 compiles of `logsigmoid_fwd_kernel` for sm_90
take 12.4 s, 4.7 s of it the one config of 8192 elements on one warp; its released version's
verify jobs spent 124 s each running the candidate on the H200 (phase `candidate` in
bench/wild/results/released). A device node has many cores, and this process, idle while it
compiles, has no use for them. With the compiles side by side (and the shorter benchmark of
runner.childlib.launches.AUTOTUNE_BENCH) one verify of that kernel on an H100 ran the candidate
for 91.6 s against 218.9 s before, and of fla's global cumsum (48 configs) 23.7 s against 72.4 s
(docs/HARDWARE.md).

So when the autotuner is about to benchmark configs, each config's launch is first bound the
way `JITFunction.run` binds it, with `warmup=True` and the JIT's compile step replaced by one
that only records what it would compile; then each recorded compile runs in a forked copy of
this process (compile_bound.run_forks), several at a time, and fills the Triton cache. The
autotuner then benchmarks as before, and each of its compiles is a cache hit. What a fork runs
is the JIT's own compile of one specialization and nothing else (no launch, no CUDA call; the
compile bound forks the same way, tests/gpu/test_compile_bound_gpu.py).

Nothing about the choice changes: the same configs, benchmarked in the same order, by the same
code. A config whose fork failed is compiled again by the autotuner, which meets the error as
it would have. Under the compile bound (compile_bound.py) a fork of a candidate's kernel is
bounded like its own compile: one that runs past the bound is killed, and its config is dropped
as the bound would have dropped it, without a second try; one that finished is not forked again.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from triton.runtime.jit import JITFunction

from runner.childlib.compile_bound import active_bound, run_forks

# forks compiling at once: each holds a compile's memory (hundreds of MB for a large block)
# beside the job's own, under the job's memory cap
MOST_FORKS = 8


@dataclass(frozen=True)
class Pending:
    """One compile the JIT would make: its function and `_do_compile`'s arguments."""

    jit: Any
    args: tuple  # (key, signature, device, constexprs, options, attrs, warmup)

    @property
    def constexprs(self) -> dict:
        return self.args[3]

    @property
    def options(self) -> Any:
        return self.args[4]


def workers() -> int:
    """The forks to run at once: the CPUs this process may use, at most MOST_FORKS."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, MOST_FORKS))


def pending_compiles(tuner: Any, args: Sequence[Any], kwargs: dict, configs: Sequence[Any]) -> list[Pending]:
    """What benchmarking `configs` would compile: each config's launch bound by the JIT with
    `warmup=True`, its compile step recording instead of compiling. A config already compiled
    records nothing; one whose binding raises is left for the autotuner (it raises there)."""
    found: dict[tuple[int, str], Pending] = {}
    installed = JITFunction.__dict__.get("_do_compile")
    if installed is None or not hasattr(os, "fork"):  # triton-ascend 3.2 compiles in `run`
        return []

    def record(jit: Any, *call: Any) -> None:
        found.setdefault((id(jit), str(call[0])), Pending(jit, call))
        return None  # JITFunction.run returns at once when the compile step gives None

    nargs = dict(getattr(tuner, "nargs", None) or {})
    JITFunction._do_compile = record
    try:
        for config in configs:
            current = {**kwargs, **config.all_kwargs(), "warmup": True}
            try:
                if config.pre_hook is not None:  # e.g. a TMA descriptor's block shape: part of the key
                    config.pre_hook({**nargs, **current})
                tuner.fn.run(*args, **current)
            except Exception:  # noqa: BLE001 - the autotuner meets it again, where it belongs
                continue
    finally:
        JITFunction._do_compile = installed
    return list(found.values())


def compile_side_by_side(pending: Sequence[Pending], most: int | None = None) -> list[bool]:
    """Run each pending compile in a fork (at most `most` at once, default `workers()`), with
    the compile bound's limit where it applies; True where it finished, as `run_forks`."""
    compile_fn = inspect.unwrap(JITFunction._do_compile)  # the JIT's own, not the bound's fork
    bound = active_bound()
    limits = [bound.limit_s if bound is not None and bound.applies(p.jit) else None for p in pending]
    finished = run_forks([_call(compile_fn, p) for p in pending], limits, most or workers())
    for p, limit, done in zip(pending, limits, finished, strict=True):
        if bound is not None and limit is not None:
            token, config = bound.token(p.jit, p.constexprs, p.options)
            if done:
                bound.warm.add(token)
            else:
                bound.stop(p.jit.fn.__name__, config, token)
    return finished


def _call(compile_fn: Callable[..., Any], p: Pending) -> Callable[[], Any]:
    return lambda: compile_fn(p.jit, *p.args)


def precompile(tuner: Any, args: Sequence[Any], kwargs: dict, configs: Sequence[Any]) -> int:
    """Compile what benchmarking `configs` needs, side by side, when that is two compiles or
    more; the number of compiles run."""
    pending = pending_compiles(tuner, args, kwargs, configs)
    if len(pending) < 2:
        return 0
    compile_side_by_side(pending)
    return len(pending)


__all__ = ["MOST_FORKS", "Pending", "compile_side_by_side", "pending_compiles", "precompile", "workers"]
