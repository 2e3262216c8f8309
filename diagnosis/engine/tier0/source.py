"""Parse an uploaded kernel module into the facts tier-0 rules read, without importing it.

Everything is static: the module is parsed with ``ast`` and values are resolved only from
literals, module-level constants and simple local assignments. A value that cannot be
resolved stays unknown (``Value.value is None``), never guessed, so a rule that needs it
stays silent and leaves the question to tier 1.
"""

from __future__ import annotations

import ast
import copy
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace

from diagnosis.engine.srcmodel import Kernel, Launch, SourceModel, SourceModelError, model_of, normalize

# Reductions whose result has fewer dimensions than their input.
REDUCTIONS = frozenset(
    {"sum", "max", "min", "reduce", "argmax", "argmin", "xor_sum", "prod", "cumsum", "cumprod"}
)
ATOMICS = frozenset(
    {"atomic_add", "atomic_max", "atomic_min", "atomic_and", "atomic_or", "atomic_xor", "atomic_xchg"}
)
TENSOR_CTORS = frozenset(
    {"randn", "rand", "zeros", "ones", "empty", "full", "randint", "randn_like", "arange", "tensor"}
)
_DTYPES = {
    "float32": "float32",
    "float": "float32",
    "float16": "float16",
    "half": "float16",
    "bfloat16": "bfloat16",
    "float64": "float64",
    "double": "float64",
    "int64": "int64",
    "long": "int64",
    "int32": "int32",
    "int": "int32",
    "int8": "int8",
    "uint8": "uint8",
    "bool": "bool",
    "float8_e4m3fn": "float8",
    "float8_e5m2": "float8",
}
_ALLOCATORS = frozenset(
    {"empty", "zeros", "ones", "full", "empty_like", "zeros_like", "ones_like", "full_like"}
)
_TENSOR_ALLOCATORS = frozenset({"new_empty", "new_zeros", "new_ones", "new_full"})
_DTYPE_METHODS = {"half": "float16", "float": "float32", "bfloat16": "bfloat16", "double": "float64"}
_TRANSPOSES = frozenset({"t", "T", "mT", "transpose", "permute", "swapaxes"})


# ---------------------------------------------------------------------------------------
# values


@dataclass(frozen=True)
class Value:
    """An expression resolved as far as literals allow.

    ``kind`` records where the value comes from even when it is unknown: ``literal``,
    ``next_power_of_2`` (shape-dependent but rounded, as Triton kernels often do),
    ``shape`` (a tensor size, numel or anything computed from one), ``stride`` (a tensor
    stride), ``param`` (a parameter of the enclosing function) or ``unknown``.
    """

    text: str
    value: int | float | bool | str | None = None
    kind: str = "unknown"
    tensor: str = ""  # for shape/stride: the tensor's variable name
    dim: int | None = None  # for shape/stride: the dimension, when given
    line: int = 0  # where the value was assigned, when it came from a local assignment

    @property
    def known(self) -> bool:
        return self.value is not None

    def as_int(self) -> int | None:
        if isinstance(self.value, bool):
            return None
        if isinstance(self.value, int):
            return self.value
        return None


def _unparse(node: ast.AST) -> str:
    try:
        return ast.unparse(node)
    except (ValueError, AttributeError, TypeError):  # a synthetic node without fields
        return "?"


def next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


_BINOPS = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b if b else None,
    ast.Mod: lambda a, b: a % b if b else None,
    ast.Pow: lambda a, b: a**b if 0 <= b < 64 else None,
    ast.LShift: lambda a, b: a << b if 0 <= b < 64 else None,
    ast.RShift: lambda a, b: a >> b if b >= 0 else None,
    ast.Div: lambda a, b: a / b if b else None,
}
_KIND_ORDER = ("shape", "stride", "next_power_of_2", "param", "unknown")


def _merge_kind(*values: Value) -> str:
    kinds = {v.kind for v in values}
    if kinds == {"literal"}:
        return "literal"
    for kind in _KIND_ORDER:
        if kind in kinds:
            return kind
    return "unknown"


class Resolver:
    """Resolves expressions inside one function (or at module level) to ``Value``s.

    Local assignments are looked up by the last assignment textually before the line being
    resolved; control flow is ignored on purpose: an uploaded wrapper is short and the
    rules only act on values that resolve to literals.
    """

    def __init__(
        self,
        module: ModuleContext,
        function: ast.FunctionDef | None = None,
        extra: dict[str, Value] | None = None,
    ) -> None:
        self.module = module
        self.function = function
        self.extra = extra or {}
        self.params: set[str] = set()
        self.local: dict[str, list[tuple[int, ast.expr]]] = {}
        if function is not None:
            self.params = {a.arg for a in _all_args(function.args)}
            self.local = collect_assignments(function.body)

    def lookup(self, name: str, line: int) -> tuple[int, ast.expr] | None:
        best = None
        for def_line, expr in self.local.get(name, ()):
            if def_line < line and (best is None or def_line >= best[0]):
                best = (def_line, expr)
        return best

    def resolve(self, node: ast.expr | None, line: int, depth: int = 0) -> Value:
        if node is None:
            return Value("None", None, "unknown")
        text = _unparse(node)
        if depth > 12:
            return Value(text)
        if isinstance(node, ast.Constant):
            if isinstance(node.value, int | float | bool | str):
                return Value(text, node.value, "literal")
            return Value(text)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            inner = self.resolve(node.operand, line, depth + 1)
            if isinstance(inner.value, int | float) and not isinstance(inner.value, bool):
                return Value(text, -inner.value, inner.kind)
            return replace(inner, text=text, value=None)
        if isinstance(node, ast.Name):
            return self._resolve_name(node.id, text, line, depth)
        if isinstance(node, ast.BinOp):
            left = self.resolve(node.left, line, depth + 1)
            right = self.resolve(node.right, line, depth + 1)
            op = _BINOPS.get(type(node.op))
            lv, rv = left.value, right.value
            if (
                op is not None
                and isinstance(lv, int | float)
                and isinstance(rv, int | float)
                and not isinstance(lv, bool)
                and not isinstance(rv, bool)
            ):
                try:
                    result = op(lv, rv)
                except (OverflowError, ZeroDivisionError):
                    result = None
                if result is not None:
                    kind = "literal" if left.kind == right.kind == "literal" else _merge_kind(left, right)
                    return Value(text, result, kind)
            return Value(text, None, _merge_kind(left, right))
        if isinstance(node, ast.Call):
            return self._resolve_call(node, text, line, depth)
        if isinstance(node, ast.Attribute):
            if node.attr == "shape" or node.attr == "ndim":
                return Value(text, None, "shape", tensor=_base_name(node.value))
            return Value(text)
        if isinstance(node, ast.Subscript):
            # x.shape[1], meta["BLOCK_SIZE"]
            base = node.value
            index = self.resolve(node.slice, line, depth + 1)
            if isinstance(base, ast.Attribute) and base.attr == "shape":
                return Value(text, None, "shape", tensor=_base_name(base.value), dim=index.as_int())
            if isinstance(base, ast.Name) and isinstance(index.value, str) and index.value in self.extra:
                return replace(self.extra[index.value], text=text)
            inner = self.resolve(base, line, depth + 1)
            if inner.kind == "shape":
                return Value(text, None, "shape", tensor=inner.tensor, dim=index.as_int())
            return Value(text)
        return Value(text)

    def _resolve_name(self, name: str, text: str, line: int, depth: int) -> Value:
        if name in self.extra:
            return replace(self.extra[name], text=text)
        found = self.lookup(name, line)
        if found is not None:
            def_line, expr = found
            value = self.resolve(expr, def_line, depth + 1)
            return replace(value, text=text, line=value.line or def_line)
        if name in self.params:
            return Value(text, None, "param")
        const = self.module.constants.get(name)
        if const is not None and depth < 12:
            value = Resolver(self.module).resolve(const[1], const[0], depth + 1)
            return replace(value, text=text, line=value.line or const[0])
        return Value(text)

    def _resolve_call(self, node: ast.Call, text: str, line: int, depth: int) -> Value:
        name = self.module.canonical(node.func)
        args = [self.resolve(a, line, depth + 1) for a in node.args]
        ints = [a.as_int() for a in args]
        if name in ("triton.next_power_of_2", "next_power_of_2") and len(args) == 1:
            n = ints[0]
            return Value(text, next_power_of_2(n) if n is not None else None, "next_power_of_2")
        if name in ("triton.cdiv", "cdiv") and len(args) == 2:
            a, b = ints
            if a is not None and b:
                return Value(
                    text, -(-a // b), "literal" if all(x.kind == "literal" for x in args) else args[0].kind
                )
            return Value(text, None, _merge_kind(*args))
        if name in ("min", "max", "int", "abs") and args:
            if all(i is not None for i in ints):
                fn = {"min": min, "max": max, "int": lambda x: x, "abs": abs}[name]
                return Value(text, fn(*ints), _merge_kind(*args) if len(args) > 1 else args[0].kind)
            return Value(text, None, _merge_kind(*args))
        if isinstance(node.func, ast.Attribute):
            method = node.func.attr
            tensor = _base_name(node.func.value)
            dim = ints[0] if ints else None
            if method in ("numel", "size", "dim") or name == "len":
                return Value(text, None, "shape", tensor=tensor, dim=dim)
            if method == "stride":
                return Value(text, None, "stride", tensor=tensor, dim=dim)
        if name == "len":
            return Value(text, None, "shape")
        return Value(text)


def _base_name(node: ast.expr) -> str:
    while isinstance(node, ast.Attribute | ast.Subscript | ast.Call):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else ""


def _all_args(args: ast.arguments) -> list[ast.arg]:
    out = [*args.posonlyargs, *args.args, *args.kwonlyargs]
    if args.vararg:
        out.append(args.vararg)
    if args.kwarg:
        out.append(args.kwarg)
    return out


def collect_assignments(body: list[ast.stmt]) -> dict[str, list[tuple[int, ast.expr]]]:
    """Name -> [(line, expression)] for plain assignments anywhere in ``body``.

    Tuple unpacking of a tuple (``a, b = x, y``) is split pairwise; unpacking of a shape
    (``M, K = a.shape``) becomes ``a.shape[0]``, ``a.shape[1]``, which is what it means.
    Nested functions and lambdas are not entered.
    """
    out: dict[str, list[tuple[int, ast.expr]]] = {}

    def add(target: ast.expr, value: ast.expr, line: int) -> None:
        if isinstance(target, ast.Name):
            out.setdefault(target.id, []).append((line, value))
        elif isinstance(target, ast.Tuple | ast.List):
            if isinstance(value, ast.Tuple | ast.List) and len(value.elts) == len(target.elts):
                for t, v in zip(target.elts, value.elts, strict=True):
                    add(t, v, line)
            else:
                for i, t in enumerate(target.elts):
                    sub = ast.Subscript(value=value, slice=ast.Constant(i), ctx=ast.Load())
                    add(t, sub, line)

    for node in _walk_no_nested(body):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                add(target, node.value, node.lineno)
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            add(node.target, node.value, node.lineno)
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            expr = ast.BinOp(left=ast.Name(node.target.id, ast.Load()), op=node.op, right=node.value)
            ast.copy_location(expr, node)
            out.setdefault(node.target.id, []).append((node.lineno, expr))
    return out


def _walk_no_nested(body: Iterable[ast.AST]) -> Iterator[ast.AST]:
    stack = list(body)[::-1]
    while stack:
        node = stack.pop()
        yield node
        for child in reversed(list(ast.iter_child_nodes(node))):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
                continue
            stack.append(child)


# ---------------------------------------------------------------------------------------
# dependency analysis inside a kernel


@dataclass(frozen=True)
class Deps:
    """What an expression inside a kernel is computed from, transitively through locals."""

    params: frozenset[str] = frozenset()
    pids: frozenset[int] = frozenset()
    loop_vars: frozenset[str] = frozenset()
    arange: bool = False
    loaded: bool = False
    reduced: bool = False
    wide: bool = False  # passed through a cast to int64 somewhere

    def __or__(self, other: Deps) -> Deps:
        return Deps(
            self.params | other.params,
            self.pids | other.pids,
            self.loop_vars | other.loop_vars,
            self.arange or other.arange,
            self.loaded or other.loaded,
            self.reduced or other.reduced,
            self.wide or other.wide,
        )

    @property
    def tensor(self) -> bool:
        """True when the value is a block (a tensor), not a scalar."""
        return self.arange or self.loaded


_NO_DEPS = Deps()


# ---------------------------------------------------------------------------------------
# launches, autotune, inputs


@dataclass(frozen=True)
class Config:
    """One ``triton.Config`` of an autotune decorator."""

    kwargs: dict[str, Value]
    num_warps: int | None
    num_stages: int | None
    line: int


@dataclass(frozen=True)
class Autotune:
    configs: tuple[Config, ...]
    key: tuple[str, ...]
    line: int
    single: bool = False  # at most one config (the source model's Kernel.single_config)


@dataclass
class LaunchSite:
    """One ``kernel[grid](...)`` call in the wrapper code."""

    kernel: str
    node: ast.Call
    line: int
    function: str  # qualified name of the enclosing function, "" at module level
    grid: tuple[Value, ...] | None  # None: grid expression not understood
    args: dict[str, ast.expr]  # kernel parameter -> argument expression
    values: dict[str, Value]  # kernel parameter -> resolved argument
    options: dict[str, Value]  # num_warps, num_stages, ...
    resolver: Resolver

    @property
    def programs(self) -> int | None:
        if self.grid is None:
            return None
        total = 1
        for dim in self.grid:
            n = dim.as_int()
            if n is None:
                return None
            total *= n
        return total

    @property
    def num_warps(self) -> Value | None:
        return self.options.get("num_warps")

    def local_buffer(self, param: str) -> bool:
        """Whether the argument for ``param`` is a tensor the launching function allocated
        (``torch.empty(...)``, ``torch.zeros_like(...)``, ``x.new_empty(...)``): an
        intermediate, not an input."""
        return self.allocation(param) is not None

    def allocation(self, param: str) -> ast.Call | None:
        """The call that allocated the tensor passed for ``param`` in the launching function."""
        arg = self.args.get(param)
        found = self.resolver.lookup(arg.id, self.line) if isinstance(arg, ast.Name) else None
        call = found[1] if found is not None else None
        if not isinstance(call, ast.Call):
            return None
        if isinstance(call.func, ast.Attribute) and call.func.attr in _TENSOR_ALLOCATORS:
            return call
        name = self.resolver.module.canonical(call.func) or ""
        return call if name.startswith("torch.") and name.split(".")[-1] in _ALLOCATORS else None

    def allocated_dims(self, param: str) -> set[int]:
        """The dimensions, known as integers, of a tensor the launching function allocated with
        a shape (``torch.empty((n, 32))``, ``x.new_zeros(n, 32)``) and passes for ``param``."""
        call = self.allocation(param)
        if call is None:
            return set()
        return {d for d in _ctor_shape(self.resolver.module, call, self.resolver) if d is not None}


@dataclass(frozen=True)
class InputTensor:
    """A tensor built in get_inputs / get_input_cases, with what could be read of it."""

    shape: tuple[int | None, ...]
    dtype: str
    line: int
    function: str

    @property
    def numel(self) -> int | None:
        if any(d is None for d in self.shape):
            return None
        return math.prod(d for d in self.shape if d is not None)


# ---------------------------------------------------------------------------------------
# kernel context


@dataclass
class KernelContext:
    """One ``@triton.jit`` function and everything the rules read about it."""

    module: ModuleContext
    name: str
    node: ast.FunctionDef
    params: list[str]
    constexprs: list[str]
    decorators: list[str]  # canonical names: triton.jit, triton.autotune, triton.heuristics
    autotune: Autotune | None
    heuristics: tuple[str, ...]  # constexprs set by @triton.heuristics
    defs: dict[str, list[tuple[int, ast.expr]]]
    loop_vars: set[str]
    parents: dict[ast.AST, ast.AST] = field(repr=False)
    _deps: dict[str, Deps] = field(default_factory=dict, repr=False)
    _busy: set[str] = field(default_factory=set, repr=False)
    # Computed once: rules walk the same body many times.
    _nodes: list[ast.AST] = field(default_factory=list, repr=False)
    _calls: list[tuple[str, ast.Call]] = field(default_factory=list, repr=False)
    _pointers: set[str] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self._nodes = list(_walk_no_nested(self.node.body))
        self._calls = [(name, n) for n in self._nodes if (name := self.tl_name(n)) is not None]

    @property
    def line(self) -> int:
        return self.node.lineno

    @property
    def launches(self) -> list[LaunchSite]:
        return [s for s in self.module.launches if s.kernel == self.name]

    @property
    def runtime_params(self) -> list[str]:
        return [p for p in self.params if p not in self.constexprs]

    def walk(self) -> Iterator[ast.AST]:
        """Every node of the body in source order, without entering nested functions or lambdas."""
        return iter(self._nodes)

    def tl_name(self, node: ast.AST) -> str | None:
        """'load' for ``tl.load(...)``; None when the call is not a triton.language call."""
        if not isinstance(node, ast.Call):
            return None
        name = self.module.canonical(node.func)
        if name and name.startswith("tl."):
            return name[3:]
        return None

    def tl_calls(self, *names: str) -> list[ast.Call]:
        """triton.language calls in the body, restricted to ``names`` when given."""
        wanted = set(names)
        return [n for name, n in self._calls if not wanted or name in wanted]

    def loops(self) -> list[ast.For | ast.While]:
        return [n for n in self.walk() if isinstance(n, ast.For | ast.While)]

    def enclosing_loops(self, node: ast.AST) -> list[ast.For | ast.While]:
        out = []
        cur = self.parents.get(node)
        while cur is not None and cur is not self.node:
            if isinstance(cur, ast.For | ast.While):
                out.append(cur)
            cur = self.parents.get(cur)
        return out

    def enclosing(self, node: ast.AST, kind: type | tuple[type, ...]) -> list[ast.AST]:
        out = []
        cur = self.parents.get(node)
        while cur is not None and cur is not self.node:
            if isinstance(cur, kind):
                out.append(cur)
            cur = self.parents.get(cur)
        return out

    # -- dependencies ------------------------------------------------------------------

    def deps(self, node: ast.AST | None) -> Deps:
        if node is None:
            return _NO_DEPS
        out = _NO_DEPS
        for sub in _walk_expr(node):
            if isinstance(sub, ast.Name):
                out = out | self.name_deps(sub.id)
            elif isinstance(sub, ast.Call):
                name = self.tl_name(sub)
                if name == "program_id":
                    out = out | Deps(pids=frozenset({_pid_axis(sub)}))
                elif name == "arange":
                    out = out | Deps(arange=True)
                elif name == "load":
                    out = out | Deps(loaded=True)
                elif name in REDUCTIONS:
                    out = out | Deps(reduced=True)
                elif name is None:
                    out = out | self._helper_pids(sub)
                if self.is_int64_cast(sub):
                    out = out | Deps(wide=True)
        return out

    def _helper_pids(self, call: ast.Call) -> Deps:
        """A call of a module jit function that reads `tl.program_id` (fla's
        `unflatten_program_id`) returns values of those program axes."""
        helper = self.module.kernels.get(self.module.canonical(call.func) or "")
        if helper is None or helper is self:
            return _NO_DEPS
        axes = frozenset(_pid_axis(c) for name, c in helper._calls if name == "program_id")
        return Deps(pids=axes) if axes else _NO_DEPS

    def name_deps(self, name: str) -> Deps:
        if name in self._deps:
            return self._deps[name]
        if name in self._busy:  # a loop-carried definition: its other definitions decide
            return _NO_DEPS
        self._busy.add(name)
        out = _NO_DEPS
        if name in self.params:
            out = out | Deps(params=frozenset({name}))
        if name in self.loop_vars:
            out = out | Deps(loop_vars=frozenset({name}))
        for _, expr in self.defs.get(name, ()):
            out = out | self.deps(expr)
        self._busy.discard(name)
        self._deps[name] = out
        return out

    def is_int64_cast(self, call: ast.Call) -> bool:
        """``x.to(tl.int64)``, ``tl.cast(x, tl.int64)``, ``x.to(tl.uint64)``."""
        if isinstance(call.func, ast.Attribute) and call.func.attr == "to" and call.args:
            target = self.module.canonical(call.args[0])
        elif self.tl_name(call) == "cast" and len(call.args) >= 2:
            target = self.module.canonical(call.args[1])
        else:
            return False
        return target in ("tl.int64", "tl.uint64")

    def memory_ops(self) -> list[tuple[str, ast.Call, ast.expr]]:
        """(op, call, pointer expression) for every tl.load / tl.store / tl.atomic_*."""
        out = []
        for call in self.tl_calls("load", "store", *ATOMICS):
            ptr = _call_arg(call, 0, "pointer")
            if ptr is not None:
                out.append((self.tl_name(call) or "", call, ptr))
        return out

    def pointer_params(self) -> set[str]:
        """Parameters used as base pointers: they reach a memory access and are only added to.

        Strides are multiplied, sizes compared or divided, so neither survives; a name
        ending in ``ptr`` is taken at its word.
        """
        if self._pointers is not None:
            return self._pointers
        reached: set[str] = set()
        for _, _, ptr in self.memory_ops():
            reached |= self.deps(ptr).params
        arithmetic: set[str] = set()
        for node in self.walk():
            operands: list[ast.expr] = []
            if isinstance(node, ast.BinOp) and not isinstance(node.op, ast.Add | ast.Sub):
                operands = [node.left, node.right]
            elif isinstance(node, ast.Compare):
                operands = [node.left, *node.comparators]
            elif isinstance(node, ast.Call) and self.tl_name(node) not in ("load", "store", *ATOMICS):
                if self.module.canonical(node.func) in ("range", "tl.range", "tl.cdiv", "tl.static_range"):
                    operands = list(node.args)
            arithmetic |= {o.id for o in operands if isinstance(o, ast.Name)}
        self._pointers = {
            p
            for p in reached
            if p not in self.constexprs and (p.lower().endswith("ptr") or p not in arithmetic)
        }
        return self._pointers

    def multidim(self, node: ast.AST, seen: frozenset[str] = frozenset()) -> bool:
        """Whether a block value has two or more dimensions, as far as the source shows it.

        2-D shows as an expansion (``x[:, None]``), a 2-tuple shape (``tl.zeros((M, N))``), a
        ``tl.dot`` or a reshape; anything else is taken as 1-D (or scalar).
        """
        for sub in _walk_expr(node):
            axes = subscript_axes(sub)
            if axes is not None and len(axes) >= 2:
                return True
            if isinstance(sub, ast.Call):
                name = self.tl_name(sub)
                if name in ("dot", "trans", "expand_dims", "broadcast_to", "reshape", "view", "join"):
                    return True
                if name in ("zeros", "full", "empty") and sub.args:
                    shape = sub.args[0]
                    if isinstance(shape, ast.Tuple | ast.List) and len(shape.elts) >= 2:
                        return True
            if isinstance(sub, ast.Name) and sub.id not in seen and sub.id in self.defs:
                if any(self.multidim(e, seen | {sub.id}) for _, e in self.defs[sub.id]):
                    return True
        return False

    def is_reduced(self, node: ast.AST, seen: frozenset[str] = frozenset()) -> bool:
        """Whether a value is a reduction result (or scalar math on reduction results only).

        ``tl.sum(x) / n`` is; ``x - tl.max(x)`` is not: it still has the block's shape.
        """
        if isinstance(node, ast.Constant):
            return True
        if isinstance(node, ast.Call):
            name = self.tl_name(node)
            if name in REDUCTIONS:
                return True
            if name in ("sqrt", "rsqrt", "exp", "log", "abs", "maximum", "minimum", "where", "fma"):
                return all(self.is_reduced(a, seen) for a in node.args)
            if isinstance(node.func, ast.Attribute) and node.func.attr in ("to", *REDUCTIONS):
                return node.func.attr in REDUCTIONS or self.is_reduced(node.func.value, seen)
            return False
        if isinstance(node, ast.BinOp):
            return self.is_reduced(node.left, seen) and self.is_reduced(node.right, seen)
        if isinstance(node, ast.UnaryOp):
            return self.is_reduced(node.operand, seen)
        if isinstance(node, ast.Name):
            if node.id in seen:
                return True
            defs = self.defs.get(node.id, ())
            if not defs:
                return node.id in self.params  # a scalar argument
            return all(self.is_reduced(e, seen | {node.id}) for _, e in defs)
        return False

    def definition(self, name: str) -> ast.expr | None:
        """The single definition of a kernel local, or None when there is none or several."""
        defs = self.defs.get(name, ())
        return defs[0][1] if len(defs) == 1 else None

    # -- values at launch -------------------------------------------------------------

    def constexpr_values(self, name: str) -> list[tuple[Value, int]]:
        """Every value a constexpr takes: per launch site or per autotune config, with a line."""
        out: list[tuple[Value, int]] = []
        if self.autotune is not None:
            for cfg in self.autotune.configs:
                if name in cfg.kwargs:
                    out.append((cfg.kwargs[name], cfg.line))
        for site in self.launches:
            if name in site.values:
                out.append((site.values[name], site.line))
        default = self.param_default(name)
        if not out and default is not None:
            out.append((default, self.line))
        return out

    def param_default(self, name: str) -> Value | None:
        args = self.node.args
        positional = [*args.posonlyargs, *args.args]
        defaults = dict(
            zip(
                [a.arg for a in positional[len(positional) - len(args.defaults) :]],
                args.defaults,
                strict=True,
            )
        )
        if name in defaults:
            return Resolver(self.module).resolve(defaults[name], self.line)
        return None

    def arange_bounds(self) -> list[tuple[str, ast.Call]]:
        """The constexpr (or literal text) each ``tl.arange(0, X)`` runs to."""
        out = []
        for call in self.tl_calls("arange"):
            if len(call.args) >= 2:
                out.append((_unparse(call.args[1]), call))
        return out


def _walk_expr(node: ast.AST) -> Iterator[ast.AST]:
    """Like ast.walk, but does not enter lambdas (their names are not kernel locals)."""
    stack = [node]
    while stack:
        cur = stack.pop()
        yield cur
        for child in ast.iter_child_nodes(cur):
            if not isinstance(child, ast.Lambda):
                stack.append(child)


def _pid_axis(call: ast.Call) -> int:
    """The axis of a `tl.program_id` call (0 where it is not a literal)."""
    axis = _call_arg(call, 0, "axis")
    return axis.value if isinstance(axis, ast.Constant) and isinstance(axis.value, int) else 0


def _call_arg(call: ast.Call, index: int, name: str) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    if len(call.args) > index:
        return call.args[index]
    return None


call_arg = _call_arg


def has_kwarg(call: ast.Call, *names: str) -> bool:
    return any(kw.arg in names for kw in call.keywords)


# ---------------------------------------------------------------------------------------
# module context


@dataclass
class ModuleContext:
    """The parsed module: kernels, wrapper functions, launch sites, inputs."""

    source: str
    tree: ast.Module
    aliases: dict[str, str]
    constants: dict[str, tuple[int, ast.expr]]
    kernels: dict[str, KernelContext] = field(default_factory=dict)
    functions: dict[str, ast.FunctionDef] = field(default_factory=dict)  # module level, not jit
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)
    launches: list[LaunchSite] = field(default_factory=list)
    inputs: list[InputTensor] = field(default_factory=list)
    model: SourceModel | None = field(default=None, repr=False)

    def canonical(self, node: ast.AST) -> str | None:
        """Dotted name with import aliases undone: ``tl.load``, ``triton.jit``, ``torch.randn``
        (the source model's reading of the imports)."""
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        text = ".".join([node.id, *reversed(parts)])
        if self.model is not None:
            return self.model.names.resolve(text)
        head = self.aliases.get(node.id, node.id)
        return normalize(".".join([head, *reversed(parts)]))

    def segment(self, node: ast.AST) -> str:
        return ast.get_source_segment(self.source, node) or _unparse(node)

    def function_named(self, qualname: str) -> ast.FunctionDef | None:
        if "." in qualname:
            cls, _, meth = qualname.partition(".")
            node = self.classes.get(cls)
            if node is None:
                return None
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == meth:
                    return item
            return None
        return self.functions.get(qualname)

    def input_dtypes(self) -> set[str]:
        return {t.dtype for t in self.inputs}

    def max_input_numel(self) -> int | None:
        sizes = [t.numel for t in self.inputs if t.numel is not None]
        return max(sizes) if sizes else None


def parse_module(source: str) -> ModuleContext:
    """The tier-0 view of ``source``'s source model: which functions are kernels, what their
    constexprs are, what the imports mean and where every launch is come from the model (the one
    validation and the rules read); this module adds the ast-side readers of values and of kernel
    bodies. Raises SyntaxError when the text does not parse."""
    try:
        model = model_of(source)
    except SourceModelError as exc:
        raise SyntaxError(str(exc)) from exc
    tree = model.ast_tree
    aliases = {local: normalize(full) for local, full in model.names.imports.items()}
    constants: dict[str, tuple[int, ast.expr]] = {}
    statements = model.ast_module_statements()
    for stmt in statements:
        targets: list[ast.expr] = []
        value: ast.expr | None = None
        if isinstance(stmt, ast.Assign):
            targets, value = stmt.targets, stmt.value
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            targets, value = [stmt.target], stmt.value
        for target in targets:
            if isinstance(target, ast.Name) and value is not None:
                constants[target.id] = (stmt.lineno, value)
    ctx = ModuleContext(source, tree, aliases, constants, model=model)
    kernel_lines = {model.position(k.node)[0]: k for k in model.kernels.values()}
    for stmt in statements:
        if isinstance(stmt, ast.FunctionDef):
            found = kernel_lines.get(stmt.lineno)
            if found is not None and found.name == stmt.name:
                ctx.kernels[stmt.name] = _kernel_context(ctx, stmt, found)
            else:
                ctx.functions[stmt.name] = stmt
        elif isinstance(stmt, ast.ClassDef):
            ctx.classes[stmt.name] = stmt
    # `k_tuned = triton.autotune(...)(k)` (a size dispatch keeps `k` for small problems): `k` has
    # an autotune space even though its own decorators do not say so
    for name, kernel in model.kernels.items():
        if kernel.handles and name in ctx.kernels:
            call = _handle_autotune(ctx, kernel.handles[0])
            if call is not None:
                ctx.kernels[name].autotune = _parse_autotune(ctx, call)
    ctx.launches = _find_launches(ctx)
    ctx.inputs = _find_inputs(ctx)
    return ctx


def _handle_autotune(ctx: ModuleContext, handle: str) -> ast.Call | None:
    """The `triton.autotune(...)` call of the module statement `handle = triton.autotune(...)(k)`."""
    assert ctx.model is not None
    for stmt in ctx.model.ast_module_statements():
        if not (isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == handle for t in stmt.targets)):
            continue
        value = stmt.value
        while isinstance(value, ast.Call) and isinstance(value.func, ast.Call):
            if _decorator_name(ctx, value.func) == "triton.autotune":
                return value.func
            value = value.args[0] if value.args else None
    return None


def _decorator_name(ctx: ModuleContext, node: ast.expr) -> str | None:
    if isinstance(node, ast.Call):
        node = node.func
    return ctx.canonical(node)


def _kernel_context(ctx: ModuleContext, fn: ast.FunctionDef, kernel: Kernel) -> KernelContext:
    params = [a.arg for a in _all_args(fn.args)]
    autotune = None
    for dec, name in zip(fn.decorator_list, kernel.decorators, strict=False):
        if name == "triton.autotune" and isinstance(dec, ast.Call):
            autotune = replace(_parse_autotune(ctx, dec), single=kernel.single_config)
    parents = _parents(fn)
    loop_vars: set[str] = set()
    for node in _walk_no_nested(fn.body):
        if isinstance(node, ast.For):
            for target in ast.walk(node.target):
                if isinstance(target, ast.Name):
                    loop_vars.add(target.id)
    return KernelContext(
        module=ctx,
        name=fn.name,
        node=fn,
        params=params,
        constexprs=list(kernel.constexprs),
        decorators=list(kernel.decorators),
        autotune=autotune,
        heuristics=tuple(kernel.heuristics),
        defs=collect_assignments(fn.body),
        loop_vars=loop_vars,
        parents=parents,
    )


def _parse_autotune(ctx: ModuleContext, dec: ast.Call) -> Autotune:
    resolver = Resolver(ctx)
    configs_node = _call_arg(dec, 0, "configs")
    key_node = _call_arg(dec, 1, "key")
    if isinstance(configs_node, ast.Name) and configs_node.id in ctx.constants:
        configs_node = ctx.constants[configs_node.id][1]
    configs: list[Config] = []
    elts: list[ast.expr] = []
    if isinstance(configs_node, ast.List | ast.Tuple):
        elts = list(configs_node.elts)
    elif isinstance(configs_node, ast.ListComp):
        # [triton.Config({...}, num_warps=w) for w in [1, 2, 4]]: expand literal iterables only
        elts = _expand_listcomp(configs_node, ctx)
    for elt in elts:
        if not isinstance(elt, ast.Call):
            continue
        kwargs: dict[str, Value] = {}
        first = _call_arg(elt, 0, "kwargs")
        if isinstance(first, ast.Dict):
            for k, v in zip(first.keys, first.values, strict=True):
                if isinstance(k, ast.Constant) and isinstance(k.value, str):
                    kwargs[k.value] = resolver.resolve(v, elt.lineno)
        warps = _call_arg(elt, 1, "num_warps")
        stages = _call_arg(elt, 2, "num_stages")
        configs.append(
            Config(
                kwargs,
                resolver.resolve(warps, elt.lineno).as_int() if warps is not None else None,
                resolver.resolve(stages, elt.lineno).as_int() if stages is not None else None,
                elt.lineno,
            )
        )
    key: tuple[str, ...] = ()
    if isinstance(key_node, ast.List | ast.Tuple):
        key = tuple(
            e.value for e in key_node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)
        )
    return Autotune(tuple(configs), key, dec.lineno)


def _expand_listcomp(node: ast.ListComp, ctx: ModuleContext) -> list[ast.expr]:
    """Substitute literal loop values into a list comprehension's element, one copy each."""
    envs: list[dict[str, ast.expr]] = [{}]
    for gen in node.generators:
        values = _literal_iter(gen.iter, ctx)
        if values is None or gen.ifs:
            return []
        new_envs = []
        for env in envs:
            for value in values:
                bound = dict(env)
                _bind(gen.target, value, bound)
                new_envs.append(bound)
        envs = new_envs
    out = []
    for env in envs[:256]:
        elt = _Substitute(env).visit(_deepcopy(node.elt))
        out.append(elt)
    return out


def _deepcopy(node: ast.expr) -> ast.expr:
    return copy.deepcopy(node)


def _literal_iter(node: ast.expr, ctx: ModuleContext) -> list[ast.expr] | None:
    if isinstance(node, ast.Name) and node.id in ctx.constants:
        node = ctx.constants[node.id][1]
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        return list(node.elts)
    if isinstance(node, ast.Call) and ctx.canonical(node.func) == "range":
        resolver = Resolver(ctx)
        ints = [resolver.resolve(a, node.lineno).as_int() for a in node.args]
        if ints and all(i is not None for i in ints) and len(ints) <= 3:
            rng = range(*[i for i in ints if i is not None])
            if len(rng) <= 64:
                return [ast.Constant(i) for i in rng]
    return None


def _bind(target: ast.expr, value: ast.expr, env: dict[str, ast.expr]) -> None:
    if isinstance(target, ast.Name):
        env[target.id] = value
    elif isinstance(target, ast.Tuple | ast.List) and isinstance(value, ast.Tuple | ast.List):
        for t, v in zip(target.elts, value.elts, strict=False):
            _bind(t, v, env)


class _Substitute(ast.NodeTransformer):
    def __init__(self, env: dict[str, ast.expr]) -> None:
        self.env = env

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in self.env:
            return ast.copy_location(_deepcopy(self.env[node.id]), node)
        return node


# ---------------------------------------------------------------------------------------
# launch sites


def _find_launches(ctx: ModuleContext) -> list[LaunchSite]:
    """The model's launches of the module's kernels, each over the ast node of its call."""
    model = ctx.model
    assert model is not None
    calls = _ast_index(ctx, ast.Call)
    functions = _ast_index(ctx, ast.FunctionDef)
    out: list[LaunchSite] = []
    for launch in model.launches:
        kernel = ctx.kernels.get(launch.kernel)
        node = calls.get(model.position(launch.call))
        fn = functions.get(model.position(launch.function))
        if kernel is None or not isinstance(node, ast.Call) or not isinstance(fn, ast.FunctionDef):
            continue
        out.append(_launch_site(ctx, kernel, launch, node, Resolver(ctx, fn)))
    out.sort(key=lambda s: s.line)
    return out


def _ast_index(ctx: ModuleContext, kind: type) -> dict[tuple[int, int], ast.AST]:
    """(line, column in characters) -> the ast node of `kind` that starts there."""
    lines = re.split(r"\r\n|\r|\n", ctx.source)
    out: dict[tuple[int, int], ast.AST] = {}
    for node in ast.walk(ctx.tree):
        if isinstance(node, kind):
            text = lines[node.lineno - 1] if node.lineno - 1 < len(lines) else ""
            # ast counts columns in UTF-8 bytes, libcst in characters
            col = len(text.encode("utf-8")[: node.col_offset].decode("utf-8", "replace"))
            out.setdefault((node.lineno, col), node)
    return out


_LAUNCH_OPTIONS = frozenset({"num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion"})


def _launch_site(
    ctx: ModuleContext, kernel: KernelContext, launch: Launch, node: ast.Call, resolver: Resolver
) -> LaunchSite:
    line = node.lineno
    model_kernel = ctx.model.kernels[launch.kernel] if ctx.model is not None else None
    positional = launch.positional
    bound = launch.bound_args(model_kernel) if model_kernel is not None else {}
    args: dict[str, ast.expr] = {}
    for param, a in bound.items():
        if a.keyword is None:
            i = next(i for i, p in enumerate(positional) if p is a)
            if i < len(node.args):
                args[param] = node.args[i]
    options: dict[str, Value] = {}
    for kw in _keywords(node, resolver):
        if kw.arg in _LAUNCH_OPTIONS and kw.arg not in kernel.params:
            options[kw.arg] = resolver.resolve(kw.value, line)
        else:
            args[kw.arg] = kw.value
    values = {param: resolver.resolve(expr, line) for param, expr in args.items()}
    assert isinstance(node.func, ast.Subscript)
    grid = _resolve_grid(ctx, node.func.slice, resolver, line, values)
    return LaunchSite(kernel.name, node, line, launch.qualname, grid, args, values, options, resolver)


def _keywords(node: ast.Call, resolver: Resolver) -> list[ast.keyword]:
    """The launch's keywords, those of a `**d` of a local dict literal among them (liger's
    `kwargs = {"BLOCK_N": 2048, "num_warps": 1}`, or written in place): the literal's string keys
    with their values."""
    out = []
    for kw in node.keywords:
        if kw.arg is not None:
            out.append(kw)
            continue
        found = resolver.lookup(kw.value.id, node.lineno) if isinstance(kw.value, ast.Name) else None
        table = found[1] if found is not None else kw.value
        if isinstance(table, ast.Dict):
            out += [
                ast.keyword(arg=key.value, value=value)
                for key, value in zip(table.keys, table.values, strict=True)
                if isinstance(key, ast.Constant) and isinstance(key.value, str)
            ]
    return out


def _resolve_grid(
    ctx: ModuleContext, expr: ast.expr, resolver: Resolver, line: int, values: dict[str, Value]
) -> tuple[Value, ...] | None:
    for _ in range(4):
        if isinstance(expr, ast.Name):
            found = resolver.lookup(expr.id, line)
            if found is not None:
                line, expr = found
                continue
            fn = ctx.functions.get(expr.id)
            if fn is not None:
                returns = [n.value for n in ast.walk(fn) if isinstance(n, ast.Return) and n.value is not None]
                if len(returns) != 1:
                    return None
                meta = fn.args.args[0].arg if fn.args.args else "meta"
                sub = Resolver(ctx, fn, extra={**values, meta: Value(meta)})
                return _grid_tuple(returns[0], sub, returns[0].lineno)
            return None
        if isinstance(expr, ast.Lambda):
            meta = expr.args.args[0].arg if expr.args.args else "meta"
            # meta["BLOCK_SIZE"] reads the launch's constexprs; the lambda's own parameter is not a local.
            sub = Resolver(ctx, resolver.function, extra={**values, meta: Value(meta)})
            return _grid_tuple(expr.body, sub, line)
        return _grid_tuple(expr, resolver, line)
    return None


def _grid_tuple(expr: ast.expr, resolver: Resolver, line: int) -> tuple[Value, ...] | None:
    if isinstance(expr, ast.Tuple | ast.List):
        return tuple(resolver.resolve(e, line) for e in expr.elts)
    value = resolver.resolve(expr, line)
    if value.known or value.kind != "unknown":
        return (value,)
    return None


# ---------------------------------------------------------------------------------------
# inputs


# Helpers of get_inputs / get_input_cases are followed this many calls deep; a recursive helper
# stops at its first repeat. The tensors collected per function are capped (comprehensions
# multiply them).
_HELPER_DEPTH = 3
_MAX_INPUTS = 1024


def _find_inputs(ctx: ModuleContext) -> list[InputTensor]:
    out: list[InputTensor] = []
    for fname in ("get_inputs", "get_input_cases"):
        fn = ctx.functions.get(fname)
        if fn is not None:
            out += _inputs_of(ctx, fn, (fname,))
    return out


def _inputs_of(ctx: ModuleContext, fn: ast.FunctionDef, path: tuple[str, ...]) -> list[InputTensor]:
    """The tensors ``fn`` builds, and those built by the module-level helpers it calls with the
    call's arguments in place of the helper's parameters. ``path``: the functions on the way here,
    get_inputs or get_input_cases first (the function every tensor found is reported under)."""
    resolver = Resolver(ctx, fn)
    parents = _parents(fn)
    out: list[InputTensor] = []
    for node in ast.walk(fn):
        if not isinstance(node, ast.Call) or len(out) >= _MAX_INPUTS:
            continue
        name = ctx.canonical(node.func) or ""
        if name.startswith("torch.") and name.split(".")[-1] in TENSOR_CTORS:
            out += _ctor_inputs(ctx, node, parents, resolver, path[0])
            continue
        helper = _helper_called(ctx, node, path)
        if helper is not None:
            out += _helper_inputs(ctx, helper, node, parents, resolver, path)
    return out[:_MAX_INPUTS]


def _helper_inputs(
    ctx: ModuleContext,
    helper: ast.FunctionDef,
    node: ast.Call,
    parents: dict[ast.AST, ast.AST],
    resolver: Resolver,
    path: tuple[str, ...],
) -> list[InputTensor]:
    """The tensors ``helper`` builds when ``node`` calls it, once per binding of the comprehensions
    around the call, each with the helper's own line."""
    out: list[InputTensor] = []
    for env in _comprehension_envs(ctx, node, parents):
        call = _Substitute(env).visit(_deepcopy(node)) if env else node
        body = _Substitute(_bind_helper(ctx, helper, call, resolver)).visit(_deepcopy(helper))
        out += _inputs_of(ctx, body, (*path, helper.name))
    return out


def _ctor_inputs(
    ctx: ModuleContext, node: ast.Call, parents: dict[ast.AST, ast.AST], resolver: Resolver, fname: str
) -> list[InputTensor]:
    """One tensor per binding of the comprehensions around the constructor call ``node``."""
    dtype = _ctor_dtype(ctx, node, parents)
    out = []
    for env in _comprehension_envs(ctx, node, parents):
        sub = _Substitute(env).visit(_deepcopy(node)) if env else node
        out.append(InputTensor(_ctor_shape(ctx, sub, resolver), dtype, node.lineno, fname))
    return out


def _parents(fn: ast.AST) -> dict[ast.AST, ast.AST]:
    parents: dict[ast.AST, ast.AST] = {}
    for node in ast.walk(fn):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    return parents


def _helper_called(ctx: ModuleContext, call: ast.Call, path: tuple[str, ...]) -> ast.FunctionDef | None:
    """The module-level function ``call`` calls by name, unless it is already on ``path`` (a
    recursion) or ``path`` is as deep as helpers are followed."""
    if not isinstance(call.func, ast.Name) or call.func.id in path or len(path) > _HELPER_DEPTH:
        return None
    return ctx.functions.get(call.func.id)


def _bind_helper(
    ctx: ModuleContext, helper: ast.FunctionDef, call: ast.Call, resolver: Resolver
) -> dict[str, ast.expr]:
    """Parameter -> what ``call`` passes it (or its default), as an expression that means the same
    inside ``helper``: a literal or a torch dtype. A parameter whose argument cannot be told, or
    that the helper assigns to, is left out and stays unknown there."""
    given, complete = _positional_args(ctx, call, resolver)
    positional = [a.arg for a in (*helper.args.posonlyargs, *helper.args.args)]
    defaults = _defaults(helper)
    if any(kw.arg is None for kw in call.keywords):  # **kwargs may set any of them
        defaults = {}
    elif not complete:  # *args of unknown length may set any positional one
        defaults = {n: d for n, d in defaults.items() if n not in positional}
    module = Resolver(ctx)
    bound = {n: _binding(ctx, d, module, helper.lineno) for n, d in defaults.items()}
    bound |= {n: _binding(ctx, a, resolver, call.lineno) for n, a in zip(positional, given, strict=False)}
    names = {a.arg for a in _all_args(helper.args)}
    bound |= {
        kw.arg: _binding(ctx, kw.value, resolver, call.lineno) for kw in call.keywords if kw.arg in names
    }
    stored = _stored_names(helper)
    return {n: e for n, e in bound.items() if e is not None and n not in stored}


def _positional_args(ctx: ModuleContext, call: ast.Call, resolver: Resolver) -> tuple[list[ast.expr], bool]:
    """The call's positional arguments with ``*literal`` spread; False when a ``*`` argument is not
    a literal sequence (the arguments from there on are unknown)."""
    out: list[ast.expr] = []
    for arg in call.args:
        if not isinstance(arg, ast.Starred):
            out.append(arg)
            continue
        elts = _literal_elts(ctx, arg.value, resolver, call.lineno)
        if elts is None:
            return out, False
        out += elts
    return out, True


def _literal_elts(ctx: ModuleContext, node: ast.expr, resolver: Resolver, line: int) -> list[ast.expr] | None:
    """The elements of a literal tuple or list, also through module constants and literal
    subscripts (``_CASES[0]``)."""
    if isinstance(node, ast.Subscript):
        elts = _literal_elts(ctx, node.value, resolver, line)
        index = resolver.resolve(node.slice, line).as_int()
        if elts is None or index is None or not -len(elts) <= index < len(elts):
            return None
        node = elts[index]
    if isinstance(node, ast.Name) and node.id in ctx.constants:
        node = ctx.constants[node.id][1]
    return list(node.elts) if isinstance(node, ast.Tuple | ast.List) else None


def _defaults(fn: ast.FunctionDef) -> dict[str, ast.expr]:
    args = fn.args
    positional = [*args.posonlyargs, *args.args]
    named = [a.arg for a in positional[len(positional) - len(args.defaults) :]]
    out = dict(zip(named, args.defaults, strict=True))
    out |= {a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None}
    return out


def _binding(ctx: ModuleContext, node: ast.expr, resolver: Resolver, line: int) -> ast.expr | None:
    """``node`` (read by ``resolver`` at ``line``) as an expression that needs no local names: a
    torch dtype as written, a value as a literal; None when it is neither."""
    if _dtype_name(ctx, node) is not None:
        return node
    value = resolver.resolve(node, line)
    return ast.Constant(value.value) if value.known else None


def _stored_names(fn: ast.FunctionDef) -> set[str]:
    return {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store | ast.Del)}


def _comprehension_envs(
    ctx: ModuleContext, node: ast.AST, parents: dict[ast.AST, ast.AST]
) -> list[dict[str, ast.expr]]:
    """Bindings of comprehension/for variables around ``node`` when they iterate literals."""
    envs: list[dict[str, ast.expr]] = [{}]
    cur = parents.get(node)
    while cur is not None:
        generators: list[tuple[ast.expr, ast.expr]] = []
        if isinstance(cur, ast.ListComp | ast.GeneratorExp | ast.SetComp):
            generators = [(g.target, g.iter) for g in cur.generators]
        elif isinstance(cur, ast.For):
            generators = [(cur.target, cur.iter)]
        for target, it in generators:
            values = _literal_iter(it, ctx)
            if values is None:
                continue
            envs = [{**env, **_bound(target, v)} for env in envs for v in values][:256]
        cur = parents.get(cur)
    return envs


def _bound(target: ast.expr, value: ast.expr) -> dict[str, ast.expr]:
    env: dict[str, ast.expr] = {}
    _bind(target, value, env)
    return env


def _ctor_shape(ctx: ModuleContext, call: ast.Call, resolver: Resolver) -> tuple[int | None, ...]:
    name = (ctx.canonical(call.func) or "").split(".")[-1]
    args = list(call.args)
    size_kw = next((kw.value for kw in call.keywords if kw.arg == "size"), None)
    if name == "randint":
        # randint(low, high, size) / randint(high, size)
        size = size_kw or (args[-1] if args else None)
        dims = list(size.elts) if isinstance(size, ast.Tuple | ast.List) else []
    elif name == "full":
        size = size_kw or (args[0] if args else None)
        dims = list(size.elts) if isinstance(size, ast.Tuple | ast.List) else []
    elif name in ("tensor", "randn_like", "arange"):
        return (None,)
    elif size_kw is not None:
        dims = list(size_kw.elts) if isinstance(size_kw, ast.Tuple | ast.List) else [size_kw]
    elif len(args) == 1 and isinstance(args[0], ast.Tuple | ast.List):
        dims = list(args[0].elts)
    else:
        dims = args
    line = getattr(call, "lineno", None) or 10**9
    return tuple(resolver.resolve(d, line).as_int() for d in dims)


def _ctor_dtype(ctx: ModuleContext, call: ast.Call, parents: dict[ast.AST, ast.AST]) -> str:
    name = (ctx.canonical(call.func) or "").split(".")[-1]
    dtype = "int64" if name == "randint" else "float32"
    for kw in call.keywords:
        if kw.arg == "dtype":
            dtype = _dtype_name(ctx, kw.value) or "unknown"
    # method chain: torch.randn(...).half().cuda(), .to(torch.float16), .to(dtype=...), also of
    # arithmetic on the tensor: (1 + 0.1 * torch.randn(n)).to(dtype)
    cur: ast.AST = call
    while True:
        cur = _through_arithmetic(cur, parents)
        parent = parents.get(cur)
        grand = parents.get(parent) if parent is not None else None
        if not (isinstance(parent, ast.Attribute) and isinstance(grand, ast.Call) and grand.func is parent):
            break
        if parent.attr in _DTYPE_METHODS:
            dtype = _DTYPE_METHODS[parent.attr]
        elif parent.attr == "to":
            for arg in [*grand.args, *(kw.value for kw in grand.keywords if kw.arg == "dtype")]:
                found = _dtype_name(ctx, arg)
                if found:
                    dtype = found
        cur = grand
    return dtype


def _through_arithmetic(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> ast.AST:
    """The outermost arithmetic expression around ``node``: a cast of it is a cast of ``node``."""
    while isinstance(parents.get(node), ast.BinOp | ast.UnaryOp):
        node = parents[node]
    return node


def _dtype_name(ctx: ModuleContext, node: ast.expr) -> str | None:
    name = ctx.canonical(node)
    if name is None:
        return None
    last = name.split(".")[-1]
    if name.startswith("torch.") or name.startswith("tl."):
        return _DTYPES.get(last)
    return None


# ---------------------------------------------------------------------------------------
# small helpers for rules


def is_transposed(resolver: Resolver, tensor: str, line: int) -> bool:
    """True when ``tensor`` is a transposed view (``.t()``, ``.T``, ``.transpose``, ``.permute``)
    made before ``line`` in the resolver's function, and not made contiguous again since."""
    seen: set[str] = set()
    while tensor and tensor not in seen:
        seen.add(tensor)
        found = resolver.lookup(tensor, line)
        if found is None:
            return False
        line, node = found
        while True:
            if isinstance(node, ast.Attribute):
                if node.attr in _TRANSPOSES:
                    return True
                node = node.value
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr == "contiguous":
                    return False
                if node.func.attr in _TRANSPOSES:
                    return True
                node = node.func.value
            else:
                break
        tensor = node.id if isinstance(node, ast.Name) else ""
    return False


def unparse(node: ast.AST) -> str:
    return _unparse(node)


def subscript_axes(node: ast.AST) -> tuple[str, ...] | None:
    """For ``x[None, :]`` -> ('new', 'slice'); None when ``node`` is not such an expansion."""
    if not isinstance(node, ast.Subscript):
        return None
    sl = node.slice
    elts = list(sl.elts) if isinstance(sl, ast.Tuple) else [sl]
    axes = []
    for e in elts:
        if isinstance(e, ast.Constant) and e.value is None:
            axes.append("new")
        elif isinstance(e, ast.Slice) and e.lower is None and e.upper is None and e.step is None:
            axes.append("slice")
        else:
            return None
    return tuple(axes)
