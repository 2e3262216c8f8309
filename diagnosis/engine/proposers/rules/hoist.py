"""HOIST: a loop-invariant load moves before a loop that also writes memory.

Triton's loop-invariant code motion moves loads out of loops that do not write memory (and
pure arithmetic out of any loop), so this rule only looks at `for` loops that store or update
atomically (tier0/hoist.py says why and how that was checked). Matches, at the top level of
such a loop's body, a statement `name = <expr>` where:

- `<expr>` calls `tl.load` and otherwise only pure `tl` functions;
- every name `<expr>` reads is bound outside the loop, or by an earlier statement of the body
  that is itself movable (a pure `tl` expression of invariant names; it moves along);
- `name` is bound exactly once in the kernel and not read earlier in the loop body;
- the pointer parameters its loads read are known and are none of those the loop writes;
- the loop is `range(...)` / `tl.range(...)` with no step or a positive literal step.

The statement moves to just before the loop. Each load it contains gets the loop's trip
condition (`start < end`) added to its mask, as Triton's own LICM does, so a loop that runs
zero times reads nothing (unless both bounds are literals and the loop surely runs). One loop
per kernel per rewrite (a later round takes the next).

Correct when the loaded and the written tensors do not overlap: the rule takes different pointer
parameters to be different tensors (the usual contract of a Triton kernel, like C's `restrict`,
and what the gate's cases exercise); a caller that passes one tensor for both would see the
first iteration's value where the original re-read it.
"""

from __future__ import annotations

from typing import Any

import libcst as cst

from diagnosis.engine.evidence import Family
from diagnosis.engine.proposers.rules import Rewrite, RuleInput, transform
from diagnosis.engine.proposers.rules import cst_util as cu
from diagnosis.engine.tier0.hoist import PURE_TL_FUNCTIONS

PURE = frozenset(f"tl.{name}" for name in PURE_TL_FUNCTIONS)
_ATOMIC_PREFIX = "tl.atomic_"


def _is_write(node: cst.CSTNode) -> bool:
    name = cu.call_name(node) if isinstance(node, cst.Call) else None
    return name is not None and (name == "tl.store" or name.startswith(_ATOMIC_PREFIX))


def assigned_in(loop: cst.For) -> set[str]:
    """Names bound anywhere inside the loop, its target included."""
    targets: list[cst.CSTNode] = [loop.target]
    for n in cu.walk(loop.body):
        if isinstance(n, cst.AssignTarget):
            targets.append(n.target)
        elif isinstance(n, (cst.AugAssign, cst.AnnAssign, cst.For, cst.NamedExpr)):
            targets.append(n.target)
    return {name for t in targets for name in cu.all_names(t)}


def _bounds(loop: cst.For) -> tuple[cst.BaseExpression, cst.BaseExpression] | None:
    """(start, end) of a `range` loop with a positive or no step; None otherwise."""
    it = loop.iter
    if not cu.is_call(it, "range", "tl.range", "tl.static_range") or not isinstance(it, cst.Call):
        return None
    args = [a for a in it.args if a.keyword is None and a.star == ""]
    if len(args) != len(it.args) or not 1 <= len(args) <= 3:
        return None
    if len(args) == 3:
        step = cu.int_literal(args[2].value)
        if step is None or step <= 0:
            return None
    if len(args) == 1:
        return cst.Integer("0"), args[0].value
    return args[0].value, args[1].value


def _guard(loop: cst.For) -> str | None:
    """The loop's trip condition as source; '' when both bounds are literals and it runs."""
    bounds = _bounds(loop)
    if bounds is None:
        return None
    start, end = bounds
    s, e = cu.int_literal(start), cu.int_literal(end)
    if s is not None and e is not None:
        return "" if s < e else None
    return f"{cu.operand(start)} < {cu.operand(end)}"


def _guarded_load(call: cst.Call, guard: str) -> cst.Call:
    mask = cu.arg(call, "mask", 1)
    if mask is None:
        return cu.drop_args(call, call, set(), add=[cu.keyword_arg("mask", cu.expr(guard))])
    new_mask = cu.expr(f"{cu.operand(mask)} & ({guard})")
    return cu.replace_in(call, [(mask, new_mask)])


def _candidate(
    stmt: cst.BaseStatement, kernel: cu.Kernel, bindings: cu.Bindings, varying: set[str], stored: set[str]
) -> tuple[str, cst.BaseExpression, list[cst.Call]] | None:
    """(bound name, value, its loads) when `stmt` is a movable `name = <pure tl expr>`: it reads
    nothing the loop varies and loads only from pointers the loop does not write."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return None
    small = stmt.body[0]
    if not isinstance(small, cst.Assign) or len(small.targets) != 1:
        return None
    target = small.targets[0].target
    if not isinstance(target, cst.Name) or bindings.single(target.value) is None:
        return None
    calls = [n for n in cu.walk(small.value) if isinstance(n, cst.Call)]
    loads = [c for c in calls if cu.is_call(c, "tl.load")]
    if any(not (cu.is_call(c, "tl.load") or cu.call_name(c) in PURE) for c in calls):
        return None
    if set(cu.name_loads(small.value)) & varying:
        return None
    for load in loads:
        ptr = cu.arg(load, "pointer", 0)
        if ptr is None or cu.arg(load, "boundary_check") is not None:
            return None
        bases = cu.base_params(kernel, ptr, bindings)
        if not bases or "?" in bases or bases & stored:
            return None
    return target.value, small.value, loads


def _plan(kernel: cu.Kernel, loop: cst.For, bindings: cu.Bindings) -> tuple[Any, list[str]] | None:
    """The edit replacing `loop` by the hoisted statements and the loop without them."""
    writes = [n for n in cu.walk(loop.body) if _is_write(n)]
    if not writes:
        return None  # Triton's LICM hoists loads out of loops that do not write
    stored: set[str] = set()
    for w in writes:
        ptr = cu.arg(w, "pointer", 0)
        stored |= cu.base_params(kernel, ptr, bindings) if ptr is not None else {"?"}
    if "?" in stored:
        return None
    guard = _guard(loop)
    if guard is None:
        return None
    varying = assigned_in(loop)
    statements = cu.body_statements(loop.body)
    # movable statements, in order: each may read the names of movable ones before it
    movable: dict[int, tuple[str, cst.BaseExpression, list[cst.Call]]] = {}
    read_before: set[str] = set()
    for i, stmt in enumerate(statements):
        found = _candidate(stmt, kernel, bindings, varying, stored)
        if found is not None and found[0] not in read_before:
            movable[i] = found
            varying.discard(found[0])
        read_before |= set(cu.name_loads(stmt))
    # move the loads, and the pure statements they read (the compiler moves the rest itself)
    chosen = {i for i, (_, _, loads) in movable.items() if loads}
    for i in sorted(chosen, reverse=True):
        needs = set(cu.name_loads(movable[i][1]))
        for j in range(i - 1, -1, -1):
            if j in movable and movable[j][0] in needs:
                chosen.add(j)
                needs |= set(cu.name_loads(movable[j][1]))
    if not chosen or len(chosen) == len(statements):
        return None
    hoisted: list[cst.BaseStatement] = []
    names: list[str] = []
    for i in sorted(chosen):
        stmt, (name, _, loads) = statements[i], movable[i]
        if guard and loads:
            stmt = cu.replace_in(stmt, [(c, _guarded_load(c, guard)) for c in loads])
        hoisted.append(stmt)
        if loads:
            names.append(name)
    kept = [st for i, st in enumerate(statements) if i not in chosen]
    assert isinstance(loop.body, cst.IndentedBlock)
    new_loop = loop.with_changes(body=loop.body.with_changes(body=kept))
    return cst.FlattenSentinel([*hoisted, new_loop]), names


@transform(Family.HOIST)
def hoist_invariant_loads(source: str, inp: RuleInput) -> Rewrite | None:
    tree = cu.parse(source)
    if tree is None:
        return None
    edits: list[tuple[cst.CSTNode, Any]] = []
    done: list[str] = []
    notes: list[str] = []
    for k in cu.find_kernels(tree).values():
        if not inp.wants(k.name):
            continue
        bindings = cu.Bindings(k.node)
        for loop in (n for n in cu.walk(k.node.body) if isinstance(n, cst.For)):
            plan = _plan(k, loop, bindings)
            if plan is not None:  # one loop per kernel: nested edits would overwrite each other
                edits.append((loop, plan[0]))
                done.append(k.name)
                notes.append(f"{k.name}: {', '.join(plan[1])} loaded once before the loop over {cu.code(loop.target)}")
                break
    if not edits:
        return None
    return Rewrite(
        source=cu.emit(cu.replace(tree, edits), tree),
        family=Family.HOIST,
        kernels=tuple(done),
        mechanism="; ".join(notes) + " (the load's mask gains the loop's trip condition).",
        effect=(
            "one load instead of one per iteration: the loop writes memory, so the compiler could not "
            "move it. The reloads mostly hit L1/L2, so the gain is issue slots and latency, modest unless "
            "the loop is short of other work. Assumes the loaded and the written tensors do not overlap."
        ),
    )
