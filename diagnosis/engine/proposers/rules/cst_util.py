"""Shared libcst helpers for the rules transforms.

The module's facts come from the source model (`diagnosis.engine.srcmodel`): which functions
are kernels, where and how they are launched, what a launch binds and the values that reach it.
Here are the helpers the transforms share on top: reading the few values a transform needs
(literal ints, single local bindings), replacing nodes by identity so that a transform can
collect its edits first and apply them in one pass, and `emit`, which writes the result in the
module's own spelling. Nothing here guesses: an expression that cannot be read is `None`.

Dotted names compare canonically (`lang.load` is `tl.load` where the module imported
`triton.language as lang`): `parse`, `find_kernels` and `find_launches` make the module they
read the one names are resolved through.
"""

from __future__ import annotations

import ast
import functools
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import libcst as cst

from diagnosis.engine.proposers.base import CaseShape
from diagnosis.engine.srcmodel import (
    Kernel,
    Launch,
    SourceModelError,
    TensorValue,
    model_of,
    model_of_tree,
    parsed,
    respell,
)
from diagnosis.engine.srcmodel.launches import SubscriptGrid
from diagnosis.engine.srcmodel.nodes import NodeMemo
from diagnosis.engine.srcmodel.read import (
    arg,
    call_name,
    children,
    code,
    dotted,
    int_literal,
    is_call,
    module_statements,
    walk,
)
from diagnosis.engine.srcmodel.values import TENSOR_DTYPES

__all__ = [
    "TENSOR_DTYPES",
    "Kernel",
    "Launch",
    "TensorValue",
    "arg",
    "call_name",
    "code",
    "dotted",
    "int_literal",
    "is_call",
    "walk",
]

# ---------------------------------------------------------------------------------------
# small readers


def parse(source: str) -> cst.Module | None:
    """The module's tree (shared with every reader of this text), its names made the ones
    canonical names are read through; None when it does not parse."""
    try:
        return model_of(source).activate().tree
    except (SyntaxError, SourceModelError, RecursionError):
        return None


def emit(new: cst.Module, original: cst.Module) -> str:
    """The source of `new`, an edit of `original`, with the new code's `tl.` / `triton.` spelled
    as `original` spells them (`lang.`, `tr.`), or an import added where nothing binds them."""
    return respell(new, model_of_tree(original).names).code


def expr(text: str) -> cst.BaseExpression:
    return cst.parse_expression(text)


def stmt(text: str) -> cst.BaseStatement:
    return cst.parse_statement(text)


def names_in(node: cst.CSTNode, skip: tuple[type, ...] = ()) -> set[str]:
    """Names read in an expression: attribute tails and keyword names are not names; nothing
    under a node of a `skip` type is read."""
    out: set[str] = set()
    stack = [node]
    while stack:  # a stack, not recursion: a whole module is deep
        n = stack.pop()
        if isinstance(n, cst.Name):
            out.add(n.value)
        elif isinstance(n, (cst.Attribute, cst.Arg)):
            stack.append(n.value)
        elif not isinstance(n, skip):
            stack.extend(children(n))
    return out


# ---------------------------------------------------------------------------------------
# kernels and launches (the source model's)


def decorator_name(d: cst.Decorator) -> str | None:
    node = d.decorator
    if isinstance(node, cst.Call):
        node = node.func
    return dotted(node)


def find_kernels(module: cst.Module) -> dict[str, Kernel]:
    """The module's top-level kernels by name (any import alias, any decorator stack) that a
    rule may edit: a kernel the module jits by a call (`f = triton.jit(f)`) has no decorators
    to add to or copy, so the rules see it once `apply_family` has written it decorated."""
    return {n: k for n, k in model_of_tree(module).activate().kernels.items() if not k.wrapped_by}


# A comment in the launching function that ties its fixed geometry to reproducible numerics
# (sglang's MLA decode: "num_warps reorders the fp32 accumulation, so ... a batch-independent
# geometry"). A rewrite that changes the order a reduction or a scan adds in (a config chosen per
# shape, a loop split into partials) would break that promise shape by shape, and the gate's
# tolerance cannot see it. Not "loop-invariant".
FIXED_ON_PURPOSE = re.compile(
    r"determinis|reproducib|batch[- ]?(in)?variant|batch[- ]independent|bit[- ]?(wise|exact|identical)"
    r"|reorders? the (\w+ )?accumulat",
    re.IGNORECASE,
)


def geometry_fixed_on_purpose(launch: Launch) -> bool:
    """A comment of the function around `launch` says its geometry is fixed for the numerics."""
    return any(FIXED_ON_PURPOSE.search(c.value) for c in walk(launch.reading_scope) if isinstance(c, cst.Comment))


def find_launches(module: cst.Module, kernels: Iterable[str]) -> list[Launch]:
    """Every launch, wherever it is, of the names in `kernels`: kernels, or handles of them
    (`k_tuned = triton.autotune(...)(k)`), by the name the launch is written with."""
    wanted = set(kernels)
    return [lc for lc in model_of_tree(module).activate().launches if lc.target in wanted]


def launch_values(launch: Launch, kernel: Kernel, cases: Sequence[CaseShape]) -> list[dict[str, Any]]:
    """Per case: kernel parameter -> its value at this launch (see SourceModel.launch_values)."""
    return launch.model.launch_values(launch, kernel, cases)


def launch_values_every_path(launch: Launch, kernel: Kernel, cases: Sequence[CaseShape]) -> list[dict[str, Any]]:
    """`launch_values` along every call path that reaches the launch, one after another: what the
    launch receives over all of them (a helper called for q and again for k), not per case."""
    return [v for path in launch.model.launch_values_per_path(launch, kernel, cases) for v in path]


def launch_locals(launch: Launch, cases: Sequence[CaseShape]) -> list[dict[str, Any]]:
    """Per case: the launching function's known locals just before the launch."""
    return [ev.known() for ev in launch.model.launch_envs(launch, cases)]


def grid_axes(launch: Launch, kernel: Kernel) -> list[cst.BaseExpression] | None:
    """The launch's grid axes as wrapper expressions: a tuple's elements (also through a local
    bound once to it), or a `lambda meta:` body's with each `meta["X"]` replaced by what the
    launch passes for X (a name or a literal; the parameter's default where it passes none).
    None when the grid is something else or a block comes from an autotuner or heuristics."""
    grid = launch.model.grid(launch)
    if grid.elements is None or grid.form not in ("tuple", "lambda"):
        return None
    if grid.form == "tuple":
        return grid.elements
    if grid.meta is None:
        return None
    bound = launch.bound(kernel)
    edits: list[tuple[cst.CSTNode, Any]] = []
    for n in walk(grid.node):
        key = _meta_key(n, grid.meta)
        if key is None:
            continue
        value = bound.get(key, kernel.defaults.get(key))
        if key in kernel.supplied or not isinstance(value, (cst.Name, cst.Integer)):
            return None
        edits.append((n, value))
    if grid.meta in {x for e in grid.elements for x in names_in(replace_in(e, edits))}:
        return None  # meta read some other way
    return [replace_in(e, edits) for e in grid.elements]


def _meta_key(node: cst.CSTNode, meta: str) -> str | None:
    if (
        isinstance(node, cst.Subscript)
        and isinstance(node.value, cst.Name)
        and node.value.value == meta
        and len(node.slice) == 1
        and isinstance(node.slice[0].slice, cst.Index)
        and isinstance(node.slice[0].slice.value, cst.SimpleString)
    ):
        key = node.slice[0].slice.value.evaluated_value
        return key if isinstance(key, str) else None
    return None


def find_function(module: cst.Module, name: str) -> cst.FunctionDef | None:
    for n in walk(module):
        if isinstance(n, cst.FunctionDef) and n.name.value == name:
            return n
    return None


# ---------------------------------------------------------------------------------------
# statements and bindings


def body_statements(block: cst.BaseSuite) -> list[cst.BaseStatement]:
    if isinstance(block, cst.IndentedBlock):
        return list(block.body)
    return []


def call_statement(block: cst.BaseSuite, call: cst.Call) -> cst.SimpleStatementLine | None:
    """The top-level statement of `block` that is `call` alone, as an expression statement."""
    for s in body_statements(block):
        if (
            isinstance(s, cst.SimpleStatementLine)
            and len(s.body) == 1
            and isinstance(s.body[0], cst.Expr)
            and s.body[0].value is call
        ):
            return s
    return None


def simple_assigns(statement: cst.CSTNode) -> list[tuple[str, cst.BaseExpression]]:
    """`name = value` pairs of a simple statement line, tuple unpacking of tuples included."""
    out: list[tuple[str, cst.BaseExpression]] = []
    if not isinstance(statement, cst.SimpleStatementLine):
        return out
    for small in statement.body:
        if not isinstance(small, cst.Assign) or len(small.targets) != 1:
            continue
        target = small.targets[0].target
        if isinstance(target, cst.Name):
            out.append((target.value, small.value))
        elif isinstance(target, cst.Tuple) and isinstance(small.value, cst.Tuple):
            if len(target.elements) == len(small.value.elements):
                for t, v in zip(target.elements, small.value.elements, strict=True):
                    if isinstance(t.value, cst.Name):
                        out.append((t.value.value, v.value))
    return out


@dataclass(frozen=True)
class Binding:
    name: str
    statement: cst.CSTNode  # the statement that binds it
    value: cst.BaseExpression | None  # the value when it is a plain `name = value` (or a tuple of values)
    unpack: cst.BaseExpression | None = None  # `a, b = <unpack>`: the unpacked expression
    index: int | None = None  # position in that unpacking


def _targets(node: cst.CSTNode) -> list[cst.Name]:
    if isinstance(node, cst.Name):
        return [node]
    if isinstance(node, (cst.Tuple, cst.List)):
        return [n for e in node.elements for n in _targets(e.value)]
    if isinstance(node, cst.StarredElement):
        return _targets(node.value)
    return []


# what a function's Bindings read: the rules read the same functions' bindings over and over
# (every family, every finding)
_BINDINGS = NodeMemo(4096)


class Bindings:
    """Every binding of every local name in one function (nested functions included)."""

    def __init__(self, function: cst.FunctionDef) -> None:
        self.params = [p.name.value for p in function.params.params]
        by_name, target_ids = _BINDINGS.get(function, lambda: self._read(function))
        # containers of its own: a caller's edit of its Bindings stays its own
        self.by_name = {name: list(bs) for name, bs in by_name.items()}
        self.target_ids = set(target_ids)

    def _read(self, function: cst.FunctionDef) -> tuple[dict[str, tuple[Binding, ...]], frozenset[int]]:
        self.by_name: dict[str, list[Binding]] = {}
        self.target_ids: set[int] = set()
        for node in walk(function.body):
            if isinstance(node, cst.SimpleStatementLine):
                for small in node.body:
                    self._small(node, small)
            elif isinstance(node, cst.For):
                self._mark(node, node.target)
            elif isinstance(node, cst.With):
                for item in node.items:
                    if item.asname is not None:
                        self._mark(node, item.asname.name)
            elif isinstance(node, cst.NamedExpr):
                self._mark(node, node.target)
        return {name: tuple(bs) for name, bs in self.by_name.items()}, frozenset(self.target_ids)

    def _add(self, b: Binding, target: cst.Name) -> None:
        self.by_name.setdefault(b.name, []).append(b)
        self.target_ids.add(id(target))

    def _mark(self, statement: cst.CSTNode, target: cst.CSTNode) -> None:
        for t in _targets(target):
            self._add(Binding(t.value, statement, None), t)

    def _small(self, statement: cst.SimpleStatementLine, small: cst.BaseSmallStatement) -> None:
        if isinstance(small, cst.Assign):
            for at in small.targets:
                target = at.target
                if isinstance(target, cst.Name):
                    self._add(Binding(target.value, statement, small.value), target)
                elif isinstance(target, cst.Tuple):
                    values = small.value.elements if isinstance(small.value, cst.Tuple) else None
                    for i, el in enumerate(target.elements):
                        if not isinstance(el.value, cst.Name):
                            self._mark(statement, el.value)
                            continue
                        if values is not None and len(values) == len(target.elements):
                            self._add(Binding(el.value.value, statement, values[i].value), el.value)
                        else:
                            self._add(Binding(el.value.value, statement, None, small.value, i), el.value)
                else:
                    self._mark(statement, target)
        elif isinstance(small, cst.AnnAssign) and small.value is not None and isinstance(small.target, cst.Name):
            self._add(Binding(small.target.value, statement, small.value), small.target)
        elif isinstance(small, cst.AugAssign) or (isinstance(small, cst.AnnAssign) and small.value is not None):
            # a bare annotation (`n_rows: int`, unsloth) binds nothing
            self._mark(statement, small.target)

    def single(self, name: str) -> Binding | None:
        """The binding of `name` when it is bound exactly once (and is not a parameter)."""
        bs = self.by_name.get(name, [])
        if len(bs) != 1 or name in self.params:
            return None
        return bs[0]


def name_loads(node: cst.CSTNode, exclude: set[int] = frozenset()) -> Counter[str]:  # type: ignore[assignment]
    """How often each name is read under `node` (binding targets excluded by identity)."""
    counts: Counter[str] = Counter()

    def visit(n: cst.CSTNode) -> None:
        if isinstance(n, cst.Name):
            if id(n) not in exclude:
                counts[n.value] += 1
            return
        if isinstance(n, cst.Attribute):
            visit(n.value)
            return
        if isinstance(n, cst.Arg):
            visit(n.value)
            return
        if isinstance(n, cst.Param):
            if n.default is not None:
                visit(n.default)
            return
        for c in children(n):
            visit(c)

    visit(node)
    return counts


def resolve_int(node: cst.BaseExpression | None, bindings: Bindings | None) -> int | None:
    """An int literal, or a name bound once to one."""
    value = int_literal(node)
    if value is not None:
        return value
    if isinstance(node, cst.Name) and bindings is not None:
        b = bindings.single(node.value)
        if b is not None and b.value is not None:
            return int_literal(b.value)
    return None


# ---------------------------------------------------------------------------------------
# replacing nodes


@dataclass
class GridAt:
    """Edit of a launch subscript whose grid is a `SubscriptGrid`: `k[M,]` -> `k[grid]`."""

    grid: cst.BaseExpression

    def apply(self, updated: cst.Subscript) -> cst.Subscript:
        return launched(updated, self.grid)


def launched(func: cst.Subscript, grid: cst.BaseExpression, name: str | None = None) -> cst.Subscript:
    """The launch subscript `func` with `grid` as its one element (whatever it held, `k[M,]` or
    `k[M, N]` included), launching `name` where given."""
    out = func.with_changes(slice=[cst.SubscriptElement(cst.Index(grid))])
    return out if name is None else out.with_changes(value=cst.Name(name))


def edit_map(edits: Sequence[tuple[cst.CSTNode, Any]]) -> dict[int, Any]:
    """id(original node) -> replacement; a `SubscriptGrid` is no node of the tree, so its
    replacement becomes a `GridAt` edit of the subscript that holds its elements."""
    out: dict[int, Any] = {}
    for old, new in edits:
        if isinstance(old, SubscriptGrid) and old.subscript is not None:
            out[id(old.subscript)] = GridAt(new)
        else:
            out[id(old)] = new
    return out


def holds(container: cst.CSTNode, node: cst.CSTNode) -> bool:
    """Whether `node` is under `container` (a `SubscriptGrid` by its subscript)."""
    target = node.subscript if isinstance(node, SubscriptGrid) and node.subscript is not None else node
    return any(n is target for n in walk(container))


class _Replacer(cst.CSTTransformer):
    def __init__(self, mapping: dict[int, Any]) -> None:
        self.mapping = mapping

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode) -> Any:
        if id(original_node) in self.mapping:
            new = self.mapping[id(original_node)]
            return new.apply(updated_node) if isinstance(new, GridAt) else new
        return updated_node


def replace(tree: cst.Module, edits: Sequence[tuple[cst.CSTNode, Any]]) -> cst.Module:
    """Apply `(original node, replacement)` edits in one pass; a replacement may be a
    node, `cst.RemoveFromParent()` or a `cst.FlattenSentinel` of statements."""
    return tree.visit(_Replacer(edit_map(edits)))


def replace_in(node: cst.CSTNode, edits: Sequence[tuple[cst.CSTNode, Any]]) -> Any:
    return node.visit(_Replacer(edit_map(edits)))


def subst_names(node: cst.CSTNode, make: Callable[[cst.Name], cst.BaseExpression | None]) -> Any:
    """Replace read names under `node` by `make(name)` when it returns an expression."""

    class T(cst.CSTTransformer):
        def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> Any:
            return updated_node.with_changes(attr=original_node.attr)

        def leave_Arg(self, original_node: cst.Arg, updated_node: cst.Arg) -> Any:
            return updated_node.with_changes(keyword=original_node.keyword)

        def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> Any:
            new = make(original_node)
            return updated_node if new is None else new

    return node.visit(T())


def fresh_name(base: str, taken: set[str]) -> str:
    name, k = base, 0
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    taken.add(name)
    return name


def all_names(node: cst.CSTNode) -> set[str]:
    # `type(n) is`: libcst's node classes are ABCs, and an isinstance against one costs several
    # plain ones; Name has no subclass
    return {n.value for n in walk(node) if type(n) is cst.Name}


# ---------------------------------------------------------------------------------------
# kernel facts

REDUCTIONS = frozenset(
    {
        "tl.sum",
        "tl.max",
        "tl.min",
        "tl.argmax",
        "tl.argmin",
        "tl.reduce",
        "tl.cumsum",
        "tl.cumprod",
        "tl.associative_scan",
        "tl.xor_sum",
        "tl.prod",
    }
)


def base_params(kernel: Kernel, node: cst.CSTNode, bindings: Bindings | None = None) -> set[str]:
    """The pointer parameters an address expression is based on: the leftmost operand of its
    `+` chain, followed through local bindings (`x_ptr + row * stride` -> {x_ptr})."""
    bindings = bindings or Bindings(kernel.node)
    params = set(kernel.params) - set(kernel.constexprs)
    out: set[str] = set()
    seen: set[str] = set()

    def base(n: cst.CSTNode) -> None:
        while True:
            if isinstance(n, cst.BinaryOperation) and isinstance(n.operator, (cst.Add, cst.Subtract)):
                n = n.left
            elif isinstance(n, cst.Subscript):
                n = n.value
            elif isinstance(n, cst.Call) and dotted(n.func) in ("tl.multiple_of", "tl.max_contiguous", "tl.advance"):
                n = n.args[0].value
            else:
                break
        if not isinstance(n, cst.Name) or n.value in seen:
            if not isinstance(n, cst.Name):
                out.add("?")  # unknown base: callers treat it as any parameter
            return
        seen.add(n.value)
        if n.value in params:
            out.add(n.value)
        for b in bindings.by_name.get(n.value, []):
            if b.value is not None:
                base(b.value)

    base(node)
    return out


def memory_params(kernel: Kernel) -> tuple[set[str], set[str]]:
    """(pointer parameters loaded from, pointer parameters stored or atomically updated to).
    An address whose base cannot be told is recorded as "?"."""
    bindings = Bindings(kernel.node)
    loads: set[str] = set()
    stores: set[str] = set()
    for call in (n for n in walk(kernel.node.body) if isinstance(n, cst.Call)):
        name = call_name(call) or ""
        ptr = arg(call, "pointer", 0)
        if ptr is None:
            continue
        if name == "tl.load":
            loads |= base_params(kernel, ptr, bindings)
        elif name == "tl.store" or name.startswith("tl.atomic_"):
            stores |= base_params(kernel, ptr, bindings)
    return loads, stores


def loop_header(loop: cst.For, kernel: Kernel) -> tuple[str, str] | None:
    """(bound parameter, block constexpr) of `range(0, n, BLOCK)` / `range(tl.cdiv(n, BLOCK))`."""
    if not isinstance(loop.target, cst.Name) or loop.orelse is not None:
        return None
    it = loop.iter
    if not is_call(it, "range", "tl.range") or any(a.keyword for a in it.args):
        return None
    args = [a.value for a in it.args]
    bound = block = None
    if len(args) == 3 and int_literal(args[0]) == 0:
        bound, block = args[1], args[2]
    elif len(args) in (1, 2) and (len(args) == 1 or int_literal(args[0]) == 0):
        last = args[-1]
        if is_call(last, "tl.cdiv") and len(last.args) == 2:
            bound, block = last.args[0].value, last.args[1].value
    if not (isinstance(bound, cst.Name) and isinstance(block, cst.Name)):
        return None
    if bound.value not in kernel.params or bound.value in kernel.constexprs or block.value not in kernel.constexprs:
        return None
    return bound.value, block.value


def has_loops(kernel: Kernel) -> bool:
    return any(isinstance(n, (cst.For, cst.While)) for n in walk(kernel.node.body))


def has_reductions(kernel: Kernel) -> bool:
    return bool(kernel.calls(*REDUCTIONS))


def axis_blocks(kernel: Kernel) -> dict[int, set[str]]:
    """Grid axis -> constexprs multiplied with that axis's program id (`pid_m * BLOCK_M`)."""
    axes = kernel.program_axes()
    out: dict[int, set[str]] = {}
    for n in walk(kernel.node.body):
        if not (isinstance(n, cst.BinaryOperation) and isinstance(n.operator, cst.Multiply)):
            continue
        for a, b in ((n.left, n.right), (n.right, n.left)):
            axis = None
            if isinstance(a, cst.Name) and a.value in axes:
                axis = axes[a.value]
            elif is_call(a, "tl.program_id"):
                axis = int_literal(arg(a, "axis", 0))
            if axis is not None and isinstance(b, cst.Name) and b.value in kernel.constexprs:
                out.setdefault(axis, set()).add(b.value)
    return out


def cdiv_pairs(kernel: Kernel) -> dict[str, set[str]]:
    """Parameter -> constexprs it is divided by in the kernel (`tl.cdiv(M, BLOCK_M)`)."""
    out: dict[str, set[str]] = {}
    for call in kernel.calls("tl.cdiv"):
        a, b = arg(call, "x", 0), arg(call, "div", 1)
        if isinstance(a, cst.Name) and isinstance(b, cst.Name) and b.value in kernel.constexprs:
            out.setdefault(a.value, set()).add(b.value)
    return out


def divisor_literals(node: cst.CSTNode) -> list[cst.Integer]:
    """Int literals used as divisors: `triton.cdiv(x, 64)`, `x // 64`, `(x + 63) // 64`."""
    out: list[cst.Integer] = []
    for n in walk(node):
        if (
            is_call(n, "triton.cdiv", "cdiv")
            and len(n.args) == 2
            and isinstance(n.args[1].value, cst.Integer)
        ):
            out.append(n.args[1].value)
        elif isinstance(n, cst.BinaryOperation) and isinstance(n.operator, cst.FloorDivide):
            if isinstance(n.right, cst.Integer):
                out.append(n.right)
    return out


def closure(node: cst.CSTNode, bindings: Bindings, skip: set[str]) -> list[cst.CSTNode]:
    """`node` and the values of every local it reads, transitively (names in `skip` not followed)."""
    out = [node]
    seen: set[str] = set(skip)
    todo = list(names_in(node) - skip)
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        for b in bindings.by_name.get(n, []):
            src = b.value if b.value is not None else b.unpack if b.unpack is not None else b.statement
            if isinstance(src, cst.For):  # a loop's target holds an element of what it iterates
                src = src.iter
            out.append(src)
            todo.extend(names_in(src) - seen)
    return out


def depends_on_block(nodes: list[cst.CSTNode], names: dict[str, str], tuned: dict[str, int]) -> bool:
    """Does any of `nodes` read a local holding a block size (`names`) or divide by one of the
    block values (`triton.cdiv(n, 1024)` when 1024 is a block)?"""
    values = set(tuned.values())
    for node in nodes:
        if names_in(node) & set(names):
            return True
        if any(int_literal(lit) in values for lit in divisor_literals(node)):
            return True
    return False


def module_constants(tree: cst.Module, read: Callable[[cst.BaseExpression], Any]) -> dict[str, Any]:
    """Module-level names bound once to a literal that `read` gives a value for (not None)."""
    out: dict[str, Any] = {}
    counts: dict[str, int] = {}
    for st in module_statements(tree):
        for name, value in simple_assigns(st):
            counts[name] = counts.get(name, 0) + 1
            v = read(value)
            if v is not None:
                out[name] = v
    return {k: v for k, v in out.items() if counts[k] == 1}


def module_ints(tree: cst.Module) -> dict[str, int]:
    """Module-level names bound once to an int literal (`NUM_STAGES = 1`)."""
    return module_constants(tree, int_literal)


def operand(node: cst.BaseExpression) -> str:
    """`node`'s source, parenthesized unless it is an atom (name, attribute, call, subscript,
    integer), to be placed beside a binary operator."""
    text = code(node)
    return text if isinstance(node, (cst.Name, cst.Attribute, cst.Call, cst.Subscript, cst.Integer)) else f"({text})"


def expr_ast(node: cst.CSTNode) -> ast.expr:
    """`node` (an expression) as an `ast` expression. Parenthesized first: an argument laid out
    over several lines inside its call's parentheses is no expression on its own."""
    return ast.parse(f"({code(node).strip()})", mode="eval").body


def receiver(node: cst.BaseExpression) -> str:
    """`node`'s source, parenthesized unless a method can be called on it as written
    (`x.to(...)`, `tl.exp(x).to(...)`, but `(x + y).to(...)`)."""
    text = code(node)
    return text if isinstance(node, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)) else f"({text})"


def make_decorator(text: str) -> cst.Decorator:
    """A decorator node from its source (without the '@')."""
    fn = cst.parse_statement(f"@{text}\ndef _f():\n    pass\n")
    assert isinstance(fn, cst.FunctionDef)
    return fn.decorators[0]


_TIGHT = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))


def keyword_arg(name: str, value: cst.BaseExpression) -> cst.Arg:
    """`name=value`, written without spaces around `=`."""
    return cst.Arg(keyword=cst.Name(name), value=value, equal=_TIGHT)


def insert_params(kernel: Kernel, at: int, names: list[str]) -> cst.Parameters:
    """The kernel's parameters with plain `names` inserted at index `at`."""
    params = list(kernel.node.params.params)
    if not names:
        return kernel.node.params
    # the separator between two parameters of the list (a line break where they are one per line
    # or in groups); in groups, the new names make one group of their own
    sep = _comma_like(params[min(max(at - 1, 0), len(params) - 2)] if len(params) > 1 else None)
    grouped = any(
        isinstance(p.comma, cst.Comma) and isinstance(p.comma.whitespace_after, cst.SimpleWhitespace)
        for p in params[:-1]
    )
    inner = _comma_like(None) if grouped else sep
    new = [cst.Param(cst.Name(n), comma=sep if i == len(names) - 1 else inner) for i, n in enumerate(names)]
    if at < len(params) or not params:
        return kernel.node.params.with_changes(params=params[:at] + new + params[at:])
    # appended: the old last parameter gets the separator, the new last one what followed the
    # old last (a trailing comma, or none and the line break before the parenthesis)
    last = params[-1]
    new[-1] = new[-1].with_changes(comma=last.comma, whitespace_after_param=last.whitespace_after_param)
    last = last.with_changes(comma=sep, whitespace_after_param=cst.SimpleWhitespace(""))
    return kernel.node.params.with_changes(params=[*params[:-1], last, *new])


def _comma_like(param: cst.Param | None) -> cst.Comma:
    """A comma like `param`'s: a line break to the next parameter's indentation where `param`'s
    comma ends its line (the comment that may follow it stays with `param`), else `, `."""
    if param is not None and isinstance(param.comma, cst.Comma):
        after = param.comma.whitespace_after
        if isinstance(after, cst.ParenthesizedWhitespace):
            return cst.Comma(
                whitespace_after=cst.ParenthesizedWhitespace(indent=after.indent, last_line=after.last_line)
            )
    return cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))


def append_constexpr(fn: cst.FunctionDef, name: str, default: str) -> cst.FunctionDef:
    """`fn` with `name: tl.constexpr = default` appended to its parameters, keeping the list's
    layout (the old last parameter's trailing comma or none moves to the new one)."""
    params = list(fn.params.params)
    last = params[-1]
    new = cst.Param(
        name=cst.Name(name),
        annotation=cst.Annotation(expr("tl.constexpr")),
        default=expr(default),
        equal=cst.AssignEqual(cst.SimpleWhitespace(" "), cst.SimpleWhitespace(" ")),
        comma=last.comma,
    )
    params[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    params.append(new)
    return fn.with_changes(params=fn.params.with_changes(params=params))


def unbind_args(launch: Launch, kernel: Kernel, params: set[str]) -> tuple[set[int], dict[int, str]]:
    """(ids of the arguments that bind `params`, to drop; positional arguments after the first
    dropped positional one -> their parameter, to pass by keyword instead so that they still
    bind what they bound)."""
    bound = launch.bound_args(kernel)
    dropped = {id(a) for p, a in bound.items() if p in params}
    positional = launch.positional
    first = next((i for i, a in enumerate(positional) if id(a) in dropped), None)
    keywords: dict[int, str] = {}
    if first is not None:
        for i, a in enumerate(positional[first:], start=first):
            if id(a) not in dropped and i < len(kernel.params):
                keywords[id(a)] = kernel.params[i]
    return dropped, keywords


def keywords_from(launch: Launch, kernel: Kernel, at: int) -> dict[int, str]:
    """The positional arguments of `launch` from parameter `at` on -> their parameter: passed by
    keyword, they bind the same parameters after new ones are inserted at `at`."""
    return {id(a): kernel.params[i] for i, a in enumerate(launch.positional) if at <= i < len(kernel.params)}


def drop_args(
    original: cst.Call,
    updated: cst.Call,
    ids: set[int],
    add: Sequence[cst.Arg] = (),
    keywords: dict[int, str] | None = None,
) -> cst.Call:
    """`updated` without the arguments whose originals are in `ids`, then `add`; arguments whose
    originals are in `keywords` are passed by that keyword. The last argument takes the comma of
    the original last one, so `f(a, B=1)` becomes `f(a)`, not `f(a, )`, and a call laid out one
    argument per line stays so."""
    pairs = list(zip(original.args, updated.args, strict=True))
    keywords = keywords or {}
    kept: list[cst.Arg] = []
    for o, u in pairs:
        if id(o) in ids:
            # comment lines between a dropped argument and the next belong to the next one
            lines = _comment_lines(u.comma)
            before = kept[-1].comma if kept else None
            if lines and isinstance(before, cst.Comma) and isinstance(ws := before.whitespace_after, cst.ParenthesizedWhitespace):
                comma = before.with_changes(whitespace_after=ws.with_changes(empty_lines=[*ws.empty_lines, *lines]))
                kept[-1] = kept[-1].with_changes(comma=comma)
            continue
        kept.append(u.with_changes(keyword=cst.Name(keywords[id(o)]), equal=_TIGHT) if id(o) in keywords else u)
    if not pairs:
        return updated.with_changes(args=list(add))
    last = pairs[-1][1]
    # the separator between the original's last two arguments, without its comments: a new line
    # in a call laid out one argument per line; the added arguments but the last, and the old
    # last one when it now precedes them, take it
    sep = plain_comma(pairs[-2][1].comma) if len(pairs) > 1 and isinstance(pairs[-2][1].comma, cst.Comma) else None
    sep = sep or cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    tail = [*kept, *(a.with_changes(comma=sep) for a in add)]
    closing = last.comma
    if add and kept and id(pairs[-1][0]) not in ids:
        # the line break before `)` goes with the last argument, after the added ones; a comment
        # on the old last one's line stays there
        own, closing = _comment_stays(last.comma, sep)
        tail[len(kept) - 1] = kept[-1].with_changes(comma=own, whitespace_after_arg=cst.SimpleWhitespace(""))
    if tail and (add or id(pairs[-1][0]) in ids):
        tail[-1] = tail[-1].with_changes(comma=closing, whitespace_after_arg=last.whitespace_after_arg)
    return updated.with_changes(args=tail)


def _comment_lines(comma: Any) -> list[cst.EmptyLine]:
    """The lines of comment after a comma, before the next argument's line."""
    ws = comma.whitespace_after if isinstance(comma, cst.Comma) else None
    if not isinstance(ws, cst.ParenthesizedWhitespace):
        return []
    return [line for line in ws.empty_lines if line.comment is not None]


def plain_comma(comma: cst.Comma) -> cst.Comma:
    """`comma` without the comments in the whitespace after it: a separator to use again
    elsewhere in its call (a line break in a call laid out one argument per line)."""
    ws = comma.whitespace_after
    if not isinstance(ws, cst.ParenthesizedWhitespace):
        return comma
    return comma.with_changes(whitespace_after=ws.with_changes(first_line=cst.TrailingWhitespace(), empty_lines=[]))


def _comment_stays(comma: Any, sep: cst.Comma) -> tuple[cst.Comma, Any]:
    """(the comma the old last argument takes, the one the new last takes): `sep` and the old
    closing comma, unless that one ends its line with a comment (`**kernel_args,  # XPU`): then
    the comment keeps its argument and the closing comma keeps only the line break before `)`."""
    ws = comma.whitespace_after if isinstance(comma, cst.Comma) else None
    between = sep.whitespace_after
    if not (
        isinstance(ws, cst.ParenthesizedWhitespace)
        and ws.first_line.comment is not None
        and isinstance(between, cst.ParenthesizedWhitespace)
    ):
        return sep, comma
    own = comma.with_changes(whitespace_after=ws.with_changes(indent=between.indent, last_line=between.last_line))
    return own, comma.with_changes(whitespace_after=ws.with_changes(first_line=cst.TrailingWhitespace()))


# ---------------------------------------------------------------------------------------
# locals a rewrite left unread

PURE_CALLS = frozenset({"triton.cdiv", "cdiv", "triton.next_power_of_2", "min", "max", "int"})


def remove_dead_locals(tree: cst.Module, kernels: set[str], candidates: set[str]) -> cst.Module:
    """Drop `name = <pure value>` statements of the launching functions whose names nothing
    reads any more: those in `candidates` (e.g. `BLOCK_SIZE = 1024`, `grid = (...)`), then the
    locals only those statements read. Of `a, b = x, y` only the unread names and their values
    go (`BLOCK_N, num_warps = 64, 4` -> `BLOCK_N = 64`). An `if` whose test is pure and whose
    branches lose every statement goes whole (with the comment above it); an `else` that loses
    every statement goes; a block that would be left empty otherwise keeps its statements."""
    pure = PureCalls(tree)
    drop: set[int] = set()
    unread: set[int] = set()
    partial: dict[int, set[str]] = {}
    scopes = (lc.reading_scope for lc in find_launches(tree, kernels))
    functions = {id(fn): fn for fn in scopes}
    for fn in functions.values():
        bindings = Bindings(fn)
        reads = name_loads(fn.body, bindings.target_ids)
        for st in walk(fn.body):  # `BLOCK_SIZE, num_warps = calculate_settings(n)`: the call stays, `_` takes what goes
            unread |= {id(n) for n in _unpacked_names(st) if n.value in candidates and reads[n.value] == 0}
        dead = _DeadStatements(fn, bindings, reads, candidates, pure)
        drop |= dead.settle()
        partial.update(dead.partial)
    return tree.visit(_Prune(drop, unread, partial)) if drop or unread or partial else tree


def drop_dead(fn: cst.FunctionDef, pure: Callable[[cst.CSTNode], bool]) -> cst.FunctionDef:
    """`fn` without the assignments nothing reads (and the `if`s they empty), where `pure` says
    their values only compute: a kernel copy whose stores a rewrite took out."""
    bindings = Bindings(fn)
    names = set(bindings.by_name) - set(bindings.params)
    dead = _DeadStatements(fn, bindings, name_loads(fn.body, bindings.target_ids), names, pure)
    drop = dead.settle()
    return fn.visit(_Prune(drop, set(), dead.partial)) if drop or dead.partial else fn


class _DeadStatements:
    """The statements of one function that go: dead pure assignments, then the `if`s they
    empty, to a fixed point; statements of a block that cannot go empty are pinned and the
    fixed point is found again."""

    def __init__(self, fn: cst.FunctionDef, bindings: Bindings, reads: Counter[str], candidates: set[str],
                 pure: Callable[[cst.CSTNode], bool]) -> None:  # fmt: skip
        self.fn, self.bindings, self.reads0, self.candidates, self.pure = fn, bindings, reads, candidates, pure
        self.statements = [n for n in walk(fn.body) if isinstance(n, (cst.SimpleStatementLine, cst.If))]
        self.pinned: set[int] = set()
        self.partial: dict[int, set[str]] = {}  # `a, b = x, y` -> the names (with their values) that go

    def settle(self) -> set[int]:
        while True:
            drop = self._fixed_point()
            emptied = [b for b in walk(self.fn) if isinstance(b, cst.IndentedBlock) and not self._may_empty(b, drop)
                       and all(id(s) in drop for s in b.body)]  # fmt: skip
            # a name keeps all its bindings or none (`x = 0` gone under a kept `x += 1`)
            halves = [bs for bs in self.bindings.by_name.values()
                      if len({id(b.statement) in drop or b.name in self.partial.get(id(b.statement), ())
                              for b in bs}) == 2]  # fmt: skip
            if not emptied and not halves:
                return drop
            self.pinned |= {id(b.statement) for bs in halves for b in bs}
            self.pinned |= {id(s) for b in emptied for s in b.body}
            # an `if` that stays keeps its `else` whole too: half of a choice left is no tidier
            kept = [st for st in self.statements if isinstance(st, cst.If) and any(st.body is b for b in emptied)]
            self.pinned |= {id(s) for st in kept if isinstance(st.orelse, cst.Else) for s in st.orelse.body.body}

    def _may_empty(self, block: cst.IndentedBlock, drop: set[int]) -> bool:
        """An `if`'s body whose `if` goes, or an `else` body (the `else` goes with it)."""
        for st in self.statements:
            if isinstance(st, cst.If):
                if st.body is block:
                    return id(st) in drop
                if isinstance(st.orelse, cst.Else) and st.orelse.body is block:
                    return True
        return False

    def _fixed_point(self) -> set[int]:
        reads, dead, drop = Counter(self.reads0), set(self.candidates), set()
        self.partial = {}
        changed = True
        while changed:
            changed = False
            for st in self.statements:
                if id(st) in drop or id(st) in self.pinned:
                    continue
                if not self._goes(st, reads, dead, drop):
                    gone = self._unpacked_going(st, reads, dead)
                    if gone:
                        changed = True
                        self.partial.setdefault(id(st), set()).update(name for name, _ in gone)
                        for _, value in gone:
                            self._unread(value, reads, dead)
                    continue
                drop.add(id(st))
                changed = True
                gone = self.partial.pop(id(st), set())  # their values' reads are released already
                if gone:
                    for name, value in simple_assigns(st):
                        if name not in gone:
                            self._unread(value, reads, dead)
                else:
                    self._unread(st.test if isinstance(st, cst.If) else st, reads, dead)
        return drop

    def _unread(self, node: cst.CSTNode, reads: Counter[str], dead: set[str]) -> None:
        for name, n in name_loads(node, self.bindings.target_ids).items():
            reads[name] -= n
            if reads[name] == 0 and name in self.bindings.by_name:
                dead.add(name)

    def _unpacked_going(
        self, st: cst.CSTNode, reads: Counter[str], dead: set[str]
    ) -> list[tuple[str, cst.BaseExpression]]:
        """The (name, value) pairs of `a, b = x, y` that go and have not gone yet, where some of
        its names stay: unread names whose values only compute."""
        if not (isinstance(st, cst.SimpleStatementLine) and len(st.body) == 1 and _tuple_assign(st.body[0])):
            return []
        done = self.partial.get(id(st), set())
        return [(n, v) for n, v in simple_assigns(st)
                if n not in done and n in dead and reads[n] == 0 and self.pure(v)]  # fmt: skip

    def _goes(self, st: cst.CSTNode, reads: Counter[str], dead: set[str], drop: set[int]) -> bool:
        if isinstance(st, cst.If):
            branches = [*st.body.body]
            if isinstance(st.orelse, cst.Else):
                branches += st.orelse.body.body
            elif st.orelse is not None:
                branches.append(st.orelse)
            return self.pure(st.test) and all(id(s) in drop for s in branches)
        assert isinstance(st, cst.SimpleStatementLine)
        pairs = simple_assigns(st)
        pairs += [(s.target.value, s.value) for s in st.body if isinstance(s, cst.AugAssign) and isinstance(s.target, cst.Name)]
        if not pairs or len(pairs) != sum(len(_all_targets(s)) for s in st.body):
            return False
        return all(n in dead and reads[n] == 0 and self.pure(v) for n, v in pairs)


class _Prune(cst.CSTTransformer):
    """Remove the statements `_DeadStatements` chose (an `if` keeps what its branches keep) and
    write `_` for the unpacked names nothing reads."""

    def __init__(self, drop: set[int], unread: set[int], partial: dict[int, set[str]] | None = None) -> None:
        self.drop, self.unread, self.partial = drop, unread, partial or {}
        self.elifs: set[int] = set()

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.Name:
        return cst.Name("_") if id(original) in self.unread else updated

    def leave_SimpleStatementLine(self, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine) -> Any:
        if id(original) in self.drop:
            return cst.RemoveFromParent()
        going = self.partial.get(id(original))
        if going and len(updated.body) == 1 and _tuple_assign(updated.body[0]):
            return updated.with_changes(body=[_without_elements(updated.body[0], going)])
        return updated

    def leave_If(self, original: cst.If, updated: cst.If) -> Any:
        orelse = original.orelse
        if isinstance(orelse, cst.If) and id(orelse) in self.drop:  # a dropped `elif` goes with its parent's field
            updated = updated.with_changes(orelse=None)
        elif isinstance(orelse, cst.Else) and all(id(s) in self.drop for s in orelse.body.body):
            updated = updated.with_changes(orelse=None)
        return cst.RemoveFromParent() if id(original) in self.drop and id(original) not in self.elifs else updated

    def visit_If(self, node: cst.If) -> None:
        if isinstance(node.orelse, cst.If):
            self.elifs.add(id(node.orelse))


def _tuple_assign(small: cst.CSTNode) -> bool:
    """`a, b = x, y`: one target, a tuple of names, and a tuple value as long."""
    if not (isinstance(small, cst.Assign) and len(small.targets) == 1):
        return False
    target, value = small.targets[0].target, small.value
    return (
        isinstance(target, cst.Tuple)
        and isinstance(value, cst.Tuple)
        and len(target.elements) == len(value.elements)
        and all(isinstance(e, cst.Element) and isinstance(e.value, cst.Name) for e in target.elements)
        and all(isinstance(e, cst.Element) for e in value.elements)
    )


def _without_elements(small: cst.Assign, names: set[str]) -> cst.Assign:
    """`a, b = x, y` without the names in `names` and their values; `a = x` where one is left."""
    target, value = small.targets[0].target, small.value
    assert isinstance(target, cst.Tuple) and isinstance(value, cst.Tuple)
    kept = [(t, v) for t, v in zip(target.elements, value.elements, strict=True) if t.value.value not in names]
    if len(kept) == 1:
        return small.with_changes(targets=[small.targets[0].with_changes(target=kept[0][0].value)], value=kept[0][1].value)

    def tup(node: cst.Tuple, elements: list[cst.BaseElement]) -> cst.Tuple:
        last = elements[-1].with_changes(comma=node.elements[-1].comma)
        return node.with_changes(elements=[*elements[:-1], last])

    return small.with_changes(
        targets=[small.targets[0].with_changes(target=tup(target, [t for t, _ in kept]))],
        value=tup(value, [v for _, v in kept]),
    )


def _unpacked_names(st: cst.BaseStatement) -> list[cst.Name]:
    """The names of `a, b = <call>` (a tuple of names unpacked from anything but a tuple)."""
    if not (isinstance(st, cst.SimpleStatementLine) and len(st.body) == 1 and isinstance(st.body[0], cst.Assign)):
        return []
    small = st.body[0]
    target = small.targets[0].target if len(small.targets) == 1 else None
    if not isinstance(target, cst.Tuple) or isinstance(small.value, cst.Tuple):
        return []
    names = [e.value for e in target.elements]
    return names if all(isinstance(n, cst.Name) for n in names) else []  # type: ignore[misc]


def _all_targets(small: cst.CSTNode) -> list[str]:
    if isinstance(small, cst.AugAssign):
        return [small.target.value] if isinstance(small.target, cst.Name) else ["?"]
    if not isinstance(small, cst.Assign):
        return ["?"]
    return [n.value for t in small.targets for n in walk(t.target) if isinstance(n, cst.Name)]


METADATA = frozenset({"numel", "size", "stride", "dim", "element_size"})


SAFE_METHODS = frozenset({"startswith", "endswith", "lower", "upper"})
PURE_BUILTINS = frozenset({"abs", "bool", "float", "len", "round"})
_CACHES = frozenset({"functools.lru_cache", "functools.cache", "lru_cache", "cache"})


class PureCalls:
    """Whether an expression calls only what has no effect, so that dropping it loses nothing:
    PURE_CALLS and a few builtins, tensor metadata (`x.numel()`), str predicates, and the
    module's own functions whose bodies are made of such expressions (liger's
    `get_num_warps(BLOCK_SIZE)`, `is_hip()`), a cache decorator allowed."""

    def __init__(self, tree: cst.Module) -> None:
        self.defs = {st.name.value: st for st in module_statements(tree) if isinstance(st, cst.FunctionDef)}
        self.known: dict[str, bool] = {}

    def __call__(self, node: cst.CSTNode) -> bool:
        return all(
            self._call(n) if isinstance(n, cst.Call) else not isinstance(n, (cst.NamedExpr, cst.Yield, cst.Await))
            for n in walk(node)
        )

    def _call(self, n: cst.Call) -> bool:
        name = call_name(n)
        if name is not None:  # flag_gems shadows `min` and `max` with its ops: `builtins.min(...)`
            name = name.removeprefix("builtins.")
        if name in PURE_CALLS or name in PURE_BUILTINS:
            return True
        if isinstance(n.func, cst.Attribute):
            return n.func.attr.value in METADATA | SAFE_METHODS
        return isinstance(n.func, cst.Name) and self._function(n.func.value)

    def _function(self, name: str) -> bool:
        if name not in self.defs:
            return False
        if name not in self.known:
            self.known[name] = False  # while it is read, a recursive call is not pure
            fn = self.defs[name]
            decorators = [d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator for d in fn.decorators]
            self.known[name] = all(dotted(d) in _CACHES for d in decorators) and self._body(fn.body.body)
        return self.known[name]

    def _body(self, statements: Sequence[cst.CSTNode]) -> bool:
        for st in statements:
            if isinstance(st, cst.If):
                orelse = [] if st.orelse is None else [st.orelse] if isinstance(st.orelse, cst.If) else st.orelse.body.body
                if not (self(st.test) and self._body(st.body.body) and self._body(orelse)):
                    return False
            elif not isinstance(st, cst.SimpleStatementLine) or not all(self._small(s) for s in st.body):
                return False
        return True

    def _small(self, small: cst.CSTNode) -> bool:
        if isinstance(small, cst.Assign):
            targets = all(isinstance(n, (cst.Name, cst.Tuple, cst.Element)) for t in small.targets for n in walk(t.target))
            return targets and self(small.value)
        if isinstance(small, cst.AugAssign):
            return isinstance(small.target, cst.Name) and self(small.value)
        if isinstance(small, cst.Return):
            return small.value is None or self(small.value)
        if isinstance(small, cst.Expr):  # a docstring
            return isinstance(small.value, (cst.SimpleString, cst.ConcatenatedString))
        return isinstance(small, cst.Pass)


def _reads(tree: cst.Module) -> set[str]:
    """The names read outside import statements."""
    return names_in(tree, skip=(cst.Import, cst.ImportFrom))


@functools.lru_cache(maxsize=32)
def _original(source: str) -> tuple[frozenset[str], frozenset[str]]:
    """The names `source` reads and the code of its lambdas: every rewrite of one module (each
    family, each composition) is tidied against the same original."""
    tree = parsed(source)
    return frozenset(_reads(tree)), frozenset(_lambdas(tree))


def _bound_name(alias: cst.ImportAlias) -> str | None:
    if alias.asname is not None:
        return alias.asname.name.value if isinstance(alias.asname.name, cst.Name) else None
    node: cst.BaseExpression = alias.name
    while isinstance(node, cst.Attribute):  # `import a.b` binds `a`
        node = node.value
    return node.value if isinstance(node, cst.Name) else None


def drop_orphaned_imports(before: str, after: str) -> str:
    """`after` without the module-level imports that the rewrite left unread: a name `before`
    read and `after` no longer does (fla's `check_shared_mem`, read only by the `num_warps` a
    LAUNCH_CONFIG rewrite drops). Imports the author left unread stay as they are."""
    new = parsed(after)
    orphans = _original(before)[0] - _reads(new)
    if not orphans:
        return after

    def kept(node: cst.Import | cst.ImportFrom) -> cst.Import | cst.ImportFrom | None:
        if isinstance(node.names, cst.ImportStar) or (
            isinstance(node, cst.ImportFrom) and isinstance(node.module, cst.Name) and node.module.value == "__future__"
        ):
            return node
        names = [a for a in node.names if _bound_name(a) not in orphans]
        if len(names) == len(node.names):
            return node
        if not names:
            return None
        names[-1] = names[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        return node.with_changes(names=names)

    body = []
    changed = False
    for st in new.body:
        if isinstance(st, cst.SimpleStatementLine) and any(isinstance(s, (cst.Import, cst.ImportFrom)) for s in st.body):
            small = [k for s in st.body if (k := kept(s) if isinstance(s, (cst.Import, cst.ImportFrom)) else s)]
            changed |= small != list(st.body)
            if not small:
                continue
            st = st.with_changes(body=small)
        body.append(st)
    return new.with_changes(body=body).code if changed else after


class _LoopBound(cst.CSTVisitor):
    """The names a loop binds: its targets and every name assigned in its body (not inside a
    function or lambda defined there, whose names are its own)."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def _targets(self, node: cst.CSTNode) -> None:
        self.names |= {t.value for t in _targets(node)}

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self.names.add(node.name.value)
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self._targets(node.target)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._targets(node.target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._targets(node.target)

    def visit_For(self, node: cst.For) -> None:
        self._targets(node.target)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._targets(node.target)

    def visit_AsName(self, node: cst.AsName) -> None:
        self._targets(node.name)


class _BindLoopNames(cst.CSTTransformer):
    """Each lambda the rewrite wrote inside a loop gets the loop's names it reads as defaults."""

    def __init__(self, authors: set[str]) -> None:
        self.authors = authors  # the code of the lambdas `before` had: the author's, left alone
        self.loops: list[set[str]] = []

    def visit_For(self, node: cst.For | cst.While) -> None:
        self.loops.append(_loop_bound(node))

    def leave_For(self, original: cst.For | cst.While, updated: Any) -> Any:
        self.loops.pop()
        return updated

    visit_While = visit_For
    leave_While = leave_For

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.loops.append(set())  # a loop outside a function's body does not rebind its names

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        self.loops.pop()
        return updated

    def leave_Lambda(self, original: cst.Lambda, updated: cst.Lambda) -> cst.Lambda:
        bound = set().union(*self.loops)
        if not bound or code(original) in self.authors:
            return updated
        params = updated.params
        own = {p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)}
        late = sorted((names_in(updated.body) & bound) - own)
        if not late:
            return updated
        defaults = [cst.Param(cst.Name(n), default=cst.Name(n), equal=_TIGHT) for n in late]
        return updated.with_changes(params=params.with_changes(params=[*params.params, *defaults]))


def _loop_bound(loop: cst.For | cst.While) -> set[str]:
    v = _LoopBound()
    if isinstance(loop, cst.For):
        v._targets(loop.target)
    loop.body.visit(v)
    return v.names


def _lambdas(tree: cst.Module) -> set[str]:
    return {code(n) for n in walk(tree) if isinstance(n, cst.Lambda)}


def bind_loop_names(before: str, after: str) -> str:
    """`after` with each lambda the rewrite wrote inside a loop binding the loop's names it reads
    as defaults (`lambda meta, n=n: (triton.cdiv(n, meta["BLOCK"]),)`). A grid lambda is called
    at once, so the late binding is harmless, but ruff (B023) and a reviewer flag it: flag_gems'
    `cat` launches once per batch of tensors in a `while` loop. The author's own lambdas stay."""
    if "lambda" not in after:
        return after
    authors = _original(before)[1]
    new = parsed(after)
    # rebuilding the whole module costs more than every check before it: only where a loop
    # holds a lambda the rewrite wrote
    loops = (n for n in walk(new) if isinstance(n, (cst.For, cst.While)))
    if not any(isinstance(n, cst.Lambda) and code(n) not in authors for loop in loops for n in walk(loop)):
        return after
    out = new.visit(_BindLoopNames(authors))
    return out.code if not out.deep_equals(new) else after
