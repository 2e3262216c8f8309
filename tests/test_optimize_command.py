"""`manage.py optimize FILE`: stores the file like an upload, runs it in-process, reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from diagnosis.models import DiagnosisRun, Kernel, KernelVersion, Team
from runner import pipeline
from tests.conftest import GOOD_SOURCE

pytestmark = pytest.mark.django_db

REPORT_KEYS = {"run", "findings", "proposals", "best_version", "timings"}


@pytest.fixture
def module(tmp_path: Path) -> Path:
    path = tmp_path / "double.py"
    path.write_text(GOOD_SOURCE)
    return path


@pytest.fixture
def scripted(monkeypatch):
    from tests.worker.fakes import ScriptedLoop

    loop = ScriptedLoop()
    monkeypatch.setattr(pipeline, "run_loop", loop)
    monkeypatch.setattr(pipeline, "make_executor", lambda run: "executor")
    return loop


def optimize_json(*args: str, capsys) -> dict:
    call_command("optimize", *args, "--json")
    return json.loads(capsys.readouterr().out)


def test_it_stores_the_file_like_an_upload_and_prints_the_report(module, scripted, capsys) -> None:
    report = optimize_json(str(module), "--device", "cpu", "--rounds", "3", capsys=capsys)

    assert set(report) == REPORT_KEYS
    run = DiagnosisRun.objects.get()
    assert (run.device, run.target, run.round_budget, run.status) == ("cpu", "sm_90", 3, "done")
    assert run.version.source == GOOD_SOURCE and run.version.filename == "double.py"
    assert run.version.kernel.name == "double" and run.version.kernel.team.name == "cli"
    assert (
        run.requested_by.username == "cli" and run.version.kernel.team.members.filter(username="cli").exists()
    )

    assert report["run"]["id"] == run.id
    assert {"id", "status", "device", "target", "wall_s", "device_s"} <= set(report["run"])
    assert report["run"]["status"] == "done"
    assert [f["code"] for f in report["findings"]] == ["test_worker.small_block", "test_worker.scalar_loads"]
    assert report["findings"][1]["lines"] == [16] and report["findings"][1]["evidence"][0]["kind"] == "ptx"
    (proposal,) = report["proposals"]
    assert proposal["status"] == "pending" and proposal["findings_addressed"] == ["test_worker.small_block"]
    assert report["best_version"]["origin"] == "proposal"
    assert report["best_version"]["proposal"] == proposal["id"]
    assert "BLOCK=1024" in report["best_version"]["source"]
    assert report["timings"]["initial"]["cases"][0]["time_ms"] == 2.0
    assert report["timings"]["best"]["cases"][0]["time_ms"] == 1.0


def test_it_runs_the_same_code_path_as_the_worker(module, scripted, capsys) -> None:
    optimize_json(str(module), "--arch", "sm_80", "--rounds", "2", capsys=capsys)

    config = scripted.calls[0]["config"]
    assert (config.device, config.target, config.round_budget, config.proposer) == (
        "cpu",
        "sm_80",
        2,
        "rules",
    )
    run = DiagnosisRun.objects.get()
    assert run.attempts == 1 and run.worker  # claimed like a worker claims it


def test_a_second_run_of_the_same_file_reuses_kernel_and_version(module, scripted, capsys) -> None:
    optimize_json(str(module), capsys=capsys)
    optimize_json(str(module), "--team", "perf", "--user", "alice", capsys=capsys)
    optimize_json(str(module), "--team", "perf", "--user", "alice", capsys=capsys)

    assert Team.objects.filter(name__in=["cli", "perf"]).count() == 2
    assert Kernel.objects.count() == 2 and KernelVersion.objects.count() == 2
    assert DiagnosisRun.objects.count() == 3


def test_the_text_report_names_status_findings_and_proposals(module, scripted, capsys) -> None:
    call_command("optimize", str(module))
    out = capsys.readouterr().out

    assert "double v1 on cpu (sm_90): done (round_budget)" in out
    assert "test_worker.scalar_loads" in out and "lines 16" in out
    assert "best: proposal" in out


@pytest.mark.parametrize(
    ("source", "problem"),
    [
        pytest.param(GOOD_SOURCE.replace("class ModelNew", "class Other"), "ModelNew", id="missing-ModelNew"),
        pytest.param(
            GOOD_SOURCE.replace(
                "    def forward(self, x):\n        return", "    def forward(self, x)\n        return", 1
            ),
            ":8: ",
            id="syntax",
        ),
        pytest.param(GOOD_SOURCE.replace("@triton.jit\n", ""), "triton.jit", id="no-kernel"),
    ],
)
def test_a_bad_file_is_a_clear_error_naming_the_line(
    tmp_path: Path, source: str, problem: str, scripted
) -> None:
    path = tmp_path / "bad.py"
    path.write_text(source)

    with pytest.raises(CommandError) as info:
        call_command("optimize", str(path), "--json")

    assert str(path) in str(info.value) and problem in str(info.value)
    assert not DiagnosisRun.objects.exists()
    assert scripted.calls == []


def test_a_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="no such file"):
        call_command("optimize", str(tmp_path / "nope.py"))


def test_a_crash_fails_the_run_and_exits_non_zero(module, scripted) -> None:
    scripted.raises = [RuntimeError("executor exploded")]

    with pytest.raises(RuntimeError, match="executor exploded"):
        call_command("optimize", str(module), "--json")

    run = DiagnosisRun.objects.get()
    assert run.status == "failed" and run.error == "attempt 1 failed: RuntimeError: executor exploded"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)  # the heartbeat thread must see the committed run
def test_it_runs_a_real_module_on_cpu(module, capsys) -> None:
    report = optimize_json(str(module), "--device", "cpu", "--rounds", "1", capsys=capsys)

    assert set(report) == REPORT_KEYS
    assert report["run"]["status"] == "done", report["run"]["error"]
    assert report["run"]["device"] == "cpu" and report["run"]["wall_s"] > 0
    assert report["timings"]["initial"]["sha256"] == KernelVersion.digest(GOOD_SOURCE)
    assert DiagnosisRun.objects.get().status == "done"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_module_that_fails_verification_prints_the_report_and_exits_non_zero(tmp_path, capsys) -> None:
    path = tmp_path / "wrong.py"
    path.write_text(GOOD_SOURCE.replace("mask=mask) * 2", "mask=mask) * 3"))

    with pytest.raises(CommandError, match=r"run \d+ failed: .*incorrect"):
        call_command("optimize", str(path), "--json", "--rounds", "1")

    report = json.loads(capsys.readouterr().out)
    assert report["run"]["status"] == "failed" and "incorrect" in report["run"]["error"]


KERNELS = Path(__file__).resolve().parent / "kernels"


def codes_at(report: dict) -> set[tuple[str, int, tuple[int, ...]]]:
    return {(f["code"], f["tier"], tuple(f["lines"])) for f in report["findings"]}


def test_it_reports_why_strided_loads_are_scalar_on_cpu(capsys) -> None:
    """Issue: on a kernel with strided loads, a tier-2 finding names the load's line and its
    scalar width, and a tier-3 finding names why. The timed cases are too big for the
    interpreter, so the run is diagnosis only: every compile tier, no proposal."""
    report = optimize_json(str(KERNELS / "colsum_strided.py"), "--device", "cpu", "--arch", "sm_90", capsys=capsys)

    assert report["run"]["status"] == "done" and report["run"]["stop_reason"] == "diagnosed_only"
    # the run says the kernel was never checked, and names no verified best version
    run = DiagnosisRun.objects.get()
    assert run.summary["checked"] is False and "NOT checked" in run.summary["stop_detail"]
    assert run.best_version is None
    found = codes_at(report)
    assert ("IR_SCALAR_GLOBAL", 2, (16,)) in found
    assert ("CG_STRIDED_ACCESS", 3, (16,)) in found
    scalar = next(f for f in report["findings"] if f["code"] == "IR_SCALAR_GLOBAL")
    assert "ld.global.b32" in scalar["message"] and "32-bit" in scalar["message"]
    strided = next(f for f in report["findings"] if f["code"] == "CG_STRIDED_ACCESS")
    assert "stride_xm" in strided["message"]
    assert report["proposals"] == []


def test_it_reports_an_unpipelined_matmul_loop_on_cpu(capsys) -> None:
    report = optimize_json(str(KERNELS / "matmul_stages1.py"), "--device", "cpu", "--arch", "sm_90", capsys=capsys)

    not_pipelined = [f for f in report["findings"] if f["code"] == "CG_NOT_PIPELINED"]
    assert not_pipelined and not_pipelined[0]["tier"] == 3 and "num_stages=1" in not_pipelined[0]["message"]
    counterfactual = [f for f in report["findings"] if f["code"] == "CG_COUNTERFACTUAL"]
    assert counterfactual and "num_stages=3" in counterfactual[0]["message"]


# --- code styles other projects write, through the whole loop on CPU ----------------------


def _styles() -> list:
    from tests.engine.rules_cases import styles as st
    from tests.engine.test_rules_launch_config import ADD_JIT_CALL, MATMUL_GRID_DEF

    add = st.source("add_tutorial.py")
    return [
        # `import triton as tr`, the launch in a module-level helper, a grid lambda over meta,
        # the block passed by position
        pytest.param(st.as_tr(add).replace("BLOCK_SIZE=1024)", "64)"), "@tr.autotune(", id="tr-helper-lambda-positional"),
        # `from triton import jit`, `from triton.language import constexpr`, the block from the
        # constexpr's default (the launch passes none)
        pytest.param(
            st.from_jit(st.from_constexpr(add))
            .replace("BLOCK_SIZE: constexpr):", "BLOCK_SIZE: constexpr = 64):")
            .replace(", BLOCK_SIZE=1024)", ")"),
            "@triton.autotune(",
            id="jit-and-constexpr-imports-constexpr-default",
        ),
        # the tutorial's GEMM with its tiles by position, the grid a function beside the launch
        pytest.param(
            MATMUL_GRID_DEF.replace("        64, 64, 32, 8,\n", "        32, 32, 32, 8,\n"),
            "    def grid(META):\n",
            id="gemm-tiles-by-position-grid-function",
        ),
        # unsloth's kernel jitted by rebinding its name: written decorated, the autotune above
        pytest.param(
            ADD_JIT_CALL.replace("BLOCK_SIZE=1024)", "BLOCK_SIZE=64)"),
            '    key=["n_elements"],\n)\n@triton.jit\ndef add_kernel(',
            id="kernel-jitted-by-a-call",
        ),
        # liger's block passed in a local dict: written out, then tuned; the dict goes
        pytest.param(
            add.replace(
                "    add_kernel[grid](x, y, output, n_elements, BLOCK_SIZE=1024)\n",
                '    kw = {"BLOCK_SIZE": 64}\n    add_kernel[grid](x, y, output, n_elements, **kw)\n',
            ),
            "    add_kernel[grid](x, y, output, n_elements)\n",
            id="block-in-a-local-dict",
        ),
        # sglang's sizes (or strides) unpacked into the launch: written out a dimension each
        pytest.param(
            add.replace(
                "    add_kernel[grid](x, y, output, n_elements, BLOCK_SIZE=1024)\n",
                "    flat = output.view(-1)\n    add_kernel[grid](x, y, output, *flat.shape, BLOCK_SIZE=64)\n",
            ),
            # the grid's n_elements is not the argument as written: the key gets it as its own
            "    add_kernel[grid](x, y, output, flat.shape[0], n_elements_key=n_elements)\n",
            id="sizes-unpacked-into-the-launch",
        ),
        # sglang's programmatic dependent launch: a switch of the kernel and a launch option in a
        # dict that is empty where the GPU lacks it; the dict stays
        pytest.param(
            add.replace("BLOCK_SIZE: tl.constexpr):", "BLOCK_SIZE: tl.constexpr, USE_GDC: tl.constexpr = False):")
            .replace("    pid = tl.program_id(axis=0)\n", "    pid = tl.program_id(axis=0)\n    if USE_GDC:\n"
                     "        tl.extra.cuda.gdc_wait()\n")
            .replace(
                "    add_kernel[grid](x, y, output, n_elements, BLOCK_SIZE=1024)\n",
                '    pdl = {"USE_GDC": True, "launch_pdl": True} if torch.cuda.is_available() else {}\n'
                "    add_kernel[grid](x, y, output, n_elements, BLOCK_SIZE=64, **pdl)\n",
            ),
            "    add_kernel[grid](x, y, output, n_elements, **pdl)\n",
            id="pdl-switch-and-option-in-a-dict",
        ),
    ]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("source", "expected"), _styles())
def test_a_module_in_each_code_style_gets_its_rewrite_on_cpu(source: str, expected: str, tmp_path, capsys) -> None:
    """Issue 15's CPU check: tier 0 finds the small block in the module as written, the rule
    rewrites it in the module's own spelling, and the gate finds the rewrite correct under the
    interpreter (speed is not measured on CPU: the round's verdict is `untimed`)."""
    from diagnosis.models import Proposal

    path = tmp_path / "styled.py"
    path.write_text(source)
    report = optimize_json(str(path), "--device", "cpu", "--rounds", "1", capsys=capsys)

    assert report["run"]["status"] == "done", report["run"]["error"]
    (proposal,) = Proposal.objects.all()
    assert (proposal.family, proposal.status, proposal.round.verdict) == ("launch_config", "pending", "untimed")
    assert proposal.verification["correct"] is True
    assert expected in proposal.source and "autotune(" in proposal.source
