"""A module written out the way the rules read it: launches' `**d` as keywords, kernels jitted
by a call as decorated ones. `apply_family` reads a module in this form only when no transform
applies to it as written, so a rewrite that never needed it keeps the module's own spelling.

**A launch's `**d` of a local dict literal.** liger's selective log-softmax launches its kernel as

    kwargs = {"BLOCK_N": 2048, "num_stages": 4, "num_warps": 1}
    _selective_log_softmax_kernel[(B, L)](logits, ..., N, **kwargs)

The dict passes a block and two launch options, which a rule that reads or rebuilds a launch's
arguments must see, so every such rule refuses the launch (`Launch.hides_args`,
`has_star_args`). Written out, the launch passes `BLOCK_N=2048, num_stages=4, num_warps=1`
itself and the dict is gone: the same call. The dict is written out only where nothing can tell
the difference: it is bound once, by a literal of string keys, in the statement block that holds
the launch and before it, and read nowhere but in the one `**`; no key is a keyword the launch
already passes; each value calls only what has no effect (`cst_util.PureCalls`) and reads no
name that a statement between the two binds again, so it is the same value at the launch.

The same holds for a launch's `*t` of a local tuple literal (sglang's `strides = (req.stride(0),
pos.stride(0), floor_arg.stride(0))` before `k[grid](..., *strides, ...)`): written out, the
launch passes the tuple's elements, one argument each, where the `*t` stood. A tuple that the
`*` of several launches read (sglang passes `*strides` to two kernels) stays until each of them
is written out.

A `*` written out must not follow a keyword or a `**` in the call: Python binds it ahead of
them, and its elements written there would no longer parse.

**A launch's `*x.stride()`.** sglang and many hand-written wrappers pass a tensor's strides
(or its sizes) by unpacking them:

    _apply_learned_sink_kernel[grid](query, sink_key, ..., num_tokens, *query.stride(), ...)

A rule cannot tell which parameters such an argument binds, so it refuses the launch. Written
out, the launch passes `query.stride(0), query.stride(1), query.stride(2)`: the same values to
the same parameters. The rank comes from the cases: the tensor, a name, must have the same
number of dimensions on every case the module is given (`*x.shape` and `*x.size()` alike).

**A kernel jitted by a call.** unsloth defines its kernels as plain functions and rebinds them:

    def _cross_entropy_forward(...): ...
    _cross_entropy_forward = triton.jit(_cross_entropy_forward)
    _cross_entropy_forward = triton.heuristics({...})(_cross_entropy_forward)

The source model reads the calls as the kernel's decorator stack (`Kernel.wrapped_by`), but a
rule that adds a decorator (an autotune above the jit) or copies the kernel with its decorators
would write it wrong, so the rules leave such a kernel alone. Written out, the calls are its
decorators, `@triton.heuristics({...})` over `@triton.jit`, in the order the statements applied
them, and the statements are gone: the same object under the same name.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import libcst as cst

from diagnosis.engine.proposers.base import CaseShape
from diagnosis.engine.proposers.rules import cst_util as cu
from diagnosis.engine.srcmodel import Launch, TensorValue, model_of_tree, read


def written_out(
    source: str, kernels: Collection[str] | None = None, cases: Sequence[CaseShape] = ()
) -> str | None:
    """`source` with its kernels jitted by calls decorated, its launches' `**d` written as
    keywords and their `*x.stride()` as one argument a dimension (given `cases`, which tell the
    rank), where any can be (of `kernels` and their launches only, where given); None where
    none can."""
    out = source
    for step in (_jit_calls, _launch_dicts, _launch_stars):
        tree = cu.parse(out)
        written = step(tree, kernels, cases) if tree is not None else None
        out = written if written is not None else out
    return out if out != source else None


def _jit_calls(
    tree: cst.Module, kernels: Collection[str] | None, cases: Sequence[CaseShape] = ()
) -> str | None:
    """The module with each kernel the model reads from `f = triton.jit(f)` statements
    decorated instead; None where it has none."""
    edits: list[tuple[cst.CSTNode, object]] = []
    for kernel in model_of_tree(tree).kernels.values():
        if not kernel.wrapped_by or (kernels is not None and kernel.name not in kernels):
            continue
        decorators: list[cst.Decorator] = []
        for statement in reversed(kernel.wrapped_by):  # the last statement wraps outermost
            value = statement.body[0].value  # `w1(...)(w2(f))`: `w1(...)` over `w2`
            while isinstance(value, cst.Call):
                decorators.append(cst.Decorator(value.func))
                value = value.args[0].value
        edits.append(
            (kernel.node, kernel.node.with_changes(decorators=[*decorators, *kernel.node.decorators]))
        )
        edits += [(statement, cst.RemoveFromParent()) for statement in kernel.wrapped_by]
    return cu.emit(cu.replace(tree, edits), tree) if edits else None


def _launch_dicts(
    tree: cst.Module, kernels: Collection[str] | None, cases: Sequence[CaseShape] = ()
) -> str | None:
    """The module with each launch's `**d` (and `*t`) of a local literal that can be written out
    so; None where there is none."""
    pure = cu.PureCalls(tree)
    edits: list[tuple[cst.CSTNode, object]] = []
    # a tuple several launches unpack (sglang's `*strides` into two kernels) goes once every
    # one of them is written out; until then it stays for the others
    left: dict[int, tuple[cst.SimpleStatementLine, int]] = {}
    for launch in model_of_tree(tree).launches:
        if kernels is not None and launch.kernel not in kernels:
            continue
        args: list[cst.Arg] = []
        written = False
        for arg in launch.call.args:
            plan = _plan(launch, arg, pure) if arg.star == "**" or _positional_star(launch, arg) else None
            if plan is None:
                args.append(arg)
                continue
            assign, elements, readers = plan
            statement, count = left.get(id(assign), (assign, readers))
            left[id(assign)] = (statement, count - 1)
            new = [cu.keyword_arg(key, value) if key else cst.Arg(value) for key, value in elements]
            args += _spliced(launch.call.args, arg, new)
            written = True
        if written:
            edits.append((launch.call, launch.call.with_changes(args=args)))
    edits += [(statement, cst.RemoveFromParent()) for statement, count in left.values() if count == 0]
    return cu.emit(cu.replace(tree, edits), tree) if edits else None


def _launch_stars(
    tree: cst.Module, kernels: Collection[str] | None, cases: Sequence[CaseShape]
) -> str | None:
    """The module with each launch's `*x.stride()`, `*x.shape` and `*x.size()` written out one
    argument a dimension; None where there is none (or no case tells a rank)."""
    if not cases:
        return None
    edits: list[tuple[cst.CSTNode, object]] = []
    for launch in model_of_tree(tree).launches:
        if (kernels is not None and launch.kernel not in kernels) or not any(
            a.star == "*" for a in launch.call.args
        ):
            continue
        envs = launch.model.launch_envs(launch, cases)
        args: list[cst.Arg] = []
        written = False
        for arg in launch.call.args:
            elements = _unpacked(arg, envs) if _positional_star(launch, arg) else None
            args += (
                [arg] if elements is None else _spliced(launch.call.args, arg, [cst.Arg(e) for e in elements])
            )
            written |= elements is not None
        if written:
            edits.append((launch.call, launch.call.with_changes(args=args)))
    return cu.emit(cu.replace(tree, edits), tree) if edits else None


def _positional_star(launch: Launch, arg: cst.Arg) -> bool:
    """Whether `arg` is a `*x` of the launch with no keyword or `**` before it (its elements,
    written out where it stands, are positional arguments that parse)."""
    if arg.star != "*":
        return False
    before = launch.call.args[: next(i for i, a in enumerate(launch.call.args) if a is arg)]
    return not any(a.keyword is not None or a.star == "**" for a in before)


def _unpacked(arg: cst.Arg, envs: Sequence) -> list[cst.BaseExpression] | None:
    """`x.stride(0), x.stride(1)` for `*x.stride()` (`x.shape[i]` for `*x.shape`, `x.size(i)` for
    `*x.size()`, the dimensions a literal slice keeps for `*x.stride()[:3]` or `*x.shape[-2:]`)
    where `x`, a name, is a tensor of one rank on every case; None otherwise."""
    value, kept = arg.value, slice(None)
    if isinstance(value, cst.Subscript):
        kept = _literal_slice(value)
        if kept is None:
            return None
        value = value.value
    if isinstance(value, cst.Call) and not value.args and isinstance(value.func, cst.Attribute):
        method, tensor = value.func.attr.value, value.func.value
        if method not in ("stride", "size"):
            return None
    elif isinstance(value, cst.Attribute) and value.attr.value == "shape":
        method, tensor = "shape", value.value
    else:
        return None
    if not isinstance(tensor, cst.Name):
        return None
    ranks = {len(t.shape) if isinstance(t := ev(tensor), TensorValue) else None for ev in envs}
    if len(ranks) != 1 or not isinstance(rank := ranks.pop(), int) or rank < 1:
        return None
    dims = range(rank)[kept]
    if not dims:
        return None
    name = tensor.value
    if method == "shape":
        return [cu.expr(f"{name}.shape[{i}]") for i in dims]
    return [cu.expr(f"{name}.{method}({i})") for i in dims]


def _literal_slice(node: cst.Subscript) -> slice | None:
    """`slice(None, 3)` for `[:3]`, `slice(-2, None)` for `[-2:]`: one slice of integer literals
    and no step; None for anything else."""
    if len(node.slice) != 1 or not isinstance(node.slice[0].slice, cst.Slice):
        return None
    part = node.slice[0].slice
    if part.step is not None:
        return None
    bounds = []
    for bound in (part.lower, part.upper):
        if bound is None:
            bounds.append(None)
            continue
        sign = 1
        if isinstance(bound, cst.UnaryOperation) and isinstance(bound.operator, cst.Minus):
            sign, bound = -1, bound.expression
        if not isinstance(bound, cst.Integer):
            return None
        bounds.append(sign * int(bound.value))
    return slice(*bounds)


def _plan(
    launch: Launch, arg: cst.Arg, pure: cu.PureCalls
) -> tuple[cst.SimpleStatementLine, list[tuple[str, cst.BaseExpression]], int] | None:
    """(the statement that binds the dict, its keys and values, how many arguments read it) when
    `arg`, a `**d`, can be written out; for a `*t`, the tuple's statement and its elements, each
    with no key (""). None otherwise."""
    if not isinstance(arg.value, cst.Name) or launch.line is None:
        return None
    name = arg.value.value
    fn = launch.function
    if name in {p.name.value for p in read.params_of(fn)}:
        return None
    # bound once and read once (the assignment's target and the `**`); a tuple may be read by
    # the `*` of several launches, and nothing else
    uses = stars = 0
    for n in read.walk(fn.body):
        if isinstance(n, cst.Name) and n.value == name:
            uses += 1
        elif isinstance(n, cst.Arg) and n.star == "*" and isinstance(n.value, cst.Name) and n.value.value == name:
            stars += 1
    readers = 1 if arg.star == "**" else stars
    if uses != 1 + readers:
        return None
    block = next(
        (
            b
            for b in read.walk(fn)
            if isinstance(b, cst.IndentedBlock) and any(s is launch.line for s in b.body)
        ),
        None,
    )
    if block is None:
        return None
    at = next(i for i, s in enumerate(block.body) if s is launch.line)
    found = next(((i, s) for i, s in enumerate(block.body[:at]) if _binds(s, name)), None)
    if found is None:
        return None
    i, statement = found
    value = statement.body[0].value
    elements = _elements(value) if arg.star == "**" else _tuple_elements(value)
    if elements is None or {k for k, _ in elements} & set(launch.keywords):
        return None
    rebound = {t for s in block.body[i + 1 : at] for t in read.bound_names(s)}
    if any(not pure(v) or cu.names_in(v) & rebound for _, v in elements):
        return None
    return statement, elements, readers


def _binds(statement: cst.BaseStatement, name: str) -> bool:
    """Whether `statement` is `name = ...` alone on its line."""
    if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1):
        return False
    small = statement.body[0]
    return (
        isinstance(small, cst.Assign)
        and len(small.targets) == 1
        and isinstance(small.targets[0].target, cst.Name)
        and small.targets[0].target.value == name
    )


def _elements(node: cst.BaseExpression) -> list[tuple[str, cst.BaseExpression]] | None:
    """The (key, value) pairs of a dict literal of distinct string keys that are identifiers."""
    if not isinstance(node, cst.Dict):
        return None
    out = []
    for e in node.elements:
        key = read.string_literal(e.key) if isinstance(e, cst.DictElement) else None
        if key is None or not key.isidentifier():
            return None
        out.append((key, e.value))
    return out if len({k for k, _ in out}) == len(out) else None


def _tuple_elements(node: cst.BaseExpression) -> list[tuple[str, cst.BaseExpression]] | None:
    """("", element) for each element of a tuple or list literal with no starred element."""
    if not isinstance(node, cst.Tuple | cst.List) or not node.elements:
        return None
    if any(isinstance(e, cst.StarredElement) for e in node.elements):
        return None
    return [("", e.value) for e in node.elements]


def _spliced(args: Sequence[cst.Arg], arg: cst.Arg, new: list[cst.Arg]) -> list[cst.Arg]:
    """`new`, the arguments written in place of `arg` (one of `args`), separated as the call
    separates its arguments: each takes `arg`'s own separator (the one before it, for the last
    argument) without its comments, a line break in a call laid out one argument per line, and
    the last `arg`'s as it is (a comment, a trailing comma, or nothing before `)`)."""
    sep = arg.comma
    if arg is args[-1]:  # its comma, if any, leads to `)`: the separator before it
        before = args[-2].comma if len(args) > 1 else None
        sep = (
            before if isinstance(before, cst.Comma) else cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        )
    sep = cu.plain_comma(sep)
    out = [a.with_changes(comma=sep) for a in new]
    out[-1] = out[-1].with_changes(comma=arg.comma, whitespace_after_arg=arg.whitespace_after_arg)
    return out
