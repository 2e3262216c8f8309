"""FUSION (partials through memory): results kept in global memory between passes over a row
stay in registers. Two transforms: `fuse_row_statistics` (below) and
`forward_stored_intermediates` (its docstring states its own preconditions).

Row statistics: a row kernel that stores per-row statistics and a later row kernel that reads
them back, with the row, become one kernel.

Matches, in one wrapper, a launch of a row kernel A (one program axis, `row = tl.program_id(0)`
bound once; no atomics) whose only stores are top-level `tl.store(S + row, V)` statements into
tensors the wrapper allocated (the statistics: a row max and sum, a mean and rstd), followed by a
launch of a row kernel B on the same grid `(G,)` and launch options that reads those tensors only
as `tl.load(Q + row)` and stores only into other tensors the wrapper allocated, which neither
kernel reads. Both kernels' other constexprs are passed the same values; the statements between
the launches only allocate and read no statistic.

The fused kernel runs A's body with each statistic kept in a register
(`s = V.to(S.dtype.element_ty)`, exactly what the store wrote), then B's body with its parameters
renamed to A's where the launches pass the same argument, each `tl.load(Q + row)` replaced by the
statistic, identical loads of the two halves merged (the row is read once when both hold it in a
block), and A's statistic stores at the end, so the tensors still hold what they held. The fused
launch goes where B's was. A's and B's kernels of a multi-pass shape (row loops) fuse the same
way; the rules proposer's FUSION -> SINGLE_PASS composition then merges their loops.

Correct by construction: program `row` of B read only row `row` of the statistics, which
program `row` of A wrote, and the inputs of both, which neither writes (B's outputs are fresh
tensors neither reads, A writes only the statistics); so running A's then B's work for each row
in one program computes the same values as all of A and then all of B.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

import libcst as cst

from diagnosis.engine.evidence import Family
from diagnosis.engine.proposers.rules import Rewrite, RuleInput, transform
from diagnosis.engine.proposers.rules import cst_util as cu
from diagnosis.engine.proposers.rules.fusion import ALLOCS, between_ok, launch_sequences
from diagnosis.engine.proposers.rules.structural import (
    Spelling,
    add_kwargs,
    bound_names,
    constexprs,
    memory_params,
    param_slot,
    parens,
    read_grid,
    same_code,
)


@dataclass
class _Rows:
    """A row kernel: its row index and, per pointer parameter, its `P + row` loads and stores."""

    kernel: cu.Kernel
    row: str
    row_statement: cst.SimpleStatementLine
    consts: list[str]
    stats: dict[str, tuple[cst.SimpleStatementLine, cst.BaseExpression]]  # S -> (store statement, V)
    row_loads: dict[str, list[cst.Call]]  # Q -> its `tl.load(Q + row)` calls
    stored: set[str]  # every pointer parameter stored to
    loaded: set[str]  # every pointer parameter loaded from
    stores: int  # how many tl.store calls


def _at_row(ptr: cst.BaseExpression | None, row: str) -> str | None:
    """P for an address `P + row`."""
    if (
        isinstance(ptr, cst.BinaryOperation)
        and isinstance(ptr.operator, cst.Add)
        and isinstance(ptr.left, cst.Name)
        and isinstance(ptr.right, cst.Name)
        and ptr.right.value == row
    ):
        return ptr.left.value
    return None


def _rows(kernel: cu.Kernel, sp: Spelling) -> _Rows | None:
    body = cu.body_statements(kernel.node.body)
    pids = [n for n in cu.walk(kernel.node.body) if sp.is_call(n, "tl.program_id", "tl.num_programs")]
    if len(pids) != 1 or kernel.autotuned:
        return None
    found = next(
        (
            (name, st)
            for st in body
            for name, value in cu.simple_assigns(st)
            if value is pids[0] and cu.int_literal(cu.arg(value, "axis", 0)) == 0
        ),
        None,
    )
    if found is None or len(cu.Bindings(kernel.node).by_name.get(found[0], [])) != 1:
        return None
    row, row_statement = found
    assert isinstance(row_statement, cst.SimpleStatementLine)
    params = set(kernel.params)
    stats: dict[str, tuple[cst.SimpleStatementLine, cst.BaseExpression]] = {}
    row_loads: dict[str, list[cst.Call]] = {}
    stored: set[str] = set()
    loaded: set[str] = set()
    stores = 0
    bindings = cu.Bindings(kernel.node)
    for call in (n for n in cu.walk(kernel.node.body) if isinstance(n, cst.Call)):
        name = sp.call(call) or ""
        if name.startswith("tl.atomic_"):
            return None
        ptr = cu.arg(call, "pointer", 0)
        if name == "tl.store":
            stores += 1
            stored |= cu.base_params(kernel, ptr, bindings) if ptr is not None else {"?"}
            base = _at_row(ptr, row)
            line = cu.call_statement(kernel.node.body, call)
            value = cu.arg(call, "value", 1)
            if base in params and line is not None and value is not None and len(call.args) == 2:
                stats[base] = (line, value)
        elif name == "tl.load":
            loaded |= cu.base_params(kernel, ptr, bindings) if ptr is not None else {"?"}
            base = _at_row(ptr, row)
            if base in params and len(call.args) == 1:
                row_loads.setdefault(base, []).append(call)
    return _Rows(kernel, row, row_statement, constexprs(kernel, sp), stats, row_loads, stored, loaded, stores)


@dataclass
class _Match:
    a: _Rows
    b: _Rows
    la: cu.Launch
    lb: cu.Launch
    forwarded: dict[str, str]  # B's parameter Q -> A's parameter S it reads


def _match(a: _Rows, b: _Rows, la: cu.Launch, lb: cu.Launch, body: list, wb: cu.Bindings) -> _Match | None:
    ga, gb = read_grid(la), read_grid(lb)
    if ga is None or gb is None or len(ga.elements) != 1 or not same_code(ga.node, gb.node):
        return None
    options_a = {k: cu.code(v.value) for k, v in la.keywords.items() if k not in a.kernel.params}
    options_b = {k: cu.code(v.value) for k, v in lb.keywords.items() if k not in b.kernel.params}
    if options_a != options_b:
        return None
    ba, bb = la.bound(a.kernel), lb.bound(b.kernel)
    # A stores each statistic once and nothing else
    if a.stored != set(a.stats) or a.stores != len(a.stats) or "?" in a.loaded | b.loaded | b.stored:
        return None

    def tensor(expr: cst.BaseExpression | None) -> str | None:
        """The wrapper's name for a tensor the wrapper allocated, or None."""
        if not isinstance(expr, cst.Name):
            return None
        binding = wb.single(expr.value)
        return expr.value if binding is not None and cu.call_name(binding.value) in ALLOCS else None

    stats: dict[str, str] = {}  # the wrapper's tensor -> A's parameter storing it
    for s in a.stats:
        t = tensor(ba.get(s))
        if t is None:
            return None
        stats[t] = s
    forwarded: dict[str, str] = {}
    for q, calls in b.row_loads.items():
        t = tensor(bb.get(q))
        if t in stats:
            uses = sum(1 for n in cu.walk(b.kernel.node.body) if isinstance(n, cst.Name) and n.value == q)
            if uses != len(calls) or q in b.stored:
                return None
            forwarded[q] = stats[t]
    if not forwarded:
        return None
    # B's outputs: allocated by the wrapper, no statistic, read by neither kernel
    inputs = {cu.code(ba[p]) for p in a.loaded if p in ba} | {cu.code(bb[p]) for p in b.loaded if p in bb}
    for p in b.stored:
        out = tensor(bb.get(p))
        if out is None or out in inputs or out in stats:
            return None
    # every other constexpr of B is one of A's with the same value
    for p in b.consts:
        if not any(same_code(bb.get(p), ba.get(q)) for q in a.consts):
            return None
    i, j = body.index(la.statement), body.index(lb.statement)
    moved = {n for node in la.call.args for n in cu.names_in(node)}
    if not between_ok(body[i + 1 : j], moved | set(stats), set(stats)):
        return None
    return _Match(a, b, la, lb, forwarded)


PURE_CALLS = frozenset({"tl.arange", "tl.zeros", "tl.full", "float", "int"})


class _Values:
    """Value numbering over straight-line statements, in order: a name bound to a pure expression
    stands for that expression (`mask = cols < n` and an inline `cols < n` agree), any other name
    for its current binding; `named` maps a value to the name that holds it now."""

    def __init__(self, sp: Spelling) -> None:
        self.sp = sp
        self.pure: dict[str, cst.BaseExpression] = {}
        self.version: dict[str, int] = {}
        self.named: dict[str, str] = {}

    def _expand(self, expr: cst.BaseExpression) -> cst.BaseExpression:
        def sub(n: cst.Name) -> cst.BaseExpression | None:
            if n.value in self.pure:
                return parens(self.pure[n.value])
            v = self.version.get(n.value)
            return cst.Name(f"{n.value}__v{v}") if v else None

        return cu.subst_names(expr, sub)

    def key(self, expr: cst.BaseExpression | None) -> str | None:
        if expr is None:
            return None
        return ast.unparse(cu.expr_ast(self._expand(expr)))  # parentheses normalized

    def _plain(self, call: cst.Call) -> bool:
        """A call whose result depends on its arguments only: tl.arange, a literal, a cast."""
        cast = isinstance(call.func, cst.Attribute) and call.func.attr.value == "to"
        return cast or self.sp.call(call) in PURE_CALLS

    def is_pure(self, expr: cst.BaseExpression) -> bool:
        return all(self._plain(c) for c in cu.walk(expr) if isinstance(c, cst.Call))

    def is_value(self, expr: cst.BaseExpression) -> bool:
        """A pure expression of at most one load: computing it twice gives the same value."""
        calls = [n for n in cu.walk(expr) if isinstance(n, cst.Call)]
        loads = [c for c in calls if self.sp.is_call(c, "tl.load")]
        return len(loads) <= 1 and all(c in loads or self._plain(c) for c in calls)

    def bind(self, name: str, expr: cst.BaseExpression) -> None:
        value = self.key(expr) if self.is_value(expr) else None
        expanded = self._expand(expr)
        self.clobber(name)
        if self.is_pure(expr):
            self.pure[name] = expanded
        if value is not None:
            self.named.setdefault(value, name)

    def clobber(self, name: str) -> None:
        self.pure.pop(name, None)
        self.version[name] = self.version.get(name, 0) + 1
        self.named = {k: n for k, n in self.named.items() if n != name}


def _bind_all(values: _Values, st: cst.BaseStatement) -> None:
    """Record what a top-level statement binds, in order; anything else it rebinds is unknown."""
    pairs = dict(cu.simple_assigns(st))
    for name in bound_names(st) - set(pairs):
        values.clobber(name)
    for name, value in pairs.items():
        values.bind(name, value)


def _fused(
    m: _Match, taken_module: set[str], sp: Spelling, slot: int
) -> tuple[cst.FunctionDef, list[str], list[cst.BaseExpression]]:
    a, b = m.a, m.b
    ba, bb = m.la.bound(a.kernel), m.lb.bound(b.kernel)
    # A's parameters, locals and the globals it reads (keyword names are no names)
    taken = set(a.kernel.params) | set(cu.Bindings(a.kernel.node).by_name) | cu.names_in(a.kernel.node.body)

    def fresh(base: str) -> str:
        name = cu.fresh_name(base, taken) if base in taken else base
        taken.add(name)
        return name

    # A: each statistic in a register where it was stored, stored again at the end
    values = _Values(sp)
    stat_vars: dict[str, str] = {}
    body: list[cst.BaseStatement] = []
    stores: list[cst.BaseStatement] = []
    by_line = {id(line): (s, v) for s, (line, v) in a.stats.items()}
    for st in cu.body_statements(a.kernel.node.body):
        if id(st) in by_line:
            s, v = by_line[id(st)]
            var = fresh(f"{s.removesuffix('_ptr')}_val")
            stat_vars[s] = var
            st = cu.stmt(f"{var} = {cu.operand(v)}.to({s}.dtype.element_ty)").with_changes(
                leading_lines=st.leading_lines
            )
            stores.append(sp.stmt(f"tl.store({s} + {a.row}, {var})"))
        _bind_all(values, st)
        body.append(st)

    # B: parameters and the row renamed to A's where the launches pass the same argument
    rename: dict[str, str] = {b.row: a.row}
    new_params: list[str] = []
    new_args: list[cst.BaseExpression] = []
    for p in b.kernel.params:
        if p in m.forwarded:
            continue
        shared = next((q for q in a.kernel.params if q in ba and same_code(ba[q], bb.get(p))), None)
        if shared is not None and p not in b.stored:
            rename[p] = shared
            continue
        rename[p] = fresh(p)
        new_params.append(rename[p])
        new_args.append(bb[p])
    # B's statements in order: its statistic loads read the registers; a value A already
    # computed (the same load of the row, the same offsets) is A's name, not a second copy
    loads = [
        (c, cst.Name(stat_vars[m.forwarded[q]]))
        for q, calls in b.row_loads.items()
        if q in m.forwarded
        for c in calls
    ]
    once_b = {n for n, bs in cu.Bindings(b.kernel.node).by_name.items() if len(bs) == 1}
    bound_b = set(cu.Bindings(b.kernel.node).by_name)
    for st in cu.body_statements(b.kernel.node.body):
        if st is b.row_statement:
            continue
        st = cu.replace_in(st, loads)
        pairs = cu.simple_assigns(st)
        if (
            len(pairs) == 1
            and isinstance(st, cst.SimpleStatementLine)
            and len(st.body) == 1
            and pairs[0][0] in once_b
        ):
            name, value = pairs[0]
            value = cu.subst_names(value, lambda n: cst.Name(rename[n.value]) if n.value in rename else None)
            if isinstance(value, cst.Name):
                rename[name] = value.value  # `m = tl.load(max_ptr + row)` is the statistic itself
                continue
            same = values.named.get(values.key(value)) if values.is_value(value) else None
            if same is not None:
                rename[name] = same
                continue
        for n in sorted(bound_b & cu.all_names(st) - set(rename)):
            rename[n] = fresh(n)
        st = cu.subst_names(st, lambda n: cst.Name(rename[n.value]) if n.value in rename else None)
        _bind_all(values, st)
        body.append(st)

    name = cu.fresh_name(
        f"{a.kernel.name.removesuffix('_kernel')}_{b.kernel.name.removesuffix('_kernel')}_kernel",
        taken_module,
    )
    jit = [d for d in a.kernel.node.decorators if sp.canon(d.decorator) == "triton.jit"]
    fn = a.kernel.node.with_changes(
        name=cst.Name(name),
        decorators=jit,
        params=cu.insert_params(a.kernel, slot, new_params),
        body=a.kernel.node.body.with_changes(body=[*body, *stores]),
    )
    return fn, new_params, new_args


def _find(tree: cst.Module, sp: Spelling, inp: RuleInput) -> _Match | None:
    once, sequences = launch_sequences(tree)
    rows = {k: r for k, kern in once.items() if (r := _rows(kern, sp))}
    for body, launched in sequences:
        if not launched:
            continue
        wb = cu.Bindings(launched[0].reading_scope)
        for i, la in enumerate(launched):
            for lb in launched[i + 1 :]:
                if (
                    la.kernel in rows
                    and lb.kernel in rows
                    and la.kernel != lb.kernel
                    and (inp.wants(la.kernel) or inp.wants(lb.kernel))
                ):
                    m = _match(rows[la.kernel], rows[lb.kernel], la, lb, body, wb)
                    if m is not None:
                        return m
    return None


@transform(Family.FUSION)
def fuse_row_statistics(source: str, inp: RuleInput) -> Rewrite | None:
    tree = cu.parse(source)
    sp = Spelling.of(tree) if tree is not None else None
    if tree is None or sp is None:
        return None
    m = _find(tree, sp, inp)
    if m is None:
        return None
    slot = param_slot(m.a.kernel, m.la, m.a.consts)
    fn, new_params, new_args = _fused(m, cu.all_names(tree), sp, slot)
    # the launch: A's arguments with B's new ones, by position where they follow A's
    # positional ones, else by keyword; at B's place
    args = list(m.la.call.args)
    positional = [x for x in args if x.keyword is None]
    keywords = [x for x in args if x.keyword is not None]
    space = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    if len(positional) == slot:
        extra = [cst.Arg(e, comma=space) for e in new_args]
        if positional:
            positional[-1] = positional[-1].with_changes(comma=space)
        listed = positional + extra + keywords
        if not keywords and extra:
            listed[-1] = listed[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        call_args = m.la.call.with_changes(args=listed)
    else:
        call_args = add_kwargs(
            m.la.call, [(p, cu.code(e)) for p, e in zip(new_params, new_args, strict=True)]
        )
    sub = m.la.call.func
    assert isinstance(sub, cst.Subscript) and m.la.statement is not None and m.lb.statement is not None
    call = call_args.with_changes(func=sub.with_changes(value=fn.name))
    edits: list[tuple[cst.CSTNode, Any]] = [
        (m.la.statement, cst.RemoveFromParent()),
        (m.lb.statement, m.lb.statement.with_changes(body=[cst.Expr(call)])),
        (m.a.kernel.node, fn),
        (m.b.kernel.node, cst.RemoveFromParent()),
    ]
    stats = ", ".join(f"{q} <- {s}" for q, s in m.forwarded.items())
    return Rewrite(
        source=cu.emit(cu.replace(tree, edits), tree),
        family=Family.FUSION,
        kernels=(fn.name.value,),
        mechanism=(
            f"{m.a.kernel.name} and {m.b.kernel.name} run as {fn.name.value}: the row statistics ({stats}) stay in "
            "registers between the two halves instead of going through memory and back, loads of the same row "
            "by both halves are merged, and the statistics are still stored at the end."
        ),
        effect=(
            "one launch instead of two, and the row the second kernel re-read (from L2 at best, from DRAM for rows "
            "that do not fit) is read once where both halves hold it in one block; for a softmax or norm written "
            "this way about 1.5x fewer bytes (3 row passes to 2), halved. Not measured on hardware yet."
        ),
    )


# ---------------------------------------------------------------------------------------
# an intermediate stored and loaded back in the same program


@dataclass
class _Store:
    """The last store to one pointer parameter, in straight-line code."""

    ptr: str | None  # its address and mask, value-numbered
    mask: str | None
    at: int  # its index in the rewritten body
    param: str
    read: bool = False  # a load of the parameter came after it (not forwarded)
    var: str | None = None  # the register that holds what it stored, once a load needs it


def _forward(
    kernel: cu.Kernel, body: list[cst.BaseStatement], sp: Spelling
) -> tuple[list[cst.BaseStatement], int] | None:
    """`body` with loads of what the same program stored before replaced by the stored value and
    the stores that a later store overwrites unread removed; None when `body` is not straight-line
    code. Returns the body and how many loads were forwarded."""
    if not all(isinstance(st, cst.SimpleStatementLine) for st in body):
        return None
    bindings = cu.Bindings(kernel.node)
    taken = set(kernel.params) | set(bindings.by_name) | cu.names_in(kernel.node.body)
    values = _Values(sp)
    out: list[list[cst.BaseStatement]] = []
    last: dict[str, _Store] = {}
    rename: dict[str, str] = {}
    forwarded = 0

    def base(ptr: cst.BaseExpression | None) -> str | None:
        params = cu.base_params(kernel, ptr, bindings) if ptr is not None else {"?"}
        return params.pop() if len(params) == 1 and "?" not in params else None

    for st in body:
        assert isinstance(st, cst.SimpleStatementLine)
        st = cu.subst_names(st, lambda n: cst.Name(rename[n.value]) if n.value in rename else None)
        edits: list[tuple[cst.CSTNode, Any]] = []
        for call in (n for n in cu.walk(st) if sp.is_call(n, "tl.load")):
            assert isinstance(call, cst.Call)
            ptr, mask, other = cu.arg(call, "pointer", 0), cu.arg(call, "mask", 1), cu.arg(call, "other", 2)
            b = base(ptr)
            if b is None:
                for r in last.values():
                    r.read = True
                continue
            r = last.get(b)
            if r is None:
                continue
            plain = all(
                a.keyword is None or a.keyword.value in ("pointer", "mask", "other") for a in call.args
            )
            if not (plain and (values.key(ptr), values.key(mask)) == (r.ptr, r.mask)):
                r.read = True
                continue
            if r.var is None:
                r.var = cu.fresh_name(f"{r.param.removesuffix('_ptr')}_val", taken)
                store = out[r.at][-1]
                assert isinstance(store, cst.SimpleStatementLine) and isinstance(store.body[0], cst.Expr)
                call0 = store.body[0].value
                assert isinstance(call0, cst.Call)
                value = cu.arg(call0, "value", 1)
                assert value is not None
                keep = cu.stmt(f"{r.var} = {cu.operand(value)}.to({r.param}.dtype.element_ty)")
                new_store = store.with_changes(
                    body=[
                        cst.Expr(
                            call0.with_changes(
                                args=[
                                    a.with_changes(value=cst.Name(r.var)) if a.value is value else a
                                    for a in call0.args
                                ]
                            )
                        )
                    ],  # fmt: skip
                    leading_lines=[],
                )
                out[r.at] = [keep.with_changes(leading_lines=store.leading_lines), new_store]
            replacement = (
                cst.Name(r.var)
                if other is None
                else sp.expr(f"tl.where({cu.code(mask)}, {r.var}, {cu.code(other)})")
            )
            edits.append((call, replacement))
            forwarded += 1
        st = cu.replace_in(st, edits)
        pairs = cu.simple_assigns(st)
        if len(pairs) == 1 and len(st.body) == 1 and isinstance(pairs[0][1], cst.Name) and edits:
            rename[pairs[0][0]] = pairs[0][1].value  # `e = tl.load(...)` forwarded: e is the register
            values.clobber(pairs[0][0])
            continue
        for name in set(dict(pairs)) | bound_names(st):
            rename.pop(name, None)
        writes = [n for n in cu.walk(st) if isinstance(n, cst.Call) and (
            sp.is_call(n, "tl.store") or (sp.call(n) or "").startswith("tl.atomic_")
        )]  # fmt: skip
        store = (
            writes[0]
            if len(writes) == 1 and isinstance(st.body[0], cst.Expr) and st.body[0].value is writes[0]
            else None
        )
        if writes and (store is None or not sp.is_call(store, "tl.store") or len(st.body) != 1):
            last.clear()  # an atomic or a store inside an expression: anything may have changed
        elif store is not None:
            ptr, mask = cu.arg(store, "pointer", 0), cu.arg(store, "mask", 2)
            b = base(ptr)
            if b is None:
                last.clear()
            else:
                prev = last.get(b)
                key = (values.key(ptr), values.key(mask))
                if prev is not None and not prev.read and (prev.ptr, prev.mask) == key:
                    out[prev.at] = out[prev.at][:-1]  # overwritten unread: keep only its value
                extra = {a.keyword.value for a in store.args if a.keyword is not None} - {
                    "pointer",
                    "value",
                    "mask",
                }
                last[b] = _Store(*key, at=len(out), param=b, read=bool(extra))
        _bind_all(values, st)
        out.append([st])
    return [st for group in out for st in group], forwarded


def _distinct_pointers(kernel: cu.Kernel, launches: list[cu.Launch], sp: Spelling) -> bool:
    """Every launch passes different tensors to the kernel's pointer parameters (a store through
    one cannot change what a load through another reads)."""
    loaded, stored = memory_params(kernel, sp)
    if "?" in loaded | stored:
        return False
    pointers = loaded | stored
    for lc in launches:
        bound = lc.bound(kernel)
        args = [cu.code(bound[p]) for p in pointers if p in bound]
        if len(args) != len(pointers) or len(set(args)) != len(args):
            return False
    return bool(launches)


def _forwarded_kernels(
    tree: cst.Module, sp: Spelling, inp: RuleInput
) -> tuple[list[tuple[cst.CSTNode, Any]], list[str]]:
    kernels = cu.find_kernels(tree)
    launches = cu.find_launches(tree, kernels)
    edits: list[tuple[cst.CSTNode, Any]] = []
    names: list[str] = []
    for kernel in kernels.values():
        if not inp.wants(kernel.name):
            continue
        if not _distinct_pointers(kernel, [lc for lc in launches if lc.kernel == kernel.name], sp):
            continue
        done = _forward(kernel, cu.body_statements(kernel.node.body), sp)
        if done is None or not done[1]:
            continue
        edits.append(
            (kernel.node, kernel.node.with_changes(body=kernel.node.body.with_changes(body=done[0])))
        )
        names.append(kernel.name)
    return edits, names


@transform(Family.FUSION)
def forward_stored_intermediates(source: str, inp: RuleInput) -> Rewrite | None:
    """A kernel that stores an intermediate and loads it back later in the same program keeps
    it in a register: each load at the address and mask of an earlier store by the same
    program, with no store to that tensor in between, reads the stored value (cast to the
    tensor's element type, as the store wrote it; `tl.where(mask, value, other)` where the load
    names `other`), and a store that a later one overwrites at the same address and mask, unread
    in between, goes. Straight-line kernel bodies only (a kernel of row loops gets there through
    SINGLE_PASS first: tier 0 points such a kernel at that family), every launch passing
    distinct tensors to the pointer parameters.

    Correct by construction: within one program the load would have read exactly what that
    store wrote (no other store of the program touched the tensor, and another program writing
    the same addresses would be a race already), and the overwritten store's values are replaced
    lane for lane before anything reads them."""
    tree = cu.parse(source)
    sp = Spelling.of(tree) if tree is not None else None
    if tree is None or sp is None:
        return None
    edits, names = _forwarded_kernels(tree, sp, inp)
    if not edits:
        return None
    return Rewrite(
        source=cu.emit(cu.replace(tree, edits), tree),
        family=Family.FUSION,
        kernels=tuple(names),
        mechanism=(
            f"{', '.join(names)}: the intermediate the kernel stored and loaded back is kept in a register "
            "(each reload reads the stored value), and the store a later one overwrites unread is dropped."
        ),
        effect=(
            "one write and one read of the intermediate per element go (a row pass of 4 memory accesses per "
            "element becomes 2, halved). Not measured on hardware yet."
        ),
    )
