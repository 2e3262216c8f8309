"""Partial results kept in global memory between passes over a row.

Two shapes of the same problem:

* two row kernels on one grid, the first storing per-row statistics (`tl.store(max_ptr + row,
  m)`) that the second loads back (`tl.load(max_ptr + row)`) together with the row itself: a
  softmax or a norm split at its reduction. The statistics are small; the cost is the second read
  of the row and the second launch (T0-UNFUSED-LAUNCHES leaves such chains out on purpose: their
  intermediates are negligible, their shared input is not);
* one kernel that stores an intermediate and loads it back in a later pass (`tl.store(y + cols,
  exp(x - m))`, then `tl.load(y + cols)` to divide by the sum): one write and one read per
  element that a register would save.

Both point to FUSION: one kernel, one pass over a row held in a block. A reload in a later row
loop points to SINGLE_PASS first (the reload is forwarded once the passes are one block of
straight-line code, where this rule then points to FUSION).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from diagnosis.engine.escalation import modest_gain
from diagnosis.engine.evidence import Family, Finding, Severity, Tier, register_code
from diagnosis.engine.srcmodel.finishes import torch_finishes
from diagnosis.engine.tier0.registry import rule
from diagnosis.engine.tier0.source import KernelContext, LaunchSite, ModuleContext, call_arg

STATS = register_code(
    "T0-STATS-THROUGH-MEMORY",
    Tier.TRIAGE,
    Family.FUSION,
    "{writer} stores per-row results to {tensor} that {reader} loads back per row on the same grid, with "
    "{shared} again: one row kernel keeping them in registers reads the row once and launches once "
    "(about {bound}x fewer bytes, gain halved)",
    "Row statistics through memory",
)
RELOADED = register_code(
    "T0-INTERMEDIATE-RELOADED",
    Tier.TRIAGE,
    Family.FUSION,
    "{kernel} stores an intermediate to {pointer} (line {store}) and loads it back in a later pass (line "
    "{load}): each element is written and read once more than the result needs; a single pass over a row "
    "held in a block keeps it in registers (about {bound}x fewer memory accesses, gain halved)",
    "Intermediate stored and reloaded",
)


TORCH_FINISH = register_code(
    "T0-TORCH-FINISH",
    Tier.TRIAGE,
    Family.FUSION,
    "{function} finishes {tensor}, which {kernel} writes, with torch's {op} over axis {dim}: where that axis "
    "holds one element (one block covered the row) the reduction returns its input, yet every call still "
    "runs torch's kernels for it; reading the partials directly there leaves the one launch",
    "Partials finished by torch",
)


def _row(ctx: KernelContext) -> str | None:
    """The local bound once to `tl.program_id(0)`."""
    for name, defs in ctx.defs.items():
        value = defs[0][1] if len(defs) == 1 else None
        if isinstance(value, ast.Call) and ctx.tl_name(value) == "program_id":
            axis = call_arg(value, 0, "axis")
            if isinstance(axis, ast.Constant) and axis.value == 0:
                return name
    return None


def _per_row(ctx: KernelContext, op: str, row: str) -> dict[str, int]:
    """Pointer parameter -> line of a tl.`op` at `param + row` (one value per program)."""
    out: dict[str, int] = {}
    for name, call, ptr in ctx.memory_ops():
        if (
            name == op
            and isinstance(ptr, ast.BinOp)
            and isinstance(ptr.op, ast.Add)
            and isinstance(ptr.left, ast.Name)
            and ptr.left.id in ctx.params
            and isinstance(ptr.right, ast.Name)
            and ptr.right.id == row
        ):
            out.setdefault(ptr.left.id, call.lineno)
    return out


def _tensors(ctx: KernelContext, site: LaunchSite, op: str, skip: set[str]) -> set[str]:
    """The wrapper's names of the tensors a launch loads (or stores) through block addresses."""
    out = set()
    for name, _, ptr in ctx.memory_ops():
        if name != op or not ctx.deps(ptr).arange:
            continue
        for p in ctx.deps(ptr).params & ctx.pointer_params():
            arg = site.args.get(p)
            if isinstance(arg, ast.Name) and p not in skip:
                out.add(arg.id)
    return out


@rule(STATS.code, scope="module")
def stats_through_memory(module: ModuleContext) -> Iterator[Finding]:
    sites = module.launches
    for i, a in enumerate(sites):
        ka = module.kernels[a.kernel]
        row_a = _row(ka)
        if row_a is None or a.grid is None or len(a.grid) != 1:
            continue
        written = {
            arg.id: (p, line)
            for p, line in _per_row(ka, "store", row_a).items()
            if isinstance(arg := a.args.get(p), ast.Name) and a.local_buffer(p)
        }
        for b in sites[i + 1 :]:
            kb = module.kernels[b.kernel]
            row_b = _row(kb)
            if b.function != a.function or b.kernel == a.kernel or row_b is None or b.grid is None:
                continue
            if [v.text for v in b.grid] != [v.text for v in a.grid]:
                continue
            read = {
                arg.id: line
                for q, line in _per_row(kb, "load", row_b).items()
                if isinstance(arg := b.args.get(q), ast.Name) and arg.id in written
            }
            if not read:
                continue
            loads_a, loads_b = _tensors(ka, a, "load", set()), _tensors(kb, b, "load", set())
            shared = loads_a & loads_b
            if not shared:
                continue  # nothing read twice: the statistics alone are negligible
            stores_b = _tensors(kb, b, "store", set())
            bound = (len(loads_a) + len(loads_b) + len(stores_b)) / (len(loads_a | loads_b) + len(stores_b))
            tensor = sorted(read)[0]
            yield Finding(
                STATS.code,
                Severity.MEDIUM,
                {
                    "writer": a.kernel,
                    "reader": b.kernel,
                    "tensor": ", ".join(sorted(read)),
                    "shared": ", ".join(sorted(shared)),
                    "bound": round(bound, 2),
                },
                lines=(written[tensor][1], read[tensor], a.line, b.line),
                kernel=a.kernel,
                gain=modest_gain(bound),
            )


def _top(ctx: KernelContext, node: ast.AST) -> ast.stmt | None:
    """The top-level statement of the kernel body that holds `node`."""
    cur: ast.AST | None = node
    while cur is not None and ctx.parents.get(cur) is not ctx.node:
        cur = ctx.parents.get(cur)
    return cur if isinstance(cur, ast.stmt) else None


@rule(RELOADED.code)
def intermediate_reloaded(ctx: KernelContext) -> Iterator[Finding]:
    ops = [(name, call, ptr) for name, call, ptr in ctx.memory_ops() if ctx.deps(ptr).arange]
    body = ctx.node.body
    for name, store, ptr in ops:
        if name != "store":
            continue
        params = ctx.deps(ptr).params & ctx.pointer_params()
        top = _top(ctx, store)
        if len(params) != 1 or top is None:
            continue
        for other, load, lptr in ops:
            later = _top(ctx, load)
            if other != "load" or ctx.deps(lptr).params & ctx.pointer_params() != params or later is None:
                continue
            if body.index(later) <= body.index(top):
                continue  # a load in the same pass (or before) reads what other passes left
            bound = len(ops) / max(1, len(ops) - 2)
            passes = isinstance(top, ast.For) or isinstance(later, ast.For)
            yield Finding(
                RELOADED.code,
                Severity.MEDIUM,
                {
                    "kernel": ctx.name,
                    "pointer": next(iter(params)),
                    "store": store.lineno,
                    "load": load.lineno,
                    "bound": round(bound, 2),
                },
                lines=(load.lineno, store.lineno),
                kernel=ctx.name,
                gain=modest_gain(bound),
                family_override=Family.SINGLE_PASS if passes else None,
            )
            return


@rule(TORCH_FINISH.code, scope="module")
def torch_finish(module: ModuleContext) -> Iterator[Finding]:
    if module.model is None:
        return
    for finish in torch_finishes(module.model):
        yield Finding(
            TORCH_FINISH.code,
            Severity.MEDIUM,
            {
                "function": finish.launch.qualname,
                "tensor": finish.tensor,
                "kernel": finish.launch.kernel,
                "op": finish.op,
                "dim": finish.dim,
            },
            lines=(module.model.position(finish.call)[0], module.model.position(finish.launch.call)[0]),
            kernel=finish.launch.kernel,
        )
