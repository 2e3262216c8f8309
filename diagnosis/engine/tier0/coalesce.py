"""Strided innermost access: adjacent lanes that do not touch adjacent addresses.

The fastest-varying index of a block is the ``tl.arange`` of its last axis (``offs[None, :]``
in 2-D, the arange itself in 1-D). Multiplied by a stride that is not 1, each lane's access
lands in its own 32-byte sector. A stride argument the wrapper passes as ``x.stride(1)`` of a
contiguous 2-D tensor is 1 at run time and Triton specializes it to a constant, so that is not
flagged; ``x.stride(0)``, a size (``x.shape[1]``, ``n_cols``), a transposed view's stride or a
literal above 1 is. A stride nothing tells us about is reported at low severity.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from diagnosis.engine.escalation import modest_gain
from diagnosis.engine.evidence import Family, Finding, Severity, Tier, register_code
from diagnosis.engine.tier0.registry import rule
from diagnosis.engine.tier0.source import KernelContext, LaunchSite, is_transposed, subscript_axes

# A 4-byte access that pulls a whole 32-byte sector uses an eighth of it.
SECTOR_BOUND = 32 / 4

STRIDED_INNER = register_code(
    "T0-STRIDED-INNER",
    Tier.TRIAGE,
    Family.COALESCE,
    "{kernel} multiplies its innermost index {index} by {stride} ({why}): adjacent lanes read "
    "addresses {stride} elements apart, so each 32-byte sector serves one element; walk the "
    "contiguous dimension innermost (gain from sector use, 8x for fp32, halved)",
    "Strided innermost access",
)

_RANK = {"unit": 0, "unknown": 1, "stride0": 2, "transposed": 2, "size": 3}
_SEVERITY = {
    "unknown": Severity.LOW,
    "stride0": Severity.MEDIUM,
    "transposed": Severity.MEDIUM,
    "size": Severity.HIGH,
}
_WHY = {
    "unknown": "a stride not known to be 1",
    "stride0": "passed as {arg}: the stride of a leading dimension, not 1 unless the tensor is 1-D",
    "transposed": "passed as {arg} of a transposed view",
    "size": "passed as {arg}, a size",
}


def _innermost(ctx: KernelContext, node: ast.expr, seen: frozenset[str] = frozenset()) -> bool:
    """True when ``node`` is an arange-derived index along the last (or only) block axis."""
    axes = subscript_axes(node)
    if axes is not None:
        assert isinstance(node, ast.Subscript)
        return (
            axes[-1] == "slice" and all(a == "new" for a in axes[:-1]) and _innermost(ctx, node.value, seen)
        )
    if isinstance(node, ast.Call):
        name = ctx.tl_name(node)
        if name == "arange":
            return True
        if name in ("max_contiguous", "multiple_of") and node.args:
            return _innermost(ctx, node.args[0], seen)
        return False
    if isinstance(node, ast.Name):
        if node.id in seen or not ctx.name_deps(node.id).arange:
            return False
        defs = [e for _, e in ctx.defs.get(node.id, ()) if ctx.deps(e).arange]
        return bool(defs) and all(_innermost(ctx, e, seen | {node.id}) for e in defs)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub | ast.Mod):
        parts = [p for p in (node.left, node.right) if ctx.deps(p).arange]
        return bool(parts) and all(_innermost(ctx, p, seen) for p in parts)
    return False


def _pointer_mults(ctx: KernelContext, node: ast.expr, seen: set[str]) -> Iterator[ast.BinOp]:
    for sub in ast.walk(node):
        if isinstance(sub, ast.BinOp) and isinstance(sub.op, ast.Mult):
            yield sub
        elif isinstance(sub, ast.Name) and sub.id not in seen:
            seen.add(sub.id)
            for _, expr in ctx.defs.get(sub.id, ()):
                yield from _pointer_mults(ctx, expr, seen)


def _classify_site(ctx: KernelContext, site: LaunchSite, stride: str) -> tuple[str, str]:
    value = site.values.get(stride)
    arg = site.args.get(stride)
    if value is None or arg is None:
        return "unknown", ""
    text = value.text
    if value.known:
        n = value.as_int()
        return ("unit", text) if n == 1 else ("size", text) if n is not None else ("unknown", text)
    if value.kind == "stride":
        if value.tensor and is_transposed(site.resolver, value.tensor, site.line):
            return "transposed", text
        return ("stride0", text) if value.dim == 0 else ("unit", text)
    if value.kind == "shape":
        return "size", text
    return "unknown", text


def _classify(ctx: KernelContext, stride: str) -> tuple[str, str]:
    if stride in ctx.constexprs:
        values = [v for v, _ in ctx.constexpr_values(stride)]
        ints = [v.as_int() for v in values]
        if ints and all(i == 1 for i in ints):
            return "unit", "1"
        big = [v for v in values if (v.as_int() or 0) > 1]
        return ("size", big[0].text) if big else ("unknown", "")
    sites = ctx.launches
    if not sites:
        return "unknown", ""
    return max((_classify_site(ctx, s, stride) for s in sites), key=lambda kv: _RANK[kv[0]])


@rule(STRIDED_INNER.code)
def strided_inner(ctx: KernelContext) -> Iterator[Finding]:
    done: set[int] = set()
    for _, call, ptr in ctx.memory_ops():
        for mult in _pointer_mults(ctx, ptr, set()):
            if id(mult) in done:
                continue
            done.add(id(mult))
            for index, stride in ((mult.left, mult.right), (mult.right, mult.left)):
                if not (isinstance(stride, ast.Name) and stride.id in ctx.params):
                    continue
                if ctx.deps(stride).arange or not _innermost(ctx, index):
                    continue
                kind, arg = _classify(ctx, stride.id)
                if kind == "unit":
                    continue
                lines = (mult.lineno,) if mult.lineno == call.lineno else (mult.lineno, call.lineno)
                yield Finding(
                    STRIDED_INNER.code,
                    _SEVERITY[kind],
                    {
                        "kernel": ctx.name,
                        "index": ast.unparse(index),
                        "stride": stride.id,
                        "why": _WHY[kind].format(arg=arg),
                        "kind": kind,
                    },
                    lines=lines,
                    kernel=ctx.name,
                    gain=modest_gain(SECTOR_BOUND) if kind != "unknown" else None,
                )
                break
