"""Parsers of diagnosis.engine.ir on real snippets of triton 3.6 output (no compile here)."""

from __future__ import annotations

import pytest

from diagnosis.engine.ir import (
    GLOBAL_LOAD,
    GLOBAL_STORE,
    LOCAL,
    SHARED_LOAD,
    WGMMA,
    CompiledKernel,
    CompileResult,
    LocResolver,
    Resources,
    access_pattern,
    classify_amdgcn,
    classify_ptx,
    classify_sass,
    occupancy,
    parse_mlir,
    parse_ptx,
    parse_sass,
)

F = "/work/k/colsum.py"

TTIR = f"""#loc = loc("{F}":11:0)
#loc2 = loc(unknown)
#loc15 = loc("{F}":18:35)
#loc19 = loc("x_ptr"(#loc))
#loc35 = loc(callsite(#loc2 at #loc15))
module {{
  tt.func public @colsum_kernel(%x_ptr: !tt.ptr<f32> {{tt.divisibility = 16 : i32}} loc("x_ptr"(#loc)), %M: i32 {{tt.divisibility = 16 : i32}} loc("M"(#loc)), %stride_xm: i32 loc("stride_xm"(#loc)), %n: i32 loc("n"(#loc))) attributes {{noinline = false}} {{
    %c512_i32 = arith.constant 512 : i32 loc(#loc1)
    %c0_i32 = arith.constant 0 : i32 loc(#loc1)
    %cst = arith.constant dense<0.000000e+00> : tensor<512xf32> loc(#loc2)
    %acc = scf.for %start = %c0_i32 to %M step %c512_i32 iter_args(%acc_0 = %cst) -> (tensor<512xf32>)  : i32 {{
      %rows = tt.make_range {{end = 512 : i32, start = 0 : i32}} : tensor<512xi32> loc(#loc26)
      %rows_1 = tt.splat %start : i32 -> tensor<512xi32> loc(#loc27)
      %rows_2 = arith.addi %rows_1, %rows : tensor<512xi32> loc(#loc27)
      %x = tt.splat %M : i32 -> tensor<512xi32> loc(#loc28)
      %x_3 = arith.cmpi slt, %rows_2, %x : tensor<512xi32> loc(#loc28)
      %x_4 = tt.splat %stride_xm : i32 -> tensor<512xi32> loc(#loc29)
      %x_5 = arith.muli %rows_2, %x_4 : tensor<512xi32> loc(#loc29)
      %x_6 = tt.splat %x_ptr : !tt.ptr<f32> -> tensor<512x!tt.ptr<f32>> loc(#loc30)
      %x_7 = tt.addptr %x_6, %x_5 : tensor<512x!tt.ptr<f32>>, tensor<512xi32> loc(#loc30)
      %x_10 = tt.load %x_7, %x_3, %cst : tensor<512x!tt.ptr<f32>> loc(#loc32)
      %y_6 = tt.addptr %x_6, %rows_2 : tensor<512x!tt.ptr<f32>>, tensor<512xi32> loc(#loc31)
      %y_m = tt.splat %n : i32 -> tensor<512xi32> loc(#loc31)
      %y_m2 = arith.cmpi slt, %rows_2, %y_m : tensor<512xi32> loc(#loc31)
      %y_10 = tt.load %y_6, %y_m2 : tensor<512x!tt.ptr<f32>> loc(#loc33)
      %acc_11 = arith.addf %acc_0, %x_10 : tensor<512xf32> loc(#loc33)
      scf.yield %acc_11 : tensor<512xf32> loc(#loc12)
    }} loc(#loc25)
    %1 = "tt.reduce"(%acc) <{{axis = 0 : i32}}> ({{
    ^bb0(%arg5: f32 loc(callsite(#loc2 at #loc15)), %arg6: f32 loc(callsite(#loc2 at #loc15))):
      %2 = arith.addf %arg5, %arg6 : f32 loc(#loc36)
      tt.reduce.return %2 : f32 loc(#loc34)
    }}) : (tensor<512xf32>) -> f32 loc(#loc34)
    tt.return loc(#loc18)
  }} loc(#loc)
}} loc(#loc)
#loc1 = loc("{F}":14:29)
#loc12 = loc("{F}":17:8)
#loc14 = loc("/site-packages/triton/language/standard.py":293:36)
#loc16 = loc("{F}":16:20)
#loc17 = loc("{F}":20:20)
#loc18 = loc("{F}":18:4)
#loc25 = loc("acc"(#loc1))
#loc26 = loc("rows"(#loc16))
#loc27 = loc("rows"(#loc16))
#loc28 = loc("x"(#loc16))
#loc29 = loc("x"(#loc16))
#loc30 = loc("x"(#loc16))
#loc31 = loc("y"(#loc17))
#loc32 = loc("x"(#loc16))
#loc33 = loc(fused[#loc14, #loc17])
#loc34 = loc(callsite(#loc14 at #loc15))
#loc36 = loc(callsite(#loc2 at #loc34))
"""

PTX = f"""//
.version 8.7
.target sm_90a
.visible .entry colsum_kernel(
	.param .u64 .ptr .global .align 1 colsum_kernel_param_0
)
{{
	.loc	1 16 20                         // colsum.py:16:20
	@%p2 ld.global.b32 {{ %r14 }}, [ %rd5 + 0 ];
	@!%p3 ld.global.v4.b32 {{ %r1, %r2, %r3, %r4 }}, [ %rd6 + 0 ];
	.loc	2 293 36                        // standard.py:293:36 @[ colsum.py:18:35 ]
	st.shared.b32 	[%r5], %r6;
	.loc	2 263 15                        // standard.py:263:15 @[ standard.py:293:36 @[ colsum.py:18:35 ] ]
	ld.shared.v2.b32 	{{%r7, %r8}}, [%r5];
$L__BB0_2:
	.loc	1 20 4                          // colsum.py:20:4
	st.global.v4.b16 	[%rd1], {{%rs1, %rs2, %rs3, %rs4}};
	ret;
}}
	.file	1 "{F}"
	.file	2 "/site-packages/triton/language/standard.py"
"""

SASS = f"""	//## File "{F}", line 16
        /*0180*/              @!P0 LDG.E.128 R16, desc[UR4][R2.64] ;
        /*0190*/                   STL [R1+0x160], R6 ;
	//## File "/site-packages/triton/language/standard.py", line 293
        /*01a0*/                   SHFL.BFLY PT, R3, R24, 0x10, 0x1f ;
	//## File "{F}", line 20
        /*01b0*/                   HGMMA.64x128x16.F32 R24, gdesc[UR4], R24 ;
"""


def test_it_resolves_named_callsite_and_fused_locations() -> None:
    locs = LocResolver(TTIR)
    assert locs.line("#loc32", F) == 16  # named -> file:line
    assert locs.line("#loc34", F) == 18  # callee in standard.py, caller in the file
    assert locs.line("#loc36", F) == 18  # nested call sites
    assert locs.line("#loc33", F) == 20  # fused: the frame in the uploaded file
    assert locs.line("#loc2", F) is None  # unknown
    assert locs.line('loc("x_ptr"(#loc))', F) == 11


FLAT = "/work/k/flat.py"

# `row, col = offs // D, offs % D` (D = 64) then `x + row * stride_row + col`, and
# `x + (offs % 2) * stride_row`; compiled by triton 3.6 for sm_90
FLAT_TTIR = f"""#loc = loc("{FLAT}":7:0)
#loc21 = loc("x"(#loc))
#loc22 = loc("y"(#loc))
#loc23 = loc("stride_row"(#loc))
#loc24 = loc("T"(#loc))
module {{
  tt.func public @flat_kernel(%x: !tt.ptr<f32> {{tt.divisibility = 16 : i32}} loc("x"(#loc)), %y: !tt.ptr<f32> {{tt.divisibility = 16 : i32}} loc("y"(#loc)), %stride_row: i32 {{tt.divisibility = 16 : i32}} loc("stride_row"(#loc)), %T: i32 loc("T"(#loc))) attributes {{noinline = false}} {{
    %b = arith.constant dense<2> : tensor<128xi32> loc(#loc25)
    %cst = arith.constant dense<64> : tensor<128xi32> loc(#loc2)
    %c128_i32 = arith.constant 128 : i32 loc(#loc2)
    %offs = tt.get_program_id x : i32 loc(#loc26)
    %offs_0 = arith.muli %offs, %c128_i32 : i32 loc(#loc27)
    %offs_1 = tt.make_range {{end = 128 : i32, start = 0 : i32}} : tensor<128xi32> loc(#loc28)
    %offs_2 = tt.splat %offs_0 : i32 -> tensor<128xi32> loc(#loc29)
    %offs_3 = arith.addi %offs_2, %offs_1 : tensor<128xi32> loc(#loc29)
    %mask = tt.splat %T : i32 -> tensor<128xi32> loc(#loc30)
    %mask_4 = arith.cmpi slt, %offs_3, %mask : tensor<128xi32> loc(#loc30)
    %row = arith.divsi %offs_3, %cst : tensor<128xi32> loc(#loc31)
    %col = arith.remsi %offs_3, %cst : tensor<128xi32> loc(#loc32)
    %a = tt.splat %stride_row : i32 -> tensor<128xi32> loc(#loc33)
    %a_5 = arith.muli %row, %a : tensor<128xi32> loc(#loc33)
    %a_6 = tt.splat %x : !tt.ptr<f32> -> tensor<128x!tt.ptr<f32>> loc(#loc34)
    %a_7 = tt.addptr %a_6, %a_5 : tensor<128x!tt.ptr<f32>>, tensor<128xi32> loc(#loc34)
    %a_8 = tt.addptr %a_7, %col : tensor<128x!tt.ptr<f32>>, tensor<128xi32> loc(#loc35)
    %a_9 = tt.load %a_8, %mask_4 : tensor<128x!tt.ptr<f32>> loc(#loc36)
    %b_10 = arith.remsi %offs_3, %b : tensor<128xi32> loc(#loc25)
    %b_11 = arith.muli %b_10, %a : tensor<128xi32> loc(#loc37)
    %b_12 = tt.addptr %a_6, %b_11 : tensor<128x!tt.ptr<f32>>, tensor<128xi32> loc(#loc38)
    %b_13 = tt.load %b_12, %mask_4 : tensor<128x!tt.ptr<f32>> loc(#loc39)
    %0 = tt.splat %y : !tt.ptr<f32> -> tensor<128x!tt.ptr<f32>> loc(#loc17)
    %1 = tt.addptr %0, %offs_3 : tensor<128x!tt.ptr<f32>>, tensor<128xi32> loc(#loc17)
    %2 = arith.addf %a_9, %b_13 : tensor<128xf32> loc(#loc18)
    tt.store %1, %2, %mask_4 : tensor<128x!tt.ptr<f32>> loc(#loc19)
    tt.return loc(#loc20)
  }} loc(#loc)
}} loc(#loc)
#loc1 = loc("{FLAT}":13:28)
#loc2 = loc(unknown)
#loc3 = loc("{FLAT}":8:25)
#loc4 = loc("{FLAT}":8:30)
#loc5 = loc("{FLAT}":8:47)
#loc6 = loc("{FLAT}":8:34)
#loc7 = loc("{FLAT}":9:18)
#loc8 = loc("{FLAT}":10:18)
#loc9 = loc("{FLAT}":11:17)
#loc10 = loc("{FLAT}":12:26)
#loc11 = loc("{FLAT}":12:20)
#loc12 = loc("{FLAT}":12:39)
#loc13 = loc("{FLAT}":12:16)
#loc14 = loc("{FLAT}":13:33)
#loc15 = loc("{FLAT}":13:20)
#loc16 = loc("{FLAT}":13:16)
#loc17 = loc("{FLAT}":14:17)
#loc18 = loc("{FLAT}":14:27)
#loc19 = loc("{FLAT}":14:23)
#loc20 = loc("{FLAT}":14:4)
#loc25 = loc("b"(#loc1))
#loc26 = loc("offs"(#loc3))
#loc27 = loc("offs"(#loc4))
#loc28 = loc("offs"(#loc5))
#loc29 = loc("offs"(#loc6))
#loc30 = loc("mask"(#loc7))
#loc31 = loc("row"(#loc8))
#loc32 = loc("col"(#loc9))
#loc33 = loc("a"(#loc10))
#loc34 = loc("a"(#loc11))
#loc35 = loc("a"(#loc12))
#loc36 = loc("a"(#loc13))
#loc37 = loc("b"(#loc14))
#loc38 = loc("b"(#loc15))
#loc39 = loc("b"(#loc16))
"""


def test_it_attributes_ttir_ops_to_lines_and_loops() -> None:
    func = parse_mlir(TTIR, F)
    assert func.name == "colsum_kernel"
    assert set(func.args) == {"%x_ptr", "%M", "%stride_xm", "%n"}
    loads = [op for op in func.ops if op.name == "tt.load"]
    assert [op.line for op in loads] == [16, 20]
    assert all(op.loops == 1 for op in loads)
    loop = next(op for op in func.ops if op.name == "scf.for")
    assert loop.line == 14  # its loc follows the closing brace
    assert func.iter_args == {"%acc_0": "%cst"}
    reduce = next(op for op in func.ops if op.name == "tt.reduce")
    assert reduce.loops == 0 and reduce.line == 18


@pytest.mark.parametrize(
    ("index", "kind", "stride_args", "mask_args"),
    [
        pytest.param(0, "strided", ("stride_xm",), ("M",), id="index-times-runtime-stride"),
        pytest.param(1, "contiguous", (), ("n",), id="unit-stride-masked-by-n"),
    ],
)
def test_it_classifies_access_patterns(index: int, kind: str, stride_args: tuple, mask_args: tuple) -> None:
    func = parse_mlir(TTIR, F)
    load = [op for op in func.ops if op.name == "tt.load"][index]
    acc = access_pattern(func, load)
    assert acc.kind == kind
    assert acc.stride_args == stride_args
    assert acc.mask_args == mask_args
    assert acc.pointer_args == ("x_ptr",)
    assert acc.has_mask


@pytest.mark.parametrize(
    ("index", "kind", "stride_args"),
    [
        # the quotient is constant over runs of 64 and the remainder walks them: the load is
        # contiguous, whatever row stride the quotient is scaled by
        pytest.param(0, "contiguous", (), id="row-times-stride-plus-col-of-a-flat-offset"),
        pytest.param(1, "unknown", (), id="offset-mod-2-times-stride-is-not-a-walk"),
    ],
)
def test_it_reads_a_flat_offset_split_by_a_divisor(index: int, kind: str, stride_args: tuple) -> None:
    func = parse_mlir(FLAT_TTIR, FLAT)
    load = [op for op in func.ops if op.name == "tt.load"][index]
    acc = access_pattern(func, load)
    assert (acc.kind, acc.stride_args, acc.mask_args) == (kind, stride_args, ("T",))
    assert acc.offset_args == ("stride_row",)
    assert acc.program_ids == ()  # the program id reaches it scaled by the block: `pid * 128`


def test_it_attributes_ptx_through_the_inlining_chain() -> None:
    instrs = parse_ptx(PTX, F)
    by_line = {}
    for ins in instrs:
        by_line.setdefault(ins.line, []).append(ins.opcode)
    assert by_line[16] == ["ld.global.b32", "ld.global.v4.b32"]  # predicates stripped
    assert by_line[18] == ["st.shared.b32", "ld.shared.v2.b32"]  # tl.sum inlined from standard.py
    assert by_line[20] == ["st.global.v4.b16", "ret"]
    ld = next(i for i in instrs if i.opcode == "ld.global.b32")
    assert PTX.splitlines()[ld.asm_line - 1].strip().startswith("@%p2 ld.global.b32")


def test_it_reads_sass_line_markers() -> None:
    instrs = parse_sass(SASS, F)
    assert [(i.opcode, i.line) for i in instrs] == [
        ("LDG.E.128", 16),
        ("STL", 16),
        ("SHFL.BFLY", None),
        ("HGMMA.64x128x16.F32", 20),
    ]


@pytest.mark.parametrize(
    ("opcode", "category", "width"),
    [
        pytest.param("ld.global.v4.b32", GLOBAL_LOAD, 128, id="v4-b32"),
        pytest.param("ld.global.b32", GLOBAL_LOAD, 32, id="scalar-b32"),
        pytest.param("ld.global.b16", GLOBAL_LOAD, 16, id="scalar-b16"),
        pytest.param("ld.global.L1::evict_last.v2.b32", GLOBAL_LOAD, 64, id="cache-hint-v2"),
        pytest.param("st.global.v4.b16", GLOBAL_STORE, 64, id="store-v4-b16"),
        pytest.param("ld.shared::cta.v4.b32", SHARED_LOAD, 128, id="shared-cta"),
        pytest.param("ldmatrix.sync.aligned.m8n8.x4.shared.b16", SHARED_LOAD, None, id="ldmatrix"),
        pytest.param("ld.local.b32", LOCAL, 32, id="local"),
        pytest.param("cp.async.cg.shared.global", "cp_async", None, id="cp-async"),
        pytest.param("cp.async.commit_group", None, None, id="commit-not-a-copy"),
        pytest.param(
            "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes",
            "tma",
            None,
            id="tma",
        ),
        pytest.param("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16", WGMMA, None, id="wgmma"),
        pytest.param("wgmma.fence.sync.aligned", None, None, id="wgmma-fence"),
        pytest.param("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", "mma", None, id="mma-sync"),
        pytest.param("fma.rn.f32", "fma", None, id="fma"),
    ],
)
def test_it_classifies_ptx_opcodes(opcode: str, category: str | None, width: int | None) -> None:
    assert classify_ptx(opcode) == (category, width)


@pytest.mark.parametrize(
    ("opcode", "expected"),
    [
        pytest.param("buffer_load_dwordx4", (GLOBAL_LOAD, 128), id="buffer-x4"),
        pytest.param("global_load_dword", (GLOBAL_LOAD, 32), id="global-dword"),
        pytest.param("buffer_store_dword", (GLOBAL_STORE, 32), id="store-dword"),
        pytest.param("ds_read_b128", (SHARED_LOAD, 128), id="lds"),
        pytest.param("v_mfma_f32_32x32x8_f16", ("mma", None), id="mfma"),
    ],
)
def test_it_classifies_amdgcn_opcodes(opcode: str, expected: tuple) -> None:
    assert classify_amdgcn(opcode) == expected


def test_it_classifies_sass_opcodes() -> None:
    assert classify_sass("LDG.E.128") == (GLOBAL_LOAD, 128)
    assert classify_sass("LDG.E") == (GLOBAL_LOAD, 32)
    assert classify_sass("STL") == (LOCAL, 32)
    assert classify_sass("HGMMA.64x128x16.F32") == (WGMMA, None)


def _kernel(registers: int, shared: int, num_warps: int) -> CompiledKernel:
    return CompiledKernel(
        "k", 1, F, num_warps, 3, (1, 1, 1), (), resources=Resources(registers, shared=shared)
    )


@pytest.mark.parametrize(
    ("registers", "shared", "num_warps", "blocks", "limiter"),
    [
        pytest.param(26, 0, 4, 16, "threads", id="light-kernel-thread-limited"),
        pytest.param(255, 0, 1, 8, "registers", id="255-regs-one-warp"),
        pytest.param(206, 98304, 4, 2, "registers", id="matmul-3-stages"),
        pytest.param(64, 120000, 4, 1, "shared", id="big-shared"),
    ],
)
def test_it_computes_the_sm90_occupancy_limit(
    registers: int, shared: int, num_warps: int, blocks: int, limiter: str
) -> None:
    occ = occupancy(_kernel(registers, shared, num_warps), "cuda", "90")
    assert occ is not None
    assert (occ.blocks_per_sm, occ.limiter) == (blocks, limiter)
    assert occ.warps_per_sm == blocks * num_warps


def test_it_builds_typed_records_from_the_job_json() -> None:
    data = {
        "target": "sm_90",
        "backend": "cuda",
        "arch": "90",
        "overrides": {"num_stages": 3},
        "kernels": [
            {
                "name": "k",
                "def_line": 11,
                "filename": F,
                "launch": {
                    "grid": [4],
                    "num_warps": 4,
                    "num_stages": 3,
                    "args": [
                        {
                            "name": "x_ptr",
                            "kind": "tensor",
                            "type": "*fp32",
                            "shape": [8],
                            "stride": [1],
                            "divisible_16": True,
                        },
                        {"name": "n", "kind": "int", "type": "i32", "value": 1000003},
                    ],
                },
                "stages": {"ptx": PTX, "ttir": TTIR},
                "pass_dumps": [
                    {"index": 0, "pass": "(input)", "changed": True, "ops": {"tt.load": 2}, "text": "x"}
                ],
                "resources": {"registers": 26, "spills_store": 8, "spills_load": 4, "shared": 16},
                "compile_s": 0.2,
                "error": None,
            }
        ],
    }
    res = CompileResult.from_json(data)
    k = res.kernel("k")
    assert k is not None and k.grid == (4, 1, 1)
    assert k.arg("x_ptr").is_pointer and k.arg("x_ptr").divisible_16
    assert k.arg("n").value == 1000003 and not k.arg("n").divisible_16
    assert k.resources.spills == 12
    assert k.pass_dumps[0].ops == {"tt.load": 2}
