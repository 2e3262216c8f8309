"""Where a child job's seconds go: named phases, summed over the job.

The parent sees only a job's wall time; to cut the benchmark's device time it must know how
much of it was the interpreter and library imports, the uploaded module's import, compiling
and the correctness runs, and how much was timing. `phase(name)` adds the seconds spent in
its block to `name`; `snapshot()` is what the job's response carries (`JobResponse.phases`).
Nested phases count in both; the child's own phases do not nest. The uploaded code runs in
the same process and could change these figures: they serve cost accounting, never a verdict.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

_totals: dict[str, float] = {}


@contextmanager
def phase(name: str) -> Iterator[None]:
    started = time.monotonic()
    try:
        yield
    finally:
        _totals[name] = _totals.get(name, 0.0) + time.monotonic() - started


def snapshot() -> dict[str, float]:
    return {name: round(seconds, 3) for name, seconds in _totals.items()}


# ---------------------------------------------------------------- deadlines the parent enforces

_report_fd: int | None = None


def report_to(fd: int | None) -> None:
    """Announce `watched` phases on `fd` (the sandbox's phase pipe); None: announce nothing."""
    global _report_fd
    _report_fd = fd


def _announce(line: str) -> None:
    if _report_fd is None:
        return
    try:
        os.write(_report_fd, line.encode("ascii") + b"\n")
    except OSError:  # the parent stopped listening: the wall clock still holds
        pass


@contextmanager
def watched(name: str) -> Iterator[None]:
    """Tell the parent that user code enters phase `name` (`import`, `inputs`) and leaves it.

    The parent (runner.sandbox) kills the job when such a phase runs past its quick deadline;
    the deadline is kept there, not here, where the user's code could change it. Not counted
    in the phase seconds.
    """
    _announce(f"enter {name}")
    try:
        yield
    finally:
        _announce(f"leave {name}")
