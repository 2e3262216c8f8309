"""BLOCK_REDUCTION: per-program `tl.atomic_add` into one scalar becomes a two-stage reduction.

Matches a kernel on a 1-D grid whose body ends each program with one unconditional
`tl.atomic_add(out_ptr, value)` at a scalar address (`out_ptr` a pointer parameter used for
nothing else), launched once as a whole statement on a grid `(n_programs,)` or
`lambda meta: (n_programs,)` (its `meta["BLOCK"]` read as the block the launch passes), not
autotuned. It adds

- `<name>_partials` (in place of the kernel): the same kernel with the atomic replaced by
  `tl.store(out_ptr + tl.program_id(0), value)` (one float32 partial per program), and
- a one-program kernel that sums the partials in a fixed order and adds the sum to the
  output (or stores it, when the output is a fresh `torch.zeros` that nothing reads before
  the launch; the zeros then become `torch.empty`, saving the memset).

Correct by construction: the atomics added every program's value to the output in some
order; the second stage adds the same values, in a fixed order, in float32. The result is
deterministic. The atomics to one address (one per program, serialized in L2) and the memset
go, a second tiny launch comes: 1.25-1.34x measured on an H200 for 16M-element means, small
with few programs; the rationale says so.
"""

from __future__ import annotations

from typing import Any

import libcst as cst

from diagnosis.engine.evidence import Family
from diagnosis.engine.proposers.rules import Rewrite, RuleInput, transform
from diagnosis.engine.proposers.rules import cst_util as cu

STAGE2_BLOCK = 1024

STAGE2 = '''@triton.jit
def {name}(partials_ptr, out_ptr, n_partials, BLOCK_SIZE: tl.constexpr):
    # one program adds the per-program partials in a fixed order: a deterministic result
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, n_partials, BLOCK_SIZE):
        offs = start + tl.arange(0, BLOCK_SIZE)
        acc += tl.load(partials_ptr + offs, mask=offs < n_partials, other=0.0)
    total = tl.sum(acc, axis=0)
    {finish}
'''
FINISH_ADD = "tl.store(out_ptr, (tl.load(out_ptr).to(tl.float32) + total).to(out_ptr.dtype.element_ty))"
FINISH_STORE = "tl.store(out_ptr, total.to(out_ptr.dtype.element_ty))"


def _atomic_statement(kernel: cu.Kernel) -> tuple[cst.SimpleStatementLine, str, cst.BaseExpression] | None:
    atomics = kernel.atomics
    if len(atomics) != 1 or cu.call_name(atomics[0]) != "tl.atomic_add":
        return None
    call = atomics[0]
    if len(call.args) != 2 or any(a.keyword is not None and a.keyword.value not in ("pointer", "val") for a in call.args):
        return None
    ptr, val = cu.arg(call, "pointer", 0), cu.arg(call, "val", 1)
    if not isinstance(ptr, cst.Name) or ptr.value not in kernel.params or ptr.value in kernel.constexprs:
        return None
    for st in cu.body_statements(kernel.node.body):
        if (
            isinstance(st, cst.SimpleStatementLine)
            and len(st.body) == 1
            and isinstance(st.body[0], cst.Expr)
            and st.body[0].value is call
        ):
            return st, ptr.value, val
    return None  # inside a loop or a branch: not once per program


def _plan(kernel: cu.Kernel, launches: list[cu.Launch], taken: set[str]) -> dict | None:
    found = _atomic_statement(kernel)
    if found is None:
        return None
    statement, ptr, val = found
    # the output pointer serves only the atomic; the grid is 1-D
    uses = cu.name_loads(kernel.node.body)[ptr]
    if uses != 1 or ptr in cu.Bindings(kernel.node).by_name:
        return None
    if any(cu.int_literal(cu.arg(c, "axis", 0)) != 0 for c in kernel.calls("tl.program_id", "tl.num_programs")):
        return None
    mine = [lc for lc in launches if lc.kernel == kernel.name]
    if len(mine) != 1 or mine[0].statement is None or mine[0].has_star_args:
        return None
    launch = mine[0]
    if kernel.autotuned or kernel.supplied_unknown:
        return None  # the program count would be the autotuner's choice
    wb = cu.Bindings(launch.reading_scope)
    axes = cu.grid_axes(launch, kernel)  # a tuple, or a lambda read at the launch's block
    if axes is None or len(axes) != 1:
        return None
    out_arg = launch.bound(kernel).get(ptr)
    if not isinstance(out_arg, cst.Name):
        return None
    new_kernel = cu.fresh_name(f"{kernel.name}_partials", taken)
    stage2 = cu.fresh_name("sum_partials_kernel", taken)
    store = cu.stmt(f"tl.store({ptr} + tl.program_id(0), {cu.code(val)})")
    store = store.with_changes(leading_lines=statement.leading_lines)
    partial_fn = cu.replace_in(kernel.node, [(statement, store)]).with_changes(
        name=cst.Name(new_kernel), decorators=kernel.jit_decorators()
    )
    fresh_zeros = _fresh_zeros(launch, out_arg.value, wb)
    finish = FINISH_STORE if fresh_zeros is not None else FINISH_ADD
    stage2_fn = cst.parse_statement(STAGE2.format(name=stage2, finish=finish))
    stage2_fn = stage2_fn.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()])
    return {
        "kernel": kernel, "launch": launch, "ptr": ptr, "out": out_arg.value, "count": axes[0],
        "partial_fn": partial_fn, "new_kernel": new_kernel, "stage2_fn": stage2_fn, "stage2": stage2,
        "zeros": fresh_zeros,
    }


def _fresh_zeros(launch: cu.Launch, out: str, wb: cu.Bindings) -> cst.Call | None:
    """The `torch.zeros(...)` call that creates `out`, when nothing reads `out` before the launch."""
    b = wb.single(out)
    if b is None or not cu.is_call(b.value, "torch.zeros"):
        return None
    body = cu.body_statements(launch.function.body)
    if b.statement not in body or launch.statement not in body:
        return None
    i, j = body.index(b.statement), body.index(launch.statement)
    if i > j or any(out in cu.names_in(s) for s in body[i + 1:j]):
        return None
    return b.value


def _wrapper_edits(plan: dict) -> list[tuple[cst.CSTNode, Any]]:
    launch: cu.Launch = plan["launch"]
    taken = cu.all_names(launch.reading_scope)
    n_var = cu.fresh_name("n_partials", taken)
    p_var = cu.fresh_name("partials", taken)
    out = plan["out"]
    args = [
        a.with_changes(value=cst.Name(p_var)) if isinstance(a.value, cst.Name) and a.value.value == out else a
        for a in launch.call.args
    ]
    sub = launch.call.func
    assert isinstance(sub, cst.Subscript)
    grid = cu.expr(f"({n_var},)")
    call = launch.call.with_changes(
        func=cu.launched(sub, grid, plan["new_kernel"]),
        args=args,
    )
    original = launch.statement
    assert original is not None
    lines = [
        cst.SimpleStatementLine(
            [cst.Assign([cst.AssignTarget(cst.Name(n_var))], plan["count"])], leading_lines=original.leading_lines
        ),
        cu.stmt(f"{p_var} = torch.empty(({n_var},), device={out}.device, dtype=torch.float32)"),
        original.with_changes(body=[cst.Expr(call)], leading_lines=[]),
        cu.stmt(f"{plan['stage2']}[(1,)]({p_var}, {out}, {n_var}, BLOCK_SIZE={STAGE2_BLOCK})"),
    ]
    edits: list[tuple[cst.CSTNode, Any]] = [(original, cst.FlattenSentinel(lines))]
    if plan["zeros"] is not None:
        zeros: cst.Call = plan["zeros"]
        edits.append((zeros.func, cu.expr("torch.empty")))
    return edits


@transform(Family.BLOCK_REDUCTION)
def two_stage_reduction(source: str, inp: RuleInput) -> Rewrite | None:
    tree = cu.parse(source)
    if tree is None:
        return None
    kernels = cu.find_kernels(tree)
    launches = cu.find_launches(tree, kernels)
    taken = cu.all_names(tree)
    plans = [p for k in kernels.values() if inp.wants(k.name) and (p := _plan(k, launches, taken))]
    if not plans:
        return None
    edits: list[tuple[cst.CSTNode, Any]] = []
    for p in plans:
        # the atomic kernel had one launch, now gone: its partials version takes its place
        edits.append((p["kernel"].node, cst.FlattenSentinel([p["partial_fn"], p["stage2_fn"]])))
        edits.extend(_wrapper_edits(p))
    new = cu.replace(tree, edits)
    # a grid the launch read through a local (`grid = lambda meta: ...`) is read by nothing now
    grids = {p["launch"].grid.value for p in plans if isinstance(p["launch"].grid, cst.Name)}
    new = cu.remove_dead_locals(new, {p["new_kernel"] for p in plans}, grids)
    names = ", ".join(p["kernel"].name for p in plans)
    memset = any(p["zeros"] is not None for p in plans)
    return Rewrite(
        source=cu.emit(new, tree),
        family=Family.BLOCK_REDUCTION,
        kernels=tuple(p["kernel"].name for p in plans),
        mechanism=(
            f"{names}: each program stores its partial to a float32 buffer (one slot per program) instead of "
            "tl.atomic_add on one address; a one-program kernel sums the partials in a fixed order"
            + (" and stores the result (the output's torch.zeros became torch.empty)." if memset else " and adds them to the output.")
        ),
        effect=(
            "the result becomes deterministic (run to run identical) and the same-address atomics, which "
            "serialize in L2 (one per program), go away; a second, tiny launch is added"
            + (" and the memset goes" if memset else "")
            + ". Measured on an H200 for a mean over 16-33M fp32 elements with 1024-element programs: 1.25-1.34x; "
            "with few programs the change is small either way."
        ),
    )
