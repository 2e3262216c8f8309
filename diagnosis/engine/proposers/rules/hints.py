"""HINTS: tell the compiler what is true about offsets, so loads and stores vectorize.

Two transforms, tried in this order:

1. `aligned_copy` acts on compiler findings (CG_VECTORIZATION_BLOCKED) whose `blockers` name
   integer kernel arguments that lack divisibility (a row stride of 1000, a mask bound of
   3000: the JIT only specializes divisibility by 16), or, without such findings, on the size
   arguments of loads/stores that some timed case makes divisible by D but not by 16. It adds a copy of the
   kernel, `<name>_aligned`, that starts with `arg = arg // D * D` for each of them (D = 16
   bytes / element size: 4 for fp32, 8 for 16-bit), which the compiler's axis analysis reads
   as divisibility by D, and launches it only when every such argument is divisible by D:

       if stride % 4 == 0 and n_cols % 4 == 0:  kernel_aligned[grid](...)
       else:                                    kernel[grid](...)   # unchanged

   Correct by construction: under the guard `arg // D * D == arg`, so the copy computes
   exactly what the kernel does; other shapes take the original kernel.
   It is also registered for MASKING, for the same finding when only mask bounds block.
2. `contiguity_hints` (findings that name no blocking argument): `offs = pid * BLOCK + tl.arange(0, BLOCK)` gets
   `offs = tl.max_contiguous(tl.multiple_of(offs, BLOCK), BLOCK)` after it, which is always
   true. Triton usually infers this by itself, so the expected gain is small or nil; the
   rationale says so.

A third HINTS transform, `pad_operands.padded_operands`, registered after these two, answers
the findings neither can: a `tl.dot` kernel whose blocking strides and sizes no timed case
makes multiples of D (a GEMM with K = 2500) runs those calls on zero-padded copies.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import libcst as cst

from diagnosis.engine.evidence import Family
from diagnosis.engine.proposers.rules import Rewrite, RuleInput, transform
from diagnosis.engine.proposers.rules import cst_util as cu
from diagnosis.engine.srcmodel.kernels import JIT
from diagnosis.engine.srcmodel.read import decorator_target, dotted

ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int8": 1, "uint8": 1, "int16": 2,
            "int32": 4, "int64": 8, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1}


def _vector_elems(inp: RuleInput) -> int:
    sizes = {
        ITEMSIZE[d.removeprefix("torch.")]
        for c in inp.context.cases
        for s, d in zip(c.shapes, c.dtypes, strict=False)
        if s and d.removeprefix("torch.") in ITEMSIZE
    }
    return 16 // min(sizes) if sizes and min(sizes) <= 16 else 4


def _memory_args(kernel: cu.Kernel) -> set[str]:
    """Integer parameters read by some load/store address or mask."""
    bindings = cu.Bindings(kernel.node)
    out: set[str] = set()
    for call in kernel.calls("tl.load", "tl.store"):
        for a in call.args:
            if a.keyword is None or a.keyword.value in ("pointer", "mask"):
                out |= {n for node in cu.closure(a.value, bindings, set()) for n in cu.names_in(node)}
    return out & (set(kernel.params) - set(kernel.constexprs))


def _blockers_from_cases(kernel: cu.Kernel, launch: cu.Launch, inp: RuleInput, d: int) -> list[str]:
    """Size arguments that some timed case makes divisible by `d` but not by 16 (the JIT's
    own specialization): those launches would vectorize with the guarded copy."""
    timed = [c for c in inp.context.cases if c.timed]
    values = cu.launch_values(launch, kernel, timed)
    used = _memory_args(kernel)
    out = []
    for p in kernel.params:
        if p not in used:
            continue
        vals = [v.get(p) for v in values]
        ints = [v for v in vals if isinstance(v, int) and not isinstance(v, bool)]
        if ints and any(v % 16 and v % d == 0 for v in ints):
            out.append(p)
    return out


def _some_case_gains(kernel: cu.Kernel, launch: cu.Launch, inp: RuleInput, args: list[str], d: int) -> bool:
    """Whether some timed case would take the aligned copy and is not already specialized:
    every argument divisible by `d`, one of them not by 16 (an argument whose value the case
    does not tell counts as both). True when no case is known. Why: a finding from a case
    whose strides are odd (2500 for 01_gemm's 3000 x 5000 x 2500, since tiers 2 and 3 compile
    the case furthest below speed-of-light) names arguments
    no guard of multiples of `d` admits there, while the other cases are divisible by 16
    already: such a copy runs on no case it could speed up."""
    timed = [c for c in inp.context.cases if c.timed]
    if not timed:
        return True
    for values in cu.launch_values(launch, kernel, timed):
        known = {a: v for a in args if isinstance(v := values.get(a), int)}
        if all(v % d == 0 for v in known.values()) and (len(known) < len(args) or any(v % 16 for v in known.values())):
            return True
    return False


def blocking_args(inp: RuleInput, kernel: cu.Kernel) -> list[str]:
    """The kernel's integer arguments that the findings name as blocking vectorization (as an
    offset term or a mask bound), but those a counterfactual recompile showed are not the cause
    (`refuted`: made divisible, the access stayed as narrow)."""
    names: list[str] = []
    refuted = refuted_args(inp, kernel)
    for f in inp.findings:
        if f.kernel and f.kernel != kernel.name:
            continue
        for b in f.args.get("blockers", ()) or ():
            if not isinstance(b, dict) or b.get("role") not in ("offset", "mask"):
                continue
            arg = b.get("arg")
            if arg in kernel.params and arg not in kernel.constexprs and arg not in names and arg not in refuted:
                names.append(arg)
    return names


def refuted_args(inp: RuleInput, kernel: cu.Kernel) -> set[str]:
    """The arguments a counterfactual recompile made divisible without widening the access."""
    return {
        a for f in inp.findings if not f.kernel or f.kernel == kernel.name for a in f.args.get("refuted", ()) or ()
    }


def _simple(node: cst.BaseExpression) -> bool:
    for n in cu.walk(node):
        if isinstance(n, cst.Call):
            name = n.func.attr.value if isinstance(n.func, cst.Attribute) else cu.call_name(n)
            if name not in ("size", "numel", "stride", "len", "int"):
                return False
        elif isinstance(n, (cst.Lambda, cst.NamedExpr)):
            return False
    return True


def _aligned_plan(kernel: cu.Kernel, launches: list[cu.Launch], inp: RuleInput, taken: set[str]) -> dict | None:
    mine = [lc for lc in launches if lc.kernel == kernel.name]
    if len(mine) != 1 or mine[0].statement is None or mine[0].has_star_args:
        return None
    launch = mine[0]
    d = _vector_elems(inp)
    refuted = refuted_args(inp, kernel)
    args = blocking_args(inp, kernel) or [a for a in _blockers_from_cases(kernel, launch, inp, d) if a not in refuted]
    bound = launch.bound(kernel)
    if not args or any(a not in bound or not _simple(bound[a]) for a in args):
        return None
    if not _some_case_gains(kernel, launch, inp, args, d):
        return None
    new_name = cu.fresh_name(f"{kernel.name}_aligned", taken)
    body = cu.body_statements(kernel.node.body)
    # multiples of D by construction: the compiler's divisibility analysis sees `x // D * D`
    prologue = [cu.stmt(f"{a} = {a} // {d} * {d}") for a in args]
    if body:
        prologue[0] = prologue[0].with_changes(
            leading_lines=[cst.EmptyLine(comment=cst.Comment(f"# launched only when these are multiples of {d}"))]
        )
    fn = kernel.node.with_changes(
        name=cst.Name(new_name),
        decorators=kernel.node.decorators,  # an autotuner and heuristics too: the copy computes what the kernel does
        body=kernel.node.body.with_changes(body=prologue + body),
        leading_lines=[cst.EmptyLine(), cst.EmptyLine()],
    )
    return {"kernel": kernel, "launch": launch, "args": args, "d": d, "fn": fn, "new_name": new_name}


def _guard(plan: dict) -> cst.If:
    launch: cu.Launch = plan["launch"]
    bound = launch.bound(plan["kernel"])
    cond = " and ".join(f"{cu.operand(bound[a])} % {plan['d']} == 0" for a in plan["args"])
    sub = launch.call.func
    assert isinstance(sub, cst.Subscript) and launch.statement is not None
    call = launch.call.with_changes(func=sub.with_changes(value=cst.Name(plan["new_name"])))
    node = cst.parse_statement(f"if {cond}:\n    pass\nelse:\n    pass\n")
    assert isinstance(node, cst.If) and isinstance(node.orelse, cst.Else)
    then = launch.statement.with_changes(body=[cst.Expr(call)], leading_lines=[])
    other = launch.statement.with_changes(leading_lines=[])
    return node.with_changes(
        body=node.body.with_changes(body=[then]),
        orelse=node.orelse.with_changes(body=node.orelse.body.with_changes(body=[other])),
        leading_lines=launch.statement.leading_lines,
    )


def _unspecialized(kernel: cu.Kernel) -> tuple[cst.Decorator, cst.Arg, list[str]] | None:
    """The jit decorator, its `do_not_specialize=[...]` argument and the parameter each of the
    list's elements names (by name or by position); None when the kernel has no such list of
    literals."""
    for d in kernel.node.decorators:
        if not isinstance(d.decorator, cst.Call) or dotted(decorator_target(d), kernel.names) != JIT:
            continue
        for a in d.decorator.args:
            if a.keyword is None or a.keyword.value != "do_not_specialize":
                continue
            if not isinstance(a.value, (cst.List, cst.Tuple)):
                return None
            names = []
            for el in a.value.elements:
                v = el.value
                if isinstance(v, cst.SimpleString):
                    names.append(v.evaluated_value)
                elif (i := cu.int_literal(v)) is not None and 0 <= i < len(kernel.params):
                    names.append(kernel.params[i])
                else:
                    return None
            return d, a, names
    return None


def _specialize(d: cst.Decorator, a: cst.Arg, names: list[str], drop: set[str]) -> cst.Decorator:
    assert isinstance(d.decorator, cst.Call) and isinstance(a.value, (cst.List, cst.Tuple))
    keep = [el for el, name in zip(a.value.elements, names, strict=True) if name not in drop]
    if keep:
        # a tuple of one keeps its comma: `("n",)`
        last = cst.Comma() if isinstance(a.value, cst.Tuple) and len(keep) == 1 else cst.MaybeSentinel.DEFAULT
        keep[-1] = keep[-1].with_changes(comma=last)
        args = [x if x is not a else a.with_changes(value=a.value.with_changes(elements=keep)) for x in d.decorator.args]
    else:
        args = [x for x in d.decorator.args if x is not a]
        if args:
            args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    if not args:  # `@triton.jit(do_not_specialize=["T"])` -> `@triton.jit`
        return d.with_changes(decorator=d.decorator.func)
    return d.with_changes(decorator=d.decorator.with_changes(args=args))


def _specialize_rewrite(source: str, inp: RuleInput, family: Family) -> Rewrite | None:
    tree = cu.parse(source)
    if tree is None:
        return None
    edits: list[tuple[cst.CSTNode, Any]] = []
    done: list[tuple[str, list[str]]] = []
    for k in cu.find_kernels(tree).values():
        found = _unspecialized(k) if inp.wants(k.name) else None
        if found is None:
            continue
        d, a, names = found
        drop = [n for n in blocking_args(inp, k) if n in names]
        if drop:
            edits.append((d, _specialize(d, a, names, set(drop))))
            done.append((k.name, drop))
    if not edits:
        return None
    new = cu.replace(tree, edits)
    what = "; ".join(f"{k} specializes {', '.join(f'`{n}`' for n in ns)}" for k, ns in done)
    return Rewrite(
        source=cu.emit(new, tree),
        family=family,
        kernels=tuple(k for k, _ in done),
        mechanism=(
            f"{what}: removed from `do_not_specialize`, so the JIT passes the compiler whether "
            "each value is a multiple of 16 (and equal to 1)."
        ),
        effect=(
            "an argument in `do_not_specialize` reaches the compiler with no known divisibility, so a mask "
            "or an offset built from it limits every access it guards to one element per instruction; "
            "specialized, a launch whose value is a multiple of 16 gets vector accesses (checked at sm_90: "
            "fla's element-wise kernels masked by `offs < T`, ld.global.b16 x4 -> ld.global.v2.b32). The "
            "cost is at most three compiled variants per kernel (a multiple of 16, 1, other), not one per value."
        ),
    )


@transform(Family.HINTS)
def specialized_args(source: str, inp: RuleInput) -> Rewrite | None:
    """The arguments that tier 3 names as blocking vectorization, where the kernel's own
    `do_not_specialize` is what hides their divisibility: take them out of that list. The
    smallest change that gives the compiler the fact, and always correct: specialization
    changes what the compiler may assume, never what the kernel computes."""
    return _specialize_rewrite(source, inp, Family.HINTS)


@transform(Family.MASKING)
def specialized_mask_bounds(source: str, inp: RuleInput) -> Rewrite | None:
    """`specialized_args` for tier 3's vectorization findings blocked only by mask bounds,
    which it files under MASKING."""
    return _specialize_rewrite(source, inp, Family.MASKING)


@transform(Family.HINTS)
def aligned_copy(source: str, inp: RuleInput) -> Rewrite | None:
    tree = cu.parse(source)
    if tree is None:
        return None
    kernels = cu.find_kernels(tree)
    launches = cu.find_launches(tree, kernels)
    taken = cu.all_names(tree)
    plans = [p for k in kernels.values() if inp.wants(k.name) and (p := _aligned_plan(k, launches, inp, taken))]
    if not plans:
        return None
    edits: list[tuple[cst.CSTNode, Any]] = []
    for p in plans:
        edits.append((p["kernel"].node, cst.FlattenSentinel([p["kernel"].node, p["fn"]])))
        edits.append((p["launch"].statement, _guard(p)))
    new = cu.replace(tree, edits)
    desc = "; ".join(
        f"{p['new_name']} assumes {', '.join(p['args'])} divisible by {p['d']} and runs only when they are" for p in plans
    )
    return Rewrite(
        source=cu.emit(new, tree),
        family=Family.HINTS,
        kernels=tuple(p["kernel"].name for p in plans),
        mechanism=f"{desc}; other shapes keep the original kernel.",
        effect=(
            "the JIT only specializes integer arguments divisible by 16, so strides or sizes such as 1000 "
            "leave loads scalar; divisibility by 16 bytes' worth of elements lets them become 128-bit vector "
            "accesses (checked: ld.global.b32 -> ld.global.v4.b32 at sm_90). Whether that is faster depends on "
            "the kernel: on an H200 a row softmax / log-softmax over rows of 1000 measured no gain (the memory "
            "system already coalesced the scalar accesses); the gate decides. Other shapes are unchanged."
        ),
    )


@transform(Family.MASKING)
def aligned_copy_for_mask_bounds(source: str, inp: RuleInput) -> Rewrite | None:
    """Tier 3 files a vectorization blocked only by mask bounds (`cols < n_cols`, n_cols = 1000)
    under MASKING: the same guarded copy makes the bound a known multiple. Only with such
    findings: other MASKING findings (a missing mask) are not this transform's business."""
    if not any(f.args.get("blockers") for f in inp.findings):
        return None
    tree = cu.parse(source)
    if tree is None:
        return None
    kernels = cu.find_kernels(tree)
    if not any(blocking_args(inp, k) for k in kernels.values() if inp.wants(k.name)):
        return None
    rw = aligned_copy(source, inp)
    return None if rw is None else dataclasses.replace(rw, family=Family.MASKING)


def offsets_statements(
    kernel: cu.Kernel, cast: bool = False
) -> list[tuple[cst.SimpleStatementLine, str, str]]:
    """`offs = pid * BLOCK + tl.arange(0, BLOCK)` statements: (statement, name, BLOCK); with
    `cast`, also where `pid` is the program id cast (`tl.program_id(0).to(tl.int64)`)."""
    axes = kernel.program_axes()
    out = []
    bindings = cu.Bindings(kernel.node)
    for st in cu.body_statements(kernel.node.body):
        pairs = cu.simple_assigns(st)
        if len(pairs) != 1 or not isinstance(st, cst.SimpleStatementLine) or len(st.body) != 1:
            continue
        name, v = pairs[0]
        if not (isinstance(v, cst.BinaryOperation) and isinstance(v.operator, cst.Add)):
            continue
        ar, prod = (v.right, v.left) if cu.is_call(v.right, "tl.arange") else (v.left, v.right)
        if not cu.is_call(ar, "tl.arange") or len(ar.args) != 2 or cu.int_literal(ar.args[0].value) != 0:
            continue
        block = ar.args[1].value
        if not (isinstance(block, cst.Name) and block.value in kernel.constexprs):
            continue
        if isinstance(prod, cst.Name):  # `block_start = pid * BLOCK` first, as the tutorials write it
            b = bindings.single(prod.value)
            prod = b.value if b is not None and b.value is not None else prod
        if not (isinstance(prod, cst.BinaryOperation) and isinstance(prod.operator, cst.Multiply)):
            continue
        sides = (prod.left, prod.right)
        pid_ok = any(_program_id(x, axes, bindings, cast) for x in sides)
        if pid_ok and block.value in {cu.code(x) for x in sides}:
            out.append((st, name, block.value))
    return out


def _program_id(node: cst.BaseExpression, axes: dict[str, int], bindings: cu.Bindings, cast: bool) -> bool:
    """`tl.program_id(axis)`, directly or through a name bound to it; with `cast`, also it cast
    (`.to(tl.int64)`, as liger and fla write it), through a name bound once."""
    if isinstance(node, cst.Name):
        if node.value in axes:
            return True
        b = bindings.single(node.value) if cast else None
        node = b.value if b is not None and b.value is not None else node
    if cast and isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
        node = node.func.value if node.func.attr.value == "to" else node
    return cu.is_call(node, "tl.program_id")


@transform(Family.HINTS)
def contiguity_hints(source: str, inp: RuleInput) -> Rewrite | None:
    tree = cu.parse(source)
    if tree is None:
        return None
    edits: list[tuple[cst.CSTNode, Any]] = []
    done: list[str] = []
    for k in cu.find_kernels(tree).values():
        # a finding that names arguments lacking divisibility says what blocks the access;
        # an always-true contiguity hint cannot change it (H200, ac4c78b: proposed for
        # 01-04's GEMMs on such findings, it measured 0.995-1.000x each time)
        if not inp.wants(k.name) or blocking_args(inp, k):
            continue
        hinted = {cu.code(c.args[0].value) for c in k.calls("tl.multiple_of", "tl.max_contiguous") if c.args}
        # plain program ids only: a hint the compiler infers anyway measured no gain (above), and
        # each candidate costs a round
        found = [f for f in offsets_statements(k) if f[1] not in hinted]
        for st, name, block in found:
            hint = cu.stmt(f"{name} = tl.max_contiguous(tl.multiple_of({name}, {block}), {block})")
            edits.append((st, cst.FlattenSentinel([st, hint])))
        if found:
            done.append(k.name)
    if not edits:
        return None
    new = cu.replace(tree, edits)
    return Rewrite(
        source=cu.emit(new, tree),
        family=Family.HINTS,
        kernels=tuple(done),
        mechanism=(
            f"{', '.join(done)}: `pid * BLOCK + tl.arange(0, BLOCK)` offsets are declared multiples of BLOCK and "
            "contiguous in runs of BLOCK (always true)."
        ),
        effect=(
            "states facts the compiler usually infers itself from this very expression, so expect no measurable "
            "gain in most kernels; it matters only where the offsets reach the access through operations that "
            "hide their contiguity. Vectorization still needs aligned pointers and divisible size arguments."
        ),
    )
