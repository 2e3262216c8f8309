"""The child's compile job (runner.childlib.compile): in process, and end to end in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runner.errors import JobFailed
from runner.protocol import JobRequest

ROOT = Path(__file__).resolve().parents[2]
KERNELS = ROOT / "tests" / "kernels"
MODULES = ROOT / "tests" / "modules"


def job(name: str, **options) -> dict:
    from runner.childlib.compile import compile_job

    target = options.pop("target", "sm_90")
    return compile_job(
        JobRequest(job="compile", module=str(KERNELS / f"{name}.py"), target=target, options=options)
    )


def ptx_loads(result: dict) -> list[str]:
    ptx = result["kernels"][0]["stages"]["ptx"]
    return [
        ln.split()[1] if ln.strip().startswith("@") else ln.split()[0]
        for ln in ptx.splitlines()
        if "ld.global" in ln
    ]


def test_it_returns_stages_resources_and_the_launch() -> None:
    result = job("vadd_aligned", sass=True)
    assert result["target"] == "sm_90" and result["backend"] == "cuda"
    [k] = result["kernels"]
    assert k["name"] == "add_kernel" and k["def_line"] == 11 and k["error"] is None
    assert set(k["stages"]) >= {"ttir", "ttgir", "llir", "ptx", "sass"}
    assert '//## File "' in k["stages"]["sass"]
    assert k["resources"]["registers"] > 0 and k["resources"]["spills_store"] == 0
    assert k["launch"]["grid"] == [1024, 1, 1]
    args = {a["name"]: a for a in k["launch"]["args"]}
    assert args["n"]["value"] == 1 << 20 and args["n"]["divisible_16"]
    assert k["compile_s"] > 0
    json.dumps(result)


def test_it_keeps_sass_for_a_versions_own_compile_by_default() -> None:
    [k] = job("softmax_warps")["kernels"]
    assert k["resources"]["spills_store"] == 0 and '//## File "' in k["stages"]["sass"]


def test_a_counterfactual_disassembles_by_default_only_when_ptxas_spilled() -> None:
    assert "sass" not in job("softmax_warps", overrides={"num_stages": 2})["kernels"][0]["stages"]
    spilling = job("softmax_spills", overrides={"num_stages": 2})["kernels"][0]
    assert spilling["resources"]["spills_store"] > 0 and "STL" in spilling["stages"]["sass"]


def test_it_applies_a_divisibility_override() -> None:
    before = job("vadd_unaligned")
    after = job("vadd_unaligned", overrides={"divisibility": ["n"]})
    assert set(ptx_loads(before)) == {"ld.global.b32"}
    assert set(ptx_loads(after)) == {"ld.global.v4.b32"}
    assert after["kernels"][0]["applied"] == ["divisibility:n"]


def test_it_applies_config_and_source_overrides() -> None:
    warps = job("softmax_spills", overrides={"num_warps": 8}, sass=False)
    assert warps["kernels"][0]["num_warps"] == 8 and warps["kernels"][0]["resources"]["spills_store"] == 0
    other = job("vadd_unaligned", overrides={"source": str(KERNELS / "vadd_aligned.py")}, sass=False)
    assert other["module"].endswith("vadd_aligned.py")
    assert set(ptx_loads(other)) == {"ld.global.v4.b32"}


def test_it_rejects_an_override_naming_no_argument() -> None:
    with pytest.raises(JobFailed) as err:
        job("vadd_unaligned", overrides={"divisibility": ["nope"]})
    assert err.value.kind == "bad_request"


def test_it_captures_on_the_verify_inputs_when_asked() -> None:
    result = job("vadd_unaligned", inputs="verify", sass=False)
    args = {a["name"]: a for a in result["kernels"][0]["launch"]["args"]}
    assert args["n"]["value"] == 1000


def test_it_keeps_pass_dumps_for_the_second_compile_in_a_process() -> None:
    first = job("vadd_aligned", pass_dumps=True, sass=False)
    second = job("vadd_aligned", pass_dumps=True, sass=False)
    for result in (first, second):
        dumps = result["kernels"][0]["pass_dumps"]
        names = [d["pass"] for d in dumps]
        assert names[0] == "(input)" and "TritonGPUCoalesce" in names and "ConvertTritonToTritonGPU" in names
        coalesce = next(d for d in dumps if d["pass"] == "TritonGPUCoalesce")
        assert coalesce["changed"] and "#ttg.blocked" in coalesce["text"]
        assert all(d["text"] is None for d in dumps if d["changed"] is False)
        assert not any("llvm.func" in (d["text"] or "") for d in dumps)  # LLVM-dialect dumps are not kept


def test_it_caps_pass_dump_text_and_says_what_it_dropped() -> None:
    result = job("vadd_aligned", pass_dumps=True, sass=False, pass_dump_max_bytes=20000)
    k = result["kernels"][0]
    assert sum(len(d["text"] or "") for d in k["pass_dumps"]) <= 20000
    assert any("cap" in note for note in k["dumps_dropped"])


def test_split_pass_dumps_turns_before_dumps_into_pass_effects() -> None:
    from runner.childlib.compile import split_pass_dumps

    text = (
        "// -----// IR Dump Before Canonicalizer (canonicalize) ('builtin.module' operation) //----- //\n"
        "module {\n  %0 = tt.load %a : tensor<4xf32>\n}\n"
        "// -----// IR Dump Before TritonGPUCoalesce (tritongpu-coalesce) ('builtin.module' operation) //----- //\n"
        "module {\n  %0 = tt.load %a : tensor<4xf32>\n}\n"
        "// -----// IR Dump Before CSE (cse) ('builtin.module' operation) //----- //\n"
        "module {\n  %0 = tt.load %a : tensor<4xf32, #blocked>\n  %1 = ttg.convert_layout %0 : x\n}\n"
    )
    dumps, notes = split_pass_dumps(text)
    assert [(d["pass"], d["changed"]) for d in dumps] == [
        ("(input)", True),
        ("Canonicalizer", False),
        ("TritonGPUCoalesce", True),
        ("CSE", None),
    ]
    assert dumps[2]["ops"] == {"tt.load": 1, "ttg.convert_layout": 1}
    assert "#blocked" in dumps[2]["text"] and dumps[1]["text"] is None
    assert notes == ["1 passes left the IR unchanged: no text kept for them"]


def test_it_compiles_for_gfx942_with_register_counts() -> None:
    result = job("softmax_spills", target="gfx942")
    k = result["kernels"][0]
    assert "amdgcn" in k["stages"] and result["backend"] == "hip"
    res = k["resources"]
    assert res["vgpr"] > 0 and res["sgpr"] > 0 and res["occupancy_waves_per_simd"] >= 1
    assert "vgpr_spill" in res


def test_it_runs_end_to_end_in_a_subprocess_with_clean_stdout() -> None:
    request = JobRequest(
        job="compile",
        module=str(KERNELS / "matmul_stages1.py"),
        target="sm_90",
        options={"pass_dumps": True, "sass": False},
    )
    code = (
        "import json, sys\n"
        "from runner.childlib.compile import compile_job\n"
        "from runner.protocol import JobRequest\n"
        "print(json.dumps(compile_job(JobRequest.loads(sys.stdin.read()))))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", code],
        input=request.dumps(),
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout)  # nothing but the JSON reached stdout
    k = result["kernels"][0]
    assert k["num_stages"] == 1 and "wgmma" in k["stages"]["ptx"]
    assert any(d["pass"] == "TritonGPUPipeline" for d in k["pass_dumps"])
    assert "IR Dump Before" not in proc.stderr  # the dumps were captured, not leaked


def test_cuda_triton_answers_unavailable_for_an_npu_target_naming_the_interpreter_it_needs() -> None:
    # the npu side is tests/runner/test_ascend.py, under .venv-ascend
    with pytest.raises(JobFailed) as err:
        job("vadd_aligned", target="npu:Ascend910B3")
    assert err.value.kind == "unavailable" and "KERNELOPT_PYTHON_NPU" in err.value.message


def test_it_runs_through_the_sandbox_child_entry_point() -> None:
    request = JobRequest(
        job="compile",
        module=str(KERNELS / "vadd_unaligned.py"),
        target="sm_90",
        options={"overrides": {"divisibility": ["n"]}},
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "runner.child"],
        input=request.dumps(),
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=300,
    )
    response = json.loads(proc.stdout)
    assert response["ok"], response["error"]
    [k] = response["result"]["kernels"]
    assert k["applied"] == ["divisibility:n"] and "ld.global.v4.b32" in k["stages"]["ptx"]


def test_the_capture_draws_the_cases_on_the_meta_device_and_falls_back_to_the_cpu() -> None:
    from runner.childlib.compile import compile_job

    def capture(inputs: str | None) -> dict:
        options = {"inputs": inputs} if inputs else {}
        request = JobRequest(
            job="compile", module=str(MODULES / "big_case_copy.py"), target="sm_90", options=options
        )
        return compile_job(request)

    timed = capture(None)  # a 1 GiB case: shapes are all the capture reads
    assert timed["captured_on"] == "meta" and timed["capture_s"] < 5
    [k] = timed["kernels"]
    assert k["name"] == "copy_kernel" and k["error"] is None
    assert k["launch"]["grid"] == [2**18, 1, 1]
    small = capture("verify")  # its forward reads a value first: the meta run cannot, the cpu run does
    assert small["captured_on"] == "cpu" and small["kernels"][0]["launch"]["grid"] == [1, 1, 1]
