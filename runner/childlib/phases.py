"""Where a child job's seconds go: named phases, summed over the job.

The parent sees only a job's wall time; to cut the benchmark's device time it must know how
much of it was the interpreter and library imports, the uploaded module's import, compiling
and the correctness runs, and how much was timing. `phase(name)` adds the seconds spent in
its block to `name`; `snapshot()` is what the job's response carries (`JobResponse.phases`).
Nested phases count in both; the child's own phases do not nest. The uploaded code runs in
the same process and could change these figures: they serve cost accounting, never a verdict.
"""

from __future__ import annotations

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
