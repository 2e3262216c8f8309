"""Tier 2 on the problem kernels of tests/kernels: each shows one problem at a known line,
its clean counterpart shows none. Compiles run on CPU (sm_90 and gfx942 targets) through the
compile job (runner.childlib.compile), so these live with the runner's tests."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from diagnosis.engine.evidence import Family, Tier
from diagnosis.engine.ir import CompileResult
from diagnosis.engine.serialize import finding_json
from diagnosis.engine.tier2 import run_tier2
from runner.childlib.compile import compile_job
from runner.protocol import JobRequest

KERNELS = Path(__file__).resolve().parents[1] / "kernels"


@functools.cache
def compiled(name: str, target: str = "sm_90") -> CompileResult:
    request = JobRequest(job="compile", module=str(KERNELS / f"{name}.py"), target=target)
    data = compile_job(request)
    return CompileResult.from_json(json.loads(json.dumps(data)))  # the JSON round trip the worker does


def tier2(name: str, target: str = "sm_90"):
    return run_tier2(compiled(name, target), (KERNELS / f"{name}.py").read_text())


def codes_at(result, code: str) -> set[int]:
    return {ln for f in result.findings if f.code == code for ln in f.lines}


FLAGGED = [
    pytest.param("vadd_unaligned", "IR_SCALAR_GLOBAL", 15, id="unaligned-n-scalar-load"),
    pytest.param("vadd_unaligned", "IR_SCALAR_GLOBAL", 17, id="unaligned-n-scalar-store"),
    pytest.param("colsum_strided", "IR_SCALAR_GLOBAL", 16, id="strided-column-load"),
    pytest.param("matmul_stages1", "IR_NO_ASYNC_COPY", 25, id="one-stage-matmul-loads"),
    pytest.param("softmax_spills", "IR_SPILLS", 16, id="one-warp-8192-row-spills"),
    pytest.param("softmax_spills", "IR_LOW_OCCUPANCY", 13, id="one-warp-255-regs-occupancy"),
    pytest.param("dot_fp32_ieee", "IR_DOT_FMA", 25, id="ieee-fp32-dot-fma"),
    pytest.param("rows_small_tile", "IR_REPLICATED_TILE", 16, id="64-element-rows-on-four-warps"),
    pytest.param("heads_thin_tile", "IR_THIN_TILE", 18, id="128-bf16-rows-on-four-warps"),
]

CLEAN = [
    pytest.param("vadd_aligned", "IR_SCALAR_GLOBAL", id="aligned-vadd"),
    pytest.param("colsum_tiled", "IR_SCALAR_GLOBAL", id="tiled-colsum"),
    pytest.param("matmul_pipelined", "IR_NO_ASYNC_COPY", id="pipelined-matmul"),
    pytest.param("softmax_warps", "IR_SPILLS", id="sixteen-warp-softmax-spills"),
    pytest.param("softmax_warps", "IR_LOW_OCCUPANCY", id="sixteen-warp-softmax-occupancy"),
    pytest.param("dot_tf32", "IR_DOT_FMA", id="tf32-dot"),
    pytest.param("matmul_pipelined", "IR_DOT_FMA", id="fp16-matmul-dot"),
    pytest.param("colsum_tiled", "IR_LAYOUT_CONVERT", id="reduction-outside-loop"),
    pytest.param("rows_small_tile_warps", "IR_REPLICATED_TILE", id="64-element-rows-on-two-warps"),
    pytest.param("vadd_aligned", "IR_REPLICATED_TILE", id="1024-element-blocks"),
    pytest.param("vadd_aligned", "IR_THIN_TILE", id="1024-element-blocks-16-bytes-a-thread"),
    pytest.param("rows_small_tile", "IR_THIN_TILE", id="replicated-not-thin"),
]


def test_a_replicated_tile_names_its_copies_and_points_at_launch_config() -> None:
    [finding] = [f for f in tier2("rows_small_tile").findings if f.code == "IR_REPLICATED_TILE"]
    assert finding.family is Family.LAUNCH_CONFIG
    assert (finding.args["shape"], finding.args["threads"], finding.args["copies"]) == ("64", 128, 2)
    assert "#ttg.blocked<" in finding.evidence[0].excerpt and "tt.load" in finding.evidence[0].excerpt
    # the store of the row after the reduction is left out: only loads say a tile is too small
    assert finding.lines == (16,)


def test_a_thin_tile_names_the_bytes_a_thread_loads_and_the_warps_that_fill_a_vector() -> None:
    [finding] = [f for f in tier2("heads_thin_tile").findings if f.code == "IR_THIN_TILE"]
    assert finding.family is Family.LAUNCH_CONFIG and finding.kernel == "silu_heads_kernel"
    args = finding.args
    assert (args["shape"], args["dtype"], args["threads"], args["per_thread"], args["bytes"]) == ("128", "bf16", 128, 1, 2)
    assert (args["fit_warps"], args["fit_bytes"]) == (1, 8)
    assert "sizePerThread = [1]" in finding.evidence[0].excerpt and "tt.load" in finding.evidence[0].excerpt
    # the store is left out, as for a replicated tile
    assert finding.lines == (18,)


def test_a_scalar_access_on_a_thin_tile_points_at_the_warps_not_at_hints() -> None:
    """Unrolled over its heads, flag_gems' rotary layout issues several 16-bit accesses a thread
    on one line: scalar, contiguous, every argument divisible. The layout gives each thread one
    element, so the finding names LAUNCH_CONFIG and the warps that give a thread a vector; an
    unaligned size's scalar load (vadd_unaligned) stays a hint's."""
    scalar = [f for f in tier2("heads_rotate_thin").findings if f.code == "IR_SCALAR_GLOBAL"]
    assert sorted(f.lines[0] for f in scalar) == [26, 27, 29]
    assert {f.family for f in scalar} == {Family.LAUNCH_CONFIG}
    args = scalar[0].args
    assert (args["per_thread"], args["warps"], args["fit_warps"], args["width"]) == (1, 4, 1, 16)
    said = "a 128 tile on 128 threads gives each 1 element(s): on 1 warp(s) each would move 8 bytes"
    assert said in scalar[0].message
    unaligned = [f for f in tier2("vadd_unaligned").findings if f.code == "IR_SCALAR_GLOBAL"]
    assert unaligned and {f.family for f in unaligned} == {Family.HINTS}


@pytest.mark.parametrize(("name", "code", "line"), FLAGGED)
def test_it_flags_the_problem_at_its_line(name: str, code: str, line: int) -> None:
    result = tier2(name)
    assert line in codes_at(result, code), [finding_json(f) for f in result.findings]
    finding = next(f for f in result.findings if f.code == code and line in f.lines)
    assert finding.tier == Tier.IR
    assert finding.evidence and finding.evidence[0].excerpt


@pytest.mark.parametrize(("name", "code"), CLEAN)
def test_it_leaves_the_clean_counterpart_alone(name: str, code: str) -> None:
    result = tier2(name)
    assert not codes_at(result, code) and not [f for f in result.findings if f.code == code]


def test_it_flags_scalar_loads_with_ptx_evidence_and_width() -> None:
    result = tier2("vadd_unaligned")
    f = next(f for f in result.findings if f.code == "IR_SCALAR_GLOBAL" and f.lines == (15,))
    assert f.args["width"] == 32 and f.args["op"] == "ld.global.b32" and f.args["access"] == "contiguous"
    ref = f.evidence[0]
    assert ref.kind == "ptx" and ref.lines
    ptx = compiled("vadd_unaligned").kernels[0].stages["ptx"].splitlines()
    assert all("ld.global.b32" in ptx[n - 1] for n in ref.lines)
    assert result.localizes and result.narrows and not result.explains


def test_it_flags_scalar_loads_on_strided_access_as_coalescing() -> None:
    result = tier2("colsum_strided")
    f = next(f for f in result.findings if f.code == "IR_SCALAR_GLOBAL")
    assert f.family == Family.COALESCE
    assert f.args["stride_args"] == ["stride_xm"]


def test_it_reports_the_line_table_with_vector_widths() -> None:
    result = tier2("vadd_aligned")
    lines = result.data["kernels"]["add_kernel"]["lines"]
    assert lines["15"]["widths"]["global_load"] == [128]
    assert lines["15"]["asm"]["global_load"] == {"ld.global.v4.b32": 2}
    assert lines["17"]["widths"]["global_store"] == [128]
    json.dumps(result.data)  # stored as JSON
    assert {a.kind for a in result.artefacts} >= {"ttir", "ttgir", "llir", "ptx", "sass"}


def test_it_attributes_wgmma_and_async_copies_in_a_pipelined_matmul() -> None:
    lines = tier2("matmul_pipelined").data["kernels"]["matmul_kernel"]["lines"]
    dot = lines["27"]
    assert any(op.startswith("wgmma.mma_async") for op in dot["asm"]["wgmma"])
    assert "cp_async" in lines["25"]["asm"] and "cp_async" in lines["26"]["asm"]
    occ = tier2("matmul_pipelined").data["kernels"]["matmul_kernel"]["occupancy"]
    assert occ["limiter"] in ("registers", "shared")


def test_it_reads_amdgcn_registers_and_widths_for_gfx942() -> None:
    result = tier2("vadd_unaligned", "gfx942")
    kernel = compiled("vadd_unaligned", "gfx942").kernels[0]
    assert kernel.resources.vgpr and kernel.resources.sgpr and kernel.resources.waves_per_simd
    assert kernel.resources.spills == 0
    f = next(f for f in result.findings if f.code == "IR_SCALAR_GLOBAL" and f.lines == (15,))
    assert f.evidence[0].kind == "amdgcn" and f.args["width"] == 32
    clean = tier2("vadd_aligned", "gfx942")
    assert not [f for f in clean.findings if f.code == "IR_SCALAR_GLOBAL"]
    assert clean.data["kernels"]["add_kernel"]["lines"]["15"]["widths"]["global_load"] == [128]


def test_it_reports_a_compile_error_as_a_finding() -> None:
    base = compiled("vadd_aligned")
    broken = CompileResult(
        base.target,
        base.backend,
        base.arch,
        (CompiledKernel_with_error(base.kernels[0]),),
    )
    result = run_tier2(broken, "")
    assert [f.code for f in result.findings] == ["IR_COMPILE_ERROR"]


def CompiledKernel_with_error(kernel):  # noqa: N802 - reads as a constructor
    from dataclasses import replace

    return replace(kernel, error="CompilationError: at 14:4: boom", stages={})
