from __future__ import annotations

import pytest

from diagnosis.engine.evidence import Family
from tests.engine import marks, primary, src, tier0

CODES = {"T0-DIV-MOD-IN-LOOP"}

HEAD = """
import triton
import triton.language as tl


"""

NOOP = [
    pytest.param(
        HEAD
        + """
@triton.jit
def grouped(x_ptr, n, num_pid_n, GROUP: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    group = pid // (GROUP * num_pid_n)
    pid_m = pid % GROUP
    for k in range(0, n, BLOCK):
        tl.store(x_ptr + group * n + pid_m + k + tl.arange(0, BLOCK), 0.0)
""",
        id="scalar-program-index-math-outside-the-loop",
    ),
    pytest.param(
        HEAD
        + """
@triton.jit
def tiles(x_ptr, n, BLOCK: tl.constexpr, WIDTH: tl.constexpr):
    for k in range(0, n, BLOCK):
        offs = k + tl.arange(0, BLOCK)
        row = offs // WIDTH
        col = offs % 64
        tl.store(x_ptr + row * WIDTH + col, 0.0)
""",
        id="division-by-constexpr-and-literal",
    ),
    pytest.param(
        HEAD
        + """
@triton.jit
def scalar_loop(x_ptr, n, width, BLOCK: tl.constexpr):
    for k in range(0, n, BLOCK):
        row = k // width
        tl.store(x_ptr + row + tl.arange(0, BLOCK), 0.0)
""",
        id="scalar-division-inside-the-loop",
    ),
    pytest.param(
        HEAD
        + """
@triton.jit
def once(x_ptr, n, width, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + (offs // width) * width, 0.0, mask=offs < n)
""",
        id="tensor-division-outside-any-loop",
    ),
    pytest.param(
        HEAD
        + """
@triton.jit
def invariant(x_ptr, y_ptr, n, width, BLOCK: tl.constexpr):
    base = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for k in range(0, n):
        acc += tl.load(x_ptr + k * n + base % width)
    tl.store(y_ptr + base, acc)
""",
        id="loop-invariant-modulo-the-compiler-hoists",
    ),
]

FIX = [
    pytest.param(
        HEAD
        + """
@triton.jit
def unfold(x_ptr, y_ptr, n, width, BLOCK: tl.constexpr):
    for k in range(0, n, BLOCK):
        offs = k + tl.arange(0, BLOCK)
        row = offs // width  # <- T0-DIV-MOD-IN-LOOP
        col = offs % width  # <- T0-DIV-MOD-IN-LOOP
        tl.store(y_ptr + col * width + row, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)
""",
        id="tensor-div-and-mod-by-a-runtime-width",
    ),
]


@pytest.mark.parametrize("source", NOOP)
def test_it_leaves_cheap_index_math_alone(source: str) -> None:
    assert primary(tier0(src(source)).findings, CODES) == []


@pytest.mark.parametrize("source", FIX)
def test_it_flags_tensor_division_by_runtime_values_in_loops(source: str) -> None:
    source = src(source)
    assert primary(tier0(source).findings, CODES) == marks(source, CODES)


def test_division_by_a_runtime_width_points_to_index_math() -> None:
    (source,) = [p.values[0] for p in FIX if p.id == "tensor-div-and-mod-by-a-runtime-width"]
    found = [f for f in tier0(src(source)).findings if f.code in CODES]
    assert found and {f.family for f in found} == {Family.INDEX_MATH}


def test_the_compiler_hoists_loop_invariant_modulo_itself(tmp_path) -> None:
    """Why the invariant case is not flagged: in sm_90 TTGIR the remsi sits before the scf.for."""
    import importlib.util

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    (source,) = [p.values[0] for p in NOOP if p.id == "loop-invariant-modulo-the-compiler-hoists"]
    path = tmp_path / "invariant_mod.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("invariant_mod", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sig = {"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32", "width": "i32", "BLOCK": "constexpr"}
    compiled = triton.compile(
        ASTSource(module.invariant, sig, constexprs={"BLOCK": 128}),
        target=GPUTarget("cuda", 90, 32),
        options={"num_warps": 4},
    )
    ops = [line for line in compiled.asm["ttgir"].splitlines() if "arith.remsi" in line or "scf.for" in line]
    assert [("remsi" in line) for line in ops] == [True, False]
