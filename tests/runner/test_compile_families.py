"""Compiler-grounded checks of the structural rewrites: each case module and its rewrite are
compiled for sm_90 on CPU (the child's compile job) and the PTX or TTGIR must show what the
rewrite promises: the walked column's loads vectorized, the atomics gone or out of the loop,
the whole-tensor reduction spread over many programs, a few programs' loop split over the
device, the intermediate's round trip gone."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnosis.engine.evidence import Family
from diagnosis.engine.ir import (
    ATOMIC,
    GLOBAL_LOAD,
    GLOBAL_STORE,
    CompileResult,
    line_table,
    parse_mlir,
    tensor_shape,
)
from diagnosis.engine.proposers.base import CaseShape, ProposalContext
from diagnosis.engine.proposers.rules import RuleInput, apply_family
from diagnosis.engine.tier2 import run_tier2
from runner.protocol import JobRequest
from tests.engine.rules_cases import harness as h


def compile_module(path: Path) -> CompileResult:
    from runner.childlib.compile import compile_job

    data = compile_job(
        JobRequest(job="compile", module=str(path), options={"pass_dumps": False, "sass": False})
    )
    result = CompileResult.from_json(data)
    assert all(k.error is None for k in result.kernels), [k.error for k in result.kernels]
    return result


# the heads scan with its walked block chosen by an fla-style autotuner (the tile tests' variant);
# the compile job compiles its first config
AUTOTUNED_SCAN = "autotuned_heads_scan.py"


def case_module(tmp_path: Path, name: str) -> Path:
    if name != AUTOTUNED_SCAN:
        return h.HERE / name
    from tests.engine.test_rules_tile_strided import AUTOTUNED_SCAN as source

    path = tmp_path / "before" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(source)
    return path


def rewrite(
    tmp_path: Path, name: str, family: Family, cases: tuple[CaseShape, ...] = ()
) -> tuple[Path, Path]:
    before = case_module(tmp_path, name)
    rw = apply_family(family, before.read_text(), h.rule_input(cases))
    assert rw is not None
    after = tmp_path / name
    after.write_text(rw.source)
    return before, after


def line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), start=1) if text in line)


@pytest.mark.parametrize(
    ("name", "walked"),
    [
        pytest.param("strided_colsum.py", "x = tl.load(", id="column-sum"),
        pytest.param("strided_transpose.py", "column = tl.load(", id="transpose"),
        pytest.param("strided_heads_scan.py", "vals = tl.load(", id="heads-of-a-split-program-index"),
        pytest.param("strided_heads_chunks.py", "g = tl.load(", id="heads-split-by-a-helper"),
        pytest.param(AUTOTUNED_SCAN, "vals = tl.load(", id="heads-whose-block-an-autotuner-chooses"),
    ],
)
def test_the_walked_column_loads_become_vector_loads(tmp_path: Path, name: str, walked: str) -> None:
    shapes = h.HERE / ("strided_heads_scan.py" if name == AUTOTUNED_SCAN else name)
    before, after = rewrite(tmp_path, name, Family.COALESCE, h.cases_of(shapes))
    compiled = compile_module(before)
    [kernel] = compiled.kernels
    row = line_table(kernel)[line_of(before, walked)]
    assert row.max_width(GLOBAL_LOAD) == 32  # one 4-byte element per lane
    tier2 = run_tier2(compiled, before.read_text())
    assert any(f.code == "IR_SCALAR_GLOBAL" and f.family is Family.COALESCE for f in tier2.findings)

    compiled = compile_module(after)
    [kernel] = compiled.kernels
    row = line_table(kernel)[line_of(after, walked)]
    assert row.max_width(GLOBAL_LOAD) == 128  # ld.global.v4.b32 along the program axis
    assert not [f for f in run_tier2(compiled, after.read_text()).findings if f.family is Family.COALESCE]


def test_the_transposed_store_stays_coalesced_through_one_layout_conversion(tmp_path: Path) -> None:
    _, after = rewrite(tmp_path, "strided_transpose.py", Family.COALESCE)
    [kernel] = compile_module(after).kernels
    row = line_table(kernel)[line_of(after, "tl.store(")]
    assert row.max_width(GLOBAL_STORE) == 128
    assert kernel.stages["ttgir"].count("ttg.convert_layout") == 1


TALL = tuple(CaseShape(i, ((4096, 4096),), ("float32",), True) for i in range(2))


def test_two_stages_leave_no_atomic_and_a_vectorized_second_stage(tmp_path: Path) -> None:
    before, after = rewrite(tmp_path, "split_rowsum.py", Family.BLOCK_REDUCTION)
    [kernel] = compile_module(before).kernels
    assert sum(r.count(ATOMIC) for r in line_table(kernel).values()) == 1
    stage1, stage2 = compile_module(after).kernels
    assert sum(r.count(ATOMIC) for r in line_table(stage1).values()) == 0
    assert sum(r.count(ATOMIC) for r in line_table(stage2).values()) == 0
    assert max(r.max_width(GLOBAL_LOAD) or 0 for r in line_table(stage2).values()) == 128


def test_the_collapse_issues_its_one_atomic_after_the_loop(tmp_path: Path) -> None:
    before, after = rewrite(tmp_path, "split_rowsum.py", Family.BLOCK_REDUCTION, TALL)
    [kernel] = compile_module(after).kernels
    ops = parse_mlir(kernel.stages["ttgir"], kernel.filename).ops
    atomics = [op for op in ops if op.name == "tt.atomic_rmw"]
    loads = [op for op in ops if op.name == "tt.load"]
    assert len(atomics) == 1 and atomics[0].loops == 0
    assert loads and all(op.loops == 1 for op in loads)
    assert kernel.grid[1] == 1  # one program per row


def test_the_loop_over_everything_runs_on_many_programs(tmp_path: Path) -> None:
    before, after = rewrite(tmp_path, "whole_sum_loop.py", Family.TWO_STAGE)
    [kernel] = compile_module(before).kernels
    assert kernel.grid == (1, 1, 1)
    stage1, stage2 = compile_module(after).kernels
    assert stage1.grid == (528, 1, 1) and stage2.grid == (1, 1, 1)  # 4 programs per SM on 132 SMs
    assert max(r.max_width(GLOBAL_LOAD) or 0 for r in line_table(stage1).values()) == 128


def test_the_input_sized_block_is_cut_into_4096_element_programs(tmp_path: Path) -> None:
    """The block of 2^20 elements is not compiled before the rewrite: it takes minutes."""
    _, after = rewrite(tmp_path, "whole_mean_block.py", Family.TWO_STAGE)
    stage1, _ = compile_module(after).kernels
    assert stage1.grid == (256, 1, 1)  # 1024 x 1024 elements: a 2^20 block in 4096-element cuts
    loads = [op for op in parse_mlir(stage1.stages["ttgir"], stage1.filename).ops if op.name == "tt.load"]
    assert [tensor_shape(op.attrs)[0] for op in loads] == [(4096,)]


def _ops(result: CompileResult, name: str) -> int:
    return sum(
        1 for k in result.kernels for op in parse_mlir(k.stages["ttgir"], k.filename).ops if op.name == name
    )


def test_the_fused_row_kernel_reads_the_row_once_and_no_statistic(tmp_path: Path) -> None:
    before, after = rewrite(tmp_path, "stats_softmax.py", Family.FUSION)
    old = compile_module(before)
    assert len(old.kernels) == 2 and _ops(old, "tt.load") == 4  # x twice, the max and the sum
    new = compile_module(after)
    assert len(new.kernels) == 1 and _ops(new, "tt.load") == 1  # x once
    assert _ops(new, "tt.store") == 3  # y, and the statistics still written


def test_the_forwarded_intermediate_is_neither_stored_nor_loaded_back(tmp_path: Path) -> None:
    before, after = rewrite(tmp_path, "reload_center.py", Family.FUSION)
    assert (_ops(compile_module(before), "tt.load"), _ops(compile_module(before), "tt.store")) == (2, 2)
    new = compile_module(after)
    assert (_ops(new, "tt.load"), _ops(new, "tt.store")) == (1, 1)


def test_the_split_loop_fills_the_device_and_combines_on_the_original_grid(tmp_path: Path) -> None:
    """few_colsum.py's first case, 16384 x 2048: 8 programs of 256 columns walk all the rows
    alone; split, 66 splits of each (4 programs per SM on 132 SMs) walk every 66th row, several
    rows' loads at a time (the loop unrolled)."""
    from diagnosis.engine.proposers.rules import RuleInput
    from diagnosis.engine.proposers.rules.split_loop import UNROLL, split_long_loop
    from tests.engine.test_rules_split_loop import CASES

    before = h.HERE / "few_colsum.py"
    rw = split_long_loop(before.read_text(), RuleInput((), h.rule_input(CASES).context))
    assert rw is not None
    after = tmp_path / "few_colsum.py"
    after.write_text(rw.source)
    [kernel] = compile_module(before).kernels
    assert kernel.grid == (8, 1, 1)
    partials, combine = compile_module(after).kernels
    assert partials.grid == (8, 66, 1) and combine.grid == (8, 1, 1)
    loop_loads = [
        op for op in parse_mlir(partials.stages["ttgir"], partials.filename).ops if op.name == "tt.load"
    ]
    # the input, in each unrolled iteration of the split loop and once more in its remainder loop
    assert [op.loops for op in loop_loads] == [1] * (UNROLL + 1)
    width = max(r.max_width(GLOBAL_LOAD) or 0 for r in line_table(kernel).values())
    assert width == 64  # 256 columns over 128 threads: two floats a thread
    assert max(r.max_width(GLOBAL_LOAD) or 0 for r in line_table(partials).values()) == width


def test_an_autotuned_scans_segments_run_at_the_config_its_totals_chose(tmp_path: Path) -> None:
    """fla's released global cumsum style: the chunk BLOCK chosen by an autotuner under
    heuristics. The compile job launches an autotuned kernel at its first config; the scan copy,
    not autotuned, takes that config from the totals' autotuner (`.fn.best_config`): the same
    BLOCK and warps, so both walk the same segments."""
    from tests.engine.test_rules_split_scan import CASES, FLA_AUTOTUNED, split

    after = tmp_path / "fla_autotuned_scan.py"
    after.write_text(split(FLA_AUTOTUNED, CASES) or "")
    totals, scan = compile_module(after).kernels
    assert (totals.name, scan.name) == ("row_cumsum_kernel_totals", "row_cumsum_kernel_scan")

    def block(kernel: object) -> int:
        return next(a.value for a in kernel.args if a.name == "BLOCK")  # type: ignore[attr-defined]

    assert block(totals) == block(scan) == 256 and totals.num_warps == scan.num_warps == 2
    assert totals.grid == scan.grid and totals.grid[1] > 1  # the split axis


def test_the_permuted_copy_read_in_place_loads_the_inputs_rows_as_vectors(tmp_path: Path) -> None:
    """The gather of a transposed copy loads one 4-byte element per lane, which tier 2 calls
    strided; read through the view's strides (its row stride 1, specialized by Triton), the tile's
    rows are the input's adjacent elements and the load is a 16-byte vector."""
    from tests.engine.test_rules_strided_view import strided

    before = h.HERE / "permuted_gather.py"
    rw = apply_family(Family.COALESCE, before.read_text(), RuleInput(strided(before.read_text()), ProposalContext()))
    assert rw is not None and rw.transform == "read_permuted_view"
    after = tmp_path / before.name
    after.write_text(rw.source)
    loaded = "selected = tl.load("
    compiled = compile_module(before)
    [kernel] = compiled.kernels
    assert line_table(kernel)[line_of(before, loaded)].max_width(GLOBAL_LOAD) == 32
    assert any(f.family is Family.COALESCE for f in run_tier2(compiled, before.read_text()).findings)

    compiled = compile_module(after)
    [kernel] = compiled.kernels
    assert line_table(kernel)[line_of(after, loaded)].max_width(GLOBAL_LOAD) == 128
    assert not [f for f in run_tier2(compiled, after.read_text()).findings if f.family is Family.COALESCE]
