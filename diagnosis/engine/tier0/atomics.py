"""Reductions finished with atomics: every program adds its partial result to one address.

``tl.atomic_add(out, tl.sum(x))`` per program serializes all programs on one address (and
makes the float result order-dependent). A two-stage reduction or a single program per
output reduces in registers instead. A per-column vector of partial results
(``tl.sum(x, axis=0)``) contends less and is often the intended split reduction: low severity.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from diagnosis.engine.evidence import Family, Finding, Severity, Tier, register_code
from diagnosis.engine.tier0.registry import rule
from diagnosis.engine.tier0.source import ATOMICS, REDUCTIONS, KernelContext, call_arg

ATOMIC_REDUCTION = register_code(
    "T0-ATOMIC-REDUCTION",
    Tier.TRIAGE,
    Family.BLOCK_REDUCTION,
    "{kernel} finishes a {shape} reduction with tl.{atomic} per program: every program contends on "
    "the same {target}; reduce inside a block (or in a second pass) instead",
    "Reduction through atomics",
)


def _reduction_axis(ctx: KernelContext, node: ast.expr, seen: set[str]) -> str | None:
    """'scalar' or 'vector' when ``node`` is (computed from) a tl reduction, else None."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call) and ctx.tl_name(sub) in REDUCTIONS:
            axis = call_arg(sub, 1, "axis")
            if axis is None or (isinstance(axis, ast.Constant) and axis.value is None):
                return "scalar"
            return "vector"
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr in REDUCTIONS:
            # x.sum() / x.sum(axis=0) method form
            axis = call_arg(sub, 0, "axis")
            return "scalar" if axis is None else "vector"
        if isinstance(sub, ast.Name) and sub.id not in seen:
            seen.add(sub.id)
            for _, expr in ctx.defs.get(sub.id, ()):
                found = _reduction_axis(ctx, expr, seen)
                if found:
                    return found
    return None


@rule(ATOMIC_REDUCTION.code)
def atomic_reduction(ctx: KernelContext) -> Iterator[Finding]:
    for call in ctx.tl_calls(*ATOMICS):
        value = call_arg(call, 1, "val")
        if value is None:
            continue
        shape = _reduction_axis(ctx, value, set())
        if shape is None:
            continue
        yield Finding(
            ATOMIC_REDUCTION.code,
            Severity.MEDIUM if shape == "scalar" else Severity.LOW,
            {
                "kernel": ctx.name,
                "atomic": ctx.tl_name(call),
                "shape": shape,
                "target": "address" if shape == "scalar" else "addresses",
            },
            lines=(call.lineno,),
            kernel=ctx.name,
        )
