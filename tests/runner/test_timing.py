"""The order of measurements in `interleaved` (the device's clock is not involved: a backend
that records calls stands in for do_bench, so only the sequencing is checked here; the timing
itself is checked on the H200 by tests/gpu)."""

from __future__ import annotations

from typing import Any

from runner.childlib.timing import interleaved


class CallLog:
    """A backend whose `time` returns the next number of a script and logs who was timed."""

    kind = "cuda"
    device = "cuda:0"
    can_time = True

    def __init__(self, script: list[float]) -> None:
        self.script = list(script)
        self.log: list[str] = []

    def synchronize(self) -> None:
        self.log.append("sync")

    def time(self, fn: Any, *, warmup_ms: float, rep_ms: float) -> float:
        self.log.append(fn.__name__)
        return self.script.pop(0)


def contender(name: str, calls: list[str]) -> Any:
    def fn() -> None:
        calls.append(name)

    fn.__name__ = name
    return fn


def test_the_first_measurement_after_compiling_is_discarded() -> None:
    calls: list[str] = []
    fns = {n: contender(n, calls) for n in ("parent", "candidate", "reference")}
    # discarded: parent 9.0 (slow first measurement), candidate 5.0, reference 7.0
    backend = CallLog([9.0, 5.0, 7.0, 4.0, 2.0, 3.0, 4.0, 2.0])
    times = interleaved(backend, fns, rounds=2, once=("reference",), discard=1)

    assert calls == ["parent", "candidate", "reference"]  # one untimed call each (compile, autotune)
    assert backend.log == ["sync", "parent", "candidate", "reference",
                           "parent", "candidate", "reference", "parent", "candidate"]  # fmt: skip
    assert times == {"parent": [4.0, 4.0], "candidate": [2.0, 2.0], "reference": [3.0]}


def test_discard_zero_keeps_every_measurement() -> None:
    calls: list[str] = []
    fns = {n: contender(n, calls) for n in ("parent", "candidate")}
    backend = CallLog([9.0, 5.0, 4.0, 2.0])
    times = interleaved(backend, fns, rounds=2, discard=0)
    assert times == {"parent": [9.0, 4.0], "candidate": [5.0, 2.0]}
