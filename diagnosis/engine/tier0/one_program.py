"""Whole-tensor reductions in one program: a sum, mean or max of everything launched on a grid
of one program, with one huge block or one loop over the whole input.

One program runs on one SM: the other SMs idle and one SM alone draws a small share of DRAM
bandwidth. A block sized to the whole input (`BLOCK = triton.next_power_of_2(n)`) also holds the
input in registers (spilling) and takes minutes to compile at 2^20 elements. Many programs
reducing slices into partials, and a second stage combining them, read with every SM: the
TWO_STAGE rewrite. (T0-GRID-SMALL says the grid is small; this rule says what the kernel does
with it and which rewrite splits it.)
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from diagnosis.engine.escalation import modest_gain
from diagnosis.engine.evidence import Family, Finding, Severity, Tier, register_code
from diagnosis.engine.tier0.launch import REFERENCE_SMS, _second_stage
from diagnosis.engine.tier0.registry import rule
from diagnosis.engine.tier0.source import ATOMICS, KernelContext, call_arg

# A lone SM reaches about 1/32 of an H100/H200's DRAM bandwidth (its own load pipes and the
# bytes it can keep in flight), so spreading over >= 32 SMs is the bound claimed.
LONE_SM_SHARE = 32
HUGE_BLOCK = 1 << 16

ONE_PROGRAM = register_code(
    "T0-ONE-PROGRAM-REDUCTION",
    Tier.TRIAGE,
    Family.TWO_STAGE,
    "{kernel} reduces {what} in one program and finishes with tl.{finish}: one SM of "
    "{sms} works while the rest idle{block}; split it into many programs that store partials and a second "
    "stage that combines them (gain from the idle SMs: one SM draws about 1/{share} of DRAM bandwidth, halved)",
    "Whole-tensor reduction in one program",
)


def _scalar_finish(ctx: KernelContext) -> ast.Call | None:
    """The store or atomic of a reduced value at an address that is no block."""
    for call in ctx.tl_calls("store", *ATOMICS):
        key = "value" if ctx.tl_name(call) == "store" else "val"
        ptr, value = call_arg(call, 0, "pointer"), call_arg(call, 1, key)
        if ptr is None or value is None or ctx.deps(ptr).arange or ctx.deps(ptr).pids:
            continue
        if ctx.deps(value).reduced or (ctx.is_reduced(value) and ctx.deps(value).loaded):
            return call
    return None


def _block(ctx: KernelContext) -> str:
    """', with a block of N elements' when an arange spans a huge or input-sized block."""
    for text, _ in ctx.arange_bounds():
        for value, _ in ctx.constexpr_values(text) if text in ctx.constexprs else ():
            n = value.as_int()
            if value.kind == "next_power_of_2" and n is None:
                return (
                    f", and its block {text} = {value.text} holds the whole input in registers, compiles for "
                    "minutes at 2^20 elements (about two on an H200) and is refused above that"
                )
            if n is not None and n >= HUGE_BLOCK:
                return (
                    f", and its block of {n} elements ({text}) holds the input in registers and compiles for "
                    "minutes (about two at 2^20 on an H200)"
                )
    return ""


@rule(ONE_PROGRAM.code)
def one_program_reduction(ctx: KernelContext) -> Iterator[Finding]:
    sites = ctx.launches
    if not sites or any(s.programs != 1 for s in sites) or any(_second_stage(ctx, s) for s in sites):
        return
    finish = _scalar_finish(ctx)
    if finish is None:
        return
    loops = [n for n in ctx.loops() if not ctx.enclosing_loops(n)]
    yield Finding(
        ONE_PROGRAM.code,
        Severity.HIGH,
        {
            "kernel": ctx.name,
            "what": "its whole input in a loop" if loops else "its whole input in one block",
            "finish": ctx.tl_name(finish),
            "sms": REFERENCE_SMS,
            "block": _block(ctx),
            "share": LONE_SM_SHARE,
        },
        lines=(finish.lineno, *(s.line for s in sites)),
        kernel=ctx.name,
        gain=modest_gain(LONE_SM_SHARE),
    )
