"""Rounds and runs in a kernel engineer's words.

The engine records its reasons for itself ("inconclusive: max tier reached; the deepest
evidence (tier 3) does not narrow, does not explain"); a page says what that means for the
kernel ("Nothing to try: even the compiler's passes (tier 3) do not say which rewrite to try,
nor why one would be faster"). Everything here reads stored records (a round's verdict, its
escalation decisions and its proposal's outcome, a run's summary) and returns sentences; the
templates only place them. The raw reason stays on the page, folded, for whoever wants it.

Plain Python: no Django (tests/web/test_wording.py is tables of stored records -> words).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from diagnosis.engine.records import CandidateOutcome, StopReason
from diagnosis.engine.serialize import RunSummary
from diagnosis.engine.verdict import Verdict

TIER_WORDS = {
    0: "the source patterns (tier 0)",
    1: "the profile (tier 1)",
    2: "the compiled IR (tier 2)",
    3: "the compiler's passes (tier 3)",
}
# what the evidence must do before a round proposes (DESIGN.md: the three tests), said as
# what is missing when a test fails
MISSING = {
    "localizes": "which line costs the time",
    "narrows": "which one kind of rewrite to try",
    "explains": "why a rewrite would be faster",
}
FAMILY_WORDS = {
    "launch_config": "the launch configuration (block sizes, warps, stages, autotuning)",
    "hints": "divisibility and contiguity hints",
    "single_pass": "a single pass over each row",
    "block_reduction": "an in-block reduction instead of atomics",
    "use_dot": "tl.dot instead of a multiply and sum",
    "coalesce": "coalesced access",
    "index_math": "cheaper index arithmetic",
    "fusion": "fusing launches",
    "dot_precision": "the precision of tl.dot",
    "masking": "the masks",
    "int64_offsets": "64-bit offsets",
    "swizzle": "grouped program order",
    "pipelining": "software pipelining",
    "hoist": "hoisting loop-invariant work",
    "two_stage": "a two-stage reduction",
}
# runner.errors.KINDS: what a candidate that failed the gate did, in words
FAILURE_WORDS = {
    "syntax_error": "does not parse",
    "import_error": "fails to import",
    "missing_name": "lacks a required name",
    "bad_inputs": "breaks its input functions",
    "state_dict_mismatch": "cannot take the reference's weights",
    "compile_error": "does not compile",
    "exception": "raises while running",
    "shape_mismatch": "returns the wrong shape",
    "dtype_mismatch": "returns the wrong dtype",
    "nan_mismatch": "puts NaN or Inf where the reference has none (or the other way round)",
    "incorrect": "gives wrong results",
    "no_triton_launch": "launches no Triton kernel",
    "constant_output": "returns the same output whatever its input",
    "device_error": "failed on the device",
    "oom": "runs out of memory",
    "timeout": "ran past its time limit",
    "crashed": "crashed the process",
    "reference_changed": "changes the reference it is judged against",
}

# "inconclusive: max tier reached; the deepest evidence (tier 3) does not narrow, does not explain"
_DEEPEST = re.compile(r"the deepest evidence \(tier (\d)\)")
# "no applicable rewrite for launch_config, hints"
_NO_REWRITE = re.compile(r"no applicable rewrite for ([a-z_, ]+)")
# "verified: 1.665x over its parent (floor 2.2 %)" / "within the floor of 2.0 %"
_FLOOR = re.compile(r"floor(?: of)? ([\d.]+) %")
# "launch_config: more work and ... (backed by T0-NO-AUTOTUNE, T1-FEW-PROGRAMS)"
_HYPOTHESIS = re.compile(r"^[a-z_]+: .*\(backed by [^)]*\)$")


def missing(tests: Sequence[str]) -> str:
    """'which line costs the time, nor why a rewrite would be faster'."""
    parts = [MISSING[t] for t in tests if t in MISSING]
    if not parts:
        return ""
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + ", nor " + parts[-1]


def family_words(family: str) -> str:
    return FAMILY_WORDS.get(family, family.replace("_", " "))


def speed(value: object) -> str:
    """A ratio parent / candidate in words: "2.31x faster", "1.25x slower", "not timed" (the
    `speedup_words` filter of the templates is this)."""
    if value is None or value == "":
        return "not timed"
    try:
        v = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return str(value)
    if v <= 0:
        return "not timed"
    if abs(v - 1.0) < 0.005:
        return "same speed (1.00x)"
    return f"{v:.2f}x faster" if v > 1 else f"{1 / v:.2f}x slower"


def split_hypothesis(text: str) -> tuple[str, str]:
    """A stored Round.hypothesis is the hypothesis, a newline and the loop's reason
    (runner.persist); either may be missing. Returns (hypothesis, reason)."""
    first, _, rest = (text or "").strip().partition("\n")
    if rest:
        return first.strip(), rest.strip()
    if _HYPOTHESIS.match(first):
        return first, ""
    return "", first


@dataclass(frozen=True)
class RoundWords:
    """A round in words: one sentence, what led there, and whether it did anything at all."""

    headline: str
    steps: tuple[str, ...]  # the escalation, tier by tier
    idle: bool  # proposed nothing: folded with its neighbours on the run page
    tone: str  # improved, same, failed, idle, pending: the badge's class
    badge: str = ""  # the verdict in two words: "faster", "not timed", "nothing to try"


def _steps(decisions: Sequence[Mapping]) -> tuple[str, ...]:
    """Which evidence the round read, and what the last of it still lacked."""
    if not decisions:
        return ()
    tiers = [d.get("tier") for d in decisions]
    tiers += [d.get("next_tier") for d in decisions if d.get("climb") and d.get("next_tier") is not None]
    read = [TIER_WORDS.get(t, f"tier {t}") for t in sorted({t for t in tiers if isinstance(t, int)})]
    path = read[0] if len(read) == 1 else ", ".join(read[:-1]) + " and " + read[-1]
    steps = [f"Read {path}."]
    last = decisions[-1]
    gaps = missing(last.get("failed_tests") or ())
    if any("no timing on this device" in str(d.get("reason") or "") for d in decisions):
        steps.append("Nothing can be timed on this device, so every compile tier ran.")
    if gaps:
        steps.append(f"The evidence does not show {gaps}.")
    else:
        steps.append("The evidence shows where the time goes, what to change and why.")
    return tuple(steps)


def _failure(outcome: CandidateOutcome | None, reason: str) -> str:
    if outcome is not None and outcome.suspect:
        return (
            "The rewrite was timed faster than the speed of light allows: the timing is suspect, not a win."
        )
    kind = outcome.error_kind if outcome is not None else ""
    if not kind and reason.startswith("suspect"):
        return (
            "The rewrite was timed faster than the speed of light allows: the timing is suspect, not a win."
        )
    words = FAILURE_WORDS.get(kind, f"failed verification ({kind})" if kind else "failed verification")
    return f"The rewrite {words}."


def _idle(reason: str, decisions: Sequence[Mapping]) -> str:
    """Why a round proposed nothing."""
    if reason.startswith("interrupted"):
        return "Interrupted: the worker stopped during this round."
    if "nothing can be verified on this device" in reason:
        return "No proposal: no case of this kernel can be checked for correctness on this device."
    if "map to no untried rewrite family" in reason:
        return "Nothing left to try: every rewrite the findings point to was tried on this version."
    last = decisions[-1] if decisions else {}
    gaps = missing(last.get("failed_tests") or ())
    deepest = _DEEPEST.search(reason)
    tier = int(deepest[1]) if deepest else last.get("tier")
    if reason.startswith("inconclusive") and gaps:
        upto = TIER_WORDS.get(tier, f"tier {tier}")
        return f"Nothing to try: the evidence, up to {upto}, does not show {gaps}."
    if no_rewrite := _NO_REWRITE.search(reason):
        families = [f.strip() for f in no_rewrite[1].split(",") if f.strip()]
        return "Nothing to try: no rule rewrites " + " or ".join(family_words(f) for f in families) + " here."
    if reason.startswith("inconclusive"):
        return "Nothing to try: the evidence explains nothing that a rewrite could change."
    return f"No proposal: {reason}." if reason and reason != "no candidate" else "No proposal."


def round_words(
    verdict: str,
    reason: str,
    decisions: Sequence[Mapping],
    outcome: CandidateOutcome | None,
    has_proposal: bool,
) -> RoundWords:
    """The round (its stored verdict, the loop's reason, its escalation decisions and its
    proposal's outcome) in words."""
    steps = _steps(decisions)
    notes = []
    if no_rewrite := _NO_REWRITE.search(reason):
        families = [f.strip() for f in no_rewrite[1].split(",") if f.strip()]
        notes.append("No rule rewrites " + " or ".join(family_words(f) for f in families) + " here.")
    if verdict == "pending":
        return RoundWords("Under way.", steps, False, "pending", "under way")
    if verdict == Verdict.IMPROVED:
        ratio = outcome.speedup if outcome is not None else None
        floor = _FLOOR.search(reason)
        noise = f", beyond the {floor[1]} % noise of the timing" if floor else ""
        return RoundWords(
            f"{speed(ratio).capitalize()} than its parent{noise}, and correct on every case.",
            steps + tuple(notes),
            False,
            "improved",
            "faster",
        )
    if verdict == Verdict.NO_GAIN:
        if outcome is not None and not outcome.timed:
            return RoundWords(
                "Correct; speed not measured on this device.",
                steps + tuple(notes),
                False,
                "same",
                "not timed",
            )
        ratio = outcome.speedup if outcome is not None else None
        floor = _FLOOR.search(reason)
        within = f"within the {floor[1]} % noise of the timing" if floor else "within the noise of the timing"
        slower = " and slower on some case" if "slower on case" in reason else ""
        figure = f"{ratio:.2f}x" if ratio else "its time"
        return RoundWords(
            f"Correct, but not faster: {figure} is {within}{slower}.",
            steps + tuple(notes),
            False,
            "same",
            "not faster",
        )
    if verdict == Verdict.FAILED:
        return RoundWords(_failure(outcome, reason), steps + tuple(notes), False, "failed", "failed")
    return RoundWords(_idle(reason, decisions), steps, not has_proposal, "idle", "nothing to try")


# --- a run ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunWords:
    """The run's state in one sentence and the facts behind it."""

    headline: str
    notes: tuple[str, ...]
    tone: str  # good, plain, warn, bad


def run_words(status: str, summary: RunSummary | None, *, error: str = "", device: str = "",
              timing_device: bool = True, absence: str = "") -> RunWords:  # fmt: skip
    """What the status box says above the facts. `absence`: why no worker takes a queued run
    (runner.workers.Presence.absence), '' when one is live."""
    if status == "queued":
        if absence:
            return RunWords(f"Waiting: {absence}; the run starts when one does.", (), "warn")
        return RunWords("Waiting for a worker.", (), "plain")
    if status == "running":
        return RunWords("Under way.", (), "plain")
    if status == "cancelled":
        return RunWords("Cancelled.", (), "plain")
    if status == "failed":
        if summary is not None and summary.stop_reason is StopReason.INITIAL_FAILED:
            return RunWords("Failed: the uploaded version does not pass its own check.", (), "bad")
        return RunWords("Failed before the loop could finish.", (), "bad")
    if summary is None:
        return RunWords("Done.", (), "plain")
    if summary.stop_reason is StopReason.DIAGNOSED_ONLY:
        detail = summary.stop_detail.removeprefix("diagnosis only, nothing verified or proposed: ")
        return RunWords(
            "Diagnosed only: correctness was not checked on this device, so nothing was proposed.",
            (f"Why: {detail}",) if detail else (),
            "warn",
        )
    initial = summary.initial
    timed = initial is not None and initial.timed
    notes = []
    if not timed:
        notes.append(
            f"Correct on every case the {device or 'device'} can check; speed not measured on this device."
            if not timing_device
            else "Correct on every case; its speed could not be measured."
        )
    if summary.improved and summary.speedup_over_initial:
        pct = f", {summary.pct_sol:.1f} %SOL" if summary.pct_sol else ""
        headline = f"Done: the best rewrite is {speed(summary.speedup_over_initial)} than the upload{pct}."
        tone = "good"
    elif summary.improved:
        headline = "Done: a rewrite passed every check."
        tone = "good"
    elif timed:
        headline = "Done: no rewrite was verified faster than the upload."
        tone = "plain"
    else:
        headline = "Done: correct, speed not measured on this device."
        tone = "plain"
    if summary.stop_detail:
        notes.append(f"Stopped: {_stop_words(summary)}")
    return RunWords(headline, tuple(notes), tone)


def _stop_words(summary: RunSummary) -> str:
    reason = summary.stop_reason
    if reason is StopReason.SOL_REACHED:
        return summary.stop_detail + "."
    if reason is StopReason.NOTHING_LEFT:
        return "the last rounds found nothing left to try."
    if reason is StopReason.ROUND_BUDGET:
        return f"every round of the budget was used ({summary.rounds})."
    if reason is StopReason.CANCELLED:
        return summary.stop_detail + "."
    return summary.stop_detail + "."
