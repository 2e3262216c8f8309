"""SWIZZLE: GEMM tiles in grouped program order (a 2-D grid folded into one axis)."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnosis.engine.evidence import Family
from diagnosis.engine.proposers.rules import apply_family
from tests.engine.rules_cases import harness as h
from tests.engine.rules_cases import styles as st

MATMUL = h.source("matmul.py")

GROUPED = """    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
"""

BATCHED = (
    MATMUL.replace("    pid_n = tl.program_id(1)\n", "    pid_n = tl.program_id(1)\n    batch = tl.program_id(2)\n")
    .replace("a_ptrs = a_ptr +", "a_ptrs = a_ptr + batch * 0 +")
    .replace("grid = (triton.cdiv(M, 64), triton.cdiv(N, 64))", "grid = (triton.cdiv(M, 64), triton.cdiv(N, 64), 1)")
)

AUTOTUNED_LAMBDA = MATMUL.replace(
    "grid = (triton.cdiv(M, 64), triton.cdiv(N, 64))",
    'grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]), triton.cdiv(N, meta["BLOCK_N"]))',
)

ROW_MAJOR_1D = MATMUL.replace(
    "    pid_m = tl.program_id(0)\n    pid_n = tl.program_id(1)\n",
    "    pid = tl.program_id(0)\n    num_pid_n = tl.cdiv(N, BLOCK_N)\n    pid_m = pid // num_pid_n\n"
    "    pid_n = pid % num_pid_n\n",
).replace(
    "grid = (triton.cdiv(M, 64), triton.cdiv(N, 64))", "grid = (triton.cdiv(M, 64) * triton.cdiv(N, 64),)"
)

FIX = [
    pytest.param(
        MATMUL,
        [GROUPED, "BLOCK_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr = 8,\n):",
         "grid = (triton.cdiv(M, 64) * triton.cdiv(N, 64),)"],
        id="2d-grid-folded-into-one-axis",
    ),
    pytest.param(
        BATCHED,
        ["    batch = tl.program_id(1)\n", "grid = (triton.cdiv(M, 64) * triton.cdiv(N, 64), 1)"],
        id="batch-axis-2-becomes-axis-1",
    ),
    pytest.param(
        AUTOTUNED_LAMBDA,
        ['grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)'],
        id="lambda-grid-of-an-autotuned-launch",
    ),
    pytest.param(
        ROW_MAJOR_1D,
        ["    pid = tl.program_id(0)\n    num_pid_n = tl.cdiv(N, BLOCK_N)\n    num_pid_m = tl.cdiv(M, BLOCK_M)\n",
         "    pid_n = (pid % num_pid_in_group) // group_size_m\n",
         "grid = (triton.cdiv(M, 64) * triton.cdiv(N, 64),)"],
        id="row-major-1d-order-regrouped",
    ),
]

NOOP = [
    pytest.param(h.source("vec_add.py"), id="no-dot"),
    pytest.param(
        MATMUL.replace("BLOCK_K: tl.constexpr,\n", "BLOCK_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr,\n"),
        id="already-grouped",
    ),
    pytest.param(
        MATMUL.replace("grid = (triton.cdiv(M, 64), triton.cdiv(N, 64))", "grid = (triton.cdiv(M, 32), triton.cdiv(N, 64))"),
        id="grid-divisor-differs-from-the-block",
    ),
    pytest.param(
        MATMUL.replace("    offs_k = tl.arange(0, BLOCK_K)\n", "    offs_k = tl.arange(0, BLOCK_K) + tl.program_id(1) * 0\n"),
        id="program-id-read-twice",
    ),
    pytest.param(
        MATMUL.replace("grid = (triton.cdiv(M, 64), triton.cdiv(N, 64))", "grid = (M // 64 + 1, triton.cdiv(N, 64))"),
        id="grid-axis-not-a-cdiv",
    ),
]


@pytest.mark.parametrize(("before", "present"), FIX)
def test_it_groups_gemm_tiles(before: str, present: list[str]) -> None:
    rw = apply_family(Family.SWIZZLE, before, h.rule_input())
    assert rw is not None
    assert h.parses(rw.source)
    for text in present:
        assert text in rw.source


@pytest.mark.parametrize("before", NOOP)
def test_it_leaves_other_kernels_alone(before: str) -> None:
    assert apply_family(Family.SWIZZLE, before, h.rule_input()) is None


def test_it_composes_with_launch_config_in_either_order() -> None:
    first = apply_family(Family.SWIZZLE, MATMUL, h.rule_input())
    assert first is not None
    a = apply_family(Family.LAUNCH_CONFIG, first.source, h.rule_input())
    second = apply_family(Family.LAUNCH_CONFIG, MATMUL, h.rule_input())
    assert second is not None
    b = apply_family(Family.SWIZZLE, second.source, h.rule_input())
    assert a is not None and b is not None
    assert a.source == b.source
    assert 'grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)' in a.source
    assert apply_family(Family.SWIZZLE, a.source, h.rule_input()) is None  # idempotent


def test_grouped_modules_are_correct(tmp_path: Path) -> None:
    paths = []
    swizzled = apply_family(Family.SWIZZLE, MATMUL, h.rule_input())
    assert swizzled is not None
    both = apply_family(Family.LAUNCH_CONFIG, swizzled.source, h.rule_input())
    assert both is not None
    row_major = apply_family(Family.SWIZZLE, ROW_MAJOR_1D, h.rule_input())
    assert row_major is not None
    for name, text in (("swizzled.py", swizzled.source), ("both.py", both.source), ("row_major.py", row_major.source)):
        path = tmp_path / name
        path.write_text(text)
        paths.append(path)
    results = h.interp_check(paths)
    for path in paths:
        assert results[str(path)]["ok"], results[str(path)]["message"]
    assert results[str(tmp_path / "both.py")]["configs"] >= 8


# --- code styles ---------------------------------------------------------------------------------

FAMILY = Family.SWIZZLE
MATMUL_2D = st.source("matmul_2d.py")

STYLES = [
    # tiles by position, the grid a lambda over META: its two axes fold into one
    st.row(MATMUL_2D, "matmul_2d.py",
           ['        grid = lambda META: (triton.cdiv(M, META["BLOCK_M"]) * triton.cdiv(N, META["BLOCK_N"]),)',
            "BLOCK_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr = 8):\n"],
           id="positional-tiles-and-grid-lambda"),
    # a tuple grid of literal tiles: the kernel's tiles, passed by position, are the grid's divisors
    st.row(MATMUL_2D.replace(
        '        grid = lambda META: (triton.cdiv(M, META["BLOCK_M"]), triton.cdiv(N, META["BLOCK_N"]))  # noqa: E731\n',
        "        grid = (triton.cdiv(M, 32), triton.cdiv(N, 32))\n"), "matmul_2d.py",
        ["        grid = (triton.cdiv(M, 32) * triton.cdiv(N, 32),)\n"], id="positional-tiles-and-a-tuple-grid"),
    *st.import_rows("matmul_2d.py", ["    group_id = pid // num_pid_in_group\n", "GROUP_SIZE_M"]),
]


@pytest.mark.parametrize("case", STYLES)
def test_it_groups_every_code_style(case: st.StyleCase) -> None:
    st.rewrite(FAMILY, case)
