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


def _reduction_shape(ctx: KernelContext, node: ast.expr, seen: frozenset[str] = frozenset()) -> str | None:
    """'scalar' or 'vector' when ``node`` is a reduction result, else None.

    A reduction over a 1-D block gives a scalar whatever its axis; over a 2-D block with an
    axis, a vector of partials.
    """
    if not ctx.is_reduced(node) or isinstance(node, ast.Constant) or not ctx.deps(node).reduced:
        return None
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and sub.id not in seen:
            for _, expr in ctx.defs.get(sub.id, ()):
                found = _reduction_shape(ctx, expr, seen | {sub.id})
                if found:
                    return found
        if not isinstance(sub, ast.Call):
            continue
        if ctx.tl_name(sub) in REDUCTIONS:
            operand, axis = call_arg(sub, 0, "input"), call_arg(sub, 1, "axis")
        elif isinstance(sub.func, ast.Attribute) and sub.func.attr in REDUCTIONS:
            operand, axis = sub.func.value, call_arg(sub, 0, "axis")
        else:
            continue
        no_axis = axis is None or (isinstance(axis, ast.Constant) and axis.value is None)
        return "scalar" if no_axis or operand is None or not ctx.multidim(operand) else "vector"
    return None


@rule(ATOMIC_REDUCTION.code)
def atomic_reduction(ctx: KernelContext) -> Iterator[Finding]:
    for call in ctx.tl_calls(*ATOMICS):
        value = call_arg(call, 1, "val")
        if value is None:
            continue
        shape = _reduction_shape(ctx, value)
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
