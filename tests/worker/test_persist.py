"""What runner.persist stores for each step of the loop, run in-process (no broker)."""

from __future__ import annotations

import pytest

from diagnosis.engine.records import sha256
from diagnosis.models import Artefact, DiagnosisRun, Finding, Proposal, Round
from runner import pipeline
from tests.worker.fakes import PTX, ScriptedLoop

pytestmark = pytest.mark.django_db


@pytest.fixture
def loop(monkeypatch) -> ScriptedLoop:
    scripted = ScriptedLoop()
    monkeypatch.setattr(pipeline, "run_loop", scripted)
    monkeypatch.setattr(pipeline, "make_executor", lambda run: "executor")
    return scripted


def test_findings_keep_every_field(run, loop) -> None:
    pipeline.execute_run(run.id)

    scalar = Finding.objects.get(run=run, code="test_worker.scalar_loads")
    assert scalar.round.index == 1
    assert (scalar.tier, scalar.severity, scalar.family) == (2, "high", "hints")
    assert scalar.message == "double_kernel: line 16 loads compile to scalar ld.global.b32"
    assert scalar.args == {"kernel": "double_kernel", "line": 16, "insn": "ld.global.b32", "widths": [32, 32]}
    assert scalar.lines == [16] and scalar.kernel == "double_kernel" and scalar.gain == 1.5
    assert scalar.evidence == [
        {"kind": "ptx", "kernel": "double_kernel", "lines": [12, 13], "excerpt": PTX[:200], "name": ""}
    ]
    triage = Finding.objects.get(run=run, code="test_worker.small_block")
    assert (triage.tier, triage.family, triage.lines) == (0, "launch_config", [23])


def test_each_finding_is_stored_once(run, loop) -> None:
    # round_finished repeats the findings tier_done already reported
    pipeline.execute_run(run.id)
    assert Finding.objects.filter(run=run).count() == 2


def test_artefacts_are_stored_compressed_with_their_round(run, loop) -> None:
    pipeline.execute_run(run.id)

    ptx = Artefact.objects.get(run=run, kind="ptx")
    assert ptx.name == "double_kernel.ptx" and ptx.round.index == 1
    assert ptx.text == PTX and ptx.size == len(PTX.encode()) and ptx.compressed_size < ptx.size
    # A kind the schema does not list is kept as a log, named after its kind.
    assert Artefact.objects.get(run=run, kind="log").name == "weird:notes"


def test_the_round_records_tier_verdict_escalation_and_cost(run, loop) -> None:
    pipeline.execute_run(run.id)

    rnd = Round.objects.get(run=run)
    assert (rnd.index, rnd.tier_reached, rnd.verdict) == (1, 2, "improved")
    assert rnd.parent_version_id == run.version_id
    assert rnd.hypothesis.startswith("launch_config: more bytes in flight")
    assert [d["tier"] for d in rnd.escalation] == [0, 2]
    assert rnd.escalation[0] == {
        "tier": 0,
        "climb": True,
        "next_tier": 1,
        "reason": "tier 0 does not localize the hotspot",
        "family": None,
        "failed_tests": ["localizes"],
    }
    assert (rnd.wall_s, rnd.device_s) == (1.5, 0.25)


def test_the_proposal_carries_diff_findings_and_verification(run, loop) -> None:
    pipeline.execute_run(run.id)

    proposal = Proposal.objects.get(round__run=run)
    assert proposal.status == Proposal.Status.PENDING  # verified and faster: awaiting review
    assert proposal.parent_version_id == run.version_id and proposal.parent_source == run.version.source
    assert "BLOCK=1024" in proposal.source and "+" in proposal.diff
    assert (proposal.proposer, proposal.family) == ("rules", "launch_config")
    assert [f.code for f in proposal.findings.all()] == ["test_worker.small_block"]
    # the rationale in parts: the candidate's mechanism and expectation, the findings it addresses
    assert (proposal.rationale_parts["mechanism"], proposal.rationale_parts["expected"]) == (
        "BLOCK 128 -> 1024",
        "more bytes in flight per program",
    )
    assert [(e["code"], e["lines"]) for e in proposal.rationale_parts["evidence"]] == [
        ("test_worker.small_block", [23])
    ]
    assert proposal.speedup == pytest.approx(2.0)
    assert proposal.pct_sol == pytest.approx(50.0)
    assert proposal.verification["correct"] is True
    assert proposal.verification["cases"] == [
        {
            "index": 0,
            "time_ms": 1.0,
            "ref_ms": 3.0,
            "sol_ms": 0.5,
            "pct_sol": 50.0,
            "speedup_over_eager": 3.0,
            "parent_ms": 2.0,
            "speedup": 2.0,
            "noise_floor": 0.01,  # the wider spread of the parent's and the candidate's timings
        }
    ]


def test_the_run_gets_totals_summary_and_best(run, loop) -> None:
    pipeline.execute_run(run.id)

    run.refresh_from_db()
    proposal = Proposal.objects.get(round__run=run)
    assert run.status == DiagnosisRun.Status.DONE
    assert (run.wall_s, run.device_s) == (2.5, 0.5)  # the round's cost plus the baseline's
    assert (run.current_round, run.current_tier) == (1, 2)
    assert run.best_version is None  # the best is a proposal, awaiting review
    summary = run.summary
    assert summary["best_proposal"] == proposal.id
    assert summary["best_sha256"] == sha256(proposal.source)
    assert summary["initial"]["cases"][0]["time_ms"] == 2.0
    assert summary["best"]["cases"][0]["time_ms"] == 1.0
    assert summary["speedup_over_initial"] == pytest.approx(2.0)
    assert summary["pct_sol"] == pytest.approx(50.0)
    assert summary["winning_tiers"] == [2]


def test_a_later_attempt_keeps_the_rounds_of_an_earlier_one(run, loop) -> None:
    # Attempt 1 died inside round 1: its round is open, its finding committed.
    first = Round.objects.create(run=run, index=1)
    Finding.objects.create(run=run, round=first, tier=0, code="x", severity="low", message="m")
    DiagnosisRun.objects.filter(id=run.id).update(attempts=1)

    pipeline.execute_run(run.id)

    rounds = list(Round.objects.filter(run=run).order_by("index").values_list("index", "verdict"))
    assert rounds == [(1, "inconclusive"), (2, "improved")]
    assert Round.objects.get(run=run, index=1).hypothesis.startswith("interrupted")
    assert loop.calls[0]["config"].round_budget == run.round_budget - 1
    assert Finding.objects.filter(run=run).count() == 3

