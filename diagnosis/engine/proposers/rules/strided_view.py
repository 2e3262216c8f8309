"""COALESCE (a permuted copy read in place): a kernel that reads a transposed copy the wrapper
made for it reads the wrapper's view through its strides instead, and the copy is skipped.

flag_gems' reductions and gathers along a dimension that is not the last (`dim_compress`,
`inp.permute(order).contiguous()`) and code written the same way by hand (`x.t().contiguous()`,
`x.transpose(0, 1).contiguous()`) make torch write a whole permuted copy of the input, so that
the kernel can address it as a contiguous matrix, `ptr + rows * N + cols`. When tiers 2 and 3
find that access strided (its tile walks the copy's rows, `N` elements apart), the copy has put
the input's contiguous axis where the kernel walks across it: flag_gems' index_select along
dim 0 reads one 4-byte element per sector of a transposed copy, at 0.03x of torch (the H200
wild table, 2026-12-07). Read through the view's strides, the same tile walks the input along
its contiguous axis, and the copy (a full read and write of the tensor) is gone.

The rewrite, for one kernel parameter `p` the kernel only loads from:

    kernel: p + A * N + B           ->  p + A * p_stride_row + B * p_stride_col
    launch: t_stride_row, t_stride_col = t.stride() if t.ndim == 2 else (N, 1)
            kernel[grid](..., t_stride_row, t_stride_col)
    wrapper (written out):  t = x.t().contiguous()
                        ->  t = x.t()
                            if t.ndim != 2:  # a 2-D view is read in place, through its strides
                                t = t.contiguous()
    wrapper (a helper's copy): t = f(x, dim)  ->  t = f(x, dim, contiguous=x.ndim != 2), and f
        returns its view uncopied when asked (`contiguous=True` by default: its other callers
        are unchanged)

Correct by construction where the kernel read the copy as a matrix of rows of `N`: a contiguous
copy `c` of the view `v` holds `v[i, j]` at `i * N + j` with N its last size, and `v` holds it
at `i * v.stride(0) + j * v.stride(1)`; a tensor of any other rank keeps its copy and the kernel
gets (N, 1), so it computes the address it computed before. That `N` is the copy's row length
is the kernel's own assumption (flag_gems' gather and the test kernels bound their columns by
it); the gate checks every case.

Preconditions (refused otherwise): tiers 2 or 3 found one of the loads strided (a COALESCE
finding on its line); the kernel is launched once, without `*args`; `p` is loaded from and
never stored to, and every address of it is `p + ...` whose terms are one product `A * N` by a
runtime parameter `N`, with A varying across the program's lanes (a row index the same for
every lane would make the view's lanes walk a column), and at least one more term, through
local names read nowhere else; the launch passes a local name for `p` whose bindings are all
statements of its function's top level before the launch, the last one `V.contiguous()` (V a
`permute`, `transpose`, `t`, `T`, `mT`, `movedim`, `moveaxis`, `swapaxes` or `swapdims` of a
tensor, as a method or a `torch.` function) or a call of a module-level function whose one
return, its last statement, is such a copy of one of its parameters; after that binding the
wrapper reads the name only for its shape, dtype, device or strides (the copy was private to
the kernel: `torch.empty_like(t)` would take the view's strides).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import libcst as cst

from diagnosis.engine.evidence import Family, Finding, Tier
from diagnosis.engine.proposers.rules import Rewrite, RuleInput, transform
from diagnosis.engine.proposers.rules import cst_util as cu
from diagnosis.engine.proposers.rules.structural import (
    Spelling,
    add_kwargs,
    constexprs,
    memory_params,
    param_slot,
    parens,
)
from diagnosis.engine.srcmodel import model_of_tree
from diagnosis.engine.srcmodel.copies import permuted_view

# what a wrapper may still read of the name once it holds the view rather than a copy
READS = frozenset({"shape", "ndim", "dtype", "device", "numel", "size", "dim", "stride", "element_size"})


@dataclass(frozen=True)
class _Reads:
    """How a kernel addresses the copy: its loads, the parameter N its rows are multiplied by,
    the products `A * N` and the other terms of the addresses."""

    loads: list[cst.Call]
    n: str
    products: list[cst.BinaryOperation]
    others: list[cst.BaseExpression]


@dataclass
class _Plan:
    kernel: cu.Kernel
    param: str  # the kernel parameter that read the copy
    tensor: str  # the wrapper's name for it
    how: str  # "written out" or the helper's name
    edits: list[tuple[cst.CSTNode, Any]] = field(default_factory=list)


@transform(Family.COALESCE)
def read_permuted_view(source: str, inp: RuleInput) -> Rewrite | None:
    tree = cu.parse(source)
    sp = Spelling.of(tree) if tree is not None else None
    strided = _strided_lines(inp.findings)
    if tree is None or sp is None or not strided:
        return None
    model = model_of_tree(tree)
    plans: list[_Plan] = []
    taken: set[int] = set()  # helpers already edited: one edit each
    for kernel in model.kernels.values():
        if not inp.wants(kernel.name) or kernel.name not in strided:
            continue
        launches = model.launches_of(kernel.name)
        if len(launches) != 1 or launches[0].has_star_args:
            continue
        loads, stores = memory_params(kernel, sp)
        if "?" in stores:
            continue
        for param in sorted(loads - stores - {"?"}):
            plan = _plan(model, sp, kernel, launches[0], param, strided[kernel.name], taken)
            if plan is not None:
                plans.append(plan)
                break
    if not plans:
        return None
    edits = [e for p in plans for e in p.edits]
    what = "; ".join(f"{p.kernel.name} reads `{p.tensor}` ({p.how})" for p in plans)
    return Rewrite(
        source=cu.emit(cu.replace(tree, edits), tree),
        family=Family.COALESCE,
        kernels=tuple(p.kernel.name for p in plans),
        mechanism=(
            f"{what} through the strides of the wrapper's permuted view instead of a contiguous copy "
            "of it: the address `rows * N + cols` becomes `rows * stride_row + cols * stride_col`, the "
            "launch passes the view's strides, and the copy is made only for a tensor that is not 2-D."
        ),
        effect=(
            "torch's permuted copy (a read and a write of the whole tensor, before the kernel runs) is "
            "skipped for 2-D inputs, and the access tiers 2 and 3 found strided walks the input along its "
            "contiguous axis: where the copy was a transpose, the tile's rows are the input's adjacent "
            "elements, one sector serving eight fp32 lanes instead of one. Worth most where the kernel "
            "gathered or walked across the copy's rows (flag_gems' index_select along dim 0 on the H100: "
            "2.7-27x per case, 6.6x over the module in the loop's round); an output the wrapper permutes "
            "back is still copied."
        ),
    )


def _strided_lines(findings: Sequence[Finding]) -> dict[str, set[int]]:
    """Kernel -> the lines of its accesses that tiers 2 and 3 found strided."""
    out: dict[str, set[int]] = {}
    for f in findings:
        if f.family is Family.COALESCE and f.kernel and f.lines and f.tier >= Tier.IR:
            out.setdefault(f.kernel, set()).update(f.lines)
    return out


def _plan(  # noqa: PLR0913 - one place that reads every precondition
    model: Any,
    sp: Spelling,
    kernel: cu.Kernel,
    launch: cu.Launch,
    param: str,
    lines: set[int],
    taken: set[int],
) -> _Plan | None:
    arg = launch.bound(kernel).get(param)
    if not isinstance(arg, cst.Name) or launch.statement is None:
        return None
    tensor = arg.value
    scope = launch.reading_scope
    top = cu.body_statements(scope.body)
    at = next((i for i, st in enumerate(top) if cu.holds(st, launch.call)), None)
    binds = cu.Bindings(scope).by_name.get(tensor, [])
    tops = [next((i for i, st in enumerate(top) if st is b.statement), None) for b in binds]
    if at is None or not binds or None in tops or any(i >= at for i in tops):  # type: ignore[operator]
        return None
    last = max(range(len(binds)), key=lambda i: tops[i])  # type: ignore[arg-type,return-value]
    binding, where = binds[last], tops[last]
    assert where is not None
    if binding.value is None or binding.unpack is not None:
        return None
    if not _reads_only_shapes(top[where + 1 :], tensor, arg):
        return None
    reads = _addresses(kernel, sp, param)
    if reads is None or not any(model.position(call)[0] in lines for call in reads.loads):
        return None
    n_arg = launch.bound(kernel).get(reads.n)
    if n_arg is None:
        return None
    slot = param_slot(kernel, launch, constexprs(kernel, sp))
    if any(p.default is not None for p in kernel.node.params.params[:slot]):
        return None
    k_taken = cu.all_names(kernel.node)
    stem = param.removesuffix("_ptr")
    row = cu.fresh_name(f"{stem}_stride_row", k_taken)
    col = cu.fresh_name(f"{stem}_stride_col", k_taken | {row})
    copy = _copy_edit(model, binding.value, binding.statement, tensor, taken)
    if copy is None:
        return None
    how, wrapper_edits = copy
    kernel_edits = [(mul, _restrided(mul, reads.n, row)) for mul in reads.products]
    kernel_edits += [(b, cst.BinaryOperation(parens(b), cst.Multiply(), cst.Name(col))) for b in reads.others]
    new_kernel = cu.replace_in(kernel.node, kernel_edits).with_changes(
        params=cu.insert_params(kernel, slot, [row, col])
    )
    # the strides, bound just before the launch: the view's where it is 2-D, else the copy's,
    # rows of N as the kernel reads them (a 1-D tensor has no stride(-2))
    w_taken = cu.all_names(scope)
    w_row = cu.fresh_name(f"{tensor}_stride_row", w_taken)
    w_col = cu.fresh_name(f"{tensor}_stride_col", w_taken | {w_row})
    strides = cu.stmt(
        f"{w_row}, {w_col} = {tensor}.stride() if {tensor}.ndim == 2 else ({cu.code(n_arg)}, 1)\n"
    )
    statement = launch.statement
    call = _with_strides(launch, slot, [(row, w_row), (col, w_col)])
    launched = cu.replace_in(statement, [(launch.call, call)]).with_changes(leading_lines=[])
    strides = strides.with_changes(leading_lines=statement.leading_lines)
    edits = [
        (kernel.node, new_kernel),
        (statement, cst.FlattenSentinel([strides, launched])),
        *wrapper_edits,
    ]
    return _Plan(kernel, param, tensor, how, edits)


def _with_strides(launch: cu.Launch, slot: int, strides: list[tuple[str, str]]) -> cst.Call:
    """The launch with the strides passed where the new parameters are: by position right after
    the positional arguments when those fill every parameter before them, else by keyword."""
    positional = launch.positional
    if not positional or len(positional) != slot:
        return add_kwargs(launch.call, strides)
    last = positional[-1]
    sep = (
        last.comma
        if isinstance(last.comma, cst.Comma)
        else cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    )
    new = [cst.Arg(cu.expr(value), comma=sep) for _, value in strides]
    new[-1] = new[-1].with_changes(comma=last.comma)
    args = list(launch.call.args)
    at = next(i for i, a in enumerate(args) if a is last)
    return launch.call.with_changes(args=[*args[:at], last.with_changes(comma=sep), *new, *args[at + 1 :]])


def _reads_only_shapes(statements: Sequence[cst.BaseStatement], name: str, arg: cst.Name) -> bool:
    """Whether `statements` read `name` only as the launch's argument `arg` or for its shape,
    dtype, device or strides, and never bind it again."""
    allowed = {id(arg)}
    names: list[cst.Name] = []
    for st in statements:
        for n in cu.walk(st):
            if isinstance(n, cst.Attribute):
                if isinstance(n.value, cst.Name) and n.value.value == name and n.attr.value in READS:
                    allowed.add(id(n.value))
                allowed.add(id(n.attr))
            elif isinstance(n, cst.Arg) and n.keyword is not None:
                allowed.add(id(n.keyword))
            elif isinstance(n, cst.Name) and n.value == name:
                names.append(n)
    return all(id(n) in allowed for n in names)


def _addresses(kernel: cu.Kernel, sp: Spelling, param: str) -> _Reads | None:
    """How the kernel reads `param` where every address of it is `param + A * N + B...`; None
    otherwise."""
    bindings = cu.Bindings(kernel.node)
    reads = cu.name_loads(kernel.node.body, bindings.target_ids)
    runtime = set(kernel.params) - set(kernel.constexprs)
    loads: list[cst.Call] = []
    products: list[cst.BinaryOperation] = []
    others: list[cst.BaseExpression] = []
    row_params: set[str] = set()
    for call in (n for n in cu.walk(kernel.node.body) if isinstance(n, cst.Call)):
        name = sp.call(call) or ""
        ptr = cu.arg(call, "pointer", 0)
        if ptr is None or not (name in ("tl.load", "tl.store") or name.startswith("tl.atomic_")):
            continue
        if param not in cu.base_params(kernel, ptr, bindings):
            continue
        if name != "tl.load":
            return None
        loads.append(call)
        leaves: list[cst.BaseExpression] = []
        _flatten(ptr, bindings, reads, leaves)
        base = [x for x in leaves if isinstance(x, cst.Name) and x.value == param]
        muls = [(x, n) for x in leaves if (n := _row_factor(x, runtime - {param})) is not None]
        rest = [x for x in leaves if not any(x is b for b in base) and not any(x is m for m, _ in muls)]
        if len(base) != 1 or len(muls) != 1 or not rest or not _spans_lanes(muls[0][0], sp, bindings):
            return None
        if any(param in cu.all_names(x) for x in rest) or param in cu.all_names(muls[0][0]):
            return None
        row_params.add(muls[0][1])
        products.append(muls[0][0])
        others.extend(rest)
    # the parameter is read in these addresses only (not passed to a helper, not compared)
    if not loads or len(row_params) != 1 or reads[param] != len(loads):
        return None
    return _Reads(loads, row_params.pop(), products, others)


def _spans_lanes(node: cst.CSTNode, sp: Spelling, bindings: cu.Bindings, depth: int = 0) -> bool:
    """Whether `node` varies across a program's lanes (a `tl.arange` reaches it): a row index the
    same for every lane would make the view's lanes walk its strided axis, where the copy's
    were adjacent."""
    for n in cu.walk(node):
        if sp.is_call(n, "tl.arange"):
            return True
        if isinstance(n, cst.Name) and depth < 8 and (b := bindings.single(n.value)) is not None:
            if b.value is not None and _spans_lanes(b.value, sp, bindings, depth + 1):
                return True
    return False


def _flatten(
    node: cst.BaseExpression, bindings: cu.Bindings, reads: Counter[str], leaves: list[cst.BaseExpression]
) -> None:
    """The terms of an address's `+` chain, through the local names it alone reads (bound once,
    to a sum or to the pointer itself): their definitions are what the rewrite edits."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add) and not node.lpar:
        _flatten(node.left, bindings, reads, leaves)
        _flatten(node.right, bindings, reads, leaves)
        return
    if isinstance(node, cst.Name) and reads[node.value] == 1:
        b = bindings.single(node.value)
        value = b.value if b is not None and b.unpack is None else None
        if isinstance(value, cst.BinaryOperation | cst.Name):
            _flatten(value, bindings, reads, leaves)
            return
    leaves.append(node)


def _row_factor(node: cst.BaseExpression, runtime: set[str]) -> str | None:
    """N where `node` is `A * N` or `N * A` with N a runtime parameter (one of the two sides)."""
    if not isinstance(node, cst.BinaryOperation) or not isinstance(node.operator, cst.Multiply):
        return None
    sides = [s.value for s in (node.left, node.right) if isinstance(s, cst.Name) and s.value in runtime]
    return sides[0] if len(sides) == 1 else None


def _restrided(mul: cst.BinaryOperation, n: str, stride: str) -> cst.BinaryOperation:
    if isinstance(mul.right, cst.Name) and mul.right.value == n:
        return mul.with_changes(right=cst.Name(stride))
    return mul.with_changes(left=cst.Name(stride))


def _copy_edit(
    model: Any, value: cst.BaseExpression, statement: cst.CSTNode, tensor: str, taken: set[int]
) -> tuple[str, list[tuple[cst.CSTNode, Any]]] | None:
    """How the wrapper's copy is skipped for a 2-D view: ("written out", edits) for a copy
    written at the binding, (the helper's name, edits) for one a module-level helper returns."""
    found = permuted_view(value)
    if found is not None:
        view = found[0]
        if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
            return None
        keep = statement.with_changes(body=[statement.body[0].with_changes(value=view)])
        guard = cu.stmt(
            f"if {tensor}.ndim != 2:  # a 2-D view is read in place, through its strides\n"
            f"    {tensor} = {tensor}.contiguous()\n"
        )
        return "written out", [(statement, cst.FlattenSentinel([keep, guard]))]
    if not (isinstance(value, cst.Call) and isinstance(value.func, cst.Name)):
        return None
    helper = model.calls.functions.get(value.func.value)
    if helper is None or id(helper) in taken or helper.name.value in model.kernels:
        return None
    return _helper_edit(helper, value, taken)


def _helper_edit(
    helper: cst.FunctionDef, call: cst.Call, taken: set[int]
) -> tuple[str, list[tuple[cst.CSTNode, Any]]] | None:
    params = helper.params
    if (
        params.star_arg is not cst.MaybeSentinel.DEFAULT
        or params.star_kwarg is not None
        or params.kwonly_params
    ):
        return None
    returns = [n for n in cu.walk(helper.body) if isinstance(n, cst.Return)]
    body = cu.body_statements(helper.body)
    last = body[-1] if body else None
    if len(returns) != 1 or not isinstance(last, cst.SimpleStatementLine) or last.body[0] is not returns[0]:
        return None
    found = permuted_view(returns[0].value) if returns[0].value is not None else None
    if found is None or not isinstance(found[1], cst.Name):
        return None
    view = found[0]
    names = [p.name.value for p in params.params]
    receiver = found[1].value
    if receiver not in names or cu.Bindings(helper).by_name.get(receiver):
        return None
    positional = [a for a in call.args if a.keyword is None and not a.star]
    if any(a.star for a in call.args) or len(call.args) > len(names):
        return None
    index = names.index(receiver)
    bound = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == receiver), None)
    bound = bound if bound is not None else positional[index].value if index < len(positional) else None
    if not isinstance(bound, cst.Name | cst.Attribute):
        return None
    taken_names = set(names) | set(cu.Bindings(helper).by_name)
    flag = cu.fresh_name("contiguous", taken_names)
    local = cu.fresh_name("view", taken_names | {flag})
    tight = cst.AssignEqual(
        whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")
    )
    new_params = params.with_changes(
        params=[
            *params.params[:-1],
            params.params[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
            cst.Param(cst.Name(flag), default=cst.Name("True"), equal=tight, comma=params.params[-1].comma),
        ]
    )
    tail = [
        last.with_changes(body=[cst.Assign([cst.AssignTarget(cst.Name(local))], view)]),
        cu.stmt(f"return {local}.contiguous() if {flag} else {local}\n"),
    ]
    new_helper = cu.replace_in(helper, [(last, cst.FlattenSentinel(tail))]).with_changes(params=new_params)
    taken.add(id(helper))
    new_call = add_kwargs(call, [(flag, f"{cu.code(bound)}.ndim != 2")])
    return helper.name.value, [(helper, new_helper), (call, new_call)]
