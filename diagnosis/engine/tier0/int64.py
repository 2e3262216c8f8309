"""int32 offset overflow: ``pid * stride`` computed in 32 bits over tensors of 2^31+ elements.

``tl.program_id`` is int32 and so are integer arguments below 2^31; their product wraps once
the tensor passes 2^31 elements and the kernel addresses the wrong memory. Only flagged when
get_inputs / get_input_cases build a tensor (with literal sizes) of at least 2^31 elements;
without such a size the question is left alone. A product where either side went through
``.to(tl.int64)`` is safe.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from diagnosis.engine.evidence import Family, Finding, Severity, Tier, register_code
from diagnosis.engine.tier0.registry import rule
from diagnosis.engine.tier0.source import KernelContext

INT32_LIMIT = 2**31

INT32_OFFSET = register_code(
    "T0-INT32-OFFSET",
    Tier.TRIAGE,
    Family.INT64_OFFSETS,
    "{kernel} computes {expr} in int32 while an input has {numel} elements (>= 2^31): the offset wraps; "
    "cast the program id to tl.int64 first",
    "int32 offset overflow",
)


@rule(INT32_OFFSET.code)
def int32_offset(ctx: KernelContext) -> Iterator[Finding]:
    biggest = ctx.module.max_input_numel()
    if biggest is None or biggest < INT32_LIMIT:
        return
    for node in ctx.walk():
        if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult)):
            continue
        left, right = ctx.deps(node.left), ctx.deps(node.right)
        if left.wide or right.wide:
            continue
        for pid_side, other, other_node in ((left, right, node.right), (right, left, node.left)):
            if not pid_side.pids or pid_side.arange or other.pids:
                continue
            if isinstance(other_node, ast.Constant):
                continue  # pid times a small literal does not reach 2^31
            if not (other.params or isinstance(other_node, ast.Name)):
                continue
            yield Finding(
                INT32_OFFSET.code,
                Severity.HIGH,
                {"kernel": ctx.name, "expr": ast.unparse(node), "numel": biggest},
                lines=(node.lineno,),
                kernel=ctx.name,
            )
            break
