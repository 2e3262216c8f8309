"""The order of measurements in `interleaved` (the device's clock is not involved: a backend
that records calls stands in for do_bench, so only the sequencing is checked here; the timing
itself is checked on the H200 by tests/gpu), and the bytes a reference's forward moves."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from diagnosis.engine.verdict import MIN_NOISE_FLOOR, noise_floor
from runner.childlib.reference import run_reference
from runner.childlib.timing import Reads, interleaved, spread, work_of_case


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


def test_rounds_that_disagree_are_re_timed_until_they_agree() -> None:
    calls: list[str] = []
    fns = {n: contender(n, calls) for n in ("parent", "candidate", "reference")}
    # round 1: parent 2.0 (slowed by interference), candidate 1.0, reference 3.0;
    # round 2: parent 1.0, candidate 1.0 -> the parent's spread is 100 %: a third round, then a
    # fourth (three rounds still hold the outlier); with four the outlier is left out.
    backend = CallLog([1.0, 1.0, 3.0, 2.0, 1.0, 3.0, 1.0, 1.0, 1.01, 1.0, 1.02, 1.0])
    times = interleaved(backend, fns, rounds=2, once=("reference",), discard=1, max_rounds=6, settle=0.05)
    assert times == {
        "parent": [2.0, 1.0, 1.01, 1.02],
        "candidate": [1.0, 1.0, 1.0, 1.0],
        "reference": [3.0],
    }
    assert backend.log.count("reference") == 2  # the discarded measurement and round 1 only
    assert not backend.script


def test_re_timing_stops_at_max_rounds() -> None:
    calls: list[str] = []
    fns = {n: contender(n, calls) for n in ("parent", "candidate")}
    backend = CallLog([1.0, 1.0] + [1.0, 1.0, 2.0, 1.0, 1.0, 1.0, 3.0, 1.0, 5.0, 1.0])
    times = interleaved(backend, fns, rounds=2, discard=1, max_rounds=5, settle=0.05)
    assert times["parent"] == [1.0, 2.0, 1.0, 3.0, 5.0]  # never agreed: five rounds, no more
    assert not backend.script


def test_agreeing_rounds_are_not_re_timed() -> None:
    calls: list[str] = []
    fns = {n: contender(n, calls) for n in ("parent", "candidate")}
    backend = CallLog([1.0, 1.0, 1.0, 2.0, 1.03, 2.02])
    times = interleaved(backend, fns, rounds=2, discard=1, max_rounds=6, settle=0.05)
    assert times == {"parent": [1.0, 1.03], "candidate": [2.0, 2.02]}


@pytest.mark.parametrize(
    "values",
    [[1.0, 1.05], [2.0, 1.0, 1.01, 1.02], [1.0, 1.0, 1.0], [1.0, 1.3, 1.1, 1.2, 9.0], [1.0]],
)
def test_the_child_settles_on_the_spread_the_verdict_uses(values: list[float]) -> None:
    assert max(MIN_NOISE_FLOOR, spread(values)) == pytest.approx(noise_floor(values))


# ---------------------------------------------------------------- bytes an index op moves


class _Cpu:
    kind = "cpu"

    def synchronize(self) -> None:
        pass


class _Forward(torch.nn.Module):
    def __init__(self, fn, table: bool = False) -> None:
        super().__init__()
        self.fn = fn
        self.table = torch.nn.Embedding(1000, 64) if table else None

    def forward(self, *args):
        return self.fn(self, *args)


ROWS, IDS = 1000 * 64 * 4, 10 * 8  # a 1000 x 64 float32 table, 10 int64 indices
GATHERED = 10 * 64 * 4  # the 10 rows: what a gather reads, and what it returns


@pytest.mark.parametrize(
    "fn, table, moved",
    [
        pytest.param(lambda m, w, i: torch.nn.functional.embedding(i, w), False, GATHERED + IDS + GATHERED,
                     id="embedding"),
        pytest.param(lambda m, w, i: torch.index_select(w, 0, i), False, GATHERED + IDS + GATHERED, id="index_select"),
        pytest.param(lambda m, w, i: w[i] * 2, False, GATHERED + IDS + GATHERED, id="subscript"),
        pytest.param(lambda m, w, i: w.t()[:, i].t(), False, GATHERED + IDS + GATHERED, id="through-views"),
        pytest.param(lambda m, w, i: m.table(i) + w[i], True, 2 * GATHERED + IDS + GATHERED, id="parameter-table"),
        pytest.param(lambda m, w, i: w[i] + w.sum(), False, ROWS + IDS + GATHERED, id="also-read-whole"),
        pytest.param(lambda m, w, i: w + 1, False, ROWS + IDS + ROWS, id="no-gather"),
    ],
)  # fmt: skip
def test_a_tensor_the_reference_only_indexes_counts_the_rows_it_gathered(fn, table, moved) -> None:
    model = _Forward(fn, table)
    inputs = [torch.randn(1000, 64), torch.randint(0, 1000, (10,))]
    reads = Reads()
    out, _ = run_reference(model, inputs, _Cpu(), [], reads)
    assert work_of_case(model, inputs, out, reads)["bytes"] == moved
    full = sum(t.numel() * t.element_size() for t in (*inputs, *model.state_dict().values(), out))
    assert work_of_case(model, inputs, out)["bytes"] == full
