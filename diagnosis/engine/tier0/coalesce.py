"""Strided access: a load or store with no dimension along which adjacent lanes are adjacent.

Triton's coalescing pass orders a block's threads along whichever dimension the compiler can
prove contiguous, so a 2-D tile read with unit stride on its *outer* axis (a transposed
operand) is still coalesced: the checked 64x64 fp32 tile with ``stride_m == 1`` gets
``order = [0, 1]`` and 32 lanes along axis 0. What the pass cannot fix is an access with no
unit-stride dimension at all: a 1-D block walking a column (``rows * stride_row``), or a tile
whose every axis is multiplied by a stride that is not 1. Then each 4-byte access pulls its own
32-byte sector.

A stride argument is unit when it is the literal 1, or ``x.stride(1)`` / ``x.stride(-1)`` of a
tensor the wrapper did not transpose (1 for a contiguous 2-D tensor; Triton specializes integer
arguments equal to 1 into constants, so the compiler knows); ``x.stride(0)``, a size, a literal
above 1 or the last-dimension stride of a transposed view is not. A stride nothing tells us
about makes a low-severity finding.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

from diagnosis.engine.escalation import modest_gain
from diagnosis.engine.evidence import Family, Finding, Severity, Tier, register_code
from diagnosis.engine.tier0.registry import rule
from diagnosis.engine.tier0.source import KernelContext, LaunchSite, is_transposed, subscript_axes

# A 4-byte access that pulls a whole 32-byte sector uses an eighth of it.
SECTOR_BOUND = 32 / 4

STRIDED_ACCESS = register_code(
    "T0-STRIDED-ACCESS",
    Tier.TRIAGE,
    Family.COALESCE,
    "{kernel}: no dimension of this tl.{op} has unit stride; the fastest index {index} is multiplied "
    "by {stride} ({why}), so adjacent lanes read addresses that far apart and each 32-byte sector "
    "serves one element; walk the contiguous dimension (gain from sector use, 8x for fp32, halved)",
    "Strided access",
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
    "transposed": "passed as {arg}, the last-dimension stride of a transposed view",
    "size": "passed as {arg}, a size",
}


@dataclass(frozen=True)
class _Term:
    """One arange-carrying addend of a pointer: index (along an axis) times stride."""

    from_end: int  # 0 = the last (fastest, innermost) block axis
    index: ast.expr
    stride: ast.expr | None  # None: unit (the index is added as is)
    node: ast.AST


def _axis(ctx: KernelContext, node: ast.expr, seen: frozenset[str] = frozenset()) -> int | None:
    """Axis of a 1-D index block, counted from the end (``x[:, None]`` -> 1), or None. `seen`:
    the locals whose definitions led here (flag_gems' `total = total + tl.sum(...)`, defined once
    from itself, is not followed again)."""
    axes = subscript_axes(node)
    if axes is not None:
        assert isinstance(node, ast.Subscript)
        if axes.count("slice") != 1 or _axis(ctx, node.value, seen) != 0:
            return None
        return len(axes) - 1 - axes.index("slice")
    if isinstance(node, ast.Call):
        name = ctx.tl_name(node)
        if name == "arange":
            return 0
        if name in ("max_contiguous", "multiple_of") and node.args:
            return _axis(ctx, node.args[0], seen)
        return None
    if isinstance(node, ast.Name):
        value = ctx.definition(node.id)
        if value is not None and node.id not in seen and not ctx.multidim(node):
            # `o_t = i_t * BT + tl.arange(0, BT)` is a block whatever `i_t` is (a chunk index
            # loaded per program too); a block of loaded values (a gather's indices) is not
            return _axis(ctx, value, seen | {node.id})
        deps = ctx.name_deps(node.id)
        return 0 if deps.arange and not deps.loaded and not ctx.multidim(node) else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub | ast.Mod):
        found = {_axis(ctx, p, seen) for p in (node.left, node.right) if ctx.deps(p).arange}
        return found.pop() if len(found) == 1 else None
    return None


def _terms(ctx: KernelContext, node: ast.expr, seen: frozenset[str]) -> list[_Term] | None:
    """The arange-carrying addends of a pointer expression; None when one is not understood."""
    if not ctx.deps(node).arange:
        return []
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub):
        left, right = _terms(ctx, node.left, seen), _terms(ctx, node.right, seen)
        return None if left is None or right is None else left + right
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        for index, stride in ((node.left, node.right), (node.right, node.left)):
            if ctx.deps(stride).arange or not isinstance(stride, ast.Name | ast.Constant):
                continue
            axis = _axis(ctx, index)
            return None if axis is None else [_Term(axis, index, stride, node)]
        return None
    if isinstance(node, ast.Name) and node.id in seen:
        return []  # a loop-carried pointer advance (``a_ptrs += BLOCK_K * stride_ak``)
    if isinstance(node, ast.Name) and ctx.defs.get(node.id):
        # through its definitions first: a local offset `(row + t) * H + h` is strided though
        # it is a 1-D block; one that is only an index (`start + tl.arange(...)`) stays unit
        out: list[_Term] | None = []
        for _, expr in ctx.defs[node.id]:
            terms = _terms(ctx, expr, seen | {node.id})
            if terms is None:
                out = None
                break
            out += terms
        if out is not None:
            return out
        return [_Term(0, node, None, node)] if _axis(ctx, node) is not None else None
    axis = _axis(ctx, node)
    return None if axis is None else [_Term(axis, node, None, node)]


def _classify_site(site: LaunchSite, stride: str) -> tuple[str, str]:
    value = site.values.get(stride)
    if value is None or stride not in site.args:
        return "unknown", ""
    text = value.text
    if value.known:
        n = value.as_int()
        return ("unit", text) if n == 1 else ("size", text) if n is not None else ("unknown", text)
    if value.kind == "stride":
        transposed = bool(value.tensor) and is_transposed(site.resolver, value.tensor, site.line)
        if value.dim == 0:
            # x.t().stride(0) is 1; a plain tensor's stride(0) is its row length.
            return ("unit", text) if transposed else ("stride0", text)
        return ("transposed", text) if transposed else ("unit", text)
    if value.kind == "shape":
        return "size", text
    return "unknown", text


def _classify(ctx: KernelContext, stride: ast.expr | None) -> tuple[str, str]:
    if stride is None:
        return "unit", ""
    if isinstance(stride, ast.Constant):
        return ("unit", "1") if stride.value == 1 else ("size", repr(stride.value))
    assert isinstance(stride, ast.Name)
    name = stride.id
    if name in ctx.constexprs:
        values = [v for v, _ in ctx.constexpr_values(name)]
        ints = [v.as_int() for v in values]
        if ints and all(i == 1 for i in ints):
            return "unit", "1"
        big = [v for v in values if (v.as_int() or 0) > 1 or v.kind == "shape"]
        return ("size", big[0].text) if big else ("unknown", "")
    if name not in ctx.params:
        return "unknown", ""
    sites = ctx.launches
    if not sites:
        return "unknown", ""
    # One launch passing a non-unit stride is enough: the kernel runs that way there.
    return max((_classify_site(s, name) for s in sites), key=lambda kv: _RANK[kv[0]])


@rule(STRIDED_ACCESS.code)
def strided_access(ctx: KernelContext) -> Iterator[Finding]:
    for op, call, ptr in ctx.memory_ops():
        terms = _terms(ctx, ptr, frozenset())
        if not terms:
            continue
        kinds = [(_classify(ctx, t.stride), t) for t in terms]
        if any(kind == "unit" for (kind, _), _ in kinds):
            continue  # some dimension is contiguous: the compiler coalesces along it
        inner = [k for k in kinds if k[1].from_end == 0] or kinds
        (kind, arg), term = max(inner, key=lambda k: _RANK[k[0][0]])
        line = getattr(term.node, "lineno", call.lineno)
        yield Finding(
            STRIDED_ACCESS.code,
            _SEVERITY[kind],
            {
                "kernel": ctx.name,
                "op": op,
                "index": ast.unparse(term.index),
                "stride": ast.unparse(term.stride) if term.stride is not None else "1",
                "why": _WHY[kind].format(arg=arg),
                "kind": kind,
            },
            lines=(line,) if line == call.lineno else (line, call.lineno),
            kernel=ctx.name,
            gain=modest_gain(SECTOR_BOUND) if kind != "unknown" else None,
        )
