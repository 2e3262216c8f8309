"""FUSION (prologue): an element-wise kernel whose only output a later kernel reads moves into
that kernel's loads.

Matches, in one wrapper, a launch of an element-wise kernel P (fusion.py's pattern: one
store, loads only at its own offsets) that writes a temporary `tmp` (allocated with
torch.empty/empty_like/zeros/zeros_like), followed by a launch of any kernel C that reads
`tmp` (or `alias = tmp.view(...)` / `tmp.reshape(...)`) through one pointer parameter, only in
loads `tl.load(<address>, mask=M, other=O)` whose address names that parameter once and no
other pointer. In the wrapper `tmp` and its alias are otherwise only asked for their metadata
or given to torch.empty_like. A residual add before a LayerNorm is the usual case.

C's every load of `tmp` becomes P's stored value computed right there: P's straight-line
statements inlined into one expression, each of its loads `tl.load(q + offs, mask=mask)`
turned into a load of `q` at C's address under C's mask, and each load at another index
`tl.load(q + f(offs), mask=mask)` (a row-broadcast `m_ptr + offs // n_cols`) into one at
f(C's element offset), where C's address is `tmp + offset`; cast as P's store would
(`.to(tmp.dtype.element_ty)`), and put under `tl.where(M, ..., O)` where C's load had an
`other`. C gains P's input pointers and scalars as parameters (passed by keyword); P's launch
goes; `tmp` stays allocated (its pointer gives the cast its dtype) but is never written or
read.

A row-broadcast index at C's row address, `(R * S + K) // D` with R a program id, K an
`arange` from 0 under C's mask `K < N` and N passed what P's D was, is R wherever S == D: the
fused C gets a constexpr `<P>_DENSE_ROWS` (default False) that its launch sets to `S == D`
(`e.stride(0) == n_cols`), and loads at `R + 0 * K` then, the division staying for the other
case. Why: on the H200 (run of 3eb0c9c) the fused logsumexp kept an integer division per
element and ran 0.87x on a 5000 x 3001 case while gaining 1.56-1.89x on four others.

Correct when the producer's inputs share the temporary's layout (the dense tensors a flat
element-wise kernel is written for): P computes element E of `tmp`'s storage from element E
of each input's (and element f(E) of the others), and C reads storage offset E of `tmp`
through the alias (a view of its storage); the fused C reads the same elements at E and
f(E) instead and applies the same expression.
A `reshape` alias of a non-contiguous temporary would be a copy in another order: the gate's
correctness check on the module's inputs is what holds then.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import libcst as cst

from diagnosis.engine.evidence import Family
from diagnosis.engine.proposers.rules import Rewrite, RuleInput, transform
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
from diagnosis.engine.proposers.rules.fusion_epilogue import metadata_only

ALIAS_METHODS = frozenset({"view", "reshape"})
LOAD_ARGS = ("pointer", "mask", "other")


@dataclass
class _Match:
    p: Elementwise
    c: cu.Kernel
    lp: cu.Launch
    lc: cu.Launch
    tmp: str
    t_param: str  # C's parameter that points at tmp
    loads: list[cst.Call]  # C's loads through it


def _value(p: Elementwise) -> cst.BaseExpression | None:
    """P's stored value as one expression over its loads and scalars (its locals inlined);
    None unless its statements are single assignments and the value reads none of its indexing
    except through its loads."""
    env: dict[str, cst.BaseExpression] = {}
    _, store_line, stored = p.stores[0]
    for s in cu.body_statements(p.kernel.node.body):
        if s in p.defs or s is store_line:
            continue
        pairs = cu.simple_assigns(s)
        if len(pairs) != 1 or not isinstance(s.body[0], cst.Assign) or len(s.body[0].targets) != 1:
            return None
        name, value = pairs[0]
        env[name] = _inline(value, env)
    value = _inline(stored, env)
    indexing = {p.pid, p.offs, p.mask, p.n, p.block}
    pointers = set(p.direct) | p.other_loads
    loads = [n for n in cu.walk(value) if cu.is_call(n, "tl.load")]
    for load in loads:
        q, index = _loaded(load), _index(load)
        if q not in pointers or index is None:
            return None
        # the address may read the offsets and P's scalars; its mask must be P's own
        if cu.names_in(index) & (indexing - {p.offs}) or p.pid in cu.names_in(index):
            return None
        mask = cu.arg(load, "mask", 1)
        if mask is not None and cu.code(mask) != p.mask:
            return None
        if any(a.keyword is not None and a.keyword.value not in LOAD_ARGS for a in load.args):
            return None
    if cu.names_in(cu.replace_in(value, [(n, cst.Name("_")) for n in loads])) & indexing:
        return None
    return value


def _inline(node: cst.BaseExpression, env: dict[str, cst.BaseExpression]) -> Any:
    return cu.subst_names(node, lambda n: _atom(env[n.value]) if n.value in env else None)


def _atom(node: cst.BaseExpression) -> cst.BaseExpression:
    """`node` safe to put where a name stood: parenthesised unless it already binds tightest."""
    if isinstance(node, (cst.Name, cst.Call, cst.Attribute, cst.Subscript, cst.Integer, cst.Float)) or node.lpar:
        return node
    return node.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def _loaded(load: cst.Call) -> str | None:
    """The parameter of a load `tl.load(q + index, ...)`."""
    ptr = cu.arg(load, "pointer", 0)
    if isinstance(ptr, cst.BinaryOperation) and isinstance(ptr.operator, cst.Add) and isinstance(ptr.left, cst.Name):
        return ptr.left.value
    return None


def _index(load: cst.Call) -> cst.BaseExpression | None:
    """The `index` of a load `tl.load(q + index, ...)`."""
    ptr = cu.arg(load, "pointer", 0)
    return ptr.right if _loaded(load) is not None and isinstance(ptr, cst.BinaryOperation) else None


def _terms(address: cst.BaseExpression, t_param: str) -> list[cst.BaseExpression] | None:
    """The terms `[a, b, ...]` of C's address `t_param + a + b ...` (a left-nested sum)."""
    terms: list[cst.BaseExpression] = []
    node = address
    while isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
        terms.append(node.right)
        node = node.left
    if not (isinstance(node, cst.Name) and node.value == t_param) or not terms:
        return None
    if any(t_param in cu.names_in(t) for t in terms):
        return None
    return list(reversed(terms))


def _offset(address: cst.BaseExpression, t_param: str) -> cst.BaseExpression | None:
    """The element offset of C's address `t_param + a + b ...`: `a + b ...`."""
    terms = _terms(address, t_param)
    return None if terms is None else cu.expr(" + ".join(cu.code(_atom(t)) for t in terms))


@dataclass
class _DenseRows:
    """A row-broadcast load `q + offs // D` fused at C's `R * S + K` under the mask `K < N`."""

    row: str  # R: bound once to tl.program_id(...), so >= 0
    cols: str  # K: bound once to tl.arange(0, ...), so >= 0
    guard: str  # the launch's test that S == D: `e.stride(0) == n_cols`


def _dense_rows(m: _Match, index: cst.BaseExpression, address: cst.BaseExpression,
                mask: cst.BaseExpression | None) -> _DenseRows | None:  # fmt: skip
    """When the producer's index is `offs // D` and C reads row R of `tmp` at `R * S + K` with
    `K < N` (N bound at C's launch to what D is at P's), the index is `(R * S + K) // D`: R
    itself wherever S == D, since 0 <= K < D there. S == D is a property of the call (a dense
    temporary has stride n_cols), so it becomes a constexpr the launch computes."""
    p, c = m.p, m.c
    if not (isinstance(index, cst.BinaryOperation) and isinstance(index.operator, cst.FloorDivide)):
        return None
    if not (isinstance(index.left, cst.Name) and index.left.value == p.offs and isinstance(index.right, cst.Name)):
        return None
    divisor = index.right.value
    if divisor not in p.kernel.params or divisor in p.kernel.constexprs:
        return None
    terms = _terms(address, m.t_param)
    if terms is None or len(terms) != 2:
        return None
    product, k = terms
    if not (isinstance(product, cst.BinaryOperation) and isinstance(product.operator, cst.Multiply)):
        return None
    if not (isinstance(product.left, cst.Name) and isinstance(product.right, cst.Name) and isinstance(k, cst.Name)):
        return None
    bindings = cu.Bindings(c.node)

    def bound_to(name: str, call: str) -> cst.Call | None:
        b = bindings.single(name)
        return b.value if b is not None and cu.is_call(b.value, call) else None  # type: ignore[return-value]

    row, stride = product.left.value, product.right.value
    if bound_to(row, "tl.program_id") is None:
        row, stride = stride, row
    arange = bound_to(k.value, "tl.arange")
    if bound_to(row, "tl.program_id") is None or arange is None or cu.int_literal(cu.arg(arange, "start", 0)) != 0:
        return None
    if stride not in c.params or stride in c.constexprs:
        return None
    if not (
        isinstance(mask, cst.Comparison)
        and len(mask.comparisons) == 1
        and isinstance(mask.comparisons[0].operator, cst.LessThan)
        and cu.code(mask.left) == k.value
        and isinstance(mask.comparisons[0].comparator, cst.Name)
    ):
        return None
    n = mask.comparisons[0].comparator.value  # type: ignore[union-attr]
    bp, bc = m.lp.bound(p.kernel), m.lc.bound(c)
    if n not in bc or divisor not in bp or stride not in bc or cu.code(bc[n]) != cu.code(bp[divisor]):
        return None
    guard = f"{cu.code(_atom(bc[stride]))} == {cu.code(_atom(bp[divisor]))}"
    return _DenseRows(row, k.value, guard)


def _reader_loads(c: cu.Kernel, t_param: str) -> list[cst.Call] | None:
    """C's loads through `t_param`; None unless every use of it is the address of such a load
    (named once, with no other pointer parameter) with at most mask and other."""
    loads, stores = cu.memory_params(c)
    if t_param not in loads or t_param in stores:
        return None
    bindings = cu.Bindings(c.node)
    if t_param in bindings.by_name:
        return None
    found: list[cst.Call] = []
    uses = [n for n in cu.walk(c.node.body) if isinstance(n, cst.Name) and n.value == t_param]
    for call in c.calls("tl.load"):
        ptr = cu.arg(call, "pointer", 0)
        if ptr is None or t_param not in cu.names_in(ptr):
            continue
        named = {a.keyword.value for a in call.args if a.keyword is not None}
        positional = [a for a in call.args if a.keyword is None]
        if len(positional) > 3 or not named <= set(LOAD_ARGS[len(positional):]):
            return None
        if cu.base_params(c, ptr, bindings) != {t_param}:
            return None
        found.append(call)
    in_loads = sum(
        1 for call in found for n in cu.walk(cu.arg(call, "pointer", 0)) if isinstance(n, cst.Name) and n.value == t_param
    )
    if not found or in_loads != len(found) or len(uses) != len(found):
        return None
    return found


def _alias_of(wb: cu.Bindings, name: str, tmp: str) -> bool:
    b = wb.single(name)
    if b is None or b.value is None or not isinstance(b.value, cst.Call):
        return False
    f = b.value.func
    return (
        isinstance(f, cst.Attribute)
        and f.attr.value in ALIAS_METHODS
        and isinstance(f.value, cst.Name)
        and f.value.value == tmp
    )


def _match(lp: cu.Launch, lc: cu.Launch, p: Elementwise, c: cu.Kernel, body: list, inp: RuleInput) -> _Match | None:
    if lp.kernel == lc.kernel or not (inp.wants(lp.kernel) or inp.wants(lc.kernel)):
        return None
    if len(p.stores) != 1 or any(x in p.kernel.constexprs and x != p.block for x in p.kernel.params):
        return None
    bp, bc = lp.bound(p.kernel), lc.bound(c)
    tmp_expr = bp.get(p.stores[0][0])
    if not isinstance(tmp_expr, cst.Name):
        return None
    tmp = tmp_expr.value
    wb = cu.Bindings(lp.reading_scope)
    tmp_b = wb.single(tmp)
    if tmp_b is None or cu.call_name(tmp_b.value) not in ALLOCS:
        return None
    readers = [
        (param, e.value)
        for param, e in bc.items()
        if isinstance(e, cst.Name) and (e.value == tmp or _alias_of(wb, e.value, tmp))
    ]
    if len(readers) != 1:
        return None
    t_param, seen_as = readers[0]
    loads = _reader_loads(c, t_param)
    if loads is None:
        return None
    # each load of tmp becomes a load of every input: no more reads than the write and reads saved
    n_in = len(set(p.direct) | p.other_loads)
    if n_in * len(loads) > n_in + 1 + len(loads):
        return None
    # tmp: P's argument, the alias definition, metadata; the alias: C's argument, metadata
    by_p = {id(a.value) for a in lp.call.args if a.value is tmp_expr}
    by_c = {id(a.value) for a in lc.call.args if isinstance(a.value, cst.Name) and a.value.value == seen_as}
    if seen_as != tmp:
        alias = wb.single(seen_as)
        assert alias is not None and isinstance(alias.value, cst.Call)
        if not metadata_only(lp.reading_scope, wb, seen_as, by_c):
            return None
        by_c = {id(alias.value.func.value)}
    if not metadata_only(lp.reading_scope, wb, tmp, by_p | by_c):
        return None
    # C writes none of P's inputs (the fused C would read what it wrote)
    inputs = {cu.code(bp[q]) for q in set(p.direct) | p.other_loads}
    _, c_stores = cu.memory_params(c)
    if "?" in c_stores or any(s in bc and cu.code(bc[s]) in inputs for s in c_stores):
        return None
    i, j = body.index(lp.statement), body.index(lc.statement)
    moved = {n for a in lp.call.args for n in cu.names_in(a)}
    if not between_ok(body[i + 1:j], moved):
        return None
    return _Match(p, c, lp, lc, tmp, t_param, loads)


def _find(tree: cst.Module, inp: RuleInput) -> _Match | None:
    once, sequences = launch_sequences(tree)
    producers = {k: e for k, kern in once.items() if (e := elementwise(kern))}
    for body, order in sequences:
        for i, lp in enumerate(order):
            if lp.kernel not in producers:
                continue
            for lc in order[i + 1:]:
                m = _match(lp, lc, producers[lp.kernel], once[lc.kernel], body, inp)
                if m is not None:
                    return m
    return None


def _fused(m: _Match) -> tuple[cst.FunctionDef, dict[str, cst.BaseExpression], str] | None:
    """C with its loads of tmp computed from P's inputs; its new parameters and their arguments;
    the dense-rows constexpr's name if a row-broadcast load got one (`_dense_rows`), else ''."""
    value = _value(m.p)
    if value is None:
        return None
    p, c = m.p, m.c
    bp = m.lp.bound(p.kernel)
    taken = set(c.params) | cu.all_names(c.node)
    rename: dict[str, str] = {}
    new_params: dict[str, cst.BaseExpression] = {}
    prefix = p.kernel.name.removesuffix("_kernel")
    for param in p.kernel.params:
        if param in (p.n, p.block, p.stores[0][0]):
            continue
        # named after the producer: `add_x_ptr` says where the pointer came from
        base = f"{prefix}_{param}"
        rename[param] = cu.fresh_name(base, taken) if base in taken else base
        taken.add(rename[param])
        new_params[rename[param]] = bp[param]

    def renamed(node: cst.BaseExpression) -> Any:
        return cu.subst_names(node, lambda n: cst.Name(rename[n.value]) if n.value in rename else None)

    loads = [n for n in cu.walk(value) if cu.is_call(n, "tl.load")]
    holes = {f"__load_{i}__": ld for i, ld in enumerate(loads)}
    flag = ""  # the constexpr that says the rows are dense, once one load needs it
    guard = ""
    # P's names renamed while its loads are holes: C's expressions, filled in after, keep theirs
    shell = renamed(cu.replace_in(value, [(ld, cst.Name(h)) for h, ld in holes.items()]))

    edits = []
    for call in m.loads:
        address = cu.arg(call, "pointer", 0)
        mask = cu.arg(call, "mask", 1)
        other = cu.arg(call, "other", 2)
        offset = _offset(address, m.t_param)
        filled: dict[str, cst.BaseExpression] = {}
        for hole, ld in holes.items():
            q, index = _loaded(ld), _index(ld)
            assert q is not None and index is not None  # checked by _value
            if cu.code(index) == p.offs:  # `q + offs`: C's address with q for tmp
                addr = cu.subst_names(address, lambda n, q=q: cst.Name(rename[q]) if n.value == m.t_param else None)
            elif offset is not None:  # `q + f(offs)`: f at C's element offset
                at = cu.subst_names(renamed(index), lambda n, o=offset: _atom(o) if n.value == p.offs else None)
                dense = _dense_rows(m, index, address, mask)
                if dense is not None and guard in ("", dense.guard):
                    if not flag:
                        flag = cu.fresh_name(f"{prefix.upper()}_DENSE_ROWS", taken)
                        taken.add(flag)
                    guard = dense.guard
                    # `0 * K` keeps the address a block, as the mask is
                    at = cu.expr(f"{dense.row} + 0 * {dense.cols} if {flag} else {cu.code(_atom(at))}")
                addr = cu.expr(f"{rename[q]} + {cu.code(_atom(at))}")
            else:
                return None
            parts = [cu.code(addr)]
            if mask is not None:
                parts.append(f"mask={cu.code(mask)}")
            own_other = cu.arg(ld, "other", 2)
            if own_other is not None:
                parts.append(f"other={cu.code(renamed(own_other))}")
            filled[hole] = cu.expr(f"tl.load({', '.join(parts)})")
        computed = cu.subst_names(shell, lambda n, filled=filled: filled.get(n.value))
        text = f"{cu.receiver(computed)}.to({m.t_param}.dtype.element_ty)"
        if other is not None and mask is not None:
            text = f"tl.where({cu.code(mask)}, {text}, {cu.code(other)})"
        edits.append((call, cu.expr(text)))
    at = constexpr_at(c)
    fn = cu.replace_in(c.node, edits).with_changes(params=cu.insert_params(c, at, list(new_params)))
    if flag:  # passed by the fused launch; any other launch of C keeps the division
        fn = cu.append_constexpr(fn, flag, "False")
        new_params[flag] = cu.expr(guard)
    return fn, new_params, flag


def _fuse(source: str, inp: RuleInput) -> tuple[str, str, str] | None:
    """(the new module, what was fused, the consumer kernel's name)."""
    tree = cu.parse(source)
    if tree is None:
        return None
    m = _find(tree, inp)
    if m is None:
        return None
    done = _fused(m)
    if done is None:
        return None
    fn, new_params, flag = done
    extra = [cu.keyword_arg(k, v) for k, v in new_params.items()]
    # the new parameters go before the constexprs: one passed by position is passed by keyword
    keywords = cu.keywords_from(m.lc, m.c, constexpr_at(m.c))
    call = cu.drop_args(m.lc.call, m.lc.call, set(), extra, keywords)
    new = splice(tree, m.lp, m.lc, call, (m.c.node, fn), m.p.kernel.node)
    step = f"{m.p.kernel.name} into the loads of {m.c.name} through `{m.tmp}`"
    if flag:
        step += (
            f"; its row-broadcast index (offset // {m.p.kernel.name}'s divisor) is the row itself where "
            f"`{cu.code(new_params[flag])}` ({flag}), so the division is left to other calls"
        )
    return new, step, m.c.name


@transform(Family.FUSION)
def fuse_elementwise_prologue(source: str, inp: RuleInput) -> Rewrite | None:
    done = _fuse(source, inp)
    if done is None:
        return None
    new, step, kernel = done
    return Rewrite(
        source=new,
        family=Family.FUSION,
        kernels=(kernel,),
        mechanism=f"fused an element-wise prologue: {step} (its inputs are loaded where the temporary was).",
        effect=(
            "the temporary is neither written nor read back and the element-wise launch is gone: the "
            "consumer reads the producer's inputs instead (for a residual add, two tensors where it read "
            "one), so expect the bytes of one write and one read of the temporary saved per pass the "
            "consumer makes over it."
        ),
    )
