"""HINTS (padded operands): a `tl.dot` kernel launched on tensors whose row strides or sizes
are not multiples of 16 runs, for those calls, on zero-padded copies whose are.

Why: Triton specializes an integer argument on its divisibility by 16 and nothing finer. A
GEMM whose K is 2500 has a row stride of 2500 and a K-mask bound of 2500, so its operand loads
compile to one element a thread (16-bit for fp16) and the K loop gets no cp.async pipelining:
on the H200 01_gemm's 3000 x 5000 x 2500 case ran at 11 %SOL against 65 % for 4096^3, and tier
3's counterfactual showed the loads becoming async copies only with the strides *and* the mask
bounds K and N divisible by 16 (strides alone left them 16-bit). A hint cannot make that true;
a padded copy can.

The rewrite, for every launch of such a kernel (the autotuned alias of LAUNCH_CONFIG too):

    if any(v % 16 for v in (M, N, K)) or any(s % 16 for t in (a, b, c) for s in t.stride()[:-1]):
        M_p16, N_p16, K_p16 = (M + 15) // 16 * 16, ...
        a_p16, b_p16 = pad16(a), pad16(b)          # zeros around a copy: last two dims padded
        c_p16 = pad16(c, fill=False)
        kernel[grid](a_p16, b_p16, c_p16, M_p16, N_p16, K_p16, a_p16.stride(0), ...)
        c.copy_(c_p16[:c.shape[0], :c.shape[1]])
    else:
        kernel[grid](a, b, c, M, N, K, ...)        # unchanged

Correct because every padded size is one of the last two dimensions of a tensor the kernel
reads or writes (checked on the wrapper: `M, K = a.shape`, `N = b.shape[-1]`, with the
tensor's rank from the strides it passes), every such dimension is padded in every tensor,
the padding of inputs is zero (a padded K adds products of zeros; padded rows and columns of
the output are computed from zeros and never copied back), and kernels with reductions over a
tile (a softmax over N would sum the padding) are left alone. What it costs: a copy of each
operand and of the output per padded call, about 3 bytes moved per element of each; aligned
calls take the original launch.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from diagnosis.engine.evidence import Family
from diagnosis.engine.proposers.rules import Rewrite, RuleInput, transform
from diagnosis.engine.proposers.rules import cst_util as cu
from diagnosis.engine.proposers.rules.hints import blocking_args

PAD = 16  # the divisibility Triton's JIT specializes integer arguments on

HELPER = '''

def {name}(t, fill=True):
    """`t` in a tensor whose last two dimensions (the one of a vector) are padded to multiples
    of {pad} elements: zeros around a copy of `t`, or uninitialised for an output (fill=False)."""
    lead = max(0, t.dim() - 2)
    shape = [*t.shape[:lead], *((s + {pad} - 1) // {pad} * {pad} for s in t.shape[lead:])]
    if not fill:
        return t.new_empty(shape)
    out = t.new_zeros(shape)
    out[tuple(slice(0, s) for s in t.shape)] = t
    return out
'''


@dataclass
class _Plan:
    launch: cu.Launch
    tensors: list[str]  # wrapper names of the tensors the kernel reads or writes
    outputs: list[str]  # of those, the ones it writes
    sizes: list[str]  # wrapper names of the sizes to pad


def _on_tensor(node: cst.CSTNode | None, attr: str) -> str | None:
    """`t` when `node` is `t.<attr>` for a plain name `t`."""
    if isinstance(node, cst.Attribute) and node.attr.value == attr and isinstance(node.value, cst.Name):
        return node.value.value
    return None


def _stride_of(e: cst.BaseExpression | None) -> tuple[str, int] | None:
    """(t, i) when `e` is `t.stride(i)`."""
    if isinstance(e, cst.Call) and (t := _on_tensor(e.func, "stride")) and len(e.args) == 1:
        i = cu.int_literal(e.args[0].value)
        return None if i is None else (t, i)
    return None


def _ranks(bound: dict[str, cst.BaseExpression]) -> dict[str, int]:
    """Tensor name -> rank, from the `t.stride(i)` arguments the launch passes (largest i + 1)."""
    ranks: dict[str, int] = {}
    for t, i in filter(None, map(_stride_of, bound.values())):
        ranks[t] = max(ranks.get(t, 0), i + 1)
    return ranks


def _shape_dim(value: cst.BaseExpression, index: int | None, ranks: dict[str, int]) -> tuple[str, int] | None:
    """(tensor, position from the end) when `value` (or its element `index`) is one of `t.shape`."""
    if index is not None:  # `a, b = t.shape`: element `index` of a tuple unpacking
        t = _on_tensor(value, "shape")
        return None if t is None else (t, index)
    if (
        isinstance(value, cst.Subscript)
        and (tensor := _on_tensor(value.value, "shape"))
        and len(value.slice) == 1
        and isinstance(value.slice[0].slice, cst.Index)
    ):
        node = value.slice[0].slice.value
        neg = isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus)
        i = cu.int_literal(node.expression if neg else node)  # type: ignore[attr-defined]
        if i is None:
            return None
        if neg:
            return tensor, -i
        return (tensor, i - ranks[tensor]) if tensor in ranks else None
    return None


def _padded_size(name: str, wb: cu.Bindings, ranks: dict[str, int], tensors: set[str]) -> bool:
    """Whether every binding of `name` in the wrapper is one of the last two dimensions of a
    tensor the kernel reads or writes."""
    bindings = wb.by_name.get(name, [])
    if not bindings or name in wb.params:
        return False
    for b in bindings:
        if b.value is not None:
            dim = _shape_dim(b.value, None, ranks)
        elif b.unpack is not None and b.index is not None:  # `m, k = t.shape`
            rank = _unpack_len(b.statement)
            dim = _shape_dim(b.unpack, b.index - rank, ranks) if rank else None
        else:
            dim = None
        if dim is None or dim[0] not in tensors or dim[1] not in (-1, -2):
            return False
    return True


def _unpack_len(statement: cst.CSTNode) -> int | None:
    for small in getattr(statement, "body", ()):
        if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Tuple):
            return len(small.targets[0].target.elements)
    return None


def _plan(kernel: cu.Kernel, launch: cu.Launch, blockers: list[str]) -> _Plan | None:
    if launch.statement is None or launch.has_star_args:
        return None
    bound = launch.bound(kernel)
    loads, stores = cu.memory_params(kernel)
    if "?" in loads or "?" in stores or loads & stores:
        return None
    pointers = loads | stores
    if any(not isinstance(bound.get(p), cst.Name) for p in pointers):
        return None
    tensors = [bound[p].value for p in kernel.params if p in pointers]  # type: ignore[union-attr]
    outputs = [bound[p].value for p in kernel.params if p in stores]  # type: ignore[union-attr]
    ranks = _ranks(bound)
    wb = cu.Bindings(launch.reading_scope)
    sizes: list[str] = []
    for p in kernel.params:
        e = bound.get(p)
        if p in pointers or p in kernel.constexprs or not isinstance(e, cst.Name) or e.value in sizes:
            continue
        if _padded_size(e.value, wb, ranks, set(tensors)):
            sizes.append(e.value)
    # every blocking argument must become a multiple of 16: a padded size, or a stride of a
    # padded tensor
    for a in blockers:
        e = bound.get(a)
        stride = _stride_of(e)
        if not (isinstance(e, cst.Name) and e.value in sizes) and not (stride and stride[0] in tensors):
            return None
    if not sizes or not outputs:
        return None
    return _Plan(launch, tensors, outputs, sizes)


def _plans(tree: cst.Module, kernel: cu.Kernel, blockers: list[str]) -> list[_Plan]:
    """A plan for every launch of `kernel` (its autotuned aliases' too), or none at all."""
    if not blockers:
        return []
    plans = []
    for launch in cu.find_launches(tree, [kernel.name, *kernel.handles]):
        plan = _plan(kernel, launch, blockers)
        if plan is None:
            return []
        plans.append(plan)
    return plans


def _guarded(plan: _Plan, helper: str, fresh: dict[str, str]) -> cst.If:
    st = plan.launch.statement
    assert st is not None
    sizes = ", ".join(plan.sizes)
    tensors = ", ".join(plan.tensors)
    one = "," if len(plan.sizes) == 1 else ""
    one_t = "," if len(plan.tensors) == 1 else ""
    test = cu.expr(f"any(v % {PAD} for v in ({sizes}{one})) or any(s % {PAD} for t in ({tensors}{one_t}) for s in t.stride()[:-1])")
    lines = [f"{', '.join(fresh[s] for s in plan.sizes)} = " + ", ".join(f"({s} + {PAD - 1}) // {PAD} * {PAD}" for s in plan.sizes)]
    lines += [
        f"{fresh[t]} = {helper}({t}{', fill=False' if t in plan.outputs else ''})" for t in plan.tensors
    ]
    padded = cu.subst_names(st, lambda n: cst.Name(fresh[n.value]) if n.value in fresh else None)
    back = [cu.stmt(f"{t}.copy_({fresh[t]}[tuple(slice(0, s) for s in {t}.shape)])") for t in plan.outputs]
    first = cu.stmt(lines[0]).with_changes(
        leading_lines=[
            cst.EmptyLine(
                comment=cst.Comment(f"# sizes and row strides not multiples of {PAD}: run on zero-padded copies")
            )
        ]
    )
    body = [first, *(cu.stmt(x) for x in lines[1:]), padded.with_changes(leading_lines=[]), *back]
    return cst.If(
        test=test,
        body=cst.IndentedBlock(body=body),
        orelse=cst.Else(body=cst.IndentedBlock(body=[st.with_changes(leading_lines=[])])),
        leading_lines=st.leading_lines,
    )


@transform(Family.HINTS)
def padded_operands(source: str, inp: RuleInput) -> Rewrite | None:
    tree = cu.parse(source)
    if tree is None:
        return None
    kernels = cu.find_kernels(tree)
    taken = cu.all_names(tree)
    for kernel in kernels.values():
        if not inp.wants(kernel.name) or not kernel.has_dot or cu.has_reductions(kernel):
            continue
        plans = _plans(tree, kernel, blocking_args(inp, kernel))
        if not plans:
            continue
        helper = cu.fresh_name("pad16", taken)
        fresh: dict[str, str] = {}
        for p in plans:
            for n in (*p.sizes, *p.tensors):
                if n not in fresh:
                    fresh[n] = cu.fresh_name(f"{n}_p16", taken | set(fresh.values()))
        edits = [(p.launch.statement, _guarded(p, helper, fresh)) for p in plans]
        new = cu.replace(tree, edits)
        # the helper goes right after the kernel's definition
        body = list(new.body)
        at = next(i for i, st in enumerate(body) if isinstance(st, cst.FunctionDef) and st.name.value == kernel.name)
        helper_def = [
            st.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()])
            for st in cst.parse_module(HELPER.format(name=helper, pad=PAD)).body
        ]
        body[at + 1:at + 1] = helper_def
        plan0 = plans[0]
        return Rewrite(
            source=cu.emit(new.with_changes(body=body), tree),
            family=Family.HINTS,
            kernels=(kernel.name,),
            mechanism=(
                f"{kernel.name}: calls whose sizes ({', '.join(plan0.sizes)}) or row strides are not multiples of "
                f"{PAD} run on zero-padded copies of {', '.join(plan0.tensors)} (last two dimensions padded to "
                f"{PAD}), so the JIT specializes every stride and mask bound and the operand loads vectorize; "
                "the output is copied back. Aligned calls are unchanged."
            ),
            effect=(
                "on the padded calls the operand loads go from one element a thread to 16-byte vectors and the K "
                "loop can be software-pipelined (cp.async), which tier 3's counterfactual showed for these "
                "arguments; the copies cost about three bytes moved per element of each tensor, small against "
                "a GEMM's run time but not nothing for a small problem."
            ),
        )
    return None
