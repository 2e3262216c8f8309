"""`python -m runner.child`: its contract (one JSON in, one JSON out), its imports, its jobs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from diagnosis.engine.profile import ProfileResult
from runner.errors import KINDS, JobFailed, RunnerError, classify_exception
from runner.execute import Executor
from runner.protocol import JobError, JobRequest, JobResponse

ROOT = Path(__file__).resolve().parent.parent.parent
MODULES = ROOT / "tests" / "modules"


def _child(request: str, env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The child run directly, without the sandbox, to see its raw stdout."""
    env = {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": str(ROOT),
        "HOME": str(ROOT / "var"),
        **(env_extra or {}),
    }
    return subprocess.run(
        [sys.executable, "-m", "runner.child"],
        input=request,
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
        check=False,
    )


# ---------------------------------------------------------------- protocol


def test_requests_and_responses_round_trip() -> None:
    req = JobRequest(
        job="verify",
        module="/a.py",
        device="cuda",
        candidate="/b.py",
        seeds=[3],
        cases=[0, 2],
        options={"tolerance": {"atol": 1e-3}},
    )
    assert JobRequest.loads(req.dumps()) == req
    resp = JobResponse(
        ok=False,
        job="verify",
        result={"cases": []},
        error=JobError("incorrect", "case 0", line=12, traceback="tb", stderr_tail="x"),
        elapsed_s=1.5,
        phases={"import": 0.5, "timing": 0.75},
    )
    assert JobResponse.loads(resp.dumps()) == resp


@pytest.mark.parametrize("phases", ['"fast"', '{"timing": "slow"}', "[1]"])
def test_a_response_with_malformed_phases_is_refused(phases: str) -> None:
    with pytest.raises((ValueError, TypeError)):
        JobResponse.loads('{"ok": true, "job": "verify", "phases": ' + phases + "}")


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("not json", id="not-json"),
        pytest.param("[]", id="not-an-object"),
        pytest.param('{"job": "dance", "module": "/a.py"}', id="unknown-job"),
        pytest.param('{"job": "verify", "module": "/a.py", "device": "tpu"}', id="unknown-device"),
        pytest.param('{"job": "verify", "module": "/a.py", "evil": 1}', id="unknown-field"),
    ],
)
def test_a_bad_request_gets_a_bad_request_answer(text: str) -> None:
    proc = _child(text)
    response = JobResponse.loads(proc.stdout)
    assert response.error is not None and response.error.kind == "bad_request"
    assert proc.returncode == 0


def test_stdout_carries_only_the_response_whatever_the_module_prints() -> None:
    # a capture job runs the forward too (recorded, not executed); a verify job needs the
    # gate's reference inputs (runner.gate), which a bare child has no way to get
    request = JobRequest(job="capture", module=str(MODULES / "noisy_import.py"), seeds=[0]).dumps()
    proc = _child(request, {"TRITON_INTERPRET": "1"})
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, proc.stdout[:500]
    response = JobResponse.loads(lines[0])
    assert response.ok, response.error
    for noise in (
        "NOISE_FROM_PRINT",
        "NOISE_FROM_SYS_STDOUT",
        "NOISE_FROM_FD_1",
        "NOISE_FROM_SUBPROCESS",
        "NOISE_FROM_FORWARD",
    ):
        assert noise in proc.stderr
        assert noise not in proc.stdout


def test_request_and_response_files_for_ncu(tmp_path: Path) -> None:
    request = tmp_path / "req.json"
    response = tmp_path / "resp.json"
    request.write_text(JobRequest(job="validate", module=str(MODULES / "broken_missing.py")).dumps())
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "runner.child", "--request", str(request), "--response", str(response)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert proc.stdout == ""
    assert JobResponse.loads(response.read_text()).error.kind == "missing_name"  # type: ignore[union-attr]


def _fresh_python(code: str) -> str:
    """The stdout of `code` run in a fresh interpreter that sees only the repository."""
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60, check=True
    ).stdout


def test_the_child_imports_no_django_and_only_the_engines_standard_library_modules() -> None:
    """The child runs on a stock accelerator image: of diagnosis it may import only the
    engine's stdlib-only modules it shares with the parent (the profile records, the device
    registry, the job error record and the LLM usage record it carries)."""
    code = (
        "import sys, runner.child, runner.childlib.verify, runner.childlib.reference, runner.childlib.derive, "
        "runner.childlib.timing, runner.childlib.profiling, runner.tensordata, "
        "runner.childlib.hostile, runner.backends.cpu, runner.backends.cuda, runner.backends.npu\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('django', 'diagnosis', 'dramatiq', 'psycopg')))"
    )
    out = _fresh_python(code)
    assert json.loads(out.replace("'", '"')) == [
        "diagnosis",
        "diagnosis.engine",
        "diagnosis.engine.devices",
        "diagnosis.engine.errors",
        "diagnosis.engine.profile",
        "diagnosis.engine.usage",
    ]


def test_the_childs_dispatch_modes_do_not_import_dynamo() -> None:
    """torch wraps every TorchDispatchMode's dispatch so that its first call imports
    torch._dynamo: about 1.2 s of a 3 s CPU job, in every reference job (the reads and FLOPs
    counted) and every verify job (fresh allocations filled). The child runs eagerly."""
    code = (
        "import sys, torch\n"
        "from runner.childlib.launches import filled_allocations\n"
        "from runner.childlib.timing import Reads, count_flops\n"
        "x = torch.ones(4, 4)\n"
        "reads = Reads()\n"
        "out, flops = count_flops(lambda: x @ x + 1, reads)\n"
        "with filled_allocations():\n"
        "    fresh = torch.empty(3)\n"
        "print(flops, bool(reads.whole), bool(fresh.isnan().all()), 'torch._dynamo' in sys.modules)"
    )
    assert _fresh_python(code).split() == ["128", "True", "True", "False"]


def test_the_libraries_are_frozen_and_the_collector_is_on_for_the_upload() -> None:
    """The child's imports run with the collector off, and their objects are frozen before
    the upload's code runs: the collector is on again and still frees what that code leaves."""
    code = (
        "import gc\n"
        "from runner.child import _import_libraries\n"
        "from runner.protocol import JobRequest\n"
        "_import_libraries(JobRequest(job='validate', module='m.py', device='cpu'))\n"
        "cycle = []\n"
        "cycle.append(cycle)\n"
        "del cycle\n"
        "print(gc.isenabled(), gc.get_freeze_count() > 100_000, gc.collect() > 0)"
    )
    assert _fresh_python(code).split() == ["True", "True", "True"]


# ---------------------------------------------------------------- errors


def test_error_kinds_are_stable_and_documented() -> None:
    for kind in (
        "import_error",
        "syntax_error",
        "missing_name",
        "bad_inputs",
        "exception",
        "incorrect",
        "nan_mismatch",
        "no_triton_launch",
        "constant_output",
        "shape_mismatch",
        "device_error",
        "timeout",
        "crashed",
        "oom",
        "bad_output",
        "sandbox_error",
    ):
        assert kind in KINDS
    assert JobFailed("incorrect", "x").kind == "incorrect"
    with pytest.raises(ValueError):
        RunnerError("x", kind="no_such_kind")


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        pytest.param(MemoryError(), "oom", id="MemoryError"),
        pytest.param(RuntimeError("CUDA out of memory. Tried to allocate 2 GiB"), "oom", id="cuda-oom"),
        pytest.param(RuntimeError("DefaultCPUAllocator: can't allocate memory"), "oom", id="cpu-oom"),
        pytest.param(
            RuntimeError("CUDA error: an illegal memory access was encountered"),
            "device_error",
            id="illegal-address",
        ),
        pytest.param(
            RuntimeError("Triton Error [CUDA]: misaligned address"), "device_error", id="triton-cuda"
        ),
        pytest.param(ValueError("bad"), "exception", id="plain"),
    ],
)
def test_classify_exception(exc: BaseException, kind: str) -> None:
    assert classify_exception(exc) == kind


# ---------------------------------------------------------------- jobs through the executor


@pytest.fixture(scope="module")
def executor() -> Executor:
    return Executor("cpu", target="sm_90")


def test_validate_reports_names_cases_and_parameters(executor: Executor) -> None:
    outcome = executor.validate(str(MODULES / "correct_matmul.py"))
    assert outcome.ok, outcome.error
    assert outcome.names == ["Model", "ModelNew", "get_inputs", "get_init_inputs", "get_verify_inputs"]
    assert outcome.kernels == ["matmul_kernel"]
    assert (outcome.input_cases, outcome.verify_cases) == (1, 1)
    assert outcome.parameters == [{"name": "weight", "shape": [32, 32], "dtype": "float32"}]
    assert outcome.num_parameters == 1024
    assert outcome.device_s == 0.0 and outcome.wall_s > 0
    assert executor.costs[-1].job == "validate"


def test_capture_on_cpu_records_without_running(executor: Executor) -> None:
    outcome = executor.capture(str(MODULES / "correct_add.py"), cases=[1])
    assert outcome.ok, outcome.error
    assert outcome.executed is False and outcome.target == "sm_90"
    (launch,) = outcome.launches
    assert launch["kernel"] == "axpy_kernel" and launch["case"] == 1
    args = {a["name"]: a for a in launch["args"]}
    assert args["x_ptr"]["divisible_16"] and args["n"]["value"] == 2048 and args["n"]["divisible_16"]
    assert args["BLOCK"]["value"] == 1024


def test_time_on_cpu_says_no_device_instead_of_numbers(executor: Executor) -> None:
    outcome = executor.time(str(MODULES / "correct_add.py"), str(MODULES / "correct_add.py"))
    assert outcome.ok, outcome.error
    assert outcome.timing is not None and outcome.timing.timed is False
    assert "no device" in outcome.timing.reason
    assert outcome.timing.cases == []


def test_profile_on_cpu_gives_bytes_flops_and_launches(executor: Executor) -> None:
    outcome = executor.profile(str(MODULES / "correct_matmul.py"))
    assert outcome.ok, outcome.error
    profile = outcome.profile
    assert isinstance(profile, ProfileResult)
    assert profile.device is None
    (case,) = profile.cases
    assert case.time_ms is None and case.flops == 2 * 32**3
    assert case.bytes == 3 * 32 * 32 * 4  # input, weight, output
    assert case.launches[0].kernel == "matmul_kernel" and case.launches[0].grid == (2, 2, 1)
    assert any("no device" in note for note in profile.notes)


def test_an_embeddings_speed_of_light_counts_the_rows_it_reads(executor: Executor) -> None:
    outcome = executor.verify(str(MODULES / "correct_embedding.py"), seeds=(0,), time=False)
    assert outcome.passed, outcome.error
    case = next(c for c in outcome.cases if c.label == "verify 0")
    rows = 5 * 17 * 4  # the 5 rows of the 100 x 17 float32 table the ids select
    assert case.bytes == rows + 5 * 8 + rows  # those rows, the ids, the output


def test_npu_without_torch_npu_is_a_device_error(executor: Executor) -> None:
    pytest.importorskip("torch")
    try:
        import torch_npu  # noqa: F401
    except Exception:  # any import failure: no NPU here, which is what this test needs
        pass
    else:  # pragma: no cover
        pytest.skip("torch_npu is installed")
    outcome = Executor("npu").verify(str(MODULES / "correct_add.py"), seeds=(0,))
    assert outcome.kind == "device_error"
    assert "torch_npu" in outcome.error.message  # type: ignore[union-attr]
    assert outcome.device_s == outcome.wall_s > 0  # an accelerator queue's job counts as device time


def test_compile_dispatches_to_the_compile_job(executor: Executor) -> None:
    outcome = executor.compile(str(MODULES / "correct_add.py"), target="sm_90")
    assert outcome.ok, outcome.error
    assert outcome.result is not None


NCU_CSV = """==PROF== Connected to process 4242 (/usr/bin/python3.12)
==PROF== Profiling "add_kernel": 0%....50%....100% - 9 passes
==PROF== Disconnected from process 4242
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","4242","python3.12","127.0.0.1","add_kernel","1","7","(128, 1, 1)","(65536, 1, 1)","0","9.0","Command line profiler metrics","dram__throughput.avg.pct_of_peak_sustained_elapsed","%","91.52"
"0","4242","python3.12","127.0.0.1","add_kernel","1","7","(128, 1, 1)","(65536, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","ns","112,640"
"0","4242","python3.12","127.0.0.1","add_kernel","1","7","(128, 1, 1)","(65536, 1, 1)","0","9.0","Command line profiler metrics","launch__registers_per_thread","register/thread","16"
"0","4242","python3.12","127.0.0.1","add_kernel","1","7","(128, 1, 1)","(65536, 1, 1)","0","9.0","Command line profiler metrics","smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio","ratio","5.25"
"0","4242","python3.12","127.0.0.1","add_kernel","1","7","(128, 1, 1)","(65536, 1, 1)","0","9.0","Command line profiler metrics","smsp__average_warps_issue_stalled_wait_per_issue_active.ratio","ratio","0.75"
"1","4242","python3.12","127.0.0.1","vectorized_elementwise_kernel(int, at::native::CUDAFunctor_add<float>)","1","7","(128, 1, 1)","(65536, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","ns","100000"
"""


def test_parse_ncu_csv() -> None:
    from runner.childlib.profiling import parse_ncu_csv

    first, second = parse_ncu_csv(NCU_CSV)
    assert first.kernel == "add_kernel"
    assert first.duration_us == pytest.approx(112.64)
    assert first.dram_pct == pytest.approx(91.52)
    assert first.registers == 16
    assert first.stalls == (("long_scoreboard", 5.25), ("wait", 0.75))
    assert second.kernel == "vectorized_elementwise_kernel"
    assert parse_ncu_csv("==PROF== nothing profiled\n") == []
