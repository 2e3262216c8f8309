"""FUSION: two element-wise launches joined by a temporary become one kernel.

Matches, in one wrapper, a launch of an element-wise kernel K1 that stores one value to a
temporary tensor `tmp` (allocated with torch.empty/empty_like/zeros/zeros_like and read by
nothing else), followed by a launch of an element-wise kernel K2 that loads `tmp` at the same
offsets, with the same grid, the same size argument and the same block. Element-wise means: a
straight-line body with `offs = pid * BLOCK + tl.arange(0, BLOCK)`, `mask = offs < n`, loads and
stores at `ptr + offs` under `mask` (other loads are allowed from tensors the pair does not
write) and no loops, reductions, atomics or dots.

The fused kernel runs K1's body, keeps its value in registers as
`t = value.to(out_ptr.dtype.element_ty)` (exactly what the store would have written), then K2's
body with its load of `tmp` replaced by `t`; inputs both kernels read are passed once and
loaded once. The launch goes where K2's was; the temporary stays allocated (its pointer gives
the cast its dtype) but is never written or read. Chains (add -> relu -> mul) fuse pairwise until
no pair is left.

Correct by construction: each output element depends only on the inputs at the same offset,
so running K1 then K2 per element is the same as K1 everywhere then K2 everywhere, given that
the pair's outputs are not among its inputs (checked) and the statements between the launches
only allocate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import libcst as cst

from diagnosis.engine.evidence import Family
from diagnosis.engine.proposers.rules import Rewrite, RuleInput, tidy, transform
from diagnosis.engine.proposers.rules import cst_util as cu
from diagnosis.engine.proposers.rules.tidy import merge_loads

ALLOCS = frozenset({"torch.empty", "torch.empty_like", "torch.zeros", "torch.zeros_like"})
BETWEEN_CALLS = ALLOCS | {"torch.ones", "torch.ones_like", "torch.full", "triton.cdiv", "len", "int", "min", "max"}
BETWEEN_METHODS = frozenset({"numel", "size", "stride", "dim", "reshape", "view", "contiguous"})
FORBIDDEN = cu.REDUCTIONS | {"tl.dot", "tl.debug_barrier", "tl.device_print", "tl.device_assert"}
MAX_ROUNDS = 4


@dataclass
class Elementwise:
    kernel: cu.Kernel
    pid: str
    offs: str
    mask: str
    n: str
    block: str
    defs: list[cst.SimpleStatementLine]  # the pid, offsets and mask statements
    direct: dict[str, list[cst.Call]] = field(default_factory=dict)  # param -> its `ptr + offs` loads
    other_loads: set[str] = field(default_factory=set)  # params read through other addresses
    stores: list[tuple[str, cst.SimpleStatementLine, cst.BaseExpression]] = field(default_factory=list)


def elementwise(kernel: cu.Kernel) -> Elementwise | None:
    body = cu.body_statements(kernel.node.body)
    if not body or not all(isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1 for s in body):
        return None
    for n in cu.walk(kernel.node.body):
        name = cu.call_name(n) if isinstance(n, cst.Call) else None
        if name in FORBIDDEN or (name or "").startswith("tl.atomic_") or cu.is_call(n, "tl.num_programs"):
            return None
    axes = kernel.program_axes()
    if list(axes.values()) != [0] or len(kernel.calls("tl.program_id")) != 1:
        return None
    pid = next(iter(axes))
    offs = mask = n = block = None
    defs: list[cst.SimpleStatementLine] = []
    for s in body:
        for name, v in cu.simple_assigns(s):
            if name == pid:
                defs.append(s)
            elif offs is None and isinstance(v, cst.BinaryOperation) and isinstance(v.operator, cst.Add):
                ar = v.right if cu.is_call(v.right, "tl.arange") else v.left
                prod = v.left if ar is v.right else v.right
                if cu.is_call(ar, "tl.arange") and isinstance(prod, cst.BinaryOperation) and isinstance(prod.operator, cst.Multiply):
                    sides = {cu.code(prod.left), cu.code(prod.right)}
                    b = cu.code(ar.args[-1].value)
                    if pid in sides and b in sides and b in kernel.constexprs:
                        offs, block = name, b
                        defs.append(s)
            elif offs is not None and mask is None and isinstance(v, cst.Comparison) and len(v.comparisons) == 1:
                comp = v.comparisons[0]
                if (
                    cu.code(v.left) == offs
                    and isinstance(comp.operator, cst.LessThan)
                    and isinstance(comp.comparator, cst.Name)
                    and comp.comparator.value in kernel.params
                ):
                    mask, n = name, comp.comparator.value
                    defs.append(s)
    if None in (offs, mask, n, block) or len(defs) != 3:
        return None
    bindings = cu.Bindings(kernel.node)
    if any(len(bindings.by_name.get(x, [])) != 1 for x in (pid, offs, mask)) or n in bindings.by_name:
        return None
    info = Elementwise(kernel, pid, offs, mask, n, block, defs)
    params = set(kernel.params) - set(kernel.constexprs)
    for s in body:
        small = s.body[0]
        for call in (c for c in cu.walk(small) if cu.is_call(c, "tl.load", "tl.store")):
            ptr = cu.arg(call, "pointer", 0)
            m = cu.arg(call, "mask", 2 if cu.call_name(call) == "tl.store" else 1)
            direct = (
                isinstance(ptr, cst.BinaryOperation)
                and isinstance(ptr.operator, cst.Add)
                and isinstance(ptr.left, cst.Name)
                and ptr.left.value in params
                and cu.code(ptr.right) == offs
                and isinstance(m, cst.Name)
                and m.value == mask
            )
            if cu.call_name(call) == "tl.store":
                if not direct or not (isinstance(small, cst.Expr) and small.value is call):
                    return None
                info.stores.append((ptr.left.value, s, cu.arg(call, "value", 1)))
            elif direct:
                info.direct.setdefault(ptr.left.value, []).append(call)
            else:
                info.other_loads |= cu.names_in(ptr) & params
    stored = {p for p, _, _ in info.stores}
    if not stored or stored & (set(info.direct) | info.other_loads):
        return None
    # pointers are only ever used as `ptr + offs` in loads and stores
    for p in params - {n}:
        if p in bindings.by_name:
            return None
    return info


@dataclass
class _Pair:
    a: Elementwise
    b: Elementwise
    la: cu.Launch
    lb: cu.Launch
    tmp: str
    q1: str  # K1's stored parameter (the temporary)
    t2: str  # K2's parameter that loads the temporary


def between_ok(stmts: list[cst.BaseStatement], kept: set[str], unread: set[str] = frozenset()) -> bool:  # type: ignore[assignment]
    """The statements between two launches only allocate or read metadata, rebind none of
    `kept` (what the moved launch reads) and read none of `unread`."""
    for s in stmts:
        if not isinstance(s, cst.SimpleStatementLine):
            return False
        for small in s.body:
            if not isinstance(small, cst.Assign):
                return False
            targets = {t.value for at in small.targets for t in cu.walk(at.target) if isinstance(t, cst.Name)}
            if targets & kept or unread & cu.names_in(small.value):
                return False
            for c in (n for n in cu.walk(small.value) if isinstance(n, cst.Call)):
                name = cu.call_name(c)
                method = c.func.attr.value if isinstance(c.func, cst.Attribute) else None
                if name not in BETWEEN_CALLS and method not in BETWEEN_METHODS:
                    return False
    return True


def constexpr_at(kernel: cu.Kernel) -> int:
    """Where the kernel's constexpr parameters begin: new runtime parameters go there."""
    return next((i for i, x in enumerate(kernel.params) if x in kernel.constexprs), len(kernel.params))


def splice(
    tree: cst.Module,
    gone: cu.Launch,
    kept: cu.Launch,
    call: cst.Call,
    kernel: tuple[cst.FunctionDef, cst.FunctionDef],
    unused: cst.FunctionDef,
) -> str:
    """The module with the launch `gone` removed, `kept`'s call replaced by `call`, one kernel
    definition replaced (old, new) and the kernel that no longer runs removed."""
    assert gone.statement is not None
    edits: list[tuple[cst.CSTNode, Any]] = [
        (gone.statement, cst.RemoveFromParent()),
        (kept.call, call),
        kernel,
        (unused, cst.RemoveFromParent()),
    ]
    new = cu.replace(tree, edits)
    # locals that fed only the launches' arguments the fused launch no longer passes (a size)
    fused = cu.dotted(call.func.value) if isinstance(call.func, cst.Subscript) else None
    fed = cu.names_in(gone.call) | cu.names_in(kept.call)
    new = cu.remove_dead_locals(new, {fused} if fused else set(), fed)
    return cu.emit(new, tree)


def launch_sequences(tree: cst.Module) -> tuple[dict[str, cu.Kernel], list[tuple[list, list[cu.Launch]]]]:
    """The kernels launched from exactly one place and not autotuned, and for each wrapper
    its statements and, in order, those kernels' launches that are whole statements of it."""
    kernels = cu.find_kernels(tree)
    launches = cu.find_launches(tree, kernels)
    count: dict[str, int] = {}
    for lc in launches:
        count[lc.kernel] = count.get(lc.kernel, 0) + 1
    once = {k: kern for k, kern in kernels.items() if count.get(k) == 1 and not kern.autotuned}
    by_fn: dict[int, list[cu.Launch]] = {}
    for lc in launches:
        by_fn.setdefault(id(lc.function), []).append(lc)
    sequences = []
    for group in by_fn.values():
        body = cu.body_statements(group[0].function.body)
        order = [lc for lc in group if lc.statement in body and lc.kernel in once and not lc.has_star_args]
        order.sort(key=lambda lc: body.index(lc.statement))
        sequences.append((body, order))
    return once, sequences


def _find_pair(tree: cst.Module, inp: RuleInput) -> _Pair | None:
    once, sequences = launch_sequences(tree)
    infos = {k: e for k, kern in once.items() if (e := elementwise(kern))}
    for body, launched in sequences:
        order = [lc for lc in launched if lc.kernel in infos]
        if len(order) < 2:
            continue
        fn = order[0].function
        wb = cu.Bindings(fn)
        reads = cu.name_loads(fn.body, wb.target_ids)
        for i, la in enumerate(order):
            for lb in order[i + 1:]:
                pair = _match(la, lb, infos, body, wb, reads, inp)
                if pair is not None:
                    return pair
    return None


def _match(la, lb, infos, body, wb, reads, inp) -> _Pair | None:
    a, b = infos[la.kernel], infos[lb.kernel]
    if la.kernel == lb.kernel or not (inp.wants(la.kernel) or inp.wants(lb.kernel)):
        return None
    if len(a.stores) != 1:
        return None
    q1 = a.stores[0][0]
    ba, bb = la.bound(a.kernel), lb.bound(b.kernel)
    tmp_expr = ba.get(q1)
    if not isinstance(tmp_expr, cst.Name):
        return None
    tmp = tmp_expr.value
    loads_tmp = [p for p, e in bb.items() if isinstance(e, cst.Name) and e.value == tmp]
    if len(loads_tmp) != 1 or loads_tmp[0] not in b.direct:
        return None
    t2 = loads_tmp[0]
    binding = wb.single(tmp)
    if binding is None or cu.call_name(binding.value) not in ALLOCS or reads[tmp] != 2:
        return None
    if cu.code(ba[a.n]) != cu.code(bb[b.n]) or cu.code(la.grid) != cu.code(lb.grid):
        return None
    # the same block (by position or keyword, or the same default) and the same launch options
    block_a, block_b = ba.get(a.block, a.kernel.defaults.get(a.block)), bb.get(b.block, b.kernel.defaults.get(b.block))
    if block_a is None or block_b is None or cu.code(block_a) != cu.code(block_b):
        return None
    if {k: cu.code(v.value) for k, v in la.options(a.kernel).items()} != {
        k: cu.code(v.value) for k, v in lb.options(b.kernel).items()
    }:
        return None
    if any(p in a.kernel.constexprs and p != a.block for p in a.kernel.params) or any(
        p in b.kernel.constexprs and p != b.block for p in b.kernel.params
    ):
        return None
    # the pair's outputs are none of its inputs; every pointer argument is a plain name
    stored_b = {cu.code(bb[p]) for p, _, _ in b.stores}
    loaded = {cu.code(ba[p]) for p in set(a.direct) | a.other_loads} | {
        cu.code(bb[p]) for p in (set(b.direct) | b.other_loads) - {t2}
    }
    if stored_b & (loaded | {tmp}) or any(not isinstance(bb[p], cst.Name) for p, _, _ in b.stores):
        return None
    i, j = body.index(la.statement), body.index(lb.statement)
    l1_names = {n for node in la.call.args for n in cu.names_in(node)}
    if not between_ok(body[i + 1:j], l1_names | {tmp}, {tmp}):
        return None
    return _Pair(a, b, la, lb, tmp, q1, t2)


def _fused(pair: _Pair, taken_module: set[str]) -> tuple[cst.FunctionDef, list[str], list[cst.BaseExpression], str]:
    a, b = pair.a, pair.b
    ba, bb = pair.la.bound(a.kernel), pair.lb.bound(b.kernel)
    taken = set(a.kernel.params) | cu.all_names(a.kernel.node)
    # K2's names in the fused kernel
    rename = {b.pid: a.pid, b.offs: a.offs, b.mask: a.mask, b.n: a.n, b.block: a.block}
    k1_inputs = {cu.code(ba[p]): p for p in a.kernel.params if p in ba and p != pair.q1 and p not in a.kernel.constexprs}
    new_params: list[str] = []
    new_args: list[cst.BaseExpression] = []
    for p in b.kernel.params:
        if p in rename or p == pair.t2:
            continue
        shared = k1_inputs.get(cu.code(bb[p]))
        if shared is not None and p not in {s for s, _, _ in b.stores}:
            rename[p] = shared
            continue
        rename[p] = cu.fresh_name(p, taken) if p in taken else p
        taken.add(rename[p])
        new_params.append(rename[p])
        new_args.append(bb[p])
    local_names = {n for n in cu.all_names(b.kernel.node.body)} - set(b.kernel.params)
    bound_locals = set(cu.Bindings(b.kernel.node).by_name)
    for n in sorted(local_names & bound_locals):
        if n not in rename:
            rename[n] = cu.fresh_name(n, taken) if n in taken else n
            taken.add(rename[n])
    t_var = cu.fresh_name(f"{pair.tmp}_vals", taken)

    store_stmt, value = a.stores[0][1], a.stores[0][2]
    keep = cu.stmt(f"{t_var} = {cu.receiver(value)}.to({pair.q1}.dtype.element_ty)")
    body_a = [keep.with_changes(leading_lines=store_stmt.leading_lines) if s is store_stmt else s
              for s in cu.body_statements(a.kernel.node.body)]
    body_b = [s for s in cu.body_statements(b.kernel.node.body) if s not in b.defs]
    load_edits = [(c, cst.Name(t_var)) for c in b.direct[pair.t2]]
    body_b = [cu.replace_in(s, load_edits) for s in body_b]
    body_b = [cu.subst_names(s, lambda n: cst.Name(rename[n.value]) if n.value in rename else None) for s in body_b]
    merged, _ = merge_loads(body_a + body_b, taken | {t_var})
    params = set(a.kernel.params) | set(new_params)
    merged = tidy.propagate_copies(tidy.drop_repeats(merged), params, [a.kernel.node, b.kernel.node])

    name = cu.fresh_name(
        f"{a.kernel.name.removesuffix('_kernel')}_{b.kernel.name.removesuffix('_kernel')}_kernel", taken_module
    )
    first_constexpr = next(i for i, p in enumerate(a.kernel.params) if p in a.kernel.constexprs)
    jit = a.kernel.jit_decorators(keep_heuristics=False)
    fn = a.kernel.node.with_changes(
        name=cst.Name(name),
        decorators=jit,
        params=cu.insert_params(a.kernel, first_constexpr, new_params),
        body=a.kernel.node.body.with_changes(body=merged),
    )
    return fn, new_params, new_args, name


def _fuse_once(source: str, inp: RuleInput) -> tuple[str, str] | None:
    tree = cu.parse(source)
    if tree is None:
        return None
    pair = _find_pair(tree, inp)
    if pair is None:
        return None
    fn, new_params, new_args, name = _fused(pair, cu.all_names(tree))
    # the launch: K1's arguments, then K2's new ones, at K2's place
    args = list(pair.la.call.args)
    positional = [x for x in args if x.keyword is None]
    keywords = [x for x in args if x.keyword is not None]
    extra = [cst.Arg(e, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))) for e in new_args]
    # K2's parameters go before K1's constexprs: a block K1 gets by position stays after them
    at = constexpr_at(pair.a.kernel)
    head, tail = positional[:at], positional[at:]
    if head:
        head[-1] = head[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    new_args_list = head + extra + tail + keywords
    if not keywords and not tail and extra:
        new_args_list[-1] = new_args_list[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    sub = pair.la.call.func
    assert isinstance(sub, cst.Subscript)
    call = pair.la.call.with_changes(func=sub.with_changes(value=cst.Name(name)), args=new_args_list)
    assert pair.lb.statement is not None and pair.la.statement is not None
    launch = pair.lb.statement.with_changes(body=[cst.Expr(call)])
    edits: list[tuple[cst.CSTNode, Any]] = [
        (pair.la.statement, cst.RemoveFromParent()),
        (pair.lb.statement, launch),
        (pair.a.kernel.node, fn),
        (pair.b.kernel.node, cst.RemoveFromParent()),
    ]
    new = cu.replace(tree, edits)
    return cu.emit(new, tree), f"{pair.a.kernel.name} -> {pair.b.kernel.name} through `{pair.tmp}` as {name}"


@transform(Family.FUSION)
def fuse_elementwise_pairs(source: str, inp: RuleInput) -> Rewrite | None:
    steps: list[str] = []
    current = source
    for _ in range(MAX_ROUNDS):
        done = _fuse_once(current, inp)
        if done is None:
            break
        current, step = done
        steps.append(step)
        inp = RuleInput(inp.findings, inp.context, frozenset())  # later pairs involve the fused kernel
    if not steps:
        return None
    names = tuple(s.split(" as ")[-1] for s in steps)
    return Rewrite(
        source=current,
        family=Family.FUSION,
        kernels=names,
        mechanism="fused element-wise launches: " + "; ".join(steps) + " (the intermediate stays in registers).",
        effect=(
            "each fused temporary is neither written to nor read back from memory and one launch goes per "
            f"fusion; for memory-bound element-wise chains expect roughly the ratio of bytes moved ({len(steps)} "
            "temporary write+read pair(s) removed), plus the saved launch overhead on small inputs."
        ),
    )
