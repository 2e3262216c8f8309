"""T0-ONE-PROGRAM-REDUCTION: a whole-tensor reduction launched on one program."""

from __future__ import annotations

import pytest

from diagnosis.engine.evidence import Family, Severity
from tests.engine import marks, primary, src, tier0

CODES = {"T0-ONE-PROGRAM-REDUCTION"}

HEAD = """
import torch
import triton
import triton.language as tl


"""

LOOP = src(
    HEAD
    + """
@triton.jit
def total(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr, tl.sum(acc, axis=0))  # <- T0-ONE-PROGRAM-REDUCTION


def run(x):
    out = torch.empty((), device=x.device)
    total[(1,)](x, out, x.numel(), BLOCK=1024)
    return out
"""
)

BLOCK = src(
    HEAD
    + """
@triton.jit
def mean(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.atomic_add(out_ptr, tl.sum(x) / n)  # <- T0-ONE-PROGRAM-REDUCTION


def run(x):
    out = torch.zeros((), device=x.device)
    mean[(1,)](x, out, x.numel(), BLOCK=triton.next_power_of_2(x.numel()))
    return out
"""
)

NOOP = [
    pytest.param(LOOP.replace("total[(1,)]", "total[(8,)]"), id="eight-programs"),
    pytest.param(
        src(
            HEAD
            + """
@triton.jit
def copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def run(x):
    y = torch.empty_like(x)
    copy[(1,)](x, y, x.numel(), BLOCK=1024)
    return y
"""
        ),
        id="one-program-storing-a-block",
    ),
    pytest.param(
        src(
            HEAD
            + """
@triton.jit
def finish(partials_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr, tl.sum(tl.load(partials_ptr + offs, mask=offs < n, other=0.0)))


def run(x):
    partials = torch.empty(64, device=x.device)
    out = torch.empty((), device=x.device)
    finish[(1,)](partials, out, 64, BLOCK=64)
    return out
"""
        ),
        id="a-second-stage-over-partials-the-wrapper-allocated",
    ),
]


@pytest.mark.parametrize("source", [pytest.param(LOOP, id="one-loop"), pytest.param(BLOCK, id="one-block")])
def test_it_flags_whole_reductions_in_one_program(source: str) -> None:
    assert primary(tier0(source).findings, CODES) == marks(source, CODES)


@pytest.mark.parametrize("source", NOOP)
def test_it_leaves_parallel_reductions_and_second_stages_alone(source: str) -> None:
    assert primary(tier0(source).findings, CODES) == []


def test_it_claims_the_idle_sms_and_warns_about_an_input_sized_block() -> None:
    (loop,) = [f for f in tier0(LOOP).findings if f.code in CODES]
    assert loop.severity is Severity.HIGH and loop.family is Family.TWO_STAGE and loop.gain == 16.5
    assert (
        loop.args["block"] == ""
        and loop.lines[1] == LOOP.splitlines().index("    total[(1,)](x, out, x.numel(), BLOCK=1024)") + 1
    )
    (block,) = [f for f in tier0(BLOCK).findings if f.code in CODES]
    assert "next_power_of_2" in block.args["block"]
