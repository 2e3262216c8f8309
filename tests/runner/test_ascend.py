"""The compile job's npu branch (runner.childlib.ascend) under triton-ascend 3.2.0, on CPU.

Every test runs the real child under .venv-ascend (`make ascend`): the launch is captured from
ModelNew.forward on CPU tensors with triton 3.2's binder, the kernel compiled through TTIR and
the adapter's linalg, and the binary stage, which needs CANN, named instead of raised.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from runner.execute import Executor
from tests.conftest import ascend_compile

ROOT = Path(__file__).resolve().parents[2]
KERNELS = ROOT / "tests" / "kernels"
SUITE = ROOT / "bench" / "suite"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def vadd(ascend_python: str) -> dict:
    response = ascend_compile(ascend_python, str(KERNELS / "vadd_unaligned.py"), pass_dumps=True)
    assert response["ok"], response["error"]
    return response["result"]


def _kernel(result: dict) -> dict:
    [kernel] = result["kernels"]
    return kernel


def test_it_reaches_ttir_and_linalg_and_names_the_stage_that_needs_cann(vadd: dict) -> None:
    assert (vadd["backend"], vadd["arch"], vadd["triton_version"]) == ("npu", "Ascend910B3", "3.2.0")
    k = _kernel(vadd)
    assert k["reached"] == ["ttir", "ttadapter"] and set(k["stages"]) == {"ttir", "ttadapter"}
    assert k["stopped"]["stage"] == "npubin" and k["stopped"]["reason"] == "needs_cann"
    assert "ASCEND_HOME_PATH" in k["stopped"]["message"] and k["error"] is None
    assert "tt.load" in k["stages"]["ttir"]
    linalg = k["stages"]["ttadapter"]
    assert "func.func @add_kernel" in linalg and "memref.copy" in linalg and "linalg.fill" in linalg
    assert 'loc("' in linalg  # line info on: linalg ops map back to source lines
    json.dumps(vadd)


def test_the_capture_keeps_the_real_launchs_specialization(vadd: dict) -> None:
    k = _kernel(vadd)
    assert k["launch"]["grid"] == [977, 1, 1]  # cdiv(1_000_003, 1024), from ModelNew.forward
    args = {a["name"]: a for a in k["launch"]["args"]}
    assert args["x_ptr"]["divisible_16"] and args["n"]["value"] == 1_000_003 and not args["n"]["divisible_16"]
    assert args["BLOCK"]["kind"] == "constexpr" and args["BLOCK"]["value"] == 1024
    assert k["ir_args"] == ["x_ptr", "y_ptr", "out_ptr", "n"]
    # `%arg0: !tt.ptr<f32> {tt.divisibility = 16 : i32} loc(...)`, `%arg3: i32 loc(...)`
    header = next(ln for ln in k["stages"]["ttir"].splitlines() if "tt.func public @add_kernel" in ln)
    assert "%arg0: !tt.ptr<f32> {tt.divisibility = 16 : i32}" in header
    assert "%arg3: i32 loc(" in header


def test_pass_dumps_cover_the_ttir_passes_and_the_adapters(vadd: dict) -> None:
    dumps = _kernel(vadd)["pass_dumps"]
    names = [d["pass"] for d in dumps]
    assert names[0] == "(input)" and "Canonicalizer" in names
    assert {"DiscreteMaskAccessConversion", "TritonToUnstructure", "TritonToLinalg"} <= set(names)
    assert names.index("TritonLoopUnroll") < names.index("TritonToLinalg")
    linalg = next(d for d in dumps if d["pass"] == "TritonToLinalg")
    assert linalg["changed"] and "memref.reinterpret_cast" in linalg["text"]
    # the seam between the two pipelines is a reprint, not a change
    assert next(d for d in dumps if d["pass"] == "TritonLoopUnroll")["changed"] is False
    assert not any("bishengir" in (d["text"] or "") for d in dumps)  # stage chatter is not IR
    assert [d["index"] for d in dumps] == list(range(len(dumps)))


def test_an_integer_equal_to_1_is_a_constant_left_out_of_the_ttir(ascend_python: str) -> None:
    response = ascend_compile(ascend_python, str(SUITE / "18_transpose_fp32.py"), cases=[0])
    assert response["ok"], response["error"]
    k = _kernel(response["result"])
    args = {a["name"]: a for a in k["launch"]["args"]}
    assert args["stride_xn"]["equal_1"] and args["stride_on"]["equal_1"]
    assert "stride_xn" not in k["ir_args"] and "stride_om" in k["ir_args"]
    assert k["pass_dumps"] == []  # none asked for


def test_a_divisibility_override_reaches_the_ttir(ascend_python: str) -> None:
    response = ascend_compile(
        ascend_python, str(KERNELS / "vadd_unaligned.py"), overrides={"divisibility": ["n"]}
    )
    assert response["ok"], response["error"]
    k = _kernel(response["result"])
    assert k["applied"] == ["divisibility:n"]
    assert "%arg3: i32 {tt.divisibility = 16 : i32}" in k["stages"]["ttir"]


def test_a_kernel_triton_ascend_refuses_is_a_compile_error_not_a_failed_job(ascend_python: str) -> None:
    # input_precision="tf32": NPUOptions allows ("ieee", "hf32") only
    response = ascend_compile(ascend_python, str(KERNELS / "dot_tf32.py"))
    assert response["ok"], response["error"]
    k = _kernel(response["result"])
    assert k["reached"] == [] and k["stopped"]["stage"] == "ttir"
    assert k["stopped"]["reason"] == "compile_error" and "tf32" in k["error"]


def test_the_executor_runs_an_npu_compile_of_a_cpu_run_under_child_python_npu(ascend_python: str) -> None:
    outcome = Executor("cpu", target="npu:Ascend910B3").compile(str(KERNELS / "vadd_aligned.py"))
    assert outcome.ok, outcome.error
    assert outcome.result is not None
    assert (outcome.result.triton_version, outcome.result.backend) == ("3.2.0", "npu")
    [kernel] = outcome.result.kernels
    assert kernel.stopped is not None and kernel.stopped["reason"] == "needs_cann"


@pytest.mark.parametrize(
    ("device", "target", "npu_python"),
    [
        pytest.param("cpu", "npu:Ascend910B3", True, id="cpu-run-npu-target"),
        pytest.param("cuda", "npu:Ascend910B3", True, id="cuda-run-npu-target"),
        pytest.param("cpu", "sm_90", False, id="cpu-run-cuda-target"),
        pytest.param("npu", "npu:Ascend910B3", False, id="npu-run-uses-its-own"),
    ],
)
def test_compile_jobs_of_npu_targets_get_the_npu_interpreter(
    device: str, target: str, npu_python: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KERNELOPT_PYTHON_NPU", "/opt/ascend/bin/python")
    expected = "/opt/ascend/bin/python" if npu_python else None
    assert Executor(device, target=target).compile_python(target) == expected


def test_child_python_npu_falls_back_to_the_repositorys_ascend_venv(monkeypatch: pytest.MonkeyPatch) -> None:
    from runner.sandbox import ASCEND_VENV_PYTHON, child_python

    monkeypatch.delenv("KERNELOPT_PYTHON_NPU", raising=False)
    monkeypatch.delenv("KERNELOPT_PYTHON", raising=False)
    assert ASCEND_VENV_PYTHON == ROOT / ".venv-ascend" / "bin" / "python"
    expected = str(ASCEND_VENV_PYTHON) if ASCEND_VENV_PYTHON.exists() else sys.executable
    assert child_python("npu") == expected
    assert child_python("cpu") == sys.executable
