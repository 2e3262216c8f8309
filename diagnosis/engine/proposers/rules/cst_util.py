"""Shared libcst helpers for the rules transforms.

They find the `@triton.jit` kernels of a module and the places that launch them
(`kernel[grid](...)`), read the few values a transform needs (literal ints, single local
bindings), evaluate wrapper expressions against the shape cases of a `ProposalContext`, and
replace nodes by identity so that a transform can collect its edits first and apply them in
one pass. Nothing here guesses: an expression that cannot be read is `None`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import libcst as cst

from diagnosis.engine.proposers.base import CaseShape

# ---------------------------------------------------------------------------------------
# small readers


def parse(source: str) -> cst.Module | None:
    try:
        return cst.parse_module(source)
    except cst.ParserSyntaxError:
        return None


def dotted(node: cst.CSTNode | None) -> str | None:
    """`tl.program_id` for the expression `tl.program_id`; None for anything but names."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = dotted(node.value)
        return None if base is None else f"{base}.{node.attr.value}"
    return None


def call_name(node: cst.CSTNode) -> str | None:
    return dotted(node.func) if isinstance(node, cst.Call) else None


def is_call(node: cst.CSTNode, *names: str) -> bool:
    return isinstance(node, cst.Call) and dotted(node.func) in names


def int_literal(node: cst.CSTNode | None) -> int | None:
    if isinstance(node, cst.Integer):
        return int(node.evaluated_value)
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        inner = int_literal(node.expression)
        return None if inner is None else -inner
    return None


def expr(text: str) -> cst.BaseExpression:
    return cst.parse_expression(text)


def stmt(text: str) -> cst.BaseStatement:
    return cst.parse_statement(text)


def code(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


def walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """Every node under `node` (itself included), depth first."""
    yield node
    for child in node.children:
        yield from walk(child)


def names_in(node: cst.CSTNode) -> set[str]:
    """Names read in an expression: attribute tails and keyword names are not names."""
    out: set[str] = set()

    def visit(n: cst.CSTNode) -> None:
        if isinstance(n, cst.Name):
            out.add(n.value)
            return
        if isinstance(n, cst.Attribute):
            visit(n.value)
            return
        if isinstance(n, cst.Arg):
            visit(n.value)
            return
        for c in n.children:
            visit(c)

    visit(node)
    return out


def arg(call: cst.Call, name: str, position: int | None = None) -> cst.BaseExpression | None:
    for i, a in enumerate(call.args):
        if a.keyword is not None and a.keyword.value == name:
            return a.value
        if position is not None and a.keyword is None and a.star == "" and i == position:
            return a.value
    return None


# ---------------------------------------------------------------------------------------
# kernels and launches


def _functionally_tuned(module: cst.Module) -> set[str]:
    """Names `k` of module statements `x = triton.autotune(...)(k)`."""
    out = set()
    for st in module.body:
        for small in st.body if isinstance(st, cst.SimpleStatementLine) else ():
            value = small.value if isinstance(small, cst.Assign) else None
            if (
                isinstance(value, cst.Call)
                and is_call(value.func, "triton.autotune", "autotune")
                and len(value.args) == 1
                and isinstance(value.args[0].value, cst.Name)
            ):
                out.add(value.args[0].value.value)
    return out


@dataclass(repr=False)
class Kernel:
    name: str
    node: cst.FunctionDef
    params: list[str]
    constexprs: list[str]
    defaults: dict[str, cst.BaseExpression]
    autotuned: bool

    def calls(self, *names: str) -> list[cst.Call]:
        return [n for n in walk(self.node.body) if is_call(n, *names)]

    @property
    def has_dot(self) -> bool:
        return bool(self.calls("tl.dot"))

    @property
    def atomics(self) -> list[cst.Call]:
        return [
            n
            for n in walk(self.node.body)
            if isinstance(n, cst.Call) and (call_name(n) or "").startswith("tl.atomic_")
        ]

    def program_axes(self) -> dict[str, int]:
        """Local names bound straight to `tl.program_id(axis)`, with the axis."""
        out: dict[str, int] = {}
        for s in body_statements(self.node.body):
            for name, value in simple_assigns(s):
                if is_call(value, "tl.program_id"):
                    axis = int_literal(arg(value, "axis", 0))
                    if axis is not None:
                        out[name] = axis
        return out


def decorator_name(d: cst.Decorator) -> str | None:
    node = d.decorator
    if isinstance(node, cst.Call):
        node = node.func
    return dotted(node)


def find_kernels(module: cst.Module) -> dict[str, Kernel]:
    """Top-level functions decorated with `triton.jit` (or `jit`), by name. A kernel counts as
    autotuned also when the module wraps it as `k_tuned = triton.autotune(...)(k)` (the size
    dispatch of LAUNCH_CONFIG keeps `k` itself for small problems)."""
    out: dict[str, Kernel] = {}
    wrapped = _functionally_tuned(module)
    for node in module.body:
        if not isinstance(node, cst.FunctionDef):
            continue
        names = [decorator_name(d) for d in node.decorators]
        if not any(n in ("triton.jit", "jit") for n in names):
            continue
        params: list[str] = []
        constexprs: list[str] = []
        defaults: dict[str, cst.BaseExpression] = {}
        for p in node.params.params:
            params.append(p.name.value)
            ann = p.annotation.annotation if p.annotation else None
            if dotted(ann) in ("tl.constexpr", "triton.language.constexpr", "constexpr"):
                constexprs.append(p.name.value)
            if p.default is not None:
                defaults[p.name.value] = p.default
        autotuned = node.name.value in wrapped or any(
            n in ("triton.autotune", "autotune", "triton.heuristics", "heuristics") for n in names
        )
        out[node.name.value] = Kernel(node.name.value, node, params, constexprs, defaults, autotuned)
    return out


@dataclass(repr=False)
class Launch:
    """One `kernel[grid](...)` call inside a wrapper function."""

    kernel: str
    call: cst.Call
    grid: cst.BaseExpression
    function: cst.FunctionDef  # the wrapper that launches it
    statement: cst.SimpleStatementLine | None  # set when the launch is a whole expression statement

    @property
    def positional(self) -> list[cst.Arg]:
        return [a for a in self.call.args if a.keyword is None and a.star == ""]

    @property
    def keywords(self) -> dict[str, cst.Arg]:
        return {a.keyword.value: a for a in self.call.args if a.keyword is not None}

    @property
    def has_star_args(self) -> bool:
        return any(a.star for a in self.call.args)

    def bound(self, kernel: Kernel) -> dict[str, cst.BaseExpression]:
        """Kernel parameter -> the launch expression that feeds it."""
        out: dict[str, cst.BaseExpression] = {}
        for name, a in zip(kernel.params, self.positional, strict=False):
            out[name] = a.value
        for name, a in self.keywords.items():
            if name in kernel.params:
                out[name] = a.value
        return out


class _LaunchFinder(cst.CSTVisitor):
    def __init__(self, kernels: Iterable[str]) -> None:
        self.kernels = set(kernels)
        self.functions: list[cst.FunctionDef] = []
        self.statements: list[cst.SimpleStatementLine] = []
        self.launches: list[Launch] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.functions.append(node)

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.functions.pop()

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        self.statements.append(node)

    def leave_SimpleStatementLine(self, original_node: cst.SimpleStatementLine) -> None:
        self.statements.pop()

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if not (isinstance(func, cst.Subscript) and len(func.slice) == 1):
            return
        name = dotted(func.value)
        if name not in self.kernels or not self.functions:
            return
        index = func.slice[0].slice
        if not isinstance(index, cst.Index):
            return
        st = self.statements[-1] if self.statements else None
        whole = (
            st is not None
            and len(st.body) == 1
            and isinstance(st.body[0], cst.Expr)
            and st.body[0].value is node
        )
        self.launches.append(Launch(name, node, index.value, self.functions[-1], st if whole else None))


def find_launches(module: cst.Module, kernels: Iterable[str]) -> list[Launch]:
    finder = _LaunchFinder(kernels)
    module.visit(finder)
    return finder.launches


def find_function(module: cst.Module, name: str) -> cst.FunctionDef | None:
    for n in walk(module):
        if isinstance(n, cst.FunctionDef) and n.name.value == name:
            return n
    return None


def imports_triton(module: cst.Module) -> bool:
    for n in walk(module):
        if isinstance(n, cst.Import):
            for alias in n.names:
                if dotted(alias.name) == "triton" and alias.asname is None:
                    return True
    return False


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


@dataclass
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


class Bindings:
    """Every binding of every local name in one function (nested functions included)."""

    def __init__(self, function: cst.FunctionDef) -> None:
        self.by_name: dict[str, list[Binding]] = {}
        self.target_ids: set[int] = set()
        self.params = [p.name.value for p in function.params.params]
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
        elif isinstance(small, (cst.AugAssign, cst.AnnAssign)):
            self._mark(statement, small.target)
            if (
                isinstance(small, cst.AnnAssign)
                and small.value is not None
                and isinstance(small.target, cst.Name)
            ):
                self.by_name[small.target.value][-1].value = small.value

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
        for c in n.children:
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


class _Replacer(cst.CSTTransformer):
    def __init__(self, mapping: dict[int, Any]) -> None:
        self.mapping = mapping

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode) -> Any:
        if id(original_node) in self.mapping:
            return self.mapping[id(original_node)]
        return updated_node


def replace(tree: cst.Module, edits: Sequence[tuple[cst.CSTNode, Any]]) -> cst.Module:
    """Apply `(original node, replacement)` edits in one pass; a replacement may be a
    node, `cst.RemoveFromParent()` or a `cst.FlattenSentinel` of statements."""
    mapping = {id(old): new for old, new in edits}
    return tree.visit(_Replacer(mapping))


def replace_in(node: cst.CSTNode, edits: Sequence[tuple[cst.CSTNode, Any]]) -> Any:
    mapping = {id(old): new for old, new in edits}
    return node.visit(_Replacer(mapping))


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
    return {n.value for n in walk(node) if isinstance(n, cst.Name)}


# ---------------------------------------------------------------------------------------
# evaluating wrapper expressions on the shape cases


@dataclass(frozen=True)
class TensorValue:
    shape: tuple[int, ...]
    dtype: str

    def numel(self) -> int:
        return math.prod(self.shape)


TENSOR_DTYPES = frozenset(
    {
        "float16",
        "bfloat16",
        "float32",
        "float64",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "bool",
        "float8_e4m3fn",
        "float8_e5m2",
        "complex64",
    }
)


def _case_inputs(case: CaseShape) -> list[Any]:
    out: list[Any] = []
    for shape, dtype in zip(case.shapes, case.dtypes, strict=False):
        dtype = dtype.removeprefix("torch.")
        # a Python scalar (shape (), a type name such as "int") has no known value
        out.append(TensorValue(tuple(shape), dtype) if shape or dtype in TENSOR_DTYPES else None)
    return out


class _Eval:
    def __init__(self, env: dict[str, Any]) -> None:
        self.env = env

    def __call__(self, node: cst.BaseExpression) -> Any:
        try:
            return self._eval(node)
        except (
            TypeError,
            ValueError,
            ZeroDivisionError,
            IndexError,
            KeyError,
            AttributeError,
            OverflowError,
        ):
            return None

    def _eval(self, node: cst.CSTNode) -> Any:  # noqa: C901 - a small expression evaluator
        if isinstance(node, cst.Integer):
            return int(node.evaluated_value)
        if isinstance(node, cst.Float):
            return float(node.evaluated_value)
        if isinstance(node, cst.Name):
            return self.env.get(node.value)
        if isinstance(node, (cst.Tuple, cst.List)):
            vals = [self._eval(e.value) for e in node.elements]
            return None if any(v is None for v in vals) else tuple(vals)
        if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
            v = self._eval(node.expression)
            return None if v is None else -v
        if isinstance(node, cst.BinaryOperation):
            a, b = self._eval(node.left), self._eval(node.right)
            if not isinstance(a, int) or not isinstance(b, int):
                return None
            op = node.operator
            if isinstance(op, cst.Add):
                return a + b
            if isinstance(op, cst.Subtract):
                return a - b
            if isinstance(op, cst.Multiply):
                return a * b
            if isinstance(op, cst.FloorDivide):
                return a // b
            if isinstance(op, cst.Modulo):
                return a % b
            return None
        if (
            isinstance(node, cst.Subscript)
            and len(node.slice) == 1
            and isinstance(node.slice[0].slice, cst.Index)
        ):
            base = self._eval(node.value)
            idx = self._eval(node.slice[0].slice.value)
            if isinstance(base, tuple) and isinstance(idx, int):
                return base[idx]
            return None
        if isinstance(node, cst.Attribute):
            base = self._eval(node.value)
            if isinstance(base, TensorValue) and node.attr.value == "shape":
                return base.shape
            if isinstance(base, TensorValue) and node.attr.value in ("T", "mT"):
                return TensorValue(base.shape[:-2] + base.shape[-2:][::-1], base.dtype)
            return None
        if isinstance(node, cst.Call):
            return self._call(node)
        return None

    def _call(self, node: cst.Call) -> Any:
        name = dotted(node.func)
        args = [a.value for a in node.args if a.keyword is None]
        if name in ("triton.cdiv", "cdiv"):
            a, b = self._eval(args[0]), self._eval(args[1])
            return None if not isinstance(a, int) or not isinstance(b, int) else -(-a // b)
        if name in ("triton.next_power_of_2", "next_power_of_2"):
            a = self._eval(args[0])
            return None if not isinstance(a, int) else 1 if a <= 1 else 1 << (a - 1).bit_length()
        if name in ("min", "max") and args:
            vals = [self._eval(a) for a in args]
            if all(isinstance(v, int) for v in vals):
                return min(vals) if name == "min" else max(vals)
            return None
        if name == "int" and args:
            v = self._eval(args[0])
            return v if isinstance(v, int) else None
        if name == "len" and args:
            v = self._eval(args[0])
            if isinstance(v, TensorValue):
                return v.shape[0]
            return len(v) if isinstance(v, tuple) else None
        if name in ("torch.empty", "torch.zeros", "torch.ones", "torch.full"):
            shape = self._eval(args[0]) if args else None
            if isinstance(shape, int):
                shape = (shape,)
            if isinstance(shape, tuple):
                dt = arg(node, "dtype")
                return TensorValue(shape, (dotted(dt) or "float32").split(".")[-1])
            return None
        if name in ("torch.empty_like", "torch.zeros_like", "torch.ones_like"):
            return self._eval(args[0]) if args else None
        if isinstance(node.func, cst.Attribute):
            base = self._eval(node.func.value)
            method = node.func.attr.value
            if isinstance(base, TensorValue):
                return self._method(base, method, args)
        return None

    def _method(self, base: TensorValue, method: str, args: list[cst.BaseExpression]) -> Any:
        if method == "numel":
            return base.numel()
        if method == "size":
            if not args:
                return base.shape
            i = self._eval(args[0])
            return base.shape[i] if isinstance(i, int) else None
        if method in ("contiguous", "clone", "float", "half", "bfloat16", "to"):
            return base
        if method == "dim":
            return len(base.shape)
        if method in ("reshape", "view"):
            dims = [self._eval(a) for a in args]
            if len(dims) == 1 and isinstance(dims[0], tuple):
                dims = list(dims[0])
            if not all(isinstance(d, int) for d in dims):
                return None
            if dims.count(-1) == 1:
                rest = math.prod(d for d in dims if d != -1)
                dims = [base.numel() // rest if d == -1 else d for d in dims]
            return TensorValue(tuple(dims), base.dtype)
        if method == "flatten":
            return TensorValue((base.numel(),), base.dtype)
        return None


def evaluate_cases(
    function: cst.FunctionDef, cases: Sequence[CaseShape], upto: cst.CSTNode | None = None
) -> list[dict[str, Any]]:
    """For each case: the values of the wrapper's locals after its straight-line top-level
    statements (stopping at `upto` when given). Inputs map to the function's parameters
    after `self`; unknown values are left out."""
    params = [p.name.value for p in function.params.params]
    if params and params[0] == "self":
        params = params[1:]
    envs: list[dict[str, Any]] = []
    for case in cases:
        env: dict[str, Any] = {}
        for name, value in zip(params, _case_inputs(case), strict=False):
            if value is not None:
                env[name] = value
        ev = _Eval(env)
        for s in body_statements(function.body):
            if upto is not None and s is upto:
                break
            if not isinstance(s, cst.SimpleStatementLine):
                continue
            for small in s.body:
                if isinstance(small, cst.Assign) and len(small.targets) == 1:
                    _assign(env, small.targets[0].target, ev(small.value))
                elif isinstance(small, (cst.AugAssign, cst.AnnAssign)):
                    for t in _targets(small.target):
                        env.pop(t.value, None)
        envs.append(env)
    return envs


def _assign(env: dict[str, Any], target: cst.CSTNode, value: Any) -> None:
    if isinstance(target, cst.Name):
        if value is None:
            env.pop(target.value, None)
        else:
            env[target.value] = value
    elif isinstance(target, (cst.Tuple, cst.List)):
        names = [e.value for e in target.elements]
        vals = value if isinstance(value, tuple) and len(value) == len(names) else (None,) * len(names)
        for t, v in zip(names, vals, strict=True):
            _assign(env, t, v)


def launch_values(launch: Launch, kernel: Kernel, cases: Sequence[CaseShape]) -> list[dict[str, Any]]:
    """Per case: kernel parameter -> its value at this launch, where the shapes tell it, else
    (integers only) where the baseline's recorded launch of this kernel does."""
    stop = launch.statement
    envs = evaluate_cases(launch.function, cases, upto=stop)
    bound = launch.bound(kernel)
    out = []
    for env, case in zip(envs, cases, strict=True):
        ev = _Eval(env)
        recorded = case.ints(kernel.name)
        vals = {}
        for name, e in bound.items():
            v = ev(e)
            if v is None and name in recorded and name not in kernel.constexprs:
                v = recorded[name]
            if v is not None:
                vals[name] = v
        out.append(vals)
    return out


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
    for st in tree.body:
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


def make_decorator(text: str) -> cst.Decorator:
    """A decorator node from its source (without the '@')."""
    fn = cst.parse_statement(f"@{text}\ndef _f():\n    pass\n")
    assert isinstance(fn, cst.FunctionDef)
    return fn.decorators[0]


def keyword_arg(name: str, value: cst.BaseExpression) -> cst.Arg:
    """`name=value`, written without spaces around `=`."""
    tight = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))
    return cst.Arg(keyword=cst.Name(name), value=value, equal=tight)


def insert_params(kernel: Kernel, at: int, names: list[str]) -> cst.Parameters:
    """The kernel's parameters with plain `names` inserted at index `at`."""
    params = list(kernel.node.params.params)
    new = [cst.Param(cst.Name(n), comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))) for n in names]
    if at == len(params) and params:  # appended: the old last parameter needs a comma
        last = params[-1]
        if not isinstance(last.comma, cst.Comma):
            params[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        new[-1] = new[-1].with_changes(comma=last.comma)
    return kernel.node.params.with_changes(params=params[:at] + new + params[at:])


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


def drop_args(original: cst.Call, updated: cst.Call, ids: set[int], add: Sequence[cst.Arg] = ()) -> cst.Call:
    """`updated` without the arguments whose originals are in `ids`, then `add`; the last
    argument takes the comma of the original last one, so `f(a, B=1)` becomes `f(a)`, not
    `f(a, )`, and a call laid out one argument per line stays so."""
    pairs = list(zip(original.args, updated.args, strict=True))
    kept = [u for o, u in pairs if id(o) not in ids]
    if not pairs:
        return updated.with_changes(args=list(add))
    last = pairs[-1][1]
    tail = [*kept, *add]
    if add and kept and id(pairs[-1][0]) not in ids:
        # the old last argument now precedes the added ones: it takes the separator its
        # predecessor had (a new line in a call laid out one argument per line)
        sep = pairs[-2][1].comma if len(pairs) > 1 and isinstance(pairs[-2][1].comma, cst.Comma) else None
        tail[len(kept) - 1] = kept[-1].with_changes(comma=sep or cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    if tail and (add or id(pairs[-1][0]) in ids):
        tail[-1] = tail[-1].with_changes(comma=last.comma, whitespace_after_arg=last.whitespace_after_arg)
    return updated.with_changes(args=tail)
