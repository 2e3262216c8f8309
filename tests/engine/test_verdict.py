"""Verification policy: noise floor, faster / slower, suspect, and the overall verdict."""

from __future__ import annotations

import pytest

from diagnosis.engine.verdict import (
    MIN_NOISE_FLOOR,
    CaseDecision,
    Verdict,
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
        pytest.param([], MIN_NOISE_FLOOR, id="none"),
    ],
)
def test_noise_floor_is_the_parents_relative_spread(repeats: list[float], expected: float) -> None:
    assert noise_floor(repeats) == pytest.approx(expected)


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
        pytest.param(False, [_case(3.0)], Verdict.FAILED, id="incorrect-is-failed-however-fast"),
        pytest.param(True, [_case(1.5), _case(1.2)], Verdict.IMPROVED, id="faster-everywhere"),
        pytest.param(True, [_case(2.0), _case(0.9)], Verdict.NO_GAIN, id="a-slower-case-blocks-improved"),
        pytest.param(True, [_case(1.005), _case(0.998)], Verdict.NO_GAIN, id="noise"),
        pytest.param(True, [_case(1.04, floor=0.05)], Verdict.NO_GAIN, id="gain-inside-a-wide-floor"),
        pytest.param(True, [_case(0.8), _case(0.85)], Verdict.SLOWER, id="slower"),
        pytest.param(True, [_case(2.0), _case(5.0, suspect=True)], Verdict.SUSPECT, id="suspect-case"),
        pytest.param(True, [_case(None)], Verdict.UNTIMED, id="untimed"),
        pytest.param(True, [], Verdict.UNTIMED, id="no-cases"),
    ],
)
def test_overall_verdict(correct: bool, cases: list[CaseDecision], expected: Verdict) -> None:
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
