"""Tier 3 on the problem kernels: the reason each optimization did not fire, and
counterfactual recompiles that confirm it before any hardware run. The compiles run on CPU
through the compile job (runner.childlib.compile), so these live with the runner's tests."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest

from diagnosis.engine.counterfactual import (
    PIPELINE,
    VECTORIZE,
    Counterfactual,
    diff_tables,
    run_counterfactual,
)
from diagnosis.engine.evidence import Family, Tier
from diagnosis.engine.ir import CompileResult
from diagnosis.engine.serialize import finding_json
from diagnosis.engine.tier3 import pass_diff, run_tier3
from runner.childlib.compile import compile_job
from runner.protocol import JobRequest

KERNELS = Path(__file__).resolve().parents[1] / "kernels"


def _compile(name: str, overrides: dict[str, Any] | None = None, dumps: bool = True) -> CompileResult:
    options: dict[str, Any] = {"pass_dumps": dumps, "sass": False}
    if overrides:
        options["overrides"] = overrides
    data = compile_job(JobRequest(job="compile", module=str(KERNELS / f"{name}.py"), options=options))
    return CompileResult.from_json(json.loads(json.dumps(data)))


@functools.cache
def compiled(name: str) -> CompileResult:
    return _compile(name)


@functools.cache
def recompiled(name: str, key: str) -> CompileResult:
    return _compile(name, json.loads(key), dumps=False)


def recompile_for(name: str):
    return lambda overrides, case=None: recompiled(name, json.dumps(overrides, sort_keys=True))


@functools.cache
def tier3(name: str, with_recompile: bool = True):
    source = (KERNELS / f"{name}.py").read_text()
    return run_tier3(compiled(name), source, recompile=recompile_for(name) if with_recompile else None)


def findings(result, code: str):
    return [f for f in result.findings if f.code == code]


FLAGGED = [
    pytest.param("vadd_unaligned", "CG_VECTORIZATION_BLOCKED", 15, id="mask-bound-n-not-divisible"),
    pytest.param("colsum_strided", "CG_STRIDED_ACCESS", 16, id="column-walk-stride"),
    pytest.param("matmul_stages1", "CG_NOT_PIPELINED", 24, id="num-stages-1"),
    pytest.param("softmax_spills", "CG_SPILL_CAUSE", 18, id="row-too-wide-for-one-warp"),
    pytest.param("dot_fp32_ieee", "CG_DOT_NO_MMA", 25, id="ieee-fp32-dot"),
]

CLEAN = [
    pytest.param("vadd_aligned", "CG_VECTORIZATION_BLOCKED", id="aligned-vadd"),
    pytest.param("colsum_tiled", "CG_STRIDED_ACCESS", id="tiled-colsum"),
    pytest.param("matmul_pipelined", "CG_NOT_PIPELINED", id="pipelined-matmul"),
    pytest.param("softmax_warps", "CG_SPILL_CAUSE", id="sixteen-warps"),
    pytest.param("dot_tf32", "CG_DOT_NO_MMA", id="tf32-dot"),
]


@pytest.mark.parametrize(("name", "code", "line"), FLAGGED)
def test_it_names_why_the_optimization_did_not_fire(name: str, code: str, line: int) -> None:
    result = tier3(name)
    hits = findings(result, code)
    assert hits and any(line in f.lines for f in hits), [finding_json(f) for f in result.findings]
    assert all(f.tier == Tier.COMPILER for f in hits)
    assert result.localizes


@pytest.mark.parametrize(("name", "code"), CLEAN)
def test_it_finds_nothing_to_explain_on_the_clean_counterpart(name: str, code: str) -> None:
    result = tier3(name)
    assert not findings(result, code)
    assert not findings(result, "CG_COUNTERFACTUAL")


def test_it_names_the_mask_bound_that_lacks_divisibility() -> None:
    f = next(f for f in findings(tier3("vadd_unaligned"), "CG_VECTORIZATION_BLOCKED") if f.lines == (15,))
    assert [b["arg"] for b in f.args["blockers"]] == ["n"]
    assert f.args["blockers"][0]["role"] == "mask" and f.args["blockers"][0]["value"] == 1_000_003
    assert "`n`" in f.message and f.family == Family.MASKING


def test_it_names_an_unscaled_program_id_where_no_argument_blocks() -> None:
    """`offset = rows * N * K + cols * K + pid_k` launched with K = 1 and one program on axis 1:
    every argument is divisible by 16 or equal to 1, and what leaves the loads 32-bit is the
    program id added unscaled. No divisibility counterfactual can show anything there."""
    result = tier3("rows_pid_offset")
    blocked = findings(result, "CG_VECTORIZATION_BLOCKED")
    assert [f.lines for f in blocked] == [(20,), (21,)]
    for f in blocked:
        assert f.args["blockers"] == [] and f.family == Family.HINTS
        assert "`tl.program_id(1)` unscaled" in f.args["reason"]
        assert "one program on axis 1: the term is always 0" in f.args["reason"]
    assert not findings(result, "CG_COUNTERFACTUAL")


def test_it_confirms_vectorization_with_n_divisible_by_16() -> None:
    result = tier3("vadd_unaligned")
    [cf] = findings(result, "CG_COUNTERFACTUAL")
    assert cf.args["overrides"] == {"divisibility": ["n"]}
    assert cf.args["before"]["widths"]["15"]["global_load"] == [32]
    assert cf.args["after"]["widths"]["15"]["global_load"] == [128]
    assert cf.args["after"]["widths"]["17"]["global_store"] == [128]
    assert "ld.global.v4.b32" in cf.message and "line 15" in cf.message
    assert cf.evidence[0].kind == "ptx" and "ld.global.v4.b32" in cf.evidence[0].excerpt
    assert result.explains and result.narrows


def test_a_blocker_its_counterfactual_refutes_is_no_longer_named_the_cause() -> None:
    """sglang's learned-sink row load: the mask bound is not specialized, but recompiled with it
    divisible the loads stay 32-bit, so the finding says the bound is not the cause."""
    result = tier3("rows_divmod_index")
    [blocked] = findings(result, "CG_VECTORIZATION_BLOCKED")
    [no_effect] = findings(result, "CG_COUNTERFACTUAL_NO_EFFECT")
    text = (KERNELS / "rows_divmod_index.py").read_text().splitlines()
    line = next(i for i, t in enumerate(text, 1) if "lse = tl.load(" in t)
    assert blocked.lines == no_effect.lines == (line,)
    assert blocked.args["refuted"] == ["n_tokens"]
    assert "; yet recompiled with `n_tokens` divisible by 16 it stays 32-bit, so that is not the cause: " in (
        blocked.message
    )
    # ... and gives the cause the TTGIR shows: the row vector takes a slice of the 2-D tile's
    # layout, one element a thread, the same element on a warp's 32 lanes
    assert blocked.message.endswith(
        "its tensor is laid out as a slice of a 2-D tile's layout (`#ttg.slice<{dim = 1, parent = #blocked}>`), "
        "which gives each thread one element of it at a time, and 32 threads hold each element, each issuing "
        "the same load"
    )
    assert not result.explains
    # a counterfactual that confirms its blocker leaves the finding as it was
    [confirmed] = [f for f in findings(tier3("vadd_unaligned"), "CG_VECTORIZATION_BLOCKED") if f.lines == (15,)]
    assert "refuted" not in confirmed.args and "not the cause" not in confirmed.message


def test_scalar_accesses_of_a_thin_layout_are_the_warps_and_fewer_warps_confirm_it() -> None:
    """flag_gems' rotary layout: every argument is divisible by 16, so no hint can help; the tile
    gives each thread one element. The explanation names the warps and points at LAUNCH_CONFIG,
    and the recompile on one warp turns the 16-bit loads and the store into 64-bit vectors."""
    result = tier3("heads_rotate_thin")
    blocked = findings(result, "CG_VECTORIZATION_BLOCKED")
    assert sorted(f.lines[0] for f in blocked) == [26, 27, 29]
    assert {f.family for f in blocked} == {Family.LAUNCH_CONFIG}
    assert "not of a hint" in blocked[0].message and "1 element(s) on 4 warps" in blocked[0].message
    [cf] = findings(result, "CG_COUNTERFACTUAL")
    assert cf.args["overrides"] == {"num_warps": 1} and cf.family == Family.LAUNCH_CONFIG
    before, after = cf.args["before"]["widths"], cf.args["after"]["widths"]
    for line, cat in (("26", "global_load"), ("27", "global_load"), ("29", "global_store")):
        assert before[line][cat] == [16] and after[line][cat] == [64]
    assert result.explains and result.narrows


def test_it_names_the_stride_argument_of_a_strided_load() -> None:
    [f] = findings(tier3("colsum_strided"), "CG_STRIDED_ACCESS")
    assert f.args["stride_args"] == ["stride_xm"]
    assert "1024" in f.message and f.family == Family.COALESCE
    assert not findings(tier3("colsum_strided"), "CG_COUNTERFACTUAL")  # no hint can fix a stride


def test_it_reports_the_loop_not_pipelined_and_confirms_with_three_stages() -> None:
    result = tier3("matmul_stages1")
    [f] = findings(result, "CG_NOT_PIPELINED")
    assert f.args["num_stages"] == 1 and "num_stages=1" in f.message
    assert f.args["async_copies"] == 0  # read from the dump after TritonGPUPipeline
    assert any(e.kind == "pass_dump" and e.name == "TritonGPUPipeline" for e in f.evidence)
    [cf] = findings(result, "CG_COUNTERFACTUAL")
    assert cf.args["overrides"] == {"num_stages": 3}
    assert cf.args["after"]["async_copies"] > 0 == cf.args["before"]["async_copies"]
    assert cf.family == Family.PIPELINING and result.explains


def test_it_explains_spills_by_the_tile_per_thread_and_confirms_with_more_warps() -> None:
    result = tier3("softmax_spills")
    [f] = findings(result, "CG_SPILL_CAUSE")
    assert f.args["elements"] == 8192 and f.args["values_per_thread"] == 256
    [cf] = findings(result, "CG_COUNTERFACTUAL")
    assert cf.args["overrides"] == {"num_warps": f.args["suggested_num_warps"]}
    assert cf.args["after"]["spills"] == 0 < cf.args["before"]["spills"]


def test_it_names_ieee_precision_as_the_reason_the_dot_uses_fma() -> None:
    [f] = findings(tier3("dot_fp32_ieee"), "CG_DOT_NO_MMA")
    assert f.args["input_precision"] == "ieee" and f.args["dtypes"][0] == "f32"
    assert f.family == Family.DOT_PRECISION


def test_it_confirms_a_source_transform_given_as_an_alternative_file() -> None:
    before = compiled("dot_fp32_ieee")
    h = Counterfactual(
        "bmm_kernel", {"source": str(KERNELS / "dot_tf32.py")}, "tensor_cores", (), Family.DOT_PRECISION
    )
    cf = run_counterfactual(h, before, recompile_for("dot_fp32_ieee"))
    assert cf.code == "CG_COUNTERFACTUAL"
    assert cf.args["after"]["tensor_core_instructions"] > 0 == cf.args["before"]["tensor_core_instructions"]


def test_it_reports_a_hypothesis_that_changes_nothing() -> None:
    before = compiled("colsum_strided")
    h = Counterfactual("colsum_kernel", {"divisibility": ["M"]}, VECTORIZE, (16,), Family.HINTS)
    cf = run_counterfactual(h, before, recompile_for("colsum_strided"))
    assert cf.code == "CG_COUNTERFACTUAL_NO_EFFECT"
    assert "stay 32-bit" in cf.message


def test_it_lists_hypotheses_without_running_them_when_no_recompile_is_given() -> None:
    result = tier3("matmul_stages1", with_recompile=False)
    assert not result.explains
    assert result.data["counterfactuals"] == [
        {"hypothesis": "num_stages=3", "kernel": "matmul_kernel", "ran": False}
    ]


def test_it_reads_which_passes_changed_the_ir() -> None:
    result = tier3("matmul_pipelined")
    passes = result.data["kernels"]["matmul_kernel"]["passes"]
    by_name = {p["pass"]: p["delta"] for p in passes}
    assert by_name["TritonGPUAccelerateMatmul"].get("ttng.warp_group_dot", 0) > 0
    # in 3.6 TritonGPUScheduleLoops already lowers the loads to async copies; Pipeline expands the loop
    assert by_name["TritonGPUScheduleLoops"].get("ttg.async_copy_global_to_local", 0) > 0
    assert any(a.kind == "pass_dump" for a in result.artefacts)
    kernel = compiled("matmul_pipelined").kernels[0]
    before = next(d for d in kernel.pass_dumps if d.name == "TritonGPUAssignLatencies")
    after = next(d for d in kernel.pass_dumps if d.name == "TritonGPUScheduleLoops")
    assert "async_copy_global_to_local" in pass_diff(before.text, after.text, limit=400)


def test_diff_tables_shows_the_counterfactual_per_line() -> None:
    before = compiled("matmul_stages1").kernels[0]
    after = recompile_for("matmul_stages1")({"num_stages": 3}).kernels[0]
    diff = diff_tables(before, after)
    assert "cp_async" in diff[25] and diff[25]["cp_async"]["before"] == {}
    assert PIPELINE == "pipeline"


SUITE = Path(__file__).resolve().parents[2] / "bench" / "suite"


def test_a_two_case_compile_explains_the_odd_case_of_a_gemm() -> None:
    """01_gemm's case 4 (3000 x 5000 x 2500: row strides not divisible by 16) compiles to 16-bit
    loads with no cp.async; case 0 (4096^3) to a pipelined loop. Compiled together, tier 3
    names the strides and its counterfactual recompile of case 4's kernel turns the loads
    into async copies; the kernel of case 0 is never the one compared."""
    module = SUITE / "01_gemm_fp16.py"
    if not module.is_file():
        pytest.skip("bench/suite is absent")

    def build(overrides: dict[str, Any] | None = None, dumps: bool = True) -> CompileResult:
        options: dict[str, Any] = {"pass_dumps": dumps, "sass": False, **({"overrides": overrides} if overrides else {})}
        job = JobRequest(job="compile", module=str(module), target="sm_90", cases=[0, 4], options=options)
        return CompileResult.from_json(json.loads(json.dumps(compile_job(job))))

    result = build()
    assert [(k.name, k.case) for k in result.kernels] == [("matmul_kernel", 0), ("matmul_kernel", 4)]
    assert result.kernel("matmul_kernel", 4) is result.kernels[1]
    assert result.kernel("matmul_kernel") is result.kernels[0] and result.kernel("matmul_kernel", 7) is result.kernels[0]
    asked: list[int | None] = []

    def recompile(overrides: dict[str, Any], case: int | None = None) -> CompileResult:
        asked.append(case)
        return build(overrides, dumps=False)

    out = run_tier3(result, module.read_text(), recompile=recompile)
    assert asked and set(asked) == {4}  # each counterfactual is of case 4's specialization
    blocked = {f.lines[0]: f.message for f in findings(out, "CG_VECTORIZATION_BLOCKED")}
    assert "`stride_am` (= 2500) is not divisible by 16" in blocked[43]
    assert "`stride_bk` (= 5000) is not divisible by 16" in blocked[44]
    confirmed = {f.lines[0]: f.message for f in findings(out, "CG_COUNTERFACTUAL")}
    assert "the loads on line 43 become" in confirmed[43] and "async copies" in confirmed[43]
    assert "the loads on line 44 become" in confirmed[44]
