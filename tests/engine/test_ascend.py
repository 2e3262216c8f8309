"""Tiers 2 and 3 on an npu target (diagnosis.engine.ascend), on real triton-ascend compiles.

Each module is compiled once for npu:Ascend910B3 by the child under .venv-ascend; the tables say
which finding each kernel must give at which line, and which it must not give.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnosis.engine.ascend import read_linalg
from diagnosis.engine.evidence import Family, Severity
from diagnosis.engine.ir import CompileResult
from diagnosis.engine.tier2 import run_tier2
from diagnosis.engine.tier3 import run_tier3
from tests.conftest import ascend_compile

ROOT = Path(__file__).resolve().parents[2]
MODULES = {
    "discrete": ROOT / "tests" / "kernels" / "npu_discrete.py",
    "tiles": ROOT / "tests" / "kernels" / "npu_tiles.py",
    "colsum": ROOT / "tests" / "kernels" / "colsum_strided.py",
    "transpose": ROOT / "bench" / "suite" / "18_transpose_fp32.py",
    "vadd": ROOT / "tests" / "kernels" / "vadd_aligned.py",
}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def compiled(ascend_python: str) -> dict[str, CompileResult]:
    out = {}
    for name, path in MODULES.items():
        response = ascend_compile(ascend_python, str(path), pass_dumps=True)
        assert response["ok"], response["error"]
        out[name] = CompileResult.from_json(response["result"])
    return out


def _tier2(compiled: dict[str, CompileResult], name: str):
    return run_tier2(compiled[name], MODULES[name].read_text())


def _codes_at(findings, code: str) -> list[tuple[int, ...]]:
    return [f.lines for f in findings if f.code == code]


@pytest.mark.parametrize(
    ("module", "code", "line", "family"),
    [
        pytest.param("discrete", "NPU_DISCRETE_ACCESS", 12, Family.NONE, id="gather-is-discrete"),
        pytest.param(
            "discrete", "NPU_DISCRETE_ACCESS", 13, Family.INDEX_MATH, id="modulo-offsets-are-discrete"
        ),
        pytest.param("discrete", "NPU_MASK_SELECT", 15, Family.MASKING, id="parity-mask-is-a-select"),
        pytest.param("colsum", "NPU_STRIDED_ACCESS", 16, Family.COALESCE, id="column-walk-load-is-strided"),
        pytest.param(
            "transpose", "NPU_STRIDED_ACCESS", 35, Family.COALESCE, id="transposed-store-is-strided"
        ),
        pytest.param(
            "tiles", "NPU_UB_OVERFLOW", 17, Family.LAUNCH_CONFIG, id="two-64k-fp32-tiles-overflow-ub"
        ),
        pytest.param("tiles", "NPU_UB_UNALIGNED", 27, Family.LAUNCH_CONFIG, id="24-byte-rows-unaligned"),
        pytest.param("tiles", "NPU_GRID_CORES", 23, Family.LAUNCH_CONFIG, id="grid-over-launch-limit"),
        pytest.param("colsum", "NPU_GRID_CORES", 11, Family.LAUNCH_CONFIG, id="grid-of-many-rounds"),
    ],
)
def test_it_flags_the_access_or_tile_at_its_line(compiled, module: str, code: str, line: int, family) -> None:
    tier = _tier2(compiled, module)
    hits = [f for f in tier.findings if f.code == code and line in f.lines]
    assert hits, [(f.code, f.lines) for f in tier.findings]
    assert hits[0].family == family
    assert hits[0].evidence and hits[0].evidence[0].excerpt


@pytest.mark.parametrize(
    ("module", "code", "line"),
    [
        pytest.param("vadd", "NPU_DISCRETE_ACCESS", None, id="contiguous-loads-are-blocks"),
        pytest.param("vadd", "NPU_STRIDED_ACCESS", None, id="unit-stride-is-not-strided"),
        pytest.param("vadd", "NPU_MASK_SELECT", None, id="bound-mask-is-a-subview"),
        pytest.param("vadd", "NPU_UB_OVERFLOW", None, id="two-4k-tiles-fit"),
        pytest.param("vadd", "NPU_UB_UNALIGNED", None, id="4k-rows-aligned"),
        pytest.param("transpose", "NPU_STRIDED_ACCESS", 33, id="row-major-tile-load-is-contiguous"),
        pytest.param("discrete", "NPU_STRIDED_ACCESS", None, id="discrete-loads-are-not-called-strided"),
        pytest.param("discrete", "NPU_MASK_SELECT", 12, id="bound-masked-gather-is-no-select"),
    ],
)
def test_it_does_not_flag(compiled, module: str, code: str, line: int | None) -> None:
    lines = _codes_at(_tier2(compiled, module).findings, code)
    assert (lines == []) if line is None else all(line not in ls for ls in lines), lines


def test_the_stage_that_needs_cann_is_an_info_finding_and_stages_are_artefacts(compiled) -> None:
    tier = _tier2(compiled, "vadd")
    [stage] = [f for f in tier.findings if f.code == "NPU_STAGE_UNAVAILABLE"]
    assert stage.severity == Severity.INFO and stage.args["stage"] == "npubin"
    assert stage.args["reason"] == "needs_cann" and stage.args["reached"] == "ttir, ttadapter"
    assert {(a.kind, a.name) for a in tier.artefacts} == {
        ("ttir", "add_kernel.ttir"),
        ("linalg", "add_kernel.ttadapter"),
    }


def test_tier2_data_has_the_transfers_of_each_line(compiled) -> None:
    data = _tier2(compiled, "colsum").data["kernels"]["colsum_kernel"]
    [load] = data["lines"]["16"]["transfers"]
    assert (load["what"], load["mode"], load["inner_stride"], load["arg"]) == (
        "load",
        "block",
        "stride_xm",
        "x_ptr",
    )
    assert data["mix_mode"] == "aiv" and data["ub_bytes"] == 512 * 4


def test_read_linalg_maps_the_hidden_arguments_away(compiled) -> None:
    k = compiled["transpose"].kernels[0]
    view = read_linalg(k.stages["ttadapter"], k.filename, k.ir_args)
    store = next(t for t in view.transfers if t.what == "store")
    load = next(t for t in view.transfers if t.what == "load")
    assert (store.arg, store.inner_stride, store.shape) == ("out_ptr", "stride_om", (32, 32))
    assert (load.arg, load.inner_stride, load.bounded) == ("x_ptr", "1", True)


@pytest.mark.parametrize(
    ("module", "line", "pass_name"),
    [
        pytest.param("discrete", 12, "TritonToUnstructure", id="gather-by-unstructure"),
        pytest.param("discrete", 13, "TritonToUnstructure", id="modulo-by-unstructure"),
        pytest.param("discrete", 15, "DiscreteMaskAccessConversion", id="mask-by-discrete-mask-conversion"),
        pytest.param("colsum", 16, "TritonToLinalg", id="strided-view-by-triton-to-linalg"),
    ],
)
def test_tier3_names_the_pass_that_lowered_the_access(
    compiled, module: str, line: int, pass_name: str
) -> None:
    tier = run_tier3(compiled[module], MODULES[module].read_text())
    [hit] = [f for f in tier.findings if f.code == "CG_NPU_LOWERING" and f.lines == (line,)]
    assert hit.args["pass_name"] == pass_name
    assert hit.evidence[0].kind == "pass_dump" and hit.evidence[0].lines
    assert any(a.kind == "pass_dump" and pass_name in a.name for a in tier.artefacts)


def test_tier3_summarises_both_pipelines_and_runs_no_counterfactual(compiled) -> None:
    tier = run_tier3(compiled["vadd"], MODULES["vadd"].read_text())
    [summary] = [f for f in tier.findings if f.code == "CG_PASS_EFFECTS"]
    names = [p["pass"] for p in summary.args["passes"]]
    assert "TritonToLinalg" in names and summary.args["total"] > 15
    assert tier.explains is False and tier.data["counterfactuals"] == []
