"""Verdicts: a round's `Verdict`, and the rules that turn raw timings into a `TimingVerdict`
(noise floor, speedup, faster / slower, suspect).

Pure standard library. The sandbox child only measures (it may not import `diagnosis`);
`diagnosis.engine.executor.compare_timings` applies these rules to the child's numbers, so
the policy lives in one place and is tested with plain tables (tests/engine/test_verdict.py).

Rules (DESIGN.md, "Verification gate"):

* The **noise floor** of a case is the relative spread of the parent's repeated timings taken
  in the same process, interleaved with the candidate's: (max - min) / min, never below 1 %;
  where the candidate's own timings spread wider, theirs (`case_floor`). A difference between
  two medians is only as certain as the noisier of the two: in the H200 run of 3eb0c9c a
  launch-bound case that both versions ran with the same fixed launch timed [33.6, 33.4] us
  for the parent and [33.6, 34.9] us for the candidate, and the parent's 2 % floor called
  that 2.1 % "slower" and refused a rewrite 1.54x faster on the other four cases.
  A median from `do_bench` on a busy or throttled GPU moves by a few percent between runs;
  a "speedup" inside that spread is noise. From four timings on the largest is left out:
  interference only makes a timing slower, and the child re-times a case whose rounds
  disagree (`runner.childlib.timing.interleaved`), so one slow round among several is an
  outlier rather than the spread of the measurement.
* A case is **faster** when speedup > 1 + floor and **slower** when speedup < 1 / (1 + floor).
* A candidate time below the **speed-of-light** bound (datasheet peaks, `diagnosis.engine.sol`)
  is physically impossible for a correct kernel that moves the bytes it must: the case is
  **suspect** (caching across calls, work skipped, a timer that missed the work) and never
  counts as a win.
* Overall: failed if not correct; suspect if any case is suspect; improved when the geometric
  mean speedup exceeds the **combined floor** and no case is slower; slower when the geometric
  mean is below 1 / (1 + combined floor); no-gain otherwise; untimed when nothing was timed
  (CPU / interpreter). The combined floor is the geometric mean of the cases' (1 + floor),
  minus 1: the most the geomean of the speedups can move when every case's timing errs by its
  whole floor in the same direction. (Until 2026-11-30 it was the largest case floor: one
  launch-bound case timed with a 44 % spread then hid a 1.9-2.6x gain on the large cases.)
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

MIN_NOISE_FLOOR = 0.01
# A time this much below the datasheet SOL is flagged; a little slack absorbs event-timer
# granularity on microsecond kernels without letting a real impossibility through.
SUSPECT_MARGIN = 0.02


class Verdict(enum.StrEnum):
    """How a round ended: the one vocabulary of the loop, the proposers' history, the stored
    Round rows (whose choices are built from it) and the reports."""

    IMPROVED = "improved"  # verified: correct everywhere, faster than its parent above the noise floor
    NO_GAIN = "no-gain"  # correct and timed, but not faster above the noise floor
    FAILED = "failed"  # did not compile, crashed, wrong answer, launches no Triton kernel, suspect time
    INCONCLUSIVE = "inconclusive"  # the deepest evidence explains nothing, or no rewrite applies
    # correct on every case the device could check, but the device cannot time (cpu): whether it
    # is faster is unknown, so never "no gain" and never promoted
    UNTIMED = "untimed"

    @property
    def label(self) -> str:
        """The verdict in a kernel engineer's words (the Round model's choice labels)."""
        return _LABELS[self]

    @property
    def rejected(self) -> bool:
        """The round's proposal was tried and did not win: its family is not tried again on
        the same parent (an untimed one neither: the same rewrite would be checked again)."""
        return self in (Verdict.FAILED, Verdict.NO_GAIN, Verdict.UNTIMED)


_LABELS = {
    Verdict.IMPROVED: "improved",
    Verdict.NO_GAIN: "no gain",
    Verdict.FAILED: "failed",
    Verdict.INCONCLUSIVE: "inconclusive",
    Verdict.UNTIMED: "correct, speed not measured",
}


class TimingVerdict(enum.StrEnum):
    """What the gate and the timings say about a candidate against its parent.

    Not a round's `Verdict`: the loop decides that from this one and its own minimum gain
    (a suspect or failed candidate fails the round; slower is no gain).
    """

    IMPROVED = "improved"  # correct and faster than the parent above the noise floor
    NO_GAIN = "no-gain"  # correct, within the noise floor of the parent
    SLOWER = "slower"  # correct, measurably slower than the parent
    SUSPECT = "suspect"  # correct but timed below the speed of light: not a win
    FAILED = "failed"  # failed the verification gate (see the error kind)
    UNTIMED = "untimed"  # correct; no device to time on (cpu)


@dataclass(frozen=True)
class CaseDecision:
    """What one timed case says about candidate vs parent."""

    speedup: float | None  # parent_ms / candidate_ms
    floor: float
    faster: bool
    slower: bool
    suspect: bool


def noise_floor(parent_repeats: Sequence[float], minimum: float = MIN_NOISE_FLOOR) -> float:
    """Relative spread (max - min) / min of the parent's repeated medians, at least `minimum`;
    from four medians on, without the largest (see the module docstring)."""
    values = sorted(t for t in parent_repeats if t is not None and t > 0)
    if len(values) >= 4:
        values = values[:-1]
    if len(values) < 2:
        return minimum
    return max(minimum, (values[-1] - values[0]) / values[0])


def case_floor(
    parent_repeats: Sequence[float], candidate_repeats: Sequence[float] = (), minimum: float = MIN_NOISE_FLOOR
) -> float:
    """A case's floor: the wider of the parent's and the candidate's spreads, at least `minimum`
    (the parent's alone where the candidate has one timing; the candidate's where there is no
    parent, as for a time job against eager)."""
    return max(noise_floor(parent_repeats, minimum), noise_floor(candidate_repeats, minimum))


def median(values: Sequence[float]) -> float | None:
    data = sorted(v for v in values if v is not None)
    if not data:
        return None
    mid = len(data) // 2
    return data[mid] if len(data) % 2 else (data[mid - 1] + data[mid]) / 2


def geomean(values: Iterable[float | None]) -> float | None:
    """The geometric mean of the positive, finite values; None when there is none."""
    data = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    if not data:
        return None
    return math.exp(sum(math.log(v) for v in data) / len(data))


def is_suspect(time_ms: float | None, sol: float | None, margin: float = SUSPECT_MARGIN) -> bool:
    """True when a measured time beats the speed-of-light bound by more than `margin`."""
    if time_ms is None or sol is None or sol <= 0:
        return False
    return time_ms < sol * (1.0 - margin)


def decide_case(
    parent_ms: float | None,
    candidate_ms: float | None,
    floor: float = MIN_NOISE_FLOOR,
    sol: float | None = None,
) -> CaseDecision:
    """Speedup of one case and whether it clears the floor; suspect beats faster."""
    if parent_ms is None or candidate_ms is None or candidate_ms <= 0:
        return CaseDecision(None, floor, False, False, is_suspect(candidate_ms, sol))
    speedup = parent_ms / candidate_ms
    suspect = is_suspect(candidate_ms, sol)
    faster = speedup > 1.0 + floor and not suspect
    slower = speedup < 1.0 / (1.0 + floor)
    return CaseDecision(speedup, floor, faster, slower, suspect)


def combined_floor(cases: Sequence[CaseDecision]) -> float:
    """The floor the geometric mean speedup must clear: geomean of (1 + case floor), minus 1."""
    timed = [c for c in cases if c.speedup is not None]
    if not timed:
        return MIN_NOISE_FLOOR
    return math.exp(sum(math.log1p(c.floor) for c in timed) / len(timed)) - 1.0


def overall(correct: bool, cases: Sequence[CaseDecision]) -> TimingVerdict:
    """The verdict for a candidate over all its timed cases (see the module docstring)."""
    if not correct:
        return TimingVerdict.FAILED
    timed = [c for c in cases if c.speedup is not None]
    if not timed:
        return TimingVerdict.SUSPECT if any(c.suspect for c in cases) else TimingVerdict.UNTIMED
    if any(c.suspect for c in cases):
        return TimingVerdict.SUSPECT
    floor = combined_floor(timed)
    mean = geomean([c.speedup for c in timed if c.speedup is not None])
    assert mean is not None
    if mean > 1.0 + floor and not any(c.slower for c in timed):
        return TimingVerdict.IMPROVED
    if mean < 1.0 / (1.0 + floor):
        return TimingVerdict.SLOWER
    return TimingVerdict.NO_GAIN
