"""Rewrites checked on what the compiler makes of them: the rules' output compiled on CPU
through the compile job (runner.childlib.compile), so these live with the runner's tests.
The rewrites' own tables are in tests/engine/test_rules_*.py."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

from diagnosis.engine.counterfactual import Counterfactual, run_counterfactual
from diagnosis.engine.evidence import Family
from diagnosis.engine.ir import GLOBAL_LOAD, GLOBAL_STORE, CompileResult, line_table
from diagnosis.engine.proposers.base import ProposalContext
from diagnosis.engine.proposers.rules import RulesProposer, apply_family
from diagnosis.engine.proposers.rules.pad_operands import padded_operands
from diagnosis.engine.tier0 import run_tier0
from diagnosis.engine.tier2 import run_tier2
from diagnosis.engine.tier3 import run_tier3
from runner.childlib.compile import compile_job
from runner.protocol import JobRequest
from tests.engine.rules_cases import harness as h
from tests.engine.test_rules_dot_precision import IEEE_KERNEL
from tests.engine.test_rules_hoist import BIAS_ROWS
from tests.engine.test_rules_pad_operands import GEMM_BLOCKERS, SUITE, blocked, suite
from tests.engine.test_rules_split_scan import COLUMN_STYLE, STRIDED
from tests.runner.test_tier3_compiled import compiled, recompile_for

# --- HOIST ----------------------------------------------------------------------------------


def _loads_before_loop(path: Path) -> tuple[int, int]:
    """(tt.load ops before the first scf.for, all tt.load ops) in the sm_90 TTGIR of the module."""
    data = compile_job(
        JobRequest(job="compile", module=str(path), options={"pass_dumps": False, "sass": False})
    )
    text = json.loads(json.dumps(data))["kernels"][0]["stages"]["ttgir"]
    lines = [line for line in text.splitlines() if "tt.load" in line or "scf.for" in line]
    first_for = next(i for i, line in enumerate(lines) if "scf.for" in line)
    loads = [i for i, line in enumerate(lines) if "tt.load" in line]
    return sum(1 for i in loads if i < first_for), len(loads)


def test_the_compiled_loop_keeps_one_load_instead_of_two(tmp_path: Path) -> None:
    """Compiler-grounded: Triton leaves both loads in the storing loop; after the rewrite the
    bias load sits before the scf.for."""
    rw = apply_family(Family.HOIST, BIAS_ROWS, h.rule_input())
    assert rw is not None
    before, after = tmp_path / "before.py", tmp_path / "after.py"
    before.write_text(BIAS_ROWS)
    after.write_text(rw.source)
    assert _loads_before_loop(before) == (0, 2)
    assert _loads_before_loop(after) == (1, 2)


def _build(path: Path, overrides: dict | None = None, dumps: bool = True) -> CompileResult:
    """The module compiled for sm_90 through the compile job, as the tiers read it."""
    options = {"pass_dumps": dumps, "sass": False, **({"overrides": overrides} if overrides else {})}
    job = JobRequest(job="compile", module=str(path), target="sm_90", options=options)
    return CompileResult.from_json(json.loads(json.dumps(compile_job(job))))


# --- HINTS (padded operands) ----------------------------------------------------------------


def test_the_padded_odd_case_compiles_to_async_copies_for_sm90(tmp_path: Path) -> None:
    """What the rewrite is for, checked without a GPU: 01_gemm's 3000 x 5000 x 2500 case
    compiles to 16-bit operand loads and no cp.async; rewritten, its launch compiles to
    cp.async copies of both operands (the compile job captures the launch on CPU)."""

    def loads(module: Path) -> dict[str, int]:
        job = JobRequest(
            job="compile", module=str(module), target="sm_90", cases=[4], options={"sass": False}
        )
        data = json.loads(json.dumps(compile_job(job)))
        ptx = data["kernels"][0]["stages"]["ptx"]
        return {
            op: len(re.findall(rf"\b{re.escape(op)}\b", ptx))
            for op in ("ld.global.b16", "cp.async.cg.shared.global")
        }

    src = suite("01_gemm_fp16.py")
    before = loads(SUITE / "01_gemm_fp16.py")
    rw = padded_operands(src, blocked("matmul_kernel", *GEMM_BLOCKERS))
    assert rw is not None
    path = tmp_path / "padded_gemm.py"
    path.write_text(rw.source)
    after = loads(path)
    assert before["ld.global.b16"] > 0 and before["cp.async.cg.shared.global"] == 0
    assert after["ld.global.b16"] == 0 and after["cp.async.cg.shared.global"] > 0


def test_tier_3s_findings_on_the_odd_case_lead_the_rules_proposer_here() -> None:
    """End to end without a GPU: compile 01_gemm's cases 0 and 4 for sm_90, run tiers 2 and 3
    (with their counterfactual recompiles), hand the findings to the rules proposer with the
    module's cases: its HINTS candidate is the padded one (the guarded copy and the
    contiguity hint decline: no case could take the first, the findings name what blocks)."""
    src = suite("01_gemm_fp16.py")
    module = SUITE / "01_gemm_fp16.py"

    def build(
        overrides: dict | None = None, dumps: bool = True, cases: list[int] | None = None
    ) -> CompileResult:
        options = {"pass_dumps": dumps, "sass": False, **({"overrides": overrides} if overrides else {})}
        job = JobRequest(
            job="compile", module=str(module), target="sm_90", cases=cases or [0, 4], options=options
        )
        return CompileResult.from_json(json.loads(json.dumps(compile_job(job))))

    compiled = build()
    t2 = run_tier2(compiled, src)
    t3 = run_tier3(
        compiled,
        src,
        recompile=lambda o, case=None: build(o, False, [case] if case else None),
        prior=t2.findings,
    )
    findings = [f for f in t2.findings + t3.findings if f.family is Family.HINTS]
    assert findings
    # the strides the baseline's verify job records with each case
    cases = tuple(
        dataclasses.replace(
            c,
            launch_ints=(
                (
                    "matmul_kernel",
                    tuple(
                        (name, c.shapes[0][1] if name == "stride_am" else c.shapes[1][1])
                        for name in ("stride_am", "stride_bk", "stride_cm")
                    ),
                ),
            ),
        )  # fmt: skip
        for c in h.cases_of(module)
    )
    candidates = RulesProposer().propose(src, findings, ProposalContext(cases=cases))
    assert candidates and candidates[0].rationale.startswith("[hints]")
    assert "pad16(a)" in candidates[0].source, candidates[0].rationale[-600:]


def test_a_length_kept_out_of_specialization_is_found_and_specialized(tmp_path: Path) -> None:
    """End to end without a GPU, on a flat row kernel (`row, col = offs // D, offs % D`) whose
    mask bound is in `do_not_specialize`: tier 2 reads the split offset as contiguous (not a
    walk along the row stride) and finds it scalar, tier 3 names the unspecialized bound and
    its counterfactual shows 128-bit accesses, the rules proposer's candidate takes the bound
    out of the list, and that module compiles to the 128-bit loads the counterfactual showed."""
    module = h.HERE / "flat_rows.py"
    src = module.read_text()
    build = _build
    compiled = build(module)
    t2 = run_tier2(compiled, src)
    scalar = [f for f in t2.findings if f.code == "IR_SCALAR_GLOBAL"]
    assert scalar and all(f.args["access"] == "contiguous" for f in scalar)
    t3 = run_tier3(compiled, src, recompile=lambda o, case=None: build(module, o, False), prior=t2.findings)
    blocked = [f for f in t3.findings if f.code == "CG_VECTORIZATION_BLOCKED"]
    assert blocked and all([b["arg"] for b in f.args["blockers"]] == ["n"] for f in blocked)
    assert "do_not_specialize" in blocked[0].args["reason"]
    [confirmed] = [f for f in t3.findings if f.code == "CG_COUNTERFACTUAL"]
    assert "128-bit" in confirmed.message
    # the round loop puts the confirmed hypothesis first
    findings = [confirmed, *t2.findings, *blocked]
    [first, *_] = RulesProposer().propose(src, findings, ProposalContext(cases=h.cases_of(module)))
    assert first.transform == "specialized_mask_bounds"
    assert first.diff.count("\n-@triton.jit") == 1 and "+@triton.jit\n" in first.diff
    after = tmp_path / "flat_rows.py"
    after.write_text(first.source)
    [before_k], [after_k] = compiled.kernels, build(after, dumps=False).kernels
    load = next(i for i, ln in enumerate(src.splitlines(), 1) if "x = tl.load(" in ln)
    assert line_table(before_k)[load].max_width(GLOBAL_LOAD) == 32
    assert line_table(after_k)[load].max_width(GLOBAL_LOAD) == 128


# --- MASKING (full blocks) ------------------------------------------------------------------


def test_an_odd_length_is_found_and_its_full_blocks_vectorize(tmp_path: Path) -> None:
    """End to end without a GPU, on an fp16 SiLU of 2^26 + 5 elements: tier 3 names the mask
    bound as what keeps every access 16-bit and its counterfactual shows 128-bit ones, the rules
    proposer's candidate drops the mask in full blocks, and there the accesses compile to the
    128-bit vectors the counterfactual showed (the last block's stay 16-bit)."""
    module = h.SUITE / "08_silu_fp16.py"
    src = module.read_text()

    def build(path: Path, overrides: dict | None = None, dumps: bool = True) -> CompileResult:
        options = {"pass_dumps": dumps, "sass": False, **({"overrides": overrides} if overrides else {})}
        job = JobRequest(job="compile", module=str(path), target="sm_90", cases=[2], options=options)
        return CompileResult.from_json(json.loads(json.dumps(compile_job(job))))

    before = build(module)
    t2 = run_tier2(before, src)
    t3 = run_tier3(before, src, recompile=lambda o, case=None: build(module, o, False), prior=t2.findings)
    blocked = [f for f in t3.findings if f.code == "CG_VECTORIZATION_BLOCKED"]
    assert blocked and all([b["arg"] for b in f.args["blockers"]] == ["n_elements"] for f in blocked)
    [confirmed] = [f for f in t3.findings if f.code == "CG_COUNTERFACTUAL"]
    findings = [confirmed, *t2.findings, *blocked]
    [first, *_] = RulesProposer().propose(src, findings, ProposalContext(cases=h.cases_of(module)))
    assert first.transform == "unmasked_full_blocks"
    after = tmp_path / "08_silu_fp16.py"
    after.write_text(first.source)
    [k_before], [k_after] = before.kernels, build(after, dumps=False).kernels
    lines = first.source.splitlines()
    loads = [i for i, t in enumerate(lines, 1) if "x = tl.load(" in t]
    stores = [i for i, t in enumerate(lines, 1) if "tl.store(" in t]
    old, new = line_table(k_before), line_table(k_after)
    load = next(i for i, t in enumerate(src.splitlines(), 1) if "x = tl.load(" in t)
    assert old[load].max_width(GLOBAL_LOAD) == 16
    assert [new[i].max_width(GLOBAL_LOAD) for i in loads] == [128, 16]
    assert [new[i].max_width(GLOBAL_STORE) for i in stores] == [128, 16]


# --- COALESCE (interleaved pairs) ------------------------------------------------------------


def test_interleaved_pairs_are_found_and_merged_into_wider_accesses(tmp_path: Path) -> None:
    """Complex rows stored as (real, imag) pairs, each half read and written alone: tier 2 reads
    every access as a walk with the index times 2 and finds it scalar, tier 3 says its elements are
    2 apart, and the rules proposer's pair rewrite compiles to one access per pair of 64-bit
    vectors where each half was two 16-bit accesses."""
    module = h.HERE / "pairs_complex.py"
    src = module.read_text()
    before = _build(module)
    t2 = run_tier2(before, src)
    scalar = [f for f in t2.findings if f.code == "IR_SCALAR_GLOBAL"]
    assert len(scalar) == 6 and all(f.args["access"] == "strided (index times 2)" for f in scalar)
    t3 = run_tier3(before, src, prior=t2.findings)
    strided = [f for f in t3.findings if f.code == "CG_STRIDED_ACCESS"]
    assert len(strided) == 6 and all("elements of the tile are 2 apart" in f.message for f in strided)
    findings = [*run_tier0(src).findings, *t2.findings, *t3.findings]
    [first, *_] = RulesProposer().propose(src, findings, ProposalContext(cases=h.cases_of(module)))
    assert first.transform == "interleaved_pairs"
    after = tmp_path / "pairs_complex.py"
    after.write_text(first.source)
    [k_before], [k_after] = before.kernels, _build(after, dumps=False).kernels
    old, new = line_table(k_before), line_table(k_after)
    loads_before = [i for i, t in enumerate(src.splitlines(), 1) if "= tl.load(" in t]
    loads_after = [i for i, t in enumerate(first.source.splitlines(), 1) if "tl.split(" in t]
    store_after = next(i for i, t in enumerate(first.source.splitlines(), 1) if "tl.store(" in t)
    assert [old[i].max_width(GLOBAL_LOAD) for i in loads_before] == [16] * 4
    assert [new[i].max_width(GLOBAL_LOAD) for i in loads_after] == [64] * 2
    assert new[store_after].max_width(GLOBAL_STORE) == 64


# --- LAUNCH_CONFIG (split scan) -------------------------------------------------------------


def test_a_split_scan_compiles_both_copies_for_sm90(tmp_path: Path) -> None:
    """The split scan's copies as the wrapper launches them on the first timed case (4 rows of
    2^20 elements: the split path), compiled for sm_90: the totals copy keeps the loop's
    vector loads and writes one scalar total per program, the scan copy keeps the kernel's
    vector stores."""
    module = h.HERE / "few_scan.py"
    rw = apply_family(Family.LAUNCH_CONFIG, module.read_text(), h.rule_input(h.cases_of(module)))
    assert rw is not None and rw.transform == "split_carried_scan"
    after = tmp_path / "few_scan.py"
    after.write_text(rw.source)
    kernels = {k.name: k.stages["ptx"] for k in _build(after, dumps=False).kernels}
    assert set(kernels) == {"row_cumsum_kernel_totals", "row_cumsum_kernel_scan"}
    totals, scan = kernels["row_cumsum_kernel_totals"], kernels["row_cumsum_kernel_scan"]
    assert "ld.global.v4.b32" in totals and "ld.global.v4.b32" in scan
    assert len(re.findall(r"\bst\.global\.b64\b", totals)) == 1  # the float64 total
    assert not re.search(r"\bst\.global\.v\d\.b32\b", totals)  # no output written
    assert re.search(r"\bst\.global\.v4\.b32\b", scan)


def test_a_tiled_and_split_column_scan_compiles_to_vectors_along_the_tile(tmp_path: Path) -> None:
    """COALESCE's tiled walk composed with the split scan (one program per column walking the
    rows at a stride of n_cols, before): compiled for sm_90 on the first timed case (64
    columns: two tiles of 32, split), both copies load 32 contiguous columns as vectors where
    the kernel as written loads one element per lane."""
    before = tmp_path / "column_scan.py"
    before.write_text(COLUMN_STYLE)
    context = ProposalContext(cases=h.cases_of(before))
    cands = RulesProposer(max_candidates=1).propose(COLUMN_STYLE, STRIDED, context)
    assert [c.transform for c in cands] == ["tile_strided_walk+split_carried_scan"]
    after = tmp_path / "column_scan_after.py"
    after.write_text(cands[0].source)
    (plain,) = _build(before, dumps=False).kernels
    assert not re.search(r"\bld\.global\.v\d", plain.stages["ptx"])
    kernels = {k.name: k.stages["ptx"] for k in _build(after, dumps=False).kernels}
    assert set(kernels) == {"col_cumsum_kernel_totals", "col_cumsum_kernel_scan"}
    for ptx in kernels.values():
        assert re.search(r"\bld\.global\.v4\.b32\b", ptx)
    assert re.search(r"\bst\.global\.v4\.b32\b", kernels["col_cumsum_kernel_scan"])


# --- DOT_PRECISION --------------------------------------------------------------------------


def test_the_rewrite_compiles_to_tensor_core_instructions(tmp_path: Path) -> None:
    """Compiler-grounded: the ieee kernel's dot lowers to FMA (no MMA), the rule's rewrite of the
    same module to tensor-core instructions (sm_90 compile, no GPU needed)."""
    rw = apply_family(Family.DOT_PRECISION, IEEE_KERNEL, h.rule_input())
    assert rw is not None
    after = tmp_path / "dot_after_rule.py"
    after.write_text(rw.source)
    hyp = Counterfactual("bmm_kernel", {"source": str(after)}, "tensor_cores", (), Family.DOT_PRECISION)
    cf = run_counterfactual(hyp, compiled("dot_fp32_ieee"), recompile_for("dot_fp32_ieee"))
    assert cf.code == "CG_COUNTERFACTUAL"
    assert cf.args["before"]["tensor_core_instructions"] == 0 < cf.args["after"]["tensor_core_instructions"]
