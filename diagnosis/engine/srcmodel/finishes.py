"""Torch reductions that finish what a kernel wrote: the wrapper's `z.logsumexp(-1)` over the
partials a kernel stored, one column per block of the row (fla's `logsumexp_fwd`), or
`partial.sum(1)` over per-program sums.

Where the reduced axis holds one element (one block covered the row), the reduction returns its
input, yet every call still runs torch's kernels for it: six small launches for a `logsumexp`
(max, a mask of infinities, the difference, exp, sum, log). Tier 0 reports such a finish
(T0-TORCH-FINISH), tier 1 the time a case spends outside the Triton kernels beside it
(T1-TORCH-FINISH); the FUSION rule `skip_one_element_finish` reads the partial directly there.

A finish is a call `z.OP(dim)` or `torch.OP(z, dim)` in the function of a launch, after it, where
`z` is a local passed to the launch and bound before it, once, to a fresh allocation
(`torch.empty(...)`, `x.new_empty(...)`, zeros, ones, full: contiguous, so a view of it reshapes as
the reduction's output does), not rebound between the launch and the finish, and read neither
beside the finish in its statement nor after it, unless that statement rebinds it; OP is a
reduction that returns its input on one element (`sum`, `mean`, `amax`, `amin`, `logsumexp`,
`prod`), `dim` an integer literal, and the call passes nothing else but `keepdim=False`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from diagnosis.engine.srcmodel import read
from diagnosis.engine.srcmodel.launches import Launch

# reductions whose value over one element is that element (a float's dtype kept)
ONE_ELEMENT_IDENTITY = frozenset({"sum", "mean", "amax", "amin", "logsumexp", "prod"})
_FRESH = frozenset({"empty", "zeros", "ones", "full"})
_FRESH_METHODS = frozenset({"new_empty", "new_zeros", "new_ones", "new_full"})


@dataclass(frozen=True)
class Finish:
    launch: Launch = field(repr=False)
    tensor: str  # the local the kernel writes and the wrapper reduces
    op: str
    dim: int
    call: cst.Call = field(repr=False)  # `z.logsumexp(-1)` or `torch.logsumexp(z, -1)`
    statement: cst.BaseSmallStatement = field(repr=False)  # the statement that holds the call


def torch_finishes(model) -> list[Finish]:  # noqa: ANN001 - a SourceModel (imported by it)
    """Every finish of every launch of `model`, in source order."""
    out: list[Finish] = []
    for launch in model.launches:
        kernel = model.kernels.get(launch.kernel)
        if kernel is None:
            continue
        # the small statements of the launch's function, in source order (any depth of its
        # blocks, not nested functions), split at the launch: a walk is in source order, and
        # reading positions would resolve them for the whole module
        order = list(read.walk(launch.function.body, prune=(cst.FunctionDef, cst.ClassDef, cst.Lambda)))
        if not any(_reduction_named(n) for n in order):
            continue
        at = next((i for i, n in enumerate(order) if n is launch.call), None)
        if at is None:
            continue
        before = [n for n in order[:at] if isinstance(n, cst.BaseSmallStatement)]
        after = [n for n in order[at + 1 :] if isinstance(n, cst.BaseSmallStatement)]
        passed = {e.value for e in launch.bound(kernel).values() if isinstance(e, cst.Name)}
        for name in sorted(passed):
            if not _fresh_before(model, launch, name, before):
                continue
            for i, st in enumerate(after):
                if isinstance(st, cst.AugAssign) and name in read.bound_names(st):
                    break  # `z += ...` reads and writes the partials at once
                rebinds = name in read.bound_names(st)
                for node in read.walk(st):
                    found = _finish_call(node, name, model)
                    if found is None:
                        continue
                    # the statement reads the partials only through the finish; later ones, not
                    # at all, unless this one rebinds the name
                    beside = _reads(st, name) - _reads(node, name) - (1 if rebinds else 0)
                    if beside == 0 and (rebinds or not any(_reads(s, name) for s in after[i + 1 :])):
                        out.append(Finish(launch, name, found[0], found[1], node, st))
                if rebinds:
                    break  # later statements read another value
    return out


def _reduction_named(node: cst.CSTNode) -> bool:
    return (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value in ONE_ELEMENT_IDENTITY
    )


def _fresh_before(model, launch: Launch, name: str, before: list[cst.BaseSmallStatement]) -> bool:  # noqa: ANN001
    """`name` is bound once before the launch, to a fresh contiguous allocation."""
    binds = [n for n in before if name in read.bound_names(n)]
    if name in {p.name.value for p in read.params_of(launch.function)} or len(binds) != 1:
        return False
    (bind,) = binds
    value = bind.value if isinstance(bind, cst.Assign) and len(bind.targets) == 1 else None
    if not isinstance(value, cst.Call):
        return False
    if isinstance(value.func, cst.Attribute) and value.func.attr.value in _FRESH_METHODS:
        return True
    dotted = read.dotted(value.func, model.names) or ""
    return dotted.startswith("torch.") and dotted.split(".")[-1] in _FRESH and dotted.count(".") == 1


def _finish_call(node: cst.CSTNode, name: str, model) -> tuple[str, int] | None:  # noqa: ANN001
    """(OP, dim) when `node` is `name.OP(dim)` or `torch.OP(name, dim)` as the module says."""
    if not isinstance(node, cst.Call) or not isinstance(node.func, cst.Attribute):
        return None
    op = node.func.attr.value
    if op not in ONE_ELEMENT_IDENTITY:
        return None
    owner = node.func.value
    args = list(node.args)
    if isinstance(owner, cst.Name) and owner.value == name:
        pass
    elif read.dotted(node.func, model.names) == f"torch.{op}" and args and _is_name(args[0], name):
        args = args[1:]
    else:
        return None
    dim: int | None = None
    for a in args:
        if a.star:
            return None
        if a.keyword is None or a.keyword.value == "dim":
            if dim is not None:
                return None
            dim = read.int_literal(a.value)
            if dim is None:
                return None
        elif a.keyword.value == "keepdim":
            if not (isinstance(a.value, cst.Name) and a.value.value == "False"):
                return None
        else:
            return None  # dtype=, out=: not the identity as written
    return None if dim is None else (op, dim)


def _is_name(a: cst.Arg, name: str) -> bool:
    return a.keyword is None and not a.star and isinstance(a.value, cst.Name) and a.value.value == name


def _reads(node: cst.CSTNode, name: str) -> int:
    """How often `name` occurs under `node`."""
    return sum(1 for n in read.walk(node) if isinstance(n, cst.Name) and n.value == name)
