"""Multi-pass loops over a row: the three-pass softmax / layernorm shape.

Two or more sequential ``for`` loops over the same range in one block of statements, each
loading from the same pointer argument, read the row from memory once per pass. When the row
fits in one block (up to tens of thousands of elements) one pass reads it once.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from diagnosis.engine.escalation import modest_gain
from diagnosis.engine.evidence import Family, Finding, Severity, Tier, register_code
from diagnosis.engine.tier0.registry import rule
from diagnosis.engine.tier0.source import KernelContext

MULTI_PASS = register_code(
    "T0-MULTI-PASS",
    Tier.TRIAGE,
    Family.SINGLE_PASS,
    "{kernel} walks {range} in {passes} sequential loops, each loading {pointers}: the row is read "
    "{passes} times; a single pass over a row held in one block reads it once (about {bound}x fewer "
    "bytes with one store, gain halved since later passes may hit L2)",
    "Multi-pass row loop",
)


def _statement_lists(node: ast.AST) -> Iterator[list[ast.stmt]]:
    for field in ("body", "orelse", "finalbody"):
        stmts = getattr(node, field, None)
        if isinstance(stmts, list) and stmts and isinstance(stmts[0], ast.stmt):
            yield stmts
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            continue
        yield from _statement_lists(child)


def _range_key(ctx: KernelContext, loop: ast.For) -> str | None:
    it = loop.iter
    if not isinstance(it, ast.Call):
        return None
    name = ctx.module.canonical(it.func)
    if name not in ("range", "tl.range", "tl.static_range"):
        return None
    return ast.dump(ast.Tuple(elts=list(it.args), ctx=ast.Load()))


def _loaded_params(ctx: KernelContext, loop: ast.For) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(loop):
        if isinstance(node, ast.Call) and ctx.tl_name(node) == "load" and node.args:
            out |= ctx.deps(node.args[0]).params
    return out


@rule(MULTI_PASS.code)
def multi_pass(ctx: KernelContext) -> Iterator[Finding]:
    for stmts in _statement_lists(ctx.node):
        groups: dict[str, list[ast.For]] = {}
        for stmt in stmts:
            if isinstance(stmt, ast.For) and (key := _range_key(ctx, stmt)) is not None:
                groups.setdefault(key, []).append(stmt)
        for loops in groups.values():
            if len(loops) < 2:
                continue
            shared = set.intersection(*(_loaded_params(ctx, loop) for loop in loops))
            pointers = sorted(shared & ctx.pointer_params())
            if not pointers:
                continue
            passes = len(loops)
            bound = (passes + 1) / 2  # passes reads + one write, against one read + one write
            assert isinstance(loops[0].iter, ast.Call)
            yield Finding(
                MULTI_PASS.code,
                Severity.MEDIUM,
                {
                    "kernel": ctx.name,
                    "range": ast.unparse(loops[0].iter),
                    "passes": passes,
                    "pointers": ", ".join(pointers),
                    "bound": round(bound, 1),
                },
                lines=tuple(loop.lineno for loop in loops),
                kernel=ctx.name,
                gain=modest_gain(bound),
            )
