"""diagnosis.wording: stored rounds and runs in a kernel engineer's words (tables of records)."""

from __future__ import annotations

import pytest

from diagnosis.engine.records import CandidateOutcome, CaseTiming, StopReason, VersionStats
from diagnosis.engine.serialize import RunSummary
from diagnosis.wording import round_words, run_words, split_hypothesis

TIMED = CandidateOutcome(True, cases=(CaseTiming(0, 0.1, 0.2, 0.05),), parent_ms=(0.2,), noise=0.02)
SAME = CandidateOutcome(True, cases=(CaseTiming(0, 0.1, 0.2, 0.05),), parent_ms=(0.101,), noise=0.02)
UNTIMED = CandidateOutcome(True, cases=(CaseTiming(0, None),))
WRONG = CandidateOutcome(False, error_kind="incorrect", message="max abs diff 2.0")
SUSPECT = CandidateOutcome(True, cases=(CaseTiming(0, 0.01, 0.2, 0.05),), parent_ms=(0.2,), suspect=True)

CLIMB = {
    "tier": 0,
    "climb": True,
    "next_tier": 1,
    "reason": "climb to tier 1",
    "failed_tests": ["localizes", "explains"],
}
ENOUGH = {"tier": 1, "climb": False, "next_tier": None, "reason": "sufficient", "failed_tests": []}
STUCK = {
    "tier": 3,
    "climb": False,
    "next_tier": None,
    "reason": "inconclusive",
    "failed_tests": ["narrows", "explains"],
}

ROUNDS = [
    pytest.param(
        "improved", "verified: 1.665x over its parent (floor 2.2 %)", [CLIMB, ENOUGH], TIMED, True,
        "2.00x faster than its parent, beyond the 2.2 % noise of the timing, and correct on every case.", False,
        id="improved",
    ),
    pytest.param(
        "no-gain", "correct, 1.010x over its parent: within the floor of 2.0 %", [ENOUGH], SAME, True,
        "Correct, but not faster: 1.01x is within the 2.0 % noise of the timing.", False, id="no-gain-timed",
    ),
    pytest.param(
        "no-gain", "correct; not timed on this device, so never counted as faster", [ENOUGH], UNTIMED, True,
        "Correct; speed not measured on this device.", False, id="correct-untimed",
    ),
    pytest.param(
        "failed", "failed verification (incorrect): max abs diff 2.0", [ENOUGH], WRONG, True,
        "The rewrite gives wrong results.", False, id="wrong",
    ),
    pytest.param(
        "failed", "suspect: a case ran faster than the speed-of-light bound", [ENOUGH], SUSPECT, True,
        "The rewrite was timed faster than the speed of light allows: the timing is suspect, not a win.", False,
        id="suspect",
    ),
    pytest.param(
        "inconclusive", "inconclusive: max tier reached; the deepest evidence (tier 3) does not narrow, does not explain",
        [STUCK], None, False,
        "Nothing to try: the evidence, up to the compiler's passes (tier 3), does not show which one kind of "
        "rewrite to try, nor why a rewrite would be faster.", True, id="inconclusive",
    ),
    pytest.param(
        "inconclusive", "sufficient: evidence up to tier 1 localizes, narrows and explains; no applicable rewrite for "
        "launch_config", [ENOUGH], None, False,
        "Nothing to try: no rule rewrites the launch configuration (block sizes, warps, stages, autotuning) here.",
        True, id="no-rewrite",
    ),
    pytest.param(
        "inconclusive", "sufficient: ...; no proposal: nothing can be verified on this device", [ENOUGH], None, False,
        "No proposal: no case of this kernel can be checked for correctness on this device.", True,
        id="diagnosed-only",
    ),
    pytest.param(
        "inconclusive", "interrupted: the worker stopped during this round", [], None, False,
        "Interrupted: the worker stopped during this round.", True, id="interrupted",
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("verdict", "reason", "decisions", "outcome", "proposed", "headline", "idle"), ROUNDS
)
def test_a_round_in_words(verdict, reason, decisions, outcome, proposed, headline, idle):
    words = round_words(verdict, reason, decisions, outcome, proposed)
    assert (words.headline, words.idle) == (headline, idle)
    assert "does not localize" not in " ".join(words.steps)  # never the engine's shorthand


@pytest.mark.parametrize(
    ("verdict", "outcome", "proposed", "badge"),
    [
        pytest.param("improved", TIMED, True, "faster", id="improved"),
        pytest.param("no-gain", SAME, True, "not faster", id="no-gain"),
        pytest.param("no-gain", UNTIMED, True, "not timed", id="untimed-is-not-no-gain"),
        pytest.param("failed", WRONG, True, "failed", id="failed"),
        pytest.param("inconclusive", None, False, "nothing to try", id="inconclusive"),
    ],
)
def test_the_verdict_badge_never_calls_an_untimed_proposal_no_gain(verdict, outcome, proposed, badge):
    assert round_words(verdict, "", [ENOUGH], outcome, proposed).badge == badge


def test_the_escalation_says_what_was_read_and_what_was_missing():
    words = round_words(
        "inconclusive", "inconclusive: ...", [CLIMB, {**ENOUGH, "tier": 2}, STUCK], None, False
    )
    assert words.steps == (
        "Read the source patterns (tier 0), the profile (tier 1), the compiled IR (tier 2) and the compiler's "
        "passes (tier 3).",
        "The evidence does not show which one kind of rewrite to try, nor why a rewrite would be faster.",
    )


@pytest.mark.parametrize(
    ("stored", "parts"),
    [
        pytest.param("hints: fewer scalar loads (backed by IR_SCALAR_GLOBAL)\nverified: 1.2x", (
            "hints: fewer scalar loads (backed by IR_SCALAR_GLOBAL)", "verified: 1.2x"), id="both"),
        pytest.param("hints: fewer scalar loads (backed by IR_SCALAR_GLOBAL)", (
            "hints: fewer scalar loads (backed by IR_SCALAR_GLOBAL)", ""), id="hypothesis-only"),
        pytest.param("inconclusive: max tier reached", ("", "inconclusive: max tier reached"), id="reason-only"),
        pytest.param("", ("", ""), id="empty"),
    ],
)  # fmt: skip
def test_a_stored_hypothesis_splits_into_hypothesis_and_reason(stored, parts):
    assert split_hypothesis(stored) == parts


def _summary(**kw) -> RunSummary:
    base = dict(
        stop_reason=StopReason.NOTHING_LEFT, stop_detail="2 consecutive rounds found nothing", attempt=1, rounds=3,
        improved=False, initial=VersionStats("a", (CaseTiming(0, 0.2, 0.3, 0.1),)),
        best=VersionStats("a", (CaseTiming(0, 0.2, 0.3, 0.1),)), best_proposal=None, best_sha256="a",
        speedup_over_initial=1.0, speedups_over_initial=(1.0,), speedup_over_eager=1.5, pct_sol=50.0,
        winning_tiers=(), device_name="NVIDIA H200", baseline_wall_s=1.0, baseline_device_s=1.0, error="",
    )  # fmt: skip
    return RunSummary(**{**base, **kw})


RUNS = [
    pytest.param("queued", None, {"absence": "no worker has been seen for cuda"},
                 "Waiting: no worker has been seen for cuda; the run starts when one does.", "warn", id="no-worker"),
    pytest.param("queued", None, {}, "Waiting for a worker.", "plain", id="queued"),
    pytest.param("done", _summary(improved=True, speedup_over_initial=2.04, pct_sol=40.17), {},
                 "Done: the best rewrite is 2.04x faster than the upload, 40.2 %SOL.", "good", id="improved"),
    pytest.param("done", _summary(), {}, "Done: no rewrite was verified faster than the upload.", "plain",
                 id="not-improved"),
    pytest.param("done", _summary(initial=VersionStats("a", (CaseTiming(0, None),)), pct_sol=None),
                 {"timing_device": False, "device": "cpu"}, "Done: correct, speed not measured on this device.",
                 "plain", id="cpu"),
    pytest.param("done", _summary(stop_reason=StopReason.DIAGNOSED_ONLY, initial=None,
                 stop_detail="diagnosis only, nothing verified or proposed: no input case is small enough"),
                 {"timing_device": False}, "Diagnosed only: correctness was not checked on this device, so nothing "
                 "was proposed.", "warn", id="diagnosed-only"),
    pytest.param("failed", _summary(stop_reason=StopReason.INITIAL_FAILED), {},
                 "Failed: the uploaded version does not pass its own check.", "bad", id="initial-failed"),
]  # fmt: skip


@pytest.mark.parametrize(("status", "summary", "kwargs", "headline", "tone"), RUNS)
def test_a_run_in_words(status, summary, kwargs, headline, tone):
    words = run_words(status, summary, **kwargs)
    assert (words.headline, words.tone) == (headline, tone)


def test_a_run_that_could_not_check_correctness_says_why():
    summary = _summary(stop_reason=StopReason.DIAGNOSED_ONLY, initial=None,
                       stop_detail="diagnosis only, nothing verified or proposed: no input case is small enough")  # fmt: skip
    assert run_words("done", summary, timing_device=False).notes == ("Why: no input case is small enough",)


def test_a_cpu_run_says_its_speed_was_not_measured():
    summary = _summary(initial=VersionStats("a", (CaseTiming(0, None),)))
    notes = run_words("done", summary, timing_device=False, device="cpu").notes
    assert notes[0] == "Correct on every case the cpu can check; speed not measured on this device."
