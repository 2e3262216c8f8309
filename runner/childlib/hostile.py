"""Calling untrusted user code from the child.

Every call into an uploaded module (import, input generation, constructors, forward) goes
through this module, so that whatever the code does (raise, sys.exit, print to stdout, run out
of memory, break the device) the job ends with one named `JobFailed` that carries the line of
the uploaded file, and the child can still write its one response. The process-level limits
(time, memory, network, environment) are the sandbox's job (runner.sandbox), not this one's.

Runs only in the sandbox child (standard library, torch, triton, numpy).
"""

from __future__ import annotations

import os
import random
import sys
import types
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from runner.childlib.module import ModuleLoadError, input_cases, load_module, verify_cases
from runner.childlib.phases import watched
from runner.errors import JobFailed, classify_exception

# ---------------------------------------------------------------- stdout


def protect_stdout() -> int:
    """Keep fd 1 for the response only: user prints (Python or C, subprocesses too) go to fd 2.

    Returns a private duplicate of the original stdout; everything else that writes to fd 1
    lands on stderr from now on. stdin is replaced by /dev/null once the request is read, so
    `input()` in user code ends instead of waiting.
    """
    sys.stdout.flush()
    response_fd = os.dup(1)  # not inheritable: subprocesses of user code never see it
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    return response_fd


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


# ---------------------------------------------------------------- user calls


def user_line(exc: BaseException, paths: Sequence[str]) -> int | None:
    """The line of the uploaded file(s) where `exc` arose: a Triton compile error's own line,
    else the deepest traceback frame inside one of `paths`, looking at the innermost cause
    first. Why the causes: the interpreter (cpu) re-raises a kernel's error as an
    InterpreterError `from` it, whose own traceback ends at the launch in ModelNew.forward;
    only the cause's runs through the kernel's lines (a `tl.arange(0, n)` on line 17 was
    reported at the launch on line 24)."""
    chain = _causes(exc)
    for e in chain:
        line = _compile_error_line(e, paths)
        if line is not None:
            return line
    for e in reversed(chain):
        tb, found = e.__traceback__, None
        while tb is not None:
            if tb.tb_frame.f_code.co_filename in paths:
                found = tb.tb_lineno
            tb = tb.tb_next
        if found is not None:
            return found
    return None


def _causes(exc: BaseException, limit: int = 8) -> list[BaseException]:
    """`exc` and the exceptions it was raised from, outermost first."""
    chain = [exc]
    while chain[-1].__cause__ is not None and len(chain) < limit and chain[-1].__cause__ not in chain:
        chain.append(chain[-1].__cause__)
    return chain


def _compile_error_line(exc: BaseException, paths: Sequence[str]) -> int | None:
    """Triton's CompilationError numbers lines from the kernel's `def` (its `src`); map to the file."""
    src, node = getattr(exc, "src", None), getattr(exc, "node", None)
    lineno = getattr(node, "lineno", None)
    if not isinstance(src, str) or not isinstance(lineno, int) or not src.strip():
        return None
    first = src.strip().splitlines()[0].strip()
    for path in paths:
        try:
            with open(path, encoding="utf-8") as fh:
                lines = fh.read().splitlines()
        except OSError:
            continue
        for number, text in enumerate(lines, start=1):
            if text.strip() == first:
                return number + lineno - 1
    return None


def user_call(fn: Callable[[], Any], *, what: str, paths: Sequence[str]) -> Any:
    """Call user code; any exception (SystemExit included) becomes a JobFailed naming `what`."""
    try:
        return fn()
    except JobFailed:
        raise
    except BaseException as exc:  # user code may raise anything, even SystemExit
        if isinstance(exc, SystemExit):
            message = f"{what}: the module called sys.exit({exc.code!r})"
            kind = "exception"
        else:
            message = f"{what} raised {type(exc).__name__}: {_first_lines(str(exc))}"
            kind = classify_exception(exc)
        raise JobFailed(kind, message, line=user_line(exc, paths)) from exc


def _first_lines(text: str, limit: int = 2000) -> str:
    return text if len(text) <= limit else text[:limit] + " ..."


def load(path: str, name: str) -> types.ModuleType:
    """Import an uploaded file; failures keep module.py's kind unless the cause is more specific."""
    try:
        return load_module(path, name)
    except ModuleLoadError as exc:
        kind = exc.kind
        cause = exc.__cause__
        if (
            kind == "import_error"
            and cause is not None
            and classify_exception(cause) in ("oom", "device_error")
        ):
            kind = classify_exception(cause)
        raise JobFailed(kind, exc.message, line=exc.line) from (cause or exc)
    except BaseException as exc:  # SystemExit / KeyboardInterrupt raised at import
        raise JobFailed(
            "import_error",
            f"importing the module raised {type(exc).__name__}: {exc}",
            line=user_line(exc, [path]),
        ) from exc


# ---------------------------------------------------------------- inputs and cases


def seed_all(seed: int) -> None:
    """Seed every generator user code is likely to draw inputs or weights from."""
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def seeded_inputs(
    module: types.ModuleType, seed: int, paths: Sequence[str], device: str | None = None
) -> tuple[list[list], list[list]]:
    """(timed cases, verify-only cases) drawn after seeding with `seed` (DESIGN.md section 1).

    With `device` (cuda, npu), the module's factory calls run under `torch.device(device)`,
    so `torch.randn(...)` without a device argument draws on the accelerator. Why: on the
    H200 drawing five GEMM-sized cases on one CPU core took most of a verify job (seconds per
    case per seed); on the device it is milliseconds. The values differ from a CPU draw, but
    both models get the same tensors, which is all the gate needs. A module whose factories
    only work on CPU tensors (e.g. `.numpy()`) falls back to the CPU draw.
    """
    if device is not None:
        import torch

        try:
            with torch.device(device):
                return _draw(module, seed, paths)
        except JobFailed:
            pass  # the module's factories need CPU tensors: draw there
    return _draw(module, seed, paths)


def draw_device(backend: Any) -> str | None:
    """Where a job draws its inputs: on the accelerator when there is one (see seeded_inputs)."""
    return None if backend.kind == "cpu" else backend.device


def _draw(module: types.ModuleType, seed: int, paths: Sequence[str]) -> tuple[list[list], list[list]]:
    with watched("inputs"):  # a hang here is answered early by the sandbox
        seed_all(seed)
        timed = user_call(lambda: input_cases(module), what="get_input_cases()/get_inputs()", paths=paths)
        seed_all(seed)
        extra = user_call(lambda: verify_cases(module), what="get_verify_inputs()", paths=paths)
    return timed, extra


@dataclass(frozen=True)
class CaseSpec:
    label: str  # 'case 0' (a timed case, index into get_input_cases) or 'verify 1'
    kind: str  # 'timed' or 'verify'
    index: int
    numel: int  # elements over all tensor inputs

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def numel_of(inputs: Sequence[Any]) -> int:
    import torch

    return sum(x.numel() for x in inputs if isinstance(x, torch.Tensor))


def select_cases(
    timed: list[list],
    extra: list[list],
    *,
    indices: Sequence[int] | None,
    max_numel: int | None,
    include_verify: bool = True,
) -> tuple[list[CaseSpec], list[CaseSpec]]:
    """Which cases to run: (selected, skipped as too large for the device's budget).

    `indices` picks timed cases (None: all); `max_numel` (cpu) skips cases whose inputs hold
    more elements, because the interpreter needs ~0.5 ms per program instance.
    """
    if indices is None:
        indices = range(len(timed))
    selected: list[CaseSpec] = []
    skipped: list[CaseSpec] = []
    for i in indices:
        if not 0 <= i < len(timed):
            raise JobFailed(
                "bad_request", f"case {i} does not exist: the module has {len(timed)} input cases"
            )
        spec = CaseSpec(f"case {i}", "timed", i, numel_of(timed[i]))
        (skipped if max_numel is not None and spec.numel > max_numel else selected).append(spec)
    if include_verify:
        for i, inputs in enumerate(extra):
            spec = CaseSpec(f"verify {i}", "verify", i, numel_of(inputs))
            (skipped if max_numel is not None and spec.numel > max_numel else selected).append(spec)
    return selected, skipped


def inputs_of(spec: CaseSpec, timed: list[list], extra: list[list]) -> list[Any]:
    return timed[spec.index] if spec.kind == "timed" else extra[spec.index]


def clone_inputs(inputs: Sequence[Any]) -> list[Any]:
    """Fresh copies, so that a forward that writes into its inputs cannot change the next call's."""
    import torch

    return [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
