"""Integer division and modulo on blocks inside loops.

``//`` and ``%`` by a runtime integer compile to a multi-instruction sequence per element
(tens of instructions for 32-bit operands). Inside a loop body that cost is paid per element
per iteration. Division by a constexpr or a power-of-two literal becomes a multiply-shift or
a shift, so it is not flagged; neither is scalar index math (one value per program), nor a
division whose operands do not change across the loop's iterations: Triton's own loop-invariant
code motion (`add_triton_licm`, run by make_ttgir for every CUDA target) moves that out of the
loop, stores in the loop or not (checked on sm_90 TTGIR with triton 3.6: `offs % n` on an
invariant block sits before the scf.for). Loop-invariant *loads* are another matter: see
tier0/hoist.py.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from diagnosis.engine.evidence import Family, Finding, Severity, Tier, register_code
from diagnosis.engine.tier0.registry import rule
from diagnosis.engine.tier0.source import KernelContext

DIV_MOD_IN_LOOP = register_code(
    "T0-DIV-MOD-IN-LOOP",
    Tier.TRIAGE,
    Family.INDEX_MATH,
    "{kernel} computes {expr} on a block inside a loop: integer {op} by the runtime value {divisor} "
    "costs tens of instructions per element per iteration",
    "Integer division in a hot loop",
)


def _cheap_divisor(ctx: KernelContext, node: ast.expr) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return True  # a literal: multiply-shift at worst
    if isinstance(node, ast.Name) and node.id in ctx.constexprs:
        return True
    deps = ctx.deps(node)
    return not deps.params and not deps.loaded and not deps.pids and not deps.loop_vars


@rule(DIV_MOD_IN_LOOP.code)
def div_mod_in_loop(ctx: KernelContext) -> Iterator[Finding]:
    for node in ctx.walk():
        if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.FloorDiv | ast.Mod)):
            continue
        loops = ctx.enclosing_loops(node)
        if not loops:
            continue
        if not ctx.deps(node.left).tensor or _cheap_divisor(ctx, node.right):
            continue
        loop_vars = {
            t.id
            for loop in loops
            if isinstance(loop, ast.For)
            for t in ast.walk(loop.target)
            if isinstance(t, ast.Name)
        }
        if not (ctx.deps(node).loop_vars & loop_vars) and not _defined_in_loop(ctx, node, loops[0]):
            continue  # loop-invariant: the compiler hoists it (module docstring)
        yield Finding(
            DIV_MOD_IN_LOOP.code,
            Severity.MEDIUM,
            {
                "kernel": ctx.name,
                "expr": ast.unparse(node),
                "op": "division" if isinstance(node.op, ast.FloorDiv) else "modulo",
                "divisor": ast.unparse(node.right),
            },
            lines=(node.lineno,),
            kernel=ctx.name,
        )


def _defined_in_loop(ctx: KernelContext, node: ast.BinOp, loop: ast.For | ast.While) -> bool:
    """Whether a name used in ``node`` is (re)assigned inside ``loop``: then it is not invariant."""
    assigned = {
        t.id
        for stmt in ast.walk(loop)
        if isinstance(stmt, ast.Assign | ast.AugAssign | ast.AnnAssign)
        for target in (stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target])
        for t in ast.walk(target)
        if isinstance(t, ast.Name)
    }
    return any(isinstance(n, ast.Name) and n.id in assigned for n in ast.walk(node))
