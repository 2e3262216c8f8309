"""Loop-invariant loads that the compiler cannot move: the loop also writes memory.

Triton's loop-invariant code motion (`add_triton_licm` in make_ttgir) moves a `tt.load` out of
an `scf.for` only when the loop is free of memory writes; pure arithmetic it moves in any case.
A loop that stores (or updates atomically) keeps every load inside, invariant or not, because a
store might change what the load reads. Checked on sm_90 TTGIR with triton 3.6: in a loop
`b = tl.load(b_ptr + offs); x = tl.load(x_ptr + k * n + offs); tl.store(out_ptr + k * n + offs, x * b)`
both loads stay in the loop body; without the store the invariant load sits before it,
masked by the loop's trip condition.

The finding names the invariant load and what the loop stores; the HOIST rule moves it before
the loop when the pointers it reads and writes are different parameters.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

from diagnosis.engine.escalation import modest_gain
from diagnosis.engine.evidence import Family, Finding, Severity, Tier, register_code
from diagnosis.engine.tier0.registry import rule
from diagnosis.engine.tier0.source import ATOMICS, KernelContext, call_arg

INVARIANT_LOAD = register_code(
    "T0-INVARIANT-LOAD-IN-STORING-LOOP",
    Tier.TRIAGE,
    Family.HOIST,
    "{kernel} loads {load} on every iteration of the loop at line {loop_line} although its address "
    "does not change; the loop also writes ({stores}), so Triton's loop-invariant code motion "
    "leaves the load in the loop ({invariant} of {total} loads per iteration are invariant)",
    "Loop-invariant load the compiler cannot hoist",
)


def assigned_in(loop: ast.For | ast.While) -> set[str]:
    """Names (re)bound anywhere inside the loop, its own target included."""
    targets: list[ast.AST] = []
    for node in ast.walk(loop):  # the loop itself first
        if isinstance(node, ast.Assign):
            targets.extend(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign | ast.For | ast.NamedExpr):
            targets.append(node.target)
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def _invariant(ctx: KernelContext, node: ast.AST, assigned: set[str], seen: frozenset[str] = frozenset()) -> bool:
    """`node` reads nothing the loop varies: names bound outside it, or bound once inside it to an
    invariant expression (`bp = b_ptr + cols` in the body); calls only pure tl functions or loads."""
    for sub in ast.walk(node):
        if sub is not node and isinstance(sub, ast.Call) and ctx.tl_name(sub) not in PURE_TL_FUNCTIONS | {"load"}:
            return False
        if isinstance(sub, ast.Name) and sub.id in assigned:
            defs = ctx.defs.get(sub.id, ())
            if sub.id in seen or sub.id in ctx.loop_vars or len(defs) != 1:
                return False
            if not _invariant(ctx, defs[0][1], assigned, seen | {sub.id}):
                return False
    return True


# tl functions that read no memory and depend only on their arguments (the HOIST rule moves
# statements made of these and loads)
PURE_TL_FUNCTIONS = frozenset(
    {
        "arange", "zeros", "full", "where", "minimum", "maximum", "multiple_of", "max_contiguous",
        "broadcast_to", "reshape", "expand_dims", "cdiv", "program_id", "num_programs", "abs",
    }
)


@dataclass
class _Loop:
    """What the rule reads about one storing loop, once for all its loads."""

    writes: list[ast.Call]
    loads: list[ast.Call]
    assigned: set[str]
    invariant: int  # loads whose address does not change across iterations


def _storing_loop(ctx: KernelContext, loop: ast.For) -> _Loop | None:
    inside = [n for n in ast.walk(loop) if isinstance(n, ast.Call)]
    writes = [n for n in inside if ctx.tl_name(n) in ("store", *ATOMICS)]
    if not writes:
        return None  # the compiler hoists its loads (module docstring)
    loads = [n for n in inside if ctx.tl_name(n) == "load"]
    assigned = assigned_in(loop)
    return _Loop(writes, loads, assigned, sum(1 for n in loads if _invariant(ctx, n, assigned)))


@rule(INVARIANT_LOAD.code)
def invariant_load_in_storing_loop(ctx: KernelContext) -> Iterator[Finding]:
    loops: dict[int, _Loop | None] = {}
    for call in ctx.tl_calls("load"):
        enclosing = ctx.enclosing_loops(call)
        loop = enclosing[0] if enclosing else None
        if not isinstance(loop, ast.For):
            continue
        if id(loop) not in loops:
            loops[id(loop)] = _storing_loop(ctx, loop)
        info = loops[id(loop)]
        if info is None or not _invariant(ctx, call, info.assigned):
            continue
        writes, loads = info.writes, info.loads
        stored = sorted({ast.unparse(call_arg(w, 0, "pointer") or w) for w in writes})
        ptr = call_arg(call, 0, "pointer")
        yield Finding(
            INVARIANT_LOAD.code,
            # low: the reloads hit L1, and a DRAM-bound kernel does not notice them (on the H200,
            # bench/targeted/02_bias_rows_fp32 at 80 %SOL: 1.002x after the hoist); tier 1 says
            # whether the kernel is short of issue slots or latency, where the hoist pays
            Severity.LOW,
            {
                "kernel": ctx.name,
                "load": f"tl.load({ast.unparse(ptr) if ptr is not None else '...'})",
                "loop_line": loop.lineno,
                "stores": ", ".join(stored[:3]),
                "invariant": info.invariant,
                "total": len(loads),
            },
            lines=(call.lineno, loop.lineno),
            kernel=ctx.name,
            # memory instructions per iteration before / after, halved: the reloads usually hit
            # L1/L2, so they cost issue slots and latency more than bandwidth
            gain=modest_gain((len(loads) + len(writes)) / (len(loads) + len(writes) - info.invariant)),
        )
