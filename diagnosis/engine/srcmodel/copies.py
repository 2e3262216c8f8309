"""The wrapper's permuted copies: `x.t().contiguous()`, `x.permute(order).contiguous()`,
`torch.transpose(x, 0, 1).contiguous()`, and calls of a module-level helper that returns one
(flag_gems' `dim_compress`).

Each is a torch kernel that reads and writes a whole tensor before (or after) the Triton
kernels run. Tier 1 names them where time goes to kernels the Triton code does not launch
(T1-OTHER-KERNELS); COALESCE's `read_permuted_view` reads the view in place where a kernel's
access of the copy was found strided.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from diagnosis.engine.srcmodel import read

VIEWS = frozenset({"permute", "transpose", "t", "movedim", "moveaxis", "swapaxes", "swapdims"})


@dataclass(frozen=True)
class Copy:
    line: int
    code: str  # the copy (or the helper's call) as written


def permuted_view(node: cst.CSTNode | None) -> tuple[cst.BaseExpression, cst.BaseExpression] | None:
    """(V, the tensor V permutes) where `node` is `V.contiguous()` and V a permuting view:
    `x.permute(...)`, `x.t()`, `x.T`, `torch.transpose(x, ...)` and the like."""
    if not (isinstance(node, cst.Call) and not node.args and isinstance(node.func, cst.Attribute)):
        return None
    if node.func.attr.value != "contiguous":
        return None
    view = node.func.value
    if isinstance(view, cst.Attribute) and view.attr.value in ("T", "mT"):
        return view, view.value
    if not isinstance(view, cst.Call) or not isinstance(view.func, cst.Attribute):
        return None
    if view.func.attr.value not in VIEWS:
        return None
    name = read.call_name(view) or ""
    if name.startswith("torch.") and name.removeprefix("torch.") in VIEWS:
        return (view, view.args[0].value) if view.args and not view.args[0].keyword else None
    return view, view.func.value


def permuted_copies(model) -> tuple[Copy, ...]:  # noqa: ANN001 - a SourceModel (no import cycle)
    """Every permuted copy in the module's functions and methods that are not kernels (nested
    functions included), and every call of a module-level function that returns one (in its
    place: the copy inside the helper is that call's), in source order."""
    calls = model.calls
    helpers = {
        name
        for name, fn in calls.functions.items()
        if any(isinstance(n, cst.Return) and permuted_view(n.value) for n in read.walk(fn.body))
    }
    found: list[Copy] = []
    for fn in [*calls.functions.values(), *(m for ms in calls.classes.values() for m in ms.values())]:
        for n in read.walk(fn.body):
            if not isinstance(n, cst.Call):
                continue
            helper = isinstance(n.func, cst.Name) and n.func.value in helpers
            if helper or (fn.name.value not in helpers and permuted_view(n) is not None):
                found.append(Copy(model.position(n)[0], read.code(n)))
    return tuple(sorted(found, key=lambda c: c.line))
