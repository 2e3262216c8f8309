"""FUSION (row broadcast): a row kernel's per-row result, broadcast over the row by a later
element-wise kernel, stays in registers; the element-wise work runs in the row kernel.

Matches, in one wrapper, a launch `R[(G,)](...)` of a row kernel R (one program axis,
`row = tl.program_id(0)`, exactly one store, `tl.store(S + row, V)`, at the top of its body;
no atomics) that writes a tensor `stat`, followed by a launch of an element-wise kernel C
(fusion.py's pattern: `offs = pid * BLOCK + tl.arange(0, BLOCK)`, `mask = offs < n`) that reads
`stat` through one parameter Q, only as `tl.load(Q + offs // D, ...)` (a row broadcast), and
whose other statements read neither `pid`, `n` nor `BLOCK`. C's outputs are tensors the wrapper
allocated, read by neither launch; the statements between the launches only allocate.

The fused kernel is R with its store kept (`_stat = V.to(S.dtype.element_ty)` first) and, after
R's body, C's body in a loop over the row's columns in C's blocks:
`offs = row * D + cols`, `mask = cols < D`, every `tl.load(Q + offs // D, ...)` replaced by
`_stat`, and C's other row and column index math on `offs` by `row` and `cols` (no integer
division per element; `_row_index_math` says when that is exact). The launch goes where C's was, under a guard that the flat size is whole rows,
`if n == G * D:`; otherwise R and C run as before. The mean-centring and normalising steps of a
first conversion written one PyTorch op per kernel are the usual case: the row is read by R and,
right after, by C in the same program, from L2 instead of from HBM.

Correct by construction where the guard holds: C computes element E from inputs at E and from
`stat[E // D]`; program `row` of the fused kernel computes the elements E = row * D + c for
c in [0, D) (together, every E < n = G * D, once) after computing `stat[row]` exactly as R
stores it. R writes nothing but `stat`, C's outputs are fresh tensors neither kernel reads, so
no program reads what another writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import libcst as cst

from diagnosis.engine.evidence import Family
from diagnosis.engine.proposers.rules import Rewrite, RuleInput, tidy, transform
from diagnosis.engine.proposers.rules import cst_util as cu
from diagnosis.engine.proposers.rules.fusion import (
    ALLOCS,
    Elementwise,
    between_ok,
    constexpr_at,
    elementwise,
    launch_sequences,
)


@dataclass
class _Row:
    kernel: cu.Kernel
    row: str  # the program id's name
    store: cst.SimpleStatementLine
    stat_param: str  # S
    value: cst.BaseExpression  # V


@dataclass
class _Match:
    r: _Row
    c: Elementwise
    lr: cu.Launch
    lc: cu.Launch
    stat: str  # the wrapper's tensor
    q: str  # C's parameter that reads it
    d: str  # C's row-length parameter
    loads: list[cst.Call]  # C's loads of Q


def row_kernel(kernel: cu.Kernel) -> _Row | None:
    """R's row id, its one store `tl.store(S + row, V)` (a top-level statement) and S, V."""
    axes = kernel.program_axes()
    if list(axes.values()) != [0] or len(kernel.calls("tl.program_id")) != 1 or kernel.atomics:
        return None
    if kernel.calls("tl.num_programs"):
        return None
    row = next(iter(axes))
    stores = kernel.calls("tl.store")
    if len(stores) != 1:
        return None
    store = stores[0]
    line = cu.call_statement(kernel.node.body, store)
    ptr, value = cu.arg(store, "pointer", 0), cu.arg(store, "value", 1)
    if line is None or value is None or len(store.args) != 2 or any(a.keyword for a in store.args):
        return None
    if not (
        isinstance(ptr, cst.BinaryOperation)
        and isinstance(ptr.operator, cst.Add)
        and isinstance(ptr.left, cst.Name)
        and ptr.left.value in kernel.params
        and isinstance(ptr.right, cst.Name)
        and ptr.right.value == row
    ):
        return None
    if len(cu.Bindings(kernel.node).by_name.get(row, [])) != 1:
        return None
    return _Row(kernel, row, line, ptr.left.value, value)


def _broadcast_loads(c: Elementwise, q: str) -> tuple[list[cst.Call], str] | None:
    """C's loads of Q, each `tl.load(Q + offs // D, ...)` with one D; None if Q is used otherwise."""
    loads: list[cst.Call] = []
    d: str | None = None
    uses = sum(1 for n in cu.walk(c.kernel.node.body) if isinstance(n, cst.Name) and n.value == q)
    for call in c.kernel.calls("tl.load"):
        ptr = cu.arg(call, "pointer", 0)
        if not (isinstance(ptr, cst.BinaryOperation) and isinstance(ptr.left, cst.Name) and ptr.left.value == q):
            continue
        idx = ptr.right
        if not (
            isinstance(ptr.operator, cst.Add)
            and isinstance(idx, cst.BinaryOperation)
            and isinstance(idx.operator, cst.FloorDivide)
            and cu.code(idx.left) == c.offs
            and isinstance(idx.right, cst.Name)
            and idx.right.value in c.kernel.params
            and idx.right.value not in c.kernel.constexprs
        ):
            return None
        if d not in (None, idx.right.value):
            return None
        d = idx.right.value
        loads.append(call)
    if not loads or d is None or uses != len(loads):
        return None
    return loads, d


def _find(tree: cst.Module, inp: RuleInput) -> _Match | None:
    once, sequences = launch_sequences(tree)
    rows = {k: r for k, kern in once.items() if (r := row_kernel(kern))}
    flats = {k: e for k, kern in once.items() if (e := elementwise(kern))}
    for body, launched in sequences:
        if not launched:
            continue
        wb = cu.Bindings(launched[0].reading_scope)
        for i, lr in enumerate(launched):
            if lr.kernel not in rows:
                continue
            for lc in launched[i + 1:]:
                if lc.kernel in flats and lc.kernel != lr.kernel and (inp.wants(lr.kernel) or inp.wants(lc.kernel)):
                    m = _match(rows[lr.kernel], flats[lc.kernel], lr, lc, body, wb)
                    if m is not None:
                        return m
    return None


def _match(r: _Row, c: Elementwise, lr: cu.Launch, lc: cu.Launch, body: list, wb: cu.Bindings) -> _Match | None:
    grid = lr.grid
    if not (isinstance(grid, cst.Tuple) and len(grid.elements) == 1):
        return None
    br, bc = lr.bound(r.kernel), lc.bound(c.kernel)
    stat_expr = br.get(r.stat_param)
    if not isinstance(stat_expr, cst.Name):
        return None
    stat = stat_expr.value
    qs = [p for p, e in bc.items() if isinstance(e, cst.Name) and e.value == stat]
    if len(qs) != 1 or qs[0] in c.direct:
        return None
    q = qs[0]
    found = _broadcast_loads(c, q)
    if found is None:
        return None
    loads, d = found
    if d not in bc or c.n not in bc:
        return None
    # C's statements past its indexing read the offsets and the mask only
    rest = [s for s in cu.body_statements(c.kernel.node.body) if s not in c.defs]
    if any(cu.names_in(s) & {c.pid, c.n, c.block} for s in rest):
        return None
    if any(p in c.kernel.constexprs and p != c.block for p in c.kernel.params):
        return None
    if any(k not in c.kernel.params for k in lc.keywords):  # launch options (num_warps...) would be lost
        return None
    # C's outputs: tensors the wrapper allocated, read by neither launch
    r_inputs = {cu.code(e) for p, e in br.items() if p != r.stat_param}
    c_inputs = {cu.code(bc[p]) for p in set(c.direct) | c.other_loads if p in bc}
    for p, _, _ in c.stores:
        out = bc.get(p)
        if not isinstance(out, cst.Name) or out.value in r_inputs | c_inputs | {stat}:
            return None
        b = wb.single(out.value)
        if b is None or cu.call_name(b.value) not in ALLOCS:
            return None
    i, j = body.index(lr.statement), body.index(lc.statement)
    moved = {n for node in lr.call.args for n in cu.names_in(node)} | cu.names_in(grid)
    if not between_ok(body[i + 1:j], moved | {stat}, {stat}):
        return None
    return _Match(r, c, lr, lc, stat, q, d, loads)


def _fused(m: _Match, taken_module: set[str]) -> tuple[cst.FunctionDef, list[tuple[str, cst.BaseExpression]], str]:
    r, c = m.r, m.c
    bc = m.lc.bound(c.kernel)
    taken = set(r.kernel.params) | cu.all_names(r.kernel.node)

    def fresh(base: str) -> str:
        name = cu.fresh_name(base, taken) if base in taken else base
        taken.add(name)
        return name

    rename: dict[str, str] = {}
    new_params: list[tuple[str, cst.BaseExpression]] = []
    for p in c.kernel.params:
        if p in (m.q, c.pid, c.n, c.block):
            continue
        rename[p] = fresh(p)
        new_params.append((rename[p], bc[p]))
    bound_locals = set(cu.Bindings(c.kernel.node).by_name) - set(c.kernel.params)
    for n in sorted(bound_locals):
        rename[n] = fresh(n)
    stat_var, start, cols = fresh(f"{m.stat}_row"), fresh("col_start"), fresh("cols")
    block = fresh(f"{c.kernel.name.removesuffix('_kernel').upper()}_BLOCK")
    d = rename[m.d]

    keep = cu.stmt(f"{stat_var} = {cu.receiver(r.value)}.to({r.stat_param}.dtype.element_ty)")
    store = cu.stmt(f"tl.store({r.stat_param} + {r.row}, {stat_var})")
    body_r: list[cst.BaseStatement] = []
    for s in cu.body_statements(r.kernel.node.body):
        if s is r.store:
            body_r += [keep.with_changes(leading_lines=s.leading_lines), store]
        else:
            body_r.append(s)
    inner = [
        cu.stmt(f"{cols} = {start} + tl.arange(0, {block})"),
        cu.stmt(f"{rename[c.offs]} = {r.row} * {d} + {cols}"),
        cu.stmt(f"{rename[c.mask]} = {cols} < {d}"),
    ]
    load_edits = [(x, cst.Name(stat_var)) for x in m.loads]
    for s in cu.body_statements(c.kernel.node.body):
        if s in c.defs:
            continue
        s = cu.replace_in(s, load_edits)
        s = cu.subst_names(s, lambda n: cst.Name(rename[n.value]) if n.value in rename else None)
        inner.append(_row_index_math(s, rename[c.offs], d, rename[c.mask], r.row, cols))
    loop = cst.parse_statement(f"for {start} in range(0, {d}, {block}):\n    pass\n")
    assert isinstance(loop, cst.For)
    params = set(r.kernel.params) | {p for p, _ in new_params} | {block}
    loop = loop.with_changes(
        body=loop.body.with_changes(body=tidy.propagate_copies(inner, params, [r.kernel.node, c.kernel.node])),  # C's `s = <the row's value>`
        leading_lines=[cst.EmptyLine(comment=cst.Comment(f"# {c.kernel.name}, row by row, {m.stat} in registers"))],
    )
    name = cu.fresh_name(
        f"{r.kernel.name.removesuffix('_kernel')}_{c.kernel.name.removesuffix('_kernel')}_kernel", taken_module
    )
    jit = r.kernel.jit_decorators()
    fn = r.kernel.node.with_changes(
        name=cst.Name(name),
        decorators=jit,
        params=cu.insert_params(r.kernel, constexpr_at(r.kernel), [p for p, _ in new_params]),
        body=r.kernel.node.body.with_changes(body=[*body_r, loop]),
    )
    fn = cu.append_constexpr(fn, block, "1024")
    new_params.append((block, bc.get(c.block, cu.expr("1024"))))
    return fn, new_params, name


def _row_index_math(stmt: cst.BaseStatement, offs: str, d: str, mask: str, row: str, cols: str) -> Any:
    """`offs // d` -> `(row + 0 * cols)` and `offs % d` -> `cols` in one of C's statements, where
    `offs = row * d + cols` and `0 <= cols`: exact on every lane with `cols < d` (the mask), and
    no integer division per element. A masked-off lane (cols >= d in the row's last block) gets
    other values; C has no reductions (fusion.py) and stores under the mask, so they reach memory
    only through an address: `%` is replaced only where every load or store whose address holds
    it is masked by `mask` (`offs % d` is in bounds on any lane, `cols` is not)."""
    div = [n for n in cu.walk(stmt) if _is_index_op(n, offs, d, cst.FloorDivide)]
    mod = [n for n in cu.walk(stmt) if _is_index_op(n, offs, d, cst.Modulo)]
    for call in (n for n in cu.walk(stmt) if cu.is_call(n, "tl.load", "tl.store")):
        ptr = cu.arg(call, "pointer", 0)
        m = cu.arg(call, "mask", 2 if cu.call_name(call) == "tl.store" else 1)
        in_ptr = {id(n) for n in cu.walk(ptr)} if ptr is not None else set()
        if any(id(x) in in_ptr for x in mod) and not (isinstance(m, cst.Name) and m.value == mask):
            mod = []
            break
    edits = [(x, cu.expr(f"({row} + 0 * {cols})")) for x in div] + [(x, cst.Name(cols)) for x in mod]
    return cu.replace_in(stmt, edits) if edits else stmt


def _is_index_op(node: cst.CSTNode, offs: str, d: str, op: type) -> bool:
    return (
        isinstance(node, cst.BinaryOperation)
        and isinstance(node.operator, op)
        and cu.code(node.left) == offs
        and isinstance(node.right, cst.Name)
        and node.right.value == d
    )


@transform(Family.FUSION)
def fuse_row_broadcast(source: str, inp: RuleInput) -> Rewrite | None:
    tree = cu.parse(source)
    if tree is None:
        return None
    m = _find(tree, inp)
    if m is None:
        return None
    fn, new_params, name = _fused(m, cu.all_names(tree))
    sub = m.lr.call.func
    assert isinstance(sub, cst.Subscript) and m.lr.statement is not None and m.lc.statement is not None
    call = m.lr.call.with_changes(
        func=sub.with_changes(value=cst.Name(name)),
        # C's parameters go before R's constexprs: one passed by position is passed by keyword
        args=cu.drop_args(
            m.lr.call,
            m.lr.call,
            set(),
            [cu.keyword_arg(p, e) for p, e in new_params],
            cu.keywords_from(m.lr, m.r.kernel, constexpr_at(m.r.kernel)),
        ).args,
    )
    bc = m.lc.bound(m.c.kernel)
    rows = m.lr.grid.elements[0].value
    cond = f"{cu.code(bc[m.c.n])} == {cu.operand(rows)} * {cu.operand(bc[m.d])}"
    guard = cst.parse_statement(f"if {cond}:\n    pass\nelse:\n    pass\n")
    assert isinstance(guard, cst.If) and guard.orelse is not None
    strip = m.lr.statement.with_changes(leading_lines=[])
    guard = guard.with_changes(
        body=cst.IndentedBlock([cst.SimpleStatementLine([cst.Expr(call)])]),
        orelse=guard.orelse.with_changes(body=cst.IndentedBlock([strip, m.lc.statement.with_changes(leading_lines=[])])),
        leading_lines=m.lc.statement.leading_lines,
    )
    # the fused kernel goes right after C's definition; both originals stay for the guard's else
    edits: list[tuple[cst.CSTNode, Any]] = [
        (m.lr.statement, cst.RemoveFromParent()),
        (m.lc.statement, guard),
        (m.c.kernel.node, cst.FlattenSentinel([m.c.kernel.node, fn])),
    ]
    new = cu.replace(tree, edits)
    return Rewrite(
        source=cu.emit(new, tree),
        family=Family.FUSION,
        kernels=(name,),
        mechanism=(
            f"{m.c.kernel.name} reads {m.r.kernel.name}'s per-row `{m.stat}` as a row broadcast; {name} runs "
            f"{m.c.kernel.name}'s element-wise body in a loop over each row's columns right after "
            f"{m.r.kernel.name}'s row reduction, with `{m.stat}[row]` in registers (launched when the flat size "
            "is whole rows; the two launches stay for any other case)."
        ),
        effect=(
            f"the row {m.r.kernel.name} reads is read again by the same program while it is still in L2, instead "
            f"of from HBM by a second launch, and one launch goes: for memory-bound rows expect up to the ratio "
            "of HBM bytes (one read of the input instead of two), less where rows do not stay in L2."
        ),
    )
