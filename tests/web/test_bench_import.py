"""manage.py import_results: a bench/run.py result file as runs a reviewer can work through."""

from __future__ import annotations

import copy
import hashlib
import json
from io import StringIO
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.urls import reverse

from diagnosis.api import run_json
from diagnosis.bench_import import import_results
from diagnosis.errors import ImportRefused
from diagnosis.models import BenchImport, DiagnosisRun, Finding, Kernel, KernelVersion, Proposal, Round
from diagnosis.reviews import accept_proposal, acceptability

pytestmark = pytest.mark.django_db

H200 = Path(settings.BASE_DIR) / "bench" / "results" / "2026-11-30-nvidia-h200-6.json"
TABLE = json.loads(H200.read_text())
SUITE = Path(settings.BASE_DIR) / "bench" / "suite"


def _op(name: str) -> dict:
    return copy.deepcopy(next(op for op in TABLE["operators"] if op["name"] == name))


def _file(tmp_path: Path, *ops: dict, **meta) -> Path:
    data = {"schema": 1, "meta": {**TABLE["meta"], **meta}, "operators": list(ops), "summary": {}}
    path = tmp_path / "results.json"
    path.write_text(json.dumps(data))
    return path


def _counts() -> list[int]:
    return [m.objects.count() for m in (Kernel, KernelVersion, DiagnosisRun, Round, Finding, Proposal)]


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture(scope="module")
def imported_table(django_db_setup, django_db_blocker):
    """The committed H200 table imported once for the module's read-only tests."""
    from django.contrib.auth import get_user_model

    from diagnosis.models import Team

    with django_db_blocker.unblock():
        user = get_user_model().objects.create_user("importer", password="importer-pass-1")
        team = Team.objects.create(name="bench")
        team.members.add(user)
        team.reviewers.add(user)
        outcome = import_results(H200, team=team, user=user)
        yield outcome
        Kernel.objects.filter(team=team).delete()
        DiagnosisRun.objects.filter(bench_import__team=team).delete()
        BenchImport.objects.filter(team=team).delete()
        team.delete()
        user.delete()


def test_every_operator_of_the_h200_table_is_a_finished_cuda_run_with_its_rounds(imported_table):
    runs = DiagnosisRun.objects.filter(bench_import=imported_table.bench)
    assert imported_table.skipped == [] and runs.count() == len(TABLE["operators"]) == 37
    assert set(runs.values_list("status", "device")) == {("done", "cuda")}
    assert Round.objects.filter(run__in=runs).count() == sum(len(op["rounds"]) for op in TABLE["operators"])
    assert Proposal.objects.filter(round__run__in=runs).count() == sum(
        1 for op in TABLE["operators"] for r in op["rounds"] if r["proposal"]
    )
    assert imported_table.bench.label == "a bench run on NVIDIA H200, 2026-11-30, commit 877efb0"


def test_each_imported_proposal_is_exactly_the_source_that_was_measured(imported_table):
    for op in TABLE["operators"]:
        run = DiagnosisRun.objects.get(bench_import=imported_table.bench, bench_operator=op["name"])
        assert run.version.sha256 == op["initial_sha256"] == _sha((SUITE / Path(op["file"]).name).read_text())
        by_round = {p.round.index: p for p in Proposal.objects.filter(round__run=run).select_related("round")}
        for r in op["rounds"]:
            if r["proposal"]:
                p = by_round[r["index"]]
                assert _sha(p.source) == r["proposal"]["sha256"], (op["name"], r["index"])
                assert _sha(p.parent_source) == r["parent_sha256"]
                assert p.verification["cases"][0]["parent_ms"] == r["outcome"]["parent_ms"][0]


def test_an_imported_run_reports_what_the_file_says(imported_table):
    op = _op("01_gemm_fp16")
    run = DiagnosisRun.objects.get(bench_import=imported_table.bench, bench_operator=op["name"])
    data = run_json(run)
    assert data["run"]["imported_from"] == {
        "file": H200.name,
        "sha256": imported_table.bench.sha256,
        "operator": op["name"],
        "device_name": "NVIDIA H200",
        "measured_on": imported_table.bench.measured_on,
        "commit": "877efb0",
    }
    report = data["report"]
    for key in ("speedup_over_initial", "pct_sol", "initial_pct_sol", "rounds_used", "winning_rounds",
                "stop_reason", "improved"):  # fmt: skip
        assert report[key] == op[key], key
    # verdicts the file's commit did not have yet (`untimed`) count zero
    assert report["verdicts"] == {**dict.fromkeys(report["verdicts"], 0), **op["verdicts"]}
    assert set(op["verdicts"]) <= set(report["verdicts"])
    assert [len(r["findings"]) for r in report["rounds"]] == [
        len({json.dumps(f, sort_keys=True) for f in r["findings"]}) for r in op["rounds"]
    ]


def test_the_run_page_says_where_and_when_it_was_measured(client, imported_table):
    client.force_login(imported_table.runs[0].requested_by)
    run = DiagnosisRun.objects.get(bench_import=imported_table.bench, bench_operator="01_gemm_fp16")
    page = client.get(reverse("run-detail", args=[run.pk])).content.decode()
    assert "Imported from a bench run on NVIDIA H200, 2026-11-30, commit 877efb0" in page
    assert "data-device-time" in page  # measured on a device, so its device time is shown
    assert f'href="{reverse("proposal-detail", args=[run.summary["best_proposal"]])}"' in page


def test_a_verified_faster_imported_proposal_can_be_accepted(team, reviewer, owner):
    import_results(H200, team=team, user=owner)
    proposal = Proposal.objects.get(
        round__run__version__kernel__team=team, round__run__bench_operator="01_gemm_fp16", round__index=1
    )
    assert acceptability(proposal).code == "verified-faster"
    accepted = accept_proposal(proposal, reviewer, "measured on the H200")
    assert accepted.version.number == 2 and accepted.version.source == proposal.source
    assert accepted.version.parent.sha256 == TABLE["operators"][0]["initial_sha256"]


def test_importing_a_file_twice_adds_nothing(tmp_path, team, owner):
    path = _file(tmp_path, _op("06_relu_fp32"), _op("09_softmax_fp32"))
    first = import_results(path, team=team, user=owner)
    counts = _counts()
    again = import_results(path, team=team, user=owner)
    assert (first.imported, again.imported, again.existing) == (
        ["06_relu_fp32", "09_softmax_fp32"],
        [],
        ["06_relu_fp32", "09_softmax_fp32"],
    )
    assert _counts() == counts


def test_an_existing_kernel_with_the_measured_source_gets_the_run_on_its_version(tmp_path, team, owner):
    source = (SUITE / "06_relu_fp32.py").read_text()
    kernel = Kernel.objects.create(team=team, name="06_relu_fp32", owner=owner)
    version = KernelVersion.objects.create(kernel=kernel, number=1, source=source, sha256=_sha(source))
    import_results(_file(tmp_path, _op("06_relu_fp32")), team=team, user=owner)
    assert Kernel.objects.filter(team=team, name="06_relu_fp32").count() == 1
    assert version.runs.get().bench_operator == "06_relu_fp32"


def _no_gain(op: dict) -> dict:
    """An operator whose second round's proposal was timed and not faster."""
    return next(
        r for r in op["rounds"] if r["verdict"] == "no-gain" and r["outcome"] and r["outcome"]["cases"]
    )


def _tampered_diff(op: dict) -> dict:
    r = next(r for r in op["rounds"] if r["proposal"])
    diff = r["proposal"]["diff"]
    hunk = diff.index("@@")
    r["proposal"]["diff"] = diff[:hunk] + diff[hunk:].replace("\n+", "\n+# one more line\n+", 1)
    return op


SKIPPED = [
    pytest.param(
        lambda op: {**op, "file": "/elsewhere/99_missing.py"}, "99_missing.py is in none of", id="no-module"
    ),
    pytest.param(
        lambda op: {**op, "initial_sha256": "0" * 64},
        "is not the source that was measured",
        id="other-source",
    ),
    pytest.param(_tampered_diff, "does not rebuild the source that was measured", id="diff-does-not-rebuild"),
    pytest.param(
        lambda op: {**op, "status": "error", "error": "boom"}, "did not run to the end", id="harness-error"
    ),
    pytest.param(
        lambda op: {**op, "rounds": [{**op["rounds"][0], "verdict": "maybe"}]},
        "does not decode",
        id="bad-verdict",
    ),
]


@pytest.mark.parametrize(("mutate", "why"), SKIPPED)
def test_an_operator_that_cannot_be_rebuilt_exactly_is_skipped_with_the_reason(
    tmp_path, team, owner, mutate, why
):
    bad = mutate(_op("01_gemm_fp16"))
    outcome = import_results(_file(tmp_path, bad, _op("06_relu_fp32")), team=team, user=owner)
    assert outcome.imported == ["06_relu_fp32"]
    assert [name for name, _ in outcome.skipped] == ["01_gemm_fp16"] and why in outcome.skipped[0][1]
    assert not DiagnosisRun.objects.filter(bench_import__team=team, bench_operator="01_gemm_fp16").exists()


def test_a_timed_proposal_that_was_not_faster_is_failed_as_a_live_run_fails_it(tmp_path, team, owner):
    op = _op("11_layernorm_fp32")
    r = _no_gain(op)
    import_results(_file(tmp_path, op), team=team, user=owner)
    p = Proposal.objects.get(round__run__bench_import__team=team, round__run__bench_operator=op["name"],
                             round__index=r["index"])  # fmt: skip
    assert (p.status, p.failure_reason) == (
        "failed",
        "no gain: not faster than its parent above the noise floor",
    )


def test_a_best_version_that_failed_the_final_check_cannot_be_accepted(tmp_path, team, owner):
    op = {**_op("06_relu_fp32"), "final_check": "incorrect"}
    import_results(_file(tmp_path, op), team=team, user=owner)
    best = Proposal.objects.get(round__run__bench_import__team=team, round__run__bench_operator=op["name"],
                                round__verdict="improved")  # fmt: skip
    assert best.status == "failed" and "final check" in best.failure_reason
    assert acceptability(best).code == "not-pending"


@pytest.mark.parametrize(
    ("content", "why"),
    [
        pytest.param(b"{not json", "not JSON", id="not-json"),
        pytest.param(
            json.dumps({"schema": 2, "operators": []}).encode(), "not a bench/run.py result", id="schema"
        ),
        pytest.param(
            json.dumps({"schema": 1, "meta": {"device": "tpu"}, "operators": []}).encode(),
            "unknown device kind",
            id="device",
        ),  # fmt: skip
    ],
)
def test_a_file_that_is_not_a_result_is_refused_and_nothing_stored(tmp_path, team, owner, content, why):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(ImportRefused, match=why):
        import_results(path, team=team, user=owner)
    with pytest.raises(CommandError, match=why):
        call_command("import_results", str(path), "--team", team.name, stdout=StringIO(), stderr=StringIO())
    assert not BenchImport.objects.filter(team=team).exists()


def test_the_command_imports_for_a_team_and_says_what_it_did(tmp_path, team, owner, reviewer):
    out, err = StringIO(), StringIO()
    bad = {**_op("01_gemm_fp16"), "initial_sha256": "0" * 64}
    call_command("import_results", str(_file(tmp_path, _op("06_relu_fp32"), bad)), "--team", team.name,
                 stdout=out, stderr=err)  # fmt: skip
    assert "1 run(s) imported, 0 already there, 1 skipped; from a bench run on NVIDIA H200" in out.getvalue()
    assert "01_gemm_fp16: not imported" in err.getvalue()
    run = DiagnosisRun.objects.get(bench_import__team=team, bench_operator="06_relu_fp32")
    assert run.requested_by == reviewer  # the team's reviewer


def test_the_kernel_list_says_a_latest_run_was_imported_and_where_it_was_measured(
    client, tmp_path, team, owner
):
    import_results(_file(tmp_path, _op("06_relu_fp32")), team=team, user=owner)
    client.force_login(owner)
    page = client.get(reverse("kernel-list")).content.decode()
    assert "cuda · imported, measured on NVIDIA H200" in page
