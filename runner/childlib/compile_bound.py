"""A bound on each Triton compile of a candidate's kernels: a config whose compile runs past it
is dropped, with the reason recorded.

Runs inside the sandbox child (standard library and triton only).

Why: a `@triton.autotune` over blocks up to 2^20 elements compiled for about two minutes on the
H200 before its first launch (TRITON_NOTES.md), and a rewrite that keeps the parent's own
config in its space pays that for every candidate. The time is one C++ call: compiling a
2^20-element row sum for sm_90 on a CPU here spent 232 s in the `llir` stage alone, so a timer
in this process could only act once that stage returned. Each bounded compile therefore runs
first in a forked copy of the job's process, which is killed when it outlasts the bound; when
it finishes in time, the job compiles again in its own process and reads the result from the
Triton cache the fork filled (a cache hit: no second compile). Forking costs about 0.1 s per
compile on a loaded CPU (torch imported).

What happens when a compile is stopped:

* inside `@triton.autotune`'s benchmarking: `CompileTimeout` is an `OutOfResources`, which
  `Autotuner._bench` turns into an infinite time (as for a config that needs too much shared
  memory): the config is dropped and another one wins;
* at a plain launch, or when every config was dropped: the exception reaches `user_call` and
  the job fails as `compile_timeout`, naming the kernel and its config.

Either way the job's result lists each stopped compile under "compile_dropped". A compile that
was stopped once is not tried again in the same job (the autotuner would otherwise compile the
all-infinite winner again).

Scope: only kernels defined in the files given (the candidate's): the parent's kernels were
compiled by the run's baseline into the shared cache, and a parent must never fail a
candidate's job. Not bounded: the interpreter (cpu runs no compile), a Triton without
`JITFunction._do_compile` (triton-ascend 3.2), `knobs.compilation.always_compile` (the cache
could not hand the fork's result back), and hosts without `os.fork`.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from triton.runtime.errors import OutOfResources

from runner.errors import JobFailed

POLL_S = 0.01
_EXIT_FAILED = 3  # the fork's compile raised: the job compiles again in-process to raise it there

Job = TypeVar("Job", bound=Callable[..., dict])


class CompileTimeout(OutOfResources):
    """A compile ran past the bound. An OutOfResources, so that the autotuner drops the config."""

    def __init__(self, kernel: str, config: str, limit_s: float) -> None:
        super().__init__(required=f"more than {limit_s:g} s", limit=f"{limit_s:g} s", name="compile time")
        self.kernel, self.config, self.limit_s = kernel, config, limit_s

    def __str__(self) -> str:
        return f"the compile of {self.kernel} ({self.config}) ran past {self.limit_s:g} s and was stopped"

    def __reduce__(self) -> tuple:
        return (type(self), (self.kernel, self.config, self.limit_s))


@dataclass
class CompileBound:
    """The bound of one job and what it stopped."""

    limit_s: float | None
    files: frozenset[str] = frozenset()  # kernels defined in these files are bounded
    dropped: list[dict[str, Any]] = field(default_factory=list)
    # (kernel, config) that ran past the bound: another specialization of the same config (other
    # shapes' divisibility) is stopped at once, and the config is listed once
    _stopped: set[tuple[int, str]] = field(default_factory=set)
    # (kernel, config) whose compile a fork of runner.childlib.precompile finished within the
    # bound: the Triton cache holds it, so the compile in this process is not forked again
    warm: set[tuple[int, str]] = field(default_factory=set)

    def applies(self, fn: Any) -> bool:
        code = getattr(getattr(fn, "fn", None), "__code__", None)
        return self.limit_s is not None and code is not None and code.co_filename in self.files

    def token(self, jit: Any, constexprs: dict, options: Any) -> tuple[tuple[int, str], str]:
        """(the key of a compile in `warm` and `_stopped`, its config in words)"""
        config = describe_config(jit, constexprs, options)
        return (id(jit), config), config

    def stop(self, kernel: str, config: str, token: tuple[int, str]) -> CompileTimeout:
        assert self.limit_s is not None
        if token not in self._stopped:
            self._stopped.add(token)
            self.dropped.append({"kernel": kernel, "config": config, "limit_s": self.limit_s})
        return CompileTimeout(kernel, config, self.limit_s)


def run_bounded(compile_fn: Callable[[], Any], limit_s: float) -> bool:
    """Run `compile_fn` in a forked copy of this process for at most `limit_s` seconds.

    True: it finished (whatever it wrote to the Triton cache is there now); False: it ran past
    the bound and was killed. A compile that raised also returns True: the caller compiles
    again in its own process, where the error is raised with its own traceback.
    """
    return run_forks([compile_fn], [limit_s], workers=1)[0]


def run_forks(fns: Sequence[Callable[[], Any]], limits: Sequence[float | None], workers: int) -> list[bool]:
    """Run each of `fns` in its own forked copy of this process, at most `workers` at a time,
    each for at most its limit (None: no limit). Per function, as `run_bounded`: True when it
    finished or raised, False when it was killed at its limit."""
    finished = [True] * len(fns)
    todo = list(range(len(fns)))
    running: dict[int, tuple[int, float | None]] = {}  # pid -> (index, deadline)
    while todo or running:
        while todo and len(running) < max(1, workers):
            i = todo.pop(0)
            limit = limits[i]
            running[_fork(fns[i])] = (i, None if limit is None else time.monotonic() + limit)
        for pid, (i, deadline) in list(running.items()):
            done, _ = os.waitpid(pid, os.WNOHANG)
            if not done and deadline is not None and time.monotonic() > deadline:
                _kill(pid)
                finished[i], done = False, pid
            if done:
                del running[pid]
        if running:
            time.sleep(POLL_S)
    return finished


def _kill(pid: int) -> None:
    """Kill a fork and its group (ptxas with it) and reap it."""
    for kill in (os.killpg, os.kill):
        with contextlib.suppress(OSError):
            kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


def _fork(fn: Callable[[], Any]) -> int:
    pid = os.fork()
    if pid == 0:  # the fork: compile, and leave without running anything of the parent's
        code = 0
        try:
            with contextlib.suppress(OSError):
                os.setpgid(0, 0)  # its own group, so that ptxas goes with it
            fn()
        except BaseException:
            code = _EXIT_FAILED
        os._exit(code)
    return pid


def describe_config(jit: Any, constexprs: dict, options: Any) -> str:
    """'BLOCK=1048576, num_warps=4, num_stages=3': a compile's constexpr values and launch options."""
    names = getattr(jit, "arg_names", [])
    parts = []
    for path, value in constexprs.items():
        index = path[0] if isinstance(path, tuple) and path else path
        if isinstance(index, int) and index < len(names) and jit.params[index].is_constexpr:
            parts.append(f"{names[index]}={value}")
    for opt in ("num_warps", "num_stages"):
        if hasattr(options, opt):
            parts.append(f"{opt}={getattr(options, opt)}")
    return ", ".join(parts)


_active: CompileBound | None = None


def active_bound() -> CompileBound | None:
    """The bound in force (inside `bounded_compiles`, when it patched the launch path), if any."""
    return _active


@contextlib.contextmanager
def bounded_compiles(limit_s: float | None, files: Sequence[str]) -> Iterator[CompileBound]:
    """Bound every compile of the kernels defined in `files` while the block runs."""
    global _active
    bound = CompileBound(limit_s, frozenset(files))
    from triton import knobs
    from triton.runtime.jit import JITFunction

    original = getattr(JITFunction, "_do_compile", None)
    if limit_s is None or not files or original is None or not hasattr(os, "fork"):
        yield bound
        return

    @functools.wraps(original)
    def do_compile(self: Any, key: Any, signature: Any, device: Any, constexprs: dict, options: Any,
                   attrs: Any, warmup: Any) -> Any:  # fmt: skip
        if not bound.applies(self) or knobs.compilation.always_compile:
            return original(self, key, signature, device, constexprs, options, attrs, warmup)
        token, config = bound.token(self, constexprs, options)
        if token in bound._stopped:
            raise bound.stop(self.fn.__name__, config, token)
        if token in bound.warm:
            return original(self, key, signature, device, constexprs, options, attrs, warmup)

        def compile_here() -> Any:
            return original(self, key, signature, device, constexprs, options, attrs, warmup)

        if not run_bounded(compile_here, limit_s):
            raise bound.stop(self.fn.__name__, config, token)
        return compile_here()  # a cache hit: the fork wrote it

    JITFunction._do_compile = do_compile
    _active = bound
    try:
        yield bound
    finally:
        JITFunction._do_compile = original
        _active = None


def with_compile_bound(job: Job) -> Job:
    """Run a job function `(req, backend, parent, cand)` under the bound its request asks for
    (`options.compile_timeout_s`) over the candidate's kernels; the compiles it stopped go into
    the result, or into the partial result of the JobFailed it raised."""

    @functools.wraps(job)
    def run(req: Any, *args: Any, **kwargs: Any) -> dict:
        seconds = req.options.get("compile_timeout_s")
        files = [req.candidate] if req.candidate else []
        with bounded_compiles(float(seconds) if seconds else None, files) as bound:
            try:
                result = job(req, *args, **kwargs)
            except JobFailed as exc:
                if bound.dropped:
                    exc.result = {**(exc.result or {}), "compile_dropped": list(bound.dropped)}
                raise
        if bound.dropped:
            result["compile_dropped"] = list(bound.dropped)
        return result

    return run  # type: ignore[return-value]


__all__ = [
    "CompileBound",
    "CompileTimeout",
    "bounded_compiles",
    "describe_config",
    "run_bounded",
    "with_compile_bound",
]
