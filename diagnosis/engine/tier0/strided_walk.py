"""Strided walks across programs: a column read one element per lane while the next element of
each row belongs to the next program.

A column sum or a transpose written one program per column (`col = tl.program_id(0)`,
`tl.load(x_ptr + rows * stride + col)`) is a strided access (T0-STRIDED-ACCESS) of a particular
kind: the contiguous axis is the program axis. Program `col + 1` reads the four bytes next to
every four bytes program `col` reads, so the data sits in the same sectors, fetched once per
program instead of once. Putting a few programs' worth of columns into one program's tile
(BLOCK x BLOCK_P, the program index along the tile's second axis) makes the access coalesced:
that is what the COALESCE rewrite `tile_strided` does.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from diagnosis.engine.escalation import modest_gain
from diagnosis.engine.evidence import Family, Finding, Severity, Tier, register_code
from diagnosis.engine.tier0.coalesce import SECTOR_BOUND, strided_access
from diagnosis.engine.tier0.registry import rule
from diagnosis.engine.tier0.source import KernelContext, call_arg

STRIDED_WALK = register_code(
    "T0-STRIDED-WALK",
    Tier.TRIAGE,
    Family.COALESCE,
    "{kernel}: the tl.{op} walks {index} with stride {stride} one element per lane while the element "
    "next to each one belongs to the next program ({pid}, from tl.program_id(0), is added with unit stride): "
    "every program pulls whole sectors for one element of each; a tile of a few programs' columns "
    "(BLOCK x BLOCK_P, the program index along the contiguous axis) reads them coalesced "
    "(gain from sector use, {bound}x for fp32, halved)",
    "Column walked one element per program",
)


def _program_index(ctx: KernelContext) -> str | None:
    """The local bound once to `tl.program_id(0)` alone or, where the index is split into
    digits, to the last digit taken `% R` of a value that holds program axis 0 (`i_h = i_bh %
    H` after `i_bh, i_t = unflatten_program_id(B * H)`): the one to walk along."""
    digit = None
    for name, defs in ctx.defs.items():
        if len(defs) != 1:
            continue
        value = defs[0][1]
        if isinstance(value, ast.Call) and ctx.tl_name(value) == "program_id":
            axis = call_arg(value, 0, "axis")
            if isinstance(axis, ast.Constant) and axis.value == 0:
                return name
        if (
            isinstance(value, ast.BinOp)
            and isinstance(value.op, ast.Mod)
            and isinstance(value.right, ast.Name)
            and value.right.id in ctx.params
            and ctx.deps(value.left).pids == frozenset({0})
            and not ctx.deps(value.left).arange
        ):
            digit = name
    return digit


def _addends(ctx: KernelContext, node: ast.expr, pid: str, depth: int = 0) -> list[ast.expr]:
    """The `+` terms of an address, through locals defined once from block or program values."""
    if depth > 8:
        return [node]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _addends(ctx, node.left, pid, depth + 1) + _addends(ctx, node.right, pid, depth + 1)
    if isinstance(node, ast.Name) and node.id != pid:
        value = ctx.definition(node.id)
        deps = ctx.deps(node)
        if value is not None and (deps.arange or deps.pids):
            return _addends(ctx, value, pid, depth + 1)
    return [node]


@rule(STRIDED_WALK.code)
def strided_walk(ctx: KernelContext) -> Iterator[Finding]:
    pid = _program_index(ctx)
    if pid is None:
        return
    by_line = {call.lineno: ptr for _, call, ptr in ctx.memory_ops()}
    for found in strided_access(ctx):
        ptr = by_line.get(found.lines[-1])
        if ptr is None:
            continue
        terms = _addends(ctx, ptr, pid)
        if not any(isinstance(t, ast.Name) and t.id == pid for t in terms):
            continue
        kind = found.args["kind"]
        yield Finding(
            STRIDED_WALK.code,
            Severity.LOW if kind == "unknown" else Severity.HIGH,
            {
                "kernel": ctx.name,
                "op": found.args["op"],
                "index": found.args["index"],
                "stride": found.args["stride"],
                "pid": pid,
                "bound": int(SECTOR_BOUND),
                "kind": kind,
            },
            lines=found.lines,
            kernel=ctx.name,
            gain=modest_gain(SECTOR_BOUND) if kind != "unknown" else None,
        )
