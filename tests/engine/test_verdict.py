"""Verification policy: noise floor, faster / slower, suspect, and the overall verdict."""

from __future__ import annotations

import pytest

from diagnosis.engine.verdict import (
    MIN_NOISE_FLOOR,
    CaseDecision,
    TimingVerdict,
    Verdict,
    case_floor,
    combined_floor,
    decide_case,
    geomean,
    is_suspect,
    median,
    noise_floor,
    overall,
)


@pytest.mark.parametrize(
    ("repeats", "expected"),
    [
        pytest.param([1.0, 1.0, 1.0], MIN_NOISE_FLOOR, id="identical-repeats-give-the-minimum"),
        pytest.param([1.0, 1.05], 0.05, id="five-percent-spread"),
        pytest.param([2.0, 1.9, 2.1], (2.1 - 1.9) / 1.9, id="three-repeats"),
        pytest.param([1.0], MIN_NOISE_FLOOR, id="one-repeat"),
        pytest.param([2.0, 1.0, 1.01, 1.02], 0.02, id="four-repeats-leave-out-the-slowest"),
        pytest.param([1.0, 1.2, 1.1], 0.2, id="three-repeats-keep-the-slowest"),
        pytest.param([], MIN_NOISE_FLOOR, id="none"),
    ],
)
def test_noise_floor_is_the_parents_relative_spread(repeats: list[float], expected: float) -> None:
    assert noise_floor(repeats) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("parent", "candidate", "expected"),
    [
        pytest.param([1.0, 1.01], [1.0, 1.005], 0.01, id="parent-wider"),
        pytest.param([33.632, 33.408], [33.568, 34.912], (34.912 - 33.568) / 33.568, id="candidate-wider"),
        pytest.param([1.0, 1.0], [1.0], MIN_NOISE_FLOOR, id="one-candidate-timing"),
        pytest.param([], [2.0, 2.1], 0.05, id="no-parent-the-candidates-spread"),
        pytest.param([1.0, 1.0], [1.0, 1.0], MIN_NOISE_FLOOR, id="never-below-the-minimum"),
    ],
)
def test_a_cases_floor_is_the_wider_of_the_two_spreads(
    parent: list[float], candidate: list[float], expected: float
) -> None:
    assert case_floor(parent, candidate) == pytest.approx(expected)


def test_the_h200_case_that_a_parent_only_floor_called_slower() -> None:
    """3eb0c9c run, 21_linear_gelu round 2, case 3: the same fixed launch in both versions."""
    parent, candidate = [0.033632, 0.033408], [0.033568, 0.034912]
    by_parent = decide_case(median(parent), median(candidate), max(noise_floor(parent), 0.02), None)
    by_both = decide_case(median(parent), median(candidate), max(case_floor(parent, candidate), 0.02), None)
    assert by_parent.slower and not by_both.slower and not by_both.faster


@pytest.mark.parametrize(
    ("parent", "candidate", "floor", "sol", "faster", "slower", "suspect"),
    [
        pytest.param(1.0, 0.5, 0.01, None, True, False, False, id="twice-as-fast"),
        pytest.param(1.0, 0.995, 0.01, None, False, False, False, id="inside-the-floor"),
        pytest.param(1.0, 0.97, 0.05, None, False, False, False, id="inside-a-wide-floor"),
        pytest.param(1.0, 0.9, 0.05, None, True, False, False, id="above-a-wide-floor"),
        pytest.param(1.0, 1.2, 0.01, None, False, True, False, id="slower"),
        pytest.param(1.0, 0.3, 0.01, 0.4, False, False, True, id="below-sol-is-suspect-not-faster"),
        pytest.param(1.0, 0.395, 0.01, 0.4, True, False, False, id="within-the-suspect-margin"),
        pytest.param(None, 0.5, 0.01, None, False, False, False, id="no-parent-time"),
    ],
)
def test_decide_case(
    parent: float | None,
    candidate: float,
    floor: float,
    sol: float | None,
    faster: bool,
    slower: bool,
    suspect: bool,
) -> None:
    decision = decide_case(parent, candidate, floor, sol)
    assert (decision.faster, decision.slower, decision.suspect) == (faster, slower, suspect)


def _case(speedup: float | None, floor: float = 0.01, suspect: bool = False) -> CaseDecision:
    return CaseDecision(
        speedup=speedup,
        floor=floor,
        faster=speedup is not None and speedup > 1 + floor and not suspect,
        slower=speedup is not None and speedup < 1 / (1 + floor),
        suspect=suspect,
    )


@pytest.mark.parametrize(
    ("correct", "cases", "expected"),
    [
        pytest.param(False, [_case(3.0)], TimingVerdict.FAILED, id="incorrect-is-failed-however-fast"),
        pytest.param(True, [_case(1.5), _case(1.2)], TimingVerdict.IMPROVED, id="faster-everywhere"),
        pytest.param(True, [_case(2.0), _case(0.9)], TimingVerdict.NO_GAIN, id="a-slower-case-blocks-improved"),
        pytest.param(True, [_case(1.005), _case(0.998)], TimingVerdict.NO_GAIN, id="noise"),
        pytest.param(True, [_case(1.04, floor=0.05)], TimingVerdict.NO_GAIN, id="gain-inside-a-wide-floor"),
        pytest.param(True, [_case(0.8), _case(0.85)], TimingVerdict.SLOWER, id="slower"),
        pytest.param(True, [_case(2.0), _case(5.0, suspect=True)], TimingVerdict.SUSPECT, id="suspect-case"),
        # one noisy case (a launch-bound shape, 44 % spread) no longer sets the bar for all:
        # the geomean 1.41x clears the combined floor 1.087x, and 1.0x is not slower by 44 %
        pytest.param(
            True,
            [_case(1.9, 0.02), _case(2.6, 0.02), _case(1.3, 0.02), _case(1.0, 0.44), _case(0.93, 0.02)],
            TimingVerdict.NO_GAIN,
            id="a-case-slower-than-its-own-floor-still-blocks",
        ),
        pytest.param(
            True,
            [_case(1.9, 0.02), _case(2.6, 0.02), _case(1.3, 0.02), _case(0.75, 0.44)],
            TimingVerdict.IMPROVED,
            id="noisy-case-inside-its-own-floor",
        ),
        pytest.param(
            True, [_case(1.10, 0.02), _case(1.05, 0.30)], TimingVerdict.NO_GAIN, id="geomean-inside-the-combined-floor"
        ),
        pytest.param(True, [_case(None)], TimingVerdict.UNTIMED, id="untimed"),
        pytest.param(True, [], TimingVerdict.UNTIMED, id="no-cases"),
    ],
)
def test_overall_verdict(correct: bool, cases: list[CaseDecision], expected: TimingVerdict) -> None:
    assert overall(correct, cases) is expected


def test_helpers() -> None:
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([1.0, 2.0]) == 1.5
    assert median([]) is None
    assert geomean([1.0, 4.0]) == pytest.approx(2.0)
    assert geomean([]) is None
    assert is_suspect(0.5, 1.0)
    assert not is_suspect(1.0, 1.0)
    assert not is_suspect(0.5, None)


def test_the_combined_floor_is_the_geomean_of_one_plus_each_floor() -> None:
    cases = [_case(1.5, 0.02), _case(1.5, 0.02), _case(1.5, 0.44)]
    expected = (1.02 * 1.02 * 1.44) ** (1 / 3) - 1
    assert combined_floor(cases) == pytest.approx(expected)
    assert combined_floor([_case(None)]) == MIN_NOISE_FLOOR
    # never above the largest floor, never below the smallest
    assert 0.02 < combined_floor(cases) < 0.44


@pytest.mark.parametrize(
    ("verdict", "rejected", "label"),
    [
        pytest.param(Verdict.IMPROVED, False, "improved", id="improved"),
        pytest.param(Verdict.NO_GAIN, True, "no gain", id="no-gain"),
        pytest.param(Verdict.FAILED, True, "failed", id="failed"),
        pytest.param(Verdict.INCONCLUSIVE, False, "inconclusive", id="inconclusive"),
        # correct, never timed: not "no gain", and the same rewrite is not checked twice
        pytest.param(Verdict.UNTIMED, True, "correct, speed not measured", id="untimed"),
    ],
)
def test_a_round_verdict_says_whether_its_family_was_tried_and_rejected(
    verdict: Verdict, rejected: bool, label: str
) -> None:
    assert (verdict.rejected, verdict.label) == (rejected, label)


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        pytest.param([2.0, 8.0], 4.0, id="plain"),
        pytest.param([2.0, None, 0.0, -1.0, 8.0], 4.0, id="none-and-non-positive-left-out"),
        pytest.param([2.0, float("inf"), float("nan"), 8.0], 4.0, id="non-finite-left-out"),
        pytest.param([None, float("inf")], None, id="nothing-left"),
    ],
)
def test_geomean_of_the_positive_finite_values(values: list[float | None], expected: float | None) -> None:
    assert geomean(values) == (pytest.approx(expected) if expected is not None else None)
