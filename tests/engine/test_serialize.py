"""The stored JSON shapes (diagnosis.engine.serialize): one encoder and one decoder each."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from diagnosis.engine import serialize as ser
from diagnosis.engine.evidence import ArtefactRef, Family, Finding, Severity, Tier, register_code
from diagnosis.engine.proposers.base import Candidate
from diagnosis.engine.records import (
    CandidateOutcome,
    CaseTiming,
    DecisionRecord,
    EvidenceRef,
    Hypothesis,
    LoopResult,
    RoundCost,
    RoundRecord,
    StopReason,
    VersionStats,
    sha256,
)
from diagnosis.engine.verdict import Verdict

ROOT = Path(__file__).resolve().parents[2]
NEWEST_RESULT = ROOT / "bench" / "results" / "2026-11-30-nvidia-h200-6.json"

CODE = register_code("TEST-SERIALIZE", Tier.IR, Family.HINTS, "{kernel}: line {line} loads are scalar")
FINDING = Finding(
    CODE.code,
    Severity.HIGH,
    {"kernel": "k", "line": 3, "widths": (32, 32)},
    lines=(3,),
    kernel="k",
    evidence=(ArtefactRef("ptx", "k", (1, 2), "ld.global.b32 %r1", ""),),
    gain=1.5,
)
CASES = (CaseTiming(0, 0.5, 1.0, 0.1), CaseTiming(1, 0.25, 0.5, 0.05))
OUTCOME = CandidateOutcome(
    correct=True,
    cases=CASES,
    parent_ms=(1.0, 0.3),
    noise=0.02,
    case_noise=(0.02, 0.01),
    case_rounds=(((0.5, 0.51), (1.0, 1.02)), ((0.25, 0.25), (0.3, 0.3))),
    wall_s=1.5,
    device_s=1.25,
    autotune_choices=(("case 0", ("k: BLOCK=256, num_warps=8",)),),
    gate_notes=("no odd-shaped case could be derived from case 0: no input dimension is 16 or larger",),
    checked=("case 0", "case 1"),
    skipped=("verify 0",),
)
DECISION = DecisionRecord(Tier.IR, False, None, "sufficient", Family.HINTS, ())
ROUND = RoundRecord(
    index=1,
    parent_sha256=sha256("parent"),
    tier_reached=Tier.IR,
    verdict=Verdict.IMPROVED,
    reason="verified: 1.5x",
    hypothesis=Hypothesis(Family.HINTS, "vector loads", (CODE.code,)),
    evidence=[EvidenceRef(CODE.code, Tier.IR, Family.HINTS, (3,), "k", ("ptx:k",))],
    findings=[FINDING],
    decisions=[DecisionRecord(Tier.TRIAGE, True, Tier.IR, "climb", None, ("localizes",)), DECISION],
    proposal=Candidate("child source", "--- a\n+++ b\n", Family.HINTS, "hint it", (CODE.code,), "rules", 7),
    outcome=OUTCOME,
    cost=RoundCost(1.5, 1.25, 7, {0: 0.1, 2: 0.4}, {0: 0.0, 2: 0.0}, 1.0, 1.25),
)
# a rules candidate: the Rewrite's mechanism and effect kept apart from the one-line rationale
PARTED = Candidate(
    "child source",
    "--- a\n+++ b\n",
    Family.HINTS,
    "hint it",
    (CODE.code,),
    "rules",
    mechanism="tl.multiple_of on the offsets",
    expected="v4 loads: up to 4x fewer load instructions",
)
INITIAL = VersionStats(sha256("parent"), (CaseTiming(0, 1.0, 1.0, 0.1), CaseTiming(1, 0.3, 0.5, 0.05)))
RESULT = LoopResult(
    initial_source="parent",
    best_source="child source",
    initial=INITIAL,
    best=VersionStats(sha256("child source"), CASES),
    rounds=[ROUND],
    stop_reason=StopReason.ROUND_BUDGET,
    stop_detail="used the round budget (1 rounds)",
    speedups_over_initial=(2.0, 1.2),
    wall_s=3.0,
    device_s=2.5,
    tokens=7,
    baseline_wall_s=1.0,
    baseline_device_s=0.75,
    device_name="NVIDIA H200",
)


def _json(value: Any) -> Any:
    """What a JSON column or file gives back."""
    return json.loads(json.dumps(value))


# --- a record encoded, stored and decoded is the record --------------------------------------


@pytest.mark.parametrize(
    ("encode", "decode", "record"),
    [
        pytest.param(lambda c: ser.case_json(c, db=True), ser.case_from_json, CASES[0], id="case"),
        pytest.param(ser.version_json, ser.version_from_json, INITIAL, id="version"),
        pytest.param(ser.decision_json, ser.decision_from_json, DECISION, id="decision"),
        pytest.param(ser.verification_json, ser.verification_from_json, OUTCOME, id="verification"),
        pytest.param(ser.outcome_json, ser.outcome_from_json, OUTCOME, id="outcome"),
        pytest.param(ser.hypothesis_json, ser.hypothesis_from_json, ROUND.hypothesis, id="hypothesis"),
        pytest.param(ser.evidence_json, ser.evidence_from_json, ROUND.evidence[0], id="evidence"),
        pytest.param(
            lambda p: ser.proposal_json(p, sources=True),
            ser.proposal_from_json,
            ROUND.proposal,
            id="proposal",
        ),
        pytest.param(ser.cost_json, ser.cost_from_json, ROUND.cost, id="cost"),
        pytest.param(
            lambda p: ser.proposal_json(p, sources=True),
            ser.proposal_from_json,
            PARTED,
            id="proposal-with-rationale-parts",
        ),
    ],
)
def test_a_record_decodes_to_what_was_encoded(
    encode: Callable[[Any], Any], decode: Callable[[Any], Any], record: Any
) -> None:
    assert decode(_json(encode(record))) == record


@pytest.mark.parametrize("for_db", [False, True], ids=["report", "database"])
def test_a_finding_decodes_with_its_code_family_tier_and_message(for_db: bool) -> None:
    stored = _json(ser.finding_json(FINDING, db=for_db))
    back = ser.finding_from_json(stored)
    assert (back.code, back.severity, back.family, back.tier) == (
        CODE.code,
        Severity.HIGH,
        Family.HINTS,
        Tier.IR,
    )
    assert back.message == "k: line 3 loads are scalar" and back.lines == (3,) and back.gain == 1.5
    assert back.evidence == FINDING.evidence
    assert ser.finding_json(back, db=for_db) == stored


def test_a_finding_whose_code_is_not_registered_reads_back_as_it_was_written() -> None:
    stored = {**_json(ser.finding_json(FINDING)), "code": "RETIRED-CODE", "tier": 2, "message": "gone {now}"}
    back = ser.finding_from_json(stored)
    assert (back.tier, back.family, back.message) == (Tier.IR, Family.HINTS, "gone {now}")
    assert ser.finding_json(back) == stored


def test_a_round_decodes_to_what_was_encoded_but_its_tier_artefacts() -> None:
    stored = _json(ser.round_json(ROUND, sources=True))
    back = ser.round_from_json(stored)
    assert ser.round_json(back, sources=True) == stored
    assert (back.verdict, back.proposal, back.outcome, back.tier_results) == (
        Verdict.IMPROVED,
        ROUND.proposal,
        OUTCOME,
        [],
    )


def test_the_run_summary_keeps_how_the_loop_ended_and_both_versions() -> None:
    summary = ser.summary_from_json(_json(ser.summary_json(RESULT, best_proposal_id=12, attempt=2)))
    assert summary is not None
    assert (summary.stop_reason, summary.attempt, summary.best_proposal) == (StopReason.ROUND_BUDGET, 2, 12)
    assert (summary.initial, summary.best) == (RESULT.initial, RESULT.best)
    assert summary.speedup_over_initial == pytest.approx(math.sqrt(2.4))
    assert summary.winning_tiers == (Tier.IR,) and summary.best_sha256 == sha256("child source")


UNCHECKED = LoopResult(
    initial_source="parent",
    best_source="parent",
    initial=None,
    best=None,
    stop_reason=StopReason.DIAGNOSED_ONLY,
    unchecked="no case is small enough to check on this device (limit 65536 elements)",
    skipped_cases=("case 0", "case 1"),
)


@pytest.mark.parametrize(
    ("stored", "checked", "skipped"),
    [
        pytest.param(ser.summary_json(RESULT, best_proposal_id=None, attempt=1), True, (), id="checked"),
        pytest.param(ser.summary_json(UNCHECKED, best_proposal_id=None, attempt=1), False, ("case 0", "case 1"),
                     id="not-checked"),
        # stored before the flag: the diagnosis-only run is the one that checked nothing
        pytest.param({"stop_reason": "diagnosed_only"}, False, (), id="old-diagnosis-only"),
        pytest.param({"stop_reason": "round_budget"}, True, (), id="old-run"),
    ],
)  # fmt: skip
def test_the_summary_says_whether_the_initial_version_was_checked(
    stored: dict, checked: bool, skipped: tuple[str, ...]
) -> None:
    summary = ser.summary_from_json(_json(stored))
    assert summary is not None and (summary.checked, summary.skipped_cases) == (checked, skipped)
    assert bool(summary.unchecked) is (not checked and "unchecked" in stored)
    report = ser.loop_report_from_json(ser.loop_result_json(UNCHECKED))
    assert (report.unchecked, report.skipped_cases) == (UNCHECKED.unchecked, UNCHECKED.skipped_cases)


@pytest.mark.parametrize("stored", [{}, None, "x"], ids=["empty", "null", "not-an-object"])
def test_nothing_recorded_decodes_to_none(stored: object) -> None:
    assert ser.verification_from_json(stored) is None
    assert ser.summary_from_json(stored) is None


def test_a_verification_stored_before_floors_and_rounds_were_kept_still_decodes() -> None:
    back = ser.verification_from_json(
        {"correct": True, "timed": True, "cases": [{"index": 0, "time_ms": 0.5, "parent_ms": 1.0}]}
    )
    assert back is not None
    assert (back.parent_ms, back.case_noise, back.case_rounds, back.speedup) == ((1.0,), (), (), 2.0)
    assert back.gate_notes == ()  # stored before the gate kept notes


# --- the JSON written stays the same keys ---------------------------------------------------


def test_the_verification_keeps_its_keys_and_a_row_per_case() -> None:
    stored = ser.verification_json(OUTCOME)
    assert list(stored) == ["correct", "error_kind", "message", "timed", "cases", "autotune_choices", "speedup",
                            "noise", "suspect", "wall_s", "device_s", "checked", "skipped", "gate_notes"]  # fmt: skip
    assert stored["cases"][0] == {
        "index": 0,
        "time_ms": 0.5,
        "ref_ms": 1.0,
        "sol_ms": 0.1,
        "pct_sol": 20.0,
        "speedup_over_eager": 2.0,
        "parent_ms": 1.0,
        "speedup": 2.0,
        "noise_floor": 0.02,
        "rounds_ms": {"candidate": [0.5, 0.51], "parent": [1.0, 1.02]},
        "autotune_choice": "k: BLOCK=256, num_warps=8",
    }
    assert "autotune_choice" not in stored["cases"][1]


def test_the_loop_report_keeps_its_keys() -> None:
    stored = ser.loop_result_json(RESULT, sources=True)
    assert list(stored) == [
        "initial_sha256", "best_sha256", "improved", "cases", "speedup_over_initial", "speedup_over_eager",
        "initial_speedup_over_eager", "initial_pct_sol", "pct_sol", "rounds_used", "verdicts", "winning_rounds",
        "winning_tiers", "winning_families", "stop_reason", "stop_detail", "error", "wall_s", "device_s",
        "baseline_wall_s", "baseline_device_s", "tokens", "unchecked", "skipped_cases", "rounds", "initial_source",
        "best_source",
    ]  # fmt: skip
    assert stored["verdicts"] == {"improved": 1, "no-gain": 0, "untimed": 0, "failed": 0, "inconclusive": 0}
    assert list(stored["rounds"][0]["outcome"]) == [
        "correct", "error_kind", "message", "cases", "parent_ms", "speedups", "speedup", "noise", "case_noise",
        "case_rounds", "suspect", "wall_s", "device_s", "autotune_choices", "checked", "skipped", "gate_notes",
    ]  # fmt: skip


def test_the_rationale_keeps_mechanism_expected_and_the_addressed_findings_only() -> None:
    other = Finding(CODE.code.replace("SERIALIZE", "OTHER"), Severity.LOW, {"kernel": "k", "line": 9})
    stored = _json(ser.rationale_json(PARTED, [FINDING, other, FINDING]))
    back = ser.rationale_from_json(stored)
    assert back is not None and not back.empty
    assert (back.mechanism, back.expected) == (PARTED.mechanism, PARTED.expected)
    assert back.evidence == (ser.RationaleEvidence(CODE.code, 2, (3,), "k", "k: line 3 loads are scalar"),)


@pytest.mark.parametrize("stored", [{}, None, []], ids=["empty", "null", "not-an-object"])
def test_a_proposal_stored_before_rationale_parts_has_none(stored: object) -> None:
    assert ser.rationale_from_json(stored) is None


def test_a_report_proposal_without_rationale_parts_has_no_keys_for_them() -> None:
    assert {"mechanism", "expected"}.isdisjoint(ser.proposal_json(ROUND.proposal))
    assert {"mechanism", "expected"} <= set(ser.proposal_json(PARTED))


def test_the_database_form_of_a_number_is_null_where_json_has_none() -> None:
    row = ser.finding_json(
        Finding(CODE.code, Severity.LOW, {"kernel": "k", "line": 1, "x": float("nan")}, gain=float("inf")),
        db=True,
    )
    assert (row["gain"], row["args"]["x"]) == (None, None)
    assert ser.case_json(CaseTiming(0, float("inf")), db=True)["time_ms"] is None


def test_the_database_form_of_a_finding_cuts_long_excerpts() -> None:
    ref = ArtefactRef("ptx", "k", (), "x" * (ser.MAX_EXCERPT_CHARS + 10))
    assert len(ser.artefact_ref_json(ref, db=True)["excerpt"]) == ser.MAX_EXCERPT_CHARS
    assert len(ser.artefact_ref_json(ref)["excerpt"]) == ser.MAX_EXCERPT_CHARS + 10


def test_plain_json_turns_engine_values_into_json() -> None:
    assert ser.plain_json({"f": Family.HINTS, "t": (1, 2.5), "nan": float("nan"), 3: {"s"}}) == {
        "f": "hints",
        "t": [1, 2.5],
        "nan": None,
        "3": ["s"],
    }


# --- a result file committed today loads ----------------------------------------------------


def _close(a: Any, b: Any, where: str = "") -> None:
    """Equal JSON, numbers to the report's rounding: derived figures (pct_sol, speedups) come
    back from the rounded times they were derived from."""
    if isinstance(a, float) or isinstance(b, float):
        assert a == pytest.approx(b, rel=1e-3, abs=1e-6), where
    elif isinstance(a, dict) and isinstance(b, dict):
        assert list(a) == list(b), where
        for k in a:
            _close(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _close(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


def test_the_newest_committed_result_file_loads_with_the_decoders() -> None:
    result = json.loads(NEWEST_RESULT.read_text())
    loaded = [(op, ser.loop_report_from_json(op)) for op in result["operators"] if op.get("status") == "ok"]
    assert len(loaded) == 37
    for op, report in loaded:
        assert report.rounds is not None and len(report.rounds) == report.rounds_used
        assert sum(report.verdicts.values()) == report.rounds_used
        assert [r.index for r in report.rounds if r.verdict is Verdict.IMPROVED] == list(
            report.winning_rounds
        )
        assert len(report.cases) == len(op["cases"]) and report.cases[0].best_ms == op["cases"][0]["best_ms"]
        for stored, decoded in zip(op["rounds"], report.rounds, strict=True):
            again = ser.round_json(decoded)
            if stored["proposal"] is not None:  # a report keeps the source's sha256, not the source
                again["proposal"]["sha256"] = stored["proposal"]["sha256"]
            _close(again, stored, f"{op['name']} round {stored['index']}")
