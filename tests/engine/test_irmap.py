"""Source-line maps of each stage, chips, and pass diffs (diagnosis.engine.irmap) on small texts
in the shapes Triton 3.6 prints; tests/runner/test_irmap_compiled.py checks them on real compiles."""

from __future__ import annotations

import pytest

from diagnosis.engine.irmap import (
    ir_diff,
    kernel_filename,
    map_llir,
    map_mlir,
    map_sass,
    op_delta,
    pass_steps,
    ptx_inlined,
    strip_locs,
)

TTIR = """\
#loc = loc("add.py":11:0)
module {
  tt.func public @add_kernel(%x_ptr: !tt.ptr<f32> loc("x_ptr"(#loc))) attributes {noinline = false} {
    %pid = tt.get_program_id x : i32 loc(#loc10)
    %x = tt.load %x_ptr : !tt.ptr<f32> loc(#loc11)
    %s = "tt.reduce"(%x) <{axis = 0 : i32}> ({
    ^bb0(%a: f32 loc(callsite(#loc1 at #loc12))):
      %m = arith.addf %a, %a : f32 loc(#loc13)
      tt.reduce.return %m : f32 loc(#loc13)
    }) : (tensor<8xf32>) -> f32 loc(#loc13)
    tt.return loc(#loc5)
  } loc(#loc)
} loc(#loc)
#loc1 = loc(unknown)
#loc2 = loc("add.py":12:24)
#loc3 = loc("add.py":14:8)
#loc4 = loc("triton/language/standard.py":293:36)
#loc5 = loc("add.py":15:4)
#loc6 = loc("add.py":16:19)
#loc10 = loc("pid"(#loc2))
#loc11 = loc("x"(#loc3))
#loc12 = loc("s"(#loc6))
#loc13 = loc(callsite(#loc4 at #loc12))
"""

LLIR = """\
define ptx_kernel void @add_kernel(ptr addrspace(1) %0) local_unnamed_addr #0 !dbg !4 {
  %2 = tail call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x(), !dbg !7
  %3 = fadd float %1, %1, !dbg !14
  ret void, !dbg !20
}
!1 = !DIFile(filename: "add.py", directory: ".")
!4 = distinct !DISubprogram(name: "add_kernel", linkageName: "add_kernel", scope: !1, file: !1, line: 11, type: !5, scopeLine: 11, spFlags: DISPFlagDefinition | DISPFlagOptimized, unit: !0)
!7 = !DILocation(line: 12, column: 24, scope: !4)
!14 = !DILocation(line: 263, column: 15, scope: !15, inlinedAt: !17)
!15 = distinct !DILexicalBlockFile(scope: !4, file: !16, discriminator: 0)
!16 = !DIFile(filename: "standard.py", directory: "triton/language")
!17 = !DILocation(line: 293, column: 36, scope: !15, inlinedAt: !18)
!18 = !DILocation(line: 16, column: 19, scope: !19)
!19 = distinct !DILexicalBlockFile(scope: !4, file: !1, discriminator: 0)
!20 = !DILocation(line: 15, column: 4, scope: !4)
"""

PTX = """\
\t.file\t1 "add.py"
\t.file\t2 "triton/language/standard.py"
\t.loc\t1 12 24                         // add.py:12:24
\tmov.u32 \t%r1, %ctaid.x;
\t.loc\t2 263 15                        // standard.py:263:15 @[ standard.py:293:36 @[ add.py:16:19 ] ]
\tadd.f32 \t%r2, %r1, %r1;
\t.loc\t2 263 15                        // standard.py:263:15 @[ standard.py:293:36 @[ add.py:20:5 ] ]
\tadd.f32 \t%r3, %r1, %r1;
"""

SASS = """\
\t//## File "add.py", line 12
        /*0000*/                   S2R R2, SR_CTAID.X ;
\t//## File "triton/language/standard.py", line 263
        /*0010*/                   FADD R3, R2, R2 ;
\t//## File "triton/language/standard.py", line 170
        /*0020*/                   FADD R4, R2, R2 ;
\t//## File "add.py", line 15
        /*0030*/                   EXIT ;
"""


def test_mlir_lines_resolve_through_names_and_call_sites() -> None:
    m = map_mlir("ttir", TTIR, "add.py")
    assert m.by_source[12] == (4,)  # `loc("pid"(#loc2))`
    assert m.by_source[14] == (5,)
    # the body of tl.sum (standard.py) belongs to the line that called it; the region op's
    # location is printed after its closing brace; the block header has none of its own
    assert m.by_source[16] == (6, 8, 9, 10)
    assert m.by_source[15] == (11,)
    assert 293 not in m.by_source


def test_llvm_lines_follow_inlined_at_to_the_users_line() -> None:
    m = map_llir(LLIR, "add.py")
    assert m.by_source == {11: (1,), 12: (2,), 16: (3,), 15: (4,)}


def test_sass_library_lines_go_to_the_lines_ptx_says_inlined_them() -> None:
    inlined = ptx_inlined(PTX, "add.py")
    assert inlined == {("standard.py", 263): {16, 20}}
    m = map_sass(SASS, "add.py", inlined)
    assert m.by_source == {12: (2,), 16: (4,), 20: (4,), 15: (8,)}
    assert m.via == {4: "triton/language/standard.py:263"}  # said, not hidden
    assert 6 not in m.via  # a library line no PTX chain names stays unattributed


def test_the_kernels_file_is_the_outermost_frame_of_its_ops() -> None:
    assert kernel_filename({"ttir": TTIR}) == "add.py"
    assert kernel_filename({"ptx": PTX}) == "add.py"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        pytest.param("%x = tt.load %p loc(#loc32)", "%x = tt.load %p", id="trailing"),
        pytest.param(
            'tt.func @k(%a: i32 loc("a"(#loc)), %b: i32 loc("b"(#loc))) {',
            "tt.func @k(%a: i32, %b: i32) {",
            id="args",
        ),
        pytest.param("} loc(callsite(#loc1 at #loc2))", "}", id="callsite"),
        pytest.param("%c = arith.constant 1 : i32", "%c = arith.constant 1 : i32", id="none"),
    ],
)
def test_strip_locs(line: str, expected: str) -> None:
    assert strip_locs(line) == expected


BEFORE = """\
module {
  %0 = tt.load %a : tensor<4xf32> loc(#loc1)
  %1 = arith.addf %0, %0 : tensor<4xf32> loc(#loc2)
  tt.store %b, %1 loc(#loc3)
}
#loc1 = loc("add.py":3:4)
"""
AFTER = """\
module {
  %0 = tt.load %a : tensor<4xf32, #blocked> loc(#loc7)
  %1 = ttg.convert_layout %0 : tensor<4xf32> loc(#loc7)
  %2 = arith.addf %1, %1 : tensor<4xf32> loc(#loc8)
  tt.store %b, %2 loc(#loc9)
}
#loc7 = loc("add.py":3:4)
#loc9 = loc("add.py":5:4)
"""


def test_ir_diff_numbers_each_side_and_ignores_locations() -> None:
    rows = ir_diff(BEFORE, AFTER, context=1)
    changed = [(r.kind, r.old, r.new) for r in rows if r.kind != "ctx"]
    assert changed == [("del", 2, None), ("del", 3, None), ("del", 4, None),
                       ("add", None, 2), ("add", None, 3), ("add", None, 4), ("add", None, 5)]  # fmt: skip
    assert not any(" loc(" in r.text or "#loc" in r.text for r in rows)
    assert ir_diff(BEFORE, BEFORE.replace("#loc1", "#loc9")) == []  # renumbered locations: no change


def test_op_delta_counts_what_the_pass_added_and_removed() -> None:
    assert op_delta(BEFORE, AFTER) == {"ttg.convert_layout": 1}


def test_pass_steps_read_the_artefact_names_in_pass_order() -> None:
    names = ["k/30-TritonGPUPipeline", "k/00-(input)", "k/11-TritonGPUCoalesce", "k.ptx"]
    assert pass_steps(names) == [(0, "(input)"), (11, "TritonGPUCoalesce"), (30, "TritonGPUPipeline")]
