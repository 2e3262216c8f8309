"""FUSION (epilogue): an element-wise kernel that only maps a temporary moves into the store of
the kernel that wrote it.

Matches, in one wrapper, a launch of a kernel P (any kind: a GEMM, a row normalisation) whose
only store writes a temporary `tmp` (allocated with torch.empty/empty_like/zeros/zeros_like),
followed by a launch of an element-wise kernel C (fusion.py's pattern) that reads `tmp` at its
offsets and nothing else from memory, writes `out = torch.empty_like(tmp)`, and covers
`tmp.numel()` elements. In the wrapper `tmp` is otherwise only asked for its metadata
(`numel`, `stride`, `shape`, `size`, `dtype`, `device`) or given to `torch.empty_like`.

The fused kernel is P with its store replaced by: the stored value kept in registers as
`t = value.to(tmp_ptr.dtype.element_ty)` (exactly what the store would have written), C's
statements with its load of `tmp` replaced by `t`, and C's store written to `out` at P's
address and under P's mask, with P's pointer to `tmp` replaced by one to `out`. The launch is
P's, with `out` and C's scalars added by keyword, at C's place; `tmp` stays allocated (its
pointer gives the cast its dtype) but is never written or read.

Correct by construction: `out` has `tmp`'s strides (empty_like of a dense tensor), so the
element P wrote at address offset E of `tmp` is the one C read at flat offset E and mapped to
offset E of `out`; C computes each element from that element alone (no other loads, no
reductions), so applying it in P's registers gives the same values. C's statements must not
use its offsets, mask or block (checked), and the statements between the launches only
allocate or read metadata.
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
    splice,
)

METADATA = frozenset({"numel", "stride", "shape", "size", "dtype", "device", "dim"})
STORE_ARGS = ("pointer", "value", "mask")


@dataclass
class _Store:
    statement: cst.SimpleStatementLine
    param: str  # the pointer parameter the store writes through
    address: cst.BaseExpression  # the address, a local pointer name inlined
    value: cst.BaseExpression
    mask: cst.BaseExpression | None


def _single_store(kernel: cu.Kernel) -> _Store | None:
    """P's one store, a top-level statement writing through one parameter it never loads."""
    stores = kernel.calls("tl.store")
    if len(stores) != 1 or kernel.atomics:
        return None
    call = stores[0]
    statement = cu.call_statement(kernel.node.body, call)
    if statement is None:
        return None
    positional = [a for a in call.args if a.keyword is None]
    named = {a.keyword.value for a in call.args if a.keyword is not None}
    if len(positional) > 3 or not named <= set(STORE_ARGS[len(positional):]):
        return None
    ptr, value, mask = (cu.arg(call, name, i) for i, name in enumerate(STORE_ARGS))
    if ptr is None or value is None:
        return None
    bindings = cu.Bindings(kernel.node)
    bases = cu.base_params(kernel, ptr, bindings)
    loads, _ = cu.memory_params(kernel)
    if len(bases) != 1 or "?" in bases or bases & loads:
        return None
    (param,) = bases
    address = ptr
    if isinstance(ptr, cst.Name) and ptr.value != param:
        b = bindings.single(ptr.value)
        if b is None or b.value is None:
            return None
        address = b.value
    # the address is rebuilt at the store: every local it reads must mean the same there
    for n in cu.names_in(address):
        if n != param and n in bindings.by_name and bindings.single(n) is None:
            return None
    if [n.value for n in cu.walk(address) if isinstance(n, cst.Name)].count(param) != 1:
        return None
    return _Store(statement, param, address, value, mask)


@dataclass
class _Match:
    p: cu.Kernel
    c: Elementwise
    lp: cu.Launch
    lc: cu.Launch
    store: _Store
    tmp: str
    t2: str  # C's parameter that loads tmp
    out_param: str  # C's parameter that stores to out


def metadata_only(fn: cst.FunctionDef, bindings: cu.Bindings, tmp: str, allowed: set[int]) -> bool:
    """Every read of `tmp` in the wrapper `fn` is one of `allowed` (by identity), a metadata
    attribute, or the argument of torch.empty_like."""
    total = cu.name_loads(fn.body, bindings.target_ids)[tmp]
    fine = 0
    for n in cu.walk(fn.body):
        if id(n) in allowed:
            fine += 1
        elif isinstance(n, cst.Attribute) and isinstance(n.value, cst.Name) and n.value.value == tmp:
            fine += n.attr.value in METADATA
        elif cu.is_call(n, "torch.empty_like") and n.args and isinstance(n.args[0].value, cst.Name):
            fine += n.args[0].value.value == tmp
    return fine == total


def _covers(expr: cst.BaseExpression, tmp: str, bindings: cu.Bindings) -> bool:
    """`expr` is `tmp.numel()`, or a name bound once to it."""
    if isinstance(expr, cst.Name):
        b = bindings.single(expr.value)
        if b is None or b.value is None:
            return False
        expr = b.value
    return cu.code(expr) == f"{tmp}.numel()"


def _match(
    lp: cu.Launch, lc: cu.Launch, p: cu.Kernel, store: _Store, c: Elementwise, body: list, inp: RuleInput
) -> _Match | None:
    if lp.kernel == lc.kernel or not (inp.wants(lp.kernel) or inp.wants(lc.kernel)):
        return None
    if len(c.stores) != 1 or c.other_loads or len(c.direct) != 1:
        return None
    bp, bc = lp.bound(p), lc.bound(c.kernel)
    tmp_expr, (t2,) = bp.get(store.param), tuple(c.direct)
    if not isinstance(tmp_expr, cst.Name) or cu.code(bc.get(t2, cst.Name("_"))) != tmp_expr.value:
        return None
    tmp = tmp_expr.value
    out_param = c.stores[0][0]
    out_expr = bc.get(out_param)
    wb = cu.Bindings(lp.reading_scope)
    tmp_b = wb.single(tmp)
    if tmp_b is None or cu.call_name(tmp_b.value) not in ALLOCS:
        return None
    out_b = wb.single(out_expr.value) if isinstance(out_expr, cst.Name) else None
    if out_b is None or cu.code(out_b.value) != f"torch.empty_like({tmp})":
        return None
    if c.n not in bc or not _covers(bc[c.n], tmp, wb):
        return None
    if any(p_ in c.kernel.constexprs and p_ != c.block for p_ in c.kernel.params):
        return None
    allowed = {id(a.value) for a in lp.call.args if a.value is tmp_expr} | {
        id(a.value) for a in lc.call.args if a.value is bc[t2]
    }
    if len(allowed) != 2 or not metadata_only(lp.reading_scope, wb, tmp, allowed):
        return None
    # C's statements, once its loads of tmp are the kept value, use none of its indexing
    rest = [s for s in cu.body_statements(c.kernel.node.body) if s not in c.defs]
    indexing = {c.pid, c.offs, c.mask, c.n, c.block}
    for s in rest:
        if s is c.stores[0][1]:
            continue
        edited = cu.replace_in(s, [(call, cst.Name("_t")) for call in c.direct[t2]])
        if cu.names_in(edited) & indexing:
            return None
    if cu.names_in(c.stores[0][2]) & indexing:
        return None
    i, j = body.index(lp.statement), body.index(lc.statement)
    moved = {n for a in lp.call.args for n in cu.names_in(a)} | cu.names_in(lp.grid)
    if not between_ok(body[i + 1:j], moved):
        return None
    return _Match(p, c, lp, lc, store, tmp, t2, out_param)


def _find(tree: cst.Module, inp: RuleInput) -> _Match | None:
    once, sequences = launch_sequences(tree)
    consumers = {k: e for k, kern in once.items() if (e := elementwise(kern))}
    producers = {k: st for k, kern in once.items() if (st := _single_store(kern))}
    for body, order in sequences:
        for i, lp in enumerate(order):
            if lp.kernel not in producers:
                continue
            for lc in order[i + 1:]:
                if lc.kernel in consumers:
                    m = _match(lp, lc, once[lp.kernel], producers[lp.kernel], consumers[lc.kernel], body, inp)
                    if m is not None:
                        return m
    return None


def _fused(m: _Match, taken_module: set[str]) -> tuple[cst.FunctionDef, dict[str, cst.BaseExpression], str]:
    """The fused kernel, its new parameters with the wrapper expressions they take, its name."""
    p, c = m.p, m.c
    bc = m.lc.bound(c.kernel)
    taken = set(p.params) | cu.all_names(p.node)
    rename: dict[str, str] = {}
    new_params: dict[str, cst.BaseExpression] = {}
    for param in c.kernel.params:
        if param in (c.n, c.block, m.t2):
            continue
        rename[param] = cu.fresh_name(param, taken) if param in taken else param
        taken.add(rename[param])
        new_params[rename[param]] = bc[param]
    bound_locals = set(cu.Bindings(c.kernel.node).by_name) - set(c.kernel.params)
    for n in sorted(bound_locals - {c.pid, c.offs, c.mask}):
        rename[n] = cu.fresh_name(n, taken) if n in taken else n
        taken.add(rename[n])
    kept = cu.fresh_name(f"{m.tmp}_vals", taken)
    taken.add(kept)

    def renamed(node: Any) -> Any:
        node = cu.replace_in(node, [(call, cst.Name(kept)) for call in c.direct[m.t2]])
        return cu.subst_names(node, lambda n: cst.Name(rename[n.value]) if n.value in rename else None)

    cast = cu.stmt(f"{kept} = {cu.receiver(m.store.value)}.to({m.store.param}.dtype.element_ty)")
    middle = [renamed(s) for s in cu.body_statements(c.kernel.node.body) if s not in c.defs and s is not c.stores[0][1]]
    out_name = rename[m.out_param]
    address = cu.subst_names(m.store.address, lambda n: cst.Name(out_name) if n.value == m.store.param else None)
    mask = f", mask={cu.code(m.store.mask)}" if m.store.mask is not None else ""
    store = cu.stmt(f"tl.store({cu.code(address)}, {cu.code(renamed(c.stores[0][2]))}{mask})")
    body = []
    for s in cu.body_statements(p.node.body):
        if s is m.store.statement:
            body += [cast.with_changes(leading_lines=s.leading_lines), *middle, store]
        else:
            body.append(s)
    name = cu.fresh_name(f"{p.name.removesuffix('_kernel')}_{c.kernel.name.removesuffix('_kernel')}_kernel", taken_module)
    at = constexpr_at(p)
    fn = p.node.with_changes(
        name=cst.Name(name),
        params=cu.insert_params(p, at, list(new_params)),
        body=p.node.body.with_changes(body=_tidy(m, body, set(p.params) | set(new_params))),
    )
    return fn, new_params, name


def _tidy(m: _Match, body: list[cst.BaseStatement], params: set[str]) -> list[cst.BaseStatement]:
    """The fused body without the copies it made (`x = c_vals`) and without the local pointer the
    old store wrote through (`c_ptrs = c_ptr + ...`, inlined by the new store) if nothing reads it."""
    body = tidy.propagate_copies(body, params, [m.p.node, m.c.kernel.node])
    call = next(c for c in cu.walk(m.store.statement) if cu.is_call(c, "tl.store"))
    ptr = cu.arg(call, "pointer", 0)  # type: ignore[arg-type]
    if not isinstance(ptr, cst.Name) or ptr.value == m.store.param:
        return body
    return tidy.drop_unread(body, {ptr.value})


def _fuse(source: str, inp: RuleInput) -> tuple[str, str] | None:
    tree = cu.parse(source)
    if tree is None:
        return None
    m = _find(tree, inp)
    if m is None:
        return None
    fn, new_params, name = _fused(m, cu.all_names(tree))
    extra = [cu.keyword_arg(k, v) for k, v in new_params.items()]
    # the new parameters go before the constexprs: one passed by position is passed by keyword
    keywords = cu.keywords_from(m.lp, m.p, constexpr_at(m.p))
    call = cu.drop_args(m.lp.call, m.lp.call, set(), extra, keywords)
    sub = call.func
    assert isinstance(sub, cst.Subscript)
    call = call.with_changes(func=sub.with_changes(value=cst.Name(name)))
    # P's launch, renamed and given C's outputs, goes where C's was
    new = splice(tree, m.lp, m.lc, call, (m.p.node, fn), m.c.kernel.node)
    return new, f"{m.c.kernel.name} into the store of {m.p.name} through `{m.tmp}` as {name}"


@transform(Family.FUSION)
def fuse_elementwise_epilogue(source: str, inp: RuleInput) -> Rewrite | None:
    done = _fuse(source, inp)
    if done is None:
        return None
    new, step = done
    return Rewrite(
        source=new,
        family=Family.FUSION,
        kernels=(step.split(" as ")[-1],),
        mechanism=f"fused an element-wise epilogue: {step} (the intermediate stays in registers).",
        effect=(
            "the temporary is neither written to nor read back from memory and the element-wise launch is "
            "gone: for a memory-bound producer expect up to the ratio of bytes moved (its output written "
            "once instead of written, read and written again); for a GEMM the saving is the epilogue's "
            "traffic, small next to the GEMM itself."
        ),
    )
