"""PIPELINING: num_stages / num_warps of dot loops raised so the loop can be pipelined."""

from __future__ import annotations

import pytest

from diagnosis.engine.evidence import Family
from diagnosis.engine.proposers.rules import apply_family
from tests.engine.rules_cases import harness as h
from tests.engine.rules_cases import styles as st

MATMUL = h.source("matmul.py")
LAUNCH = "            BLOCK_M=64, BLOCK_N=64, BLOCK_K=32,\n"


def with_options(options: str) -> str:
    return MATMUL.replace(LAUNCH, LAUNCH.rstrip("\n") + f" {options}\n")


def with_local(binding: str, options: str) -> str:
    """The launch's options read a local that `binding` (statements above the grid) binds."""
    return with_options(options).replace("        grid = (", f"{binding}        grid = (")


FIX = [
    pytest.param(with_options("num_stages=1,"), ["BLOCK_K=32, num_stages=3,\n"], id="stages-literal"),
    pytest.param(
        "NUM_STAGES = 2\n" + with_options("num_stages=NUM_STAGES,"), ["BLOCK_K=32, num_stages=3,\n"],
        id="stages-module-constant",
    ),
    pytest.param(
        with_options("num_warps=1, num_stages=4,"), ["BLOCK_K=32, num_warps=4, num_stages=4,\n"], id="one-warp"
    ),
    pytest.param(
        MATMUL.replace(
            "@triton.jit\ndef matmul_kernel(",
            "@triton.autotune(configs=[triton.Config({}, num_warps=8, num_stages=1), triton.Config({}, num_warps=2)],"
            " key=['M'])\n@triton.jit\ndef matmul_kernel(",
        ),
        ["triton.Config({}, num_warps=8, num_stages=3), triton.Config({}, num_warps=4)"],
        id="autotune-configs",
    ),
    # sglang's extend attention: `num_stages = 1` above the launch, read by it alone; the
    # literal changes, so the launch stays as written and no local is left unread
    pytest.param(
        with_local("        num_stages = 1\n", "num_stages=num_stages,"),
        ["        num_stages = 3\n        grid = (", "BLOCK_K=32, num_stages=num_stages,\n"],
        id="stages-in-a-local-read-by-the-launch-alone",
    ),
    # read elsewhere too: the launch's keyword changes, the local stays for its other reader
    pytest.param(
        with_local("        num_stages = 1\n        assert num_stages > 0\n", "num_stages=num_stages,"),
        ["        num_stages = 1\n", "BLOCK_K=32, num_stages=3,\n"],
        id="stages-in-a-local-read-elsewhere-too",
    ),
]

NOOP = [
    pytest.param(MATMUL, id="default-options"),
    pytest.param(with_options("num_stages=3, num_warps=8,"), id="already-pipelined"),
    pytest.param(h.source("vec_add.py").replace("num_warps=4", "num_warps=1"), id="no-dot"),
    pytest.param(with_options("num_stages=stages,"), id="runtime-value"),
]


@pytest.mark.parametrize(("before", "present"), FIX)
def test_it_raises_stages_and_warps_of_dot_loops(before: str, present: list[str]) -> None:
    rw = apply_family(Family.PIPELINING, before, h.rule_input())
    assert rw is not None
    assert h.parses(rw.source)
    for text in present:
        assert text in rw.source


@pytest.mark.parametrize("before", NOOP)
def test_it_leaves_other_launches_alone(before: str) -> None:
    assert apply_family(Family.PIPELINING, before, h.rule_input()) is None


# --- code styles ---------------------------------------------------------------------------------

FAMILY = Family.PIPELINING
MATMUL = st.source("matmul_tutorial.py")
MATMUL_AUTOTUNED = MATMUL.replace(
    "@triton.jit\n",
    "@triton.autotune(\n    configs=[\n"
    '        triton.Config({"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8},'
    " num_stages=2, num_warps=2),\n"
    '        triton.Config({"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8},'
    " num_stages=4, num_warps=4),\n"
    '    ],\n    key=["M", "N", "K"],\n)\n@triton.jit\n',
).replace("        64, 64, 32, 8,\n", "").replace("        num_stages=2,\n", "")

STYLES = [
    st.row(MATMUL, "matmul_tutorial.py", ["        ACTIVATION=activation,\n        num_stages=3,\n    )"],
           id="tutorial-matmul-launch-in-a-helper"),
    st.row(MATMUL_AUTOTUNED, "matmul_tutorial.py",
           ['"GROUP_SIZE_M": 8}, num_stages=3, num_warps=4),\n', '"GROUP_SIZE_M": 8}, num_stages=4, num_warps=4),\n'],
           id="tutorial-autotune-configs"),
    *st.import_rows("matmul_tutorial.py", ["        num_stages=3,\n"]),
]


@pytest.mark.parametrize("case", STYLES)
def test_it_pipelines_every_code_style(case: st.StyleCase) -> None:
    st.rewrite(FAMILY, case)
