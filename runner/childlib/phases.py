"""Where a child job's seconds go: named phases, summed over the job.

The parent sees only a job's wall time; to cut the benchmark's device time it must know how
much of it was the interpreter and library imports, the uploaded module's import, compiling
and the correctness runs, and how much was timing. `phase(name)` adds the seconds spent in
its block to `name`; `snapshot()` is what the job's response carries (`JobResponse.phases`).
Nested phases count in both; the child's own phases do not nest.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

# A file that jobs sharing one device lock while they use it (bench/run.py --jobs N --gpus G
# with N > G): their start-up, imports and compiles overlap, their device work does not.
DEVICE_LOCK_ENV = "KERNELOPT_DEVICE_LOCK"

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


def reset() -> None:
    _totals.clear()


@contextmanager
def device_lock() -> Iterator[None]:
    """Hold the device exclusively (an flock on $KERNELOPT_DEVICE_LOCK) for the block; the
    seconds spent waiting are the phase 'wait', which is not device time. No-op when unset."""
    path = os.environ.get(DEVICE_LOCK_ENV)
    if not path:
        yield
        return
    import fcntl

    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        with phase("wait"):
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock; so does the process's exit

