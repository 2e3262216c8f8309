"""runner.persist's artefacts: once per source version of a run, and no server paths in any row."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps

from diagnosis.engine.evidence import Artefact as EngineArtefact
from diagnosis.engine.evidence import ArtefactRef, Finding, Severity, Tier, TierResult
from diagnosis.engine.paths import has_server_path
from diagnosis.engine.records import DecisionRecord, sha256
from diagnosis.engine.tier2 import COMPILE_ERROR
from diagnosis.models import Artefact, Proposal, Round
from diagnosis.models import Finding as FindingRow
from runner.persist import RunRecorder
from tests.conftest import GOOD_SOURCE, PROPOSED_SOURCE

pytestmark = pytest.mark.django_db

MODULE = "/tmp/kernelopt-loop-g83ianiq/v_65aabc8c202f3ebc.py"
TTIR = f'#loc = loc("{MODULE}":13:0)\n%x = tt.load %p loc(#loc)\n'
PTX = (
    f'\t.file\t1 "{MODULE}"\n'
    '\t.file\t2 "/work/main/.venv/lib/python3.11/site-packages/triton/language/standard.py"\n'
    "\tld.global.b32 %r1, [%rd1];\n"
)
DECISION = DecisionRecord(Tier.IR, False, None, "enough", None, ())


def tier2(ptx: str = PTX) -> TierResult:
    finding = Finding(
        COMPILE_ERROR.code,
        Severity.HIGH,
        {"kernel": "k", "target": "sm_90", "error": f"at 4:23 in {MODULE}"},
        lines=(17,),
        kernel="k",
        evidence=(ArtefactRef("log", "k", excerpt=f'File "{MODULE}", line 17'),),
    )
    return TierResult(
        Tier.IR,
        findings=[finding],
        artefacts=[EngineArtefact("ttir", "k.ttir", TTIR), EngineArtefact("ptx", "k.ptx", ptx)],
    )


def test_a_source_diagnosed_again_stores_no_second_copy(run) -> None:
    recorder = RunRecorder(run)
    for index in (1, 2, 3):  # a cpu run: every round diagnoses the upload again
        recorder.round_started(index, GOOD_SOURCE)
        recorder.tier_done(index, tier2(), DECISION)
    rows = Artefact.objects.filter(run=run)
    assert sorted(rows.values_list("kind", "round__index")) == [("ptx", 1), ("ttir", 1)]
    assert set(rows.values_list("source_sha256", flat=True)) == {sha256(GOOD_SOURCE)}
    assert set(Round.objects.filter(run=run).values_list("parent_sha256", flat=True)) == {sha256(GOOD_SOURCE)}


def test_another_source_or_another_text_is_stored(run) -> None:
    recorder = RunRecorder(run)
    recorder.round_started(1, GOOD_SOURCE)
    recorder.tier_done(1, tier2(), DECISION)
    recorder.round_started(2, PROPOSED_SOURCE)  # the round starts from a verified candidate
    recorder.tier_done(2, tier2(), DECISION)
    recorder.round_started(3, PROPOSED_SOURCE)
    recorder.tier_done(3, tier2(PTX + "\tst.global.b32 [%rd2], %r1;\n"), DECISION)
    by_source = {
        sha: sorted(Artefact.objects.filter(run=run, source_sha256=sha).values_list("kind", "round__index"))
        for sha in (sha256(GOOD_SOURCE), sha256(PROPOSED_SOURCE))
    }
    assert by_source == {
        sha256(GOOD_SOURCE): [("ptx", 1), ("ttir", 1)],
        sha256(PROPOSED_SOURCE): [("ptx", 2), ("ptx", 3), ("ttir", 2)],
    }


def test_a_retried_attempt_does_not_store_what_the_first_stored(run) -> None:
    first = RunRecorder(run)
    first.round_started(1, GOOD_SOURCE)
    first.tier_done(1, tier2(), DECISION)
    again = RunRecorder(run, round_offset=1)
    again.round_started(1, GOOD_SOURCE)
    again.tier_done(1, tier2(), DECISION)
    assert Artefact.objects.filter(run=run).count() == 2


def test_stored_text_names_the_upload_not_the_server(run) -> None:
    recorder = RunRecorder(run)
    recorder.round_started(1, GOOD_SOURCE)
    recorder.tier_done(1, tier2(), DECISION)
    ptx = Artefact.objects.get(run=run, kind="ptx").text
    assert '.file\t1 "double.py"' in ptx and '.file\t2 "triton/language/standard.py"' in ptx
    assert Artefact.objects.get(run=run, kind="ttir").text.startswith('#loc = loc("double.py":13:0)')
    finding = FindingRow.objects.get(run=run)
    assert finding.args["error"] == "at 4:23 in double.py"
    assert finding.evidence[0]["excerpt"] == 'File "double.py", line 17'
    for text in (ptx, finding.message, str(finding.args), str(finding.evidence)):
        assert not has_server_path(text), text


def test_a_run_artefact_is_stored_once_under_the_runs_version(run) -> None:
    recorder = RunRecorder(run)
    first = recorder.run_artefact("log", "baseline", f"read {MODULE}")
    assert recorder.run_artefact("log", "baseline", f"read {MODULE}") is None
    assert first.round is None and first.source_sha256 == run.version.sha256
    assert first.text == "read double.py"


def test_the_migration_fills_in_old_rows(run, version, round_) -> None:
    backfill = importlib.import_module("diagnosis.migrations.0002_llm_review_evidence_imports").backfill
    orphan = Round.objects.create(run=run, index=2)  # started from a candidate, no KernelVersion
    Proposal.objects.create(
        round=orphan, parent_source=PROPOSED_SOURCE, source="x", diff="", proposer="rules"
    )
    Round.objects.filter(run=run).update(parent_sha256="")
    old = [
        Artefact.build(run=run, round=round_, kind="ptx", name="k.ptx", text="a"),
        Artefact.build(run=run, round=orphan, kind="ptx", name="k.ptx", text="a"),
        Artefact.build(run=run, kind="log", name="baseline", text="b"),
    ]
    Artefact.objects.bulk_create(old)

    backfill(apps, None)

    assert dict(Round.objects.filter(run=run).values_list("index", "parent_sha256")) == {
        1: version.sha256,
        2: sha256(PROPOSED_SOURCE),
    }
    assert sorted(Artefact.objects.filter(run=run).values_list("name", "source_sha256")) == sorted(
        [("k.ptx", version.sha256), ("k.ptx", sha256(PROPOSED_SOURCE)), ("baseline", version.sha256)]
    )
