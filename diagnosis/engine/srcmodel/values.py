"""The values that reach a launch: wrapper code evaluated on a module's input cases.

`ModelNew.forward` is run, on shapes only, from its parameters (a case's inputs) through the
calls that lead to the launch's function (module-level helpers, methods through `self`,
`Function.apply`, nested functions), binding each call's arguments to the callee's parameters,
and through that function's statements up to the launch. Helpers that compute launch settings
(`BLOCK_SIZE, num_warps = calculate_settings(n)`) are evaluated from their body, branches
included. Only integers, floats, tuples, tensor shapes and Python's `None` are tracked;
anything else is unknown, never guessed. Inside the evaluator `None` the value is `NONE` (so
that `if softcap is not None:` and `x = None` are decided); to callers an evaluation returns
None for unknown, and `NONE` never leaves it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import libcst as cst

from diagnosis.engine.proposers.base import CaseShape
from diagnosis.engine.srcmodel import read
from diagnosis.engine.srcmodel.names import Names


@dataclass(frozen=True)
class TensorValue:
    shape: tuple[int, ...]
    dtype: str

    def numel(self) -> int:
        return math.prod(self.shape)


_DTYPE_ALIASES = {"float": "float32", "half": "float16", "double": "float64", "long": "int64", "int": "int32"}
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

MAX_DEPTH = 6


class _Unknown:
    """A local bound to something unknown: it hides a module constant of the same name."""


UNKNOWN = _Unknown()


class _NoneValue:
    """Python's None as a known value (a default `softcap=None`, an argument `bias=None`)."""

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "None"


NONE = _NoneValue()


class _Abort(Exception):
    """A helper's body took a path the evaluator cannot follow: its result is unknown."""


def case_inputs(case: CaseShape) -> list[Any]:
    out: list[Any] = []
    for shape, dtype in zip(case.shapes, case.dtypes, strict=False):
        dtype = dtype.removeprefix("torch.")
        # a Python scalar (shape (), a type name such as "int") has no known value
        out.append(TensorValue(tuple(shape), dtype) if shape or dtype in TENSOR_DTYPES else None)
    return out


@dataclass(frozen=True)
class Context:
    """What evaluation may read besides the locals: module constants and functions."""

    names: Names
    globals: dict[str, Any]
    functions: dict[str, cst.FunctionDef]


class Evaluator:
    """Evaluates expressions and straight-line statements over `env` (name -> value)."""

    def __init__(self, env: dict[str, Any], ctx: Context, depth: int = 0) -> None:
        self.env = env
        self.ctx = ctx
        self.depth = depth

    def __call__(self, node: cst.BaseExpression) -> Any:
        """The value of `node`, None when unknown (a `None` the code computes is unknown too:
        callers read values, and only the evaluator's own branches need to tell them apart)."""
        return _public(self.value(node))

    def value(self, node: cst.BaseExpression) -> Any:
        """The value of `node`, `NONE` for Python's None, None when unknown."""
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
            _Abort,
        ):
            return None

    def known(self) -> dict[str, Any]:
        return {k: v for k, v in self.env.items() if v is not UNKNOWN and _public(v) is not None}

    # -- statements ---------------------------------------------------------------------

    def run(self, body: Sequence[cst.BaseStatement], stop: cst.CSTNode | None = None) -> bool:
        """Execute `body` up to the statement that holds `stop` (not that statement); True when
        `stop` was reached. Control flow it cannot decide leaves the names it binds unknown; a
        block that holds `stop` is entered, since reaching `stop` means it ran."""
        for st in body:
            holds = stop is not None and any(n is stop for n in read.walk(st))
            if isinstance(st, cst.SimpleStatementLine):
                if holds:
                    return True
                for small in st.body:
                    self._small(small)
            elif isinstance(st, cst.With):
                for item in st.items:
                    if item.asname is not None:
                        self._clobber(item.asname.name)
                if self.run(read.statements(st.body), stop):
                    return True
            elif isinstance(st, cst.If):
                branch = self._branch(st, stop if holds else None)
                if branch is None:
                    self._clobber(st)
                    if holds:
                        return True
                elif self.run(branch, stop):
                    return True
            elif holds:
                # a loop or a try around `stop`: values bound in earlier iterations are unknown
                self._clobber(st)
                return self.run(_block_holding(st, stop), stop)
            else:
                self._clobber(st)
        return False

    def _branch(self, st: cst.If, stop: cst.CSTNode | None) -> list[cst.BaseStatement] | None:
        """The statements of the branch that runs (the one holding `stop` if given)."""
        node: cst.If | cst.Else | None = st
        while isinstance(node, cst.If):
            if stop is not None:
                if any(n is stop for n in read.walk(node.body)):
                    return read.statements(node.body)
            else:
                test = self.value(node.test)
                if not isinstance(test, (bool, int, _NoneValue)):
                    return None
                if test:
                    return read.statements(node.body)
            node = node.orelse
        if isinstance(node, cst.Else):
            return read.statements(node.body)
        return [] if stop is None else None

    def _small(self, small: cst.BaseSmallStatement) -> None:
        if isinstance(small, cst.Assign):
            value = self.value(small.value)
            for t in small.targets:
                self._assign(t.target, value)
        elif isinstance(small, cst.AnnAssign) and small.value is not None:  # a bare annotation binds nothing
            self._assign(small.target, self.value(small.value))
        elif isinstance(small, cst.AugAssign):
            current = self(small.target) if isinstance(small.target, cst.Name) else None
            op = _BINARY.get(type(small.operator).__name__.removesuffix("Assign"))
            value = self(small.value)
            result = op(current, value) if op and _ints(current, value) else None
            self._assign(small.target, result)

    def _assign(self, target: cst.CSTNode, value: Any) -> None:
        if isinstance(target, cst.Name):
            self.env[target.value] = UNKNOWN if value is None else value
        elif isinstance(target, (cst.Tuple, cst.List)):
            elts = list(target.elements)
            stars = [i for i, e in enumerate(elts) if isinstance(e, cst.StarredElement)]
            vals: list[Any] = [None] * len(elts)
            if isinstance(value, tuple) and not stars and len(value) == len(elts):
                vals = list(value)
            elif isinstance(value, tuple) and len(stars) == 1 and len(value) >= len(elts) - 1:
                # `*batch, n_cols = x.shape`: the starred name takes what the others leave
                s, rest = stars[0], len(elts) - 1 - stars[0]
                vals = [*value[:s], tuple(value[s : len(value) - rest]), *value[len(value) - rest :]]
            for e, v in zip(elts, vals, strict=True):
                self._assign(e.value, v)

    def _clobber(self, node: cst.CSTNode) -> None:
        for n in read.walk(node):
            if isinstance(n, cst.AnnAssign) and n.value is None:
                continue
            if isinstance(n, cst.AssignTarget) or isinstance(
                n, (cst.AugAssign, cst.AnnAssign, cst.For, cst.NamedExpr)
            ):
                target = n.target
            elif isinstance(n, cst.AsName):
                target = n.name
            elif isinstance(n, (cst.FunctionDef, cst.ClassDef)):
                target = n.name
            else:
                continue
            for t in read.walk(target):
                if isinstance(t, cst.Name):
                    self.env[t.value] = UNKNOWN

    def call_body(self, fn: cst.FunctionDef) -> Any:
        """The value a helper returns, when its path through the body can be followed."""
        return self._returns(read.statements(fn.body))

    def _returns(self, body: Sequence[cst.BaseStatement]) -> Any:
        for st in body:
            if isinstance(st, cst.SimpleStatementLine):
                for small in st.body:
                    if isinstance(small, cst.Return):
                        return self._eval(small.value) if small.value is not None else None
                    if isinstance(small, cst.Raise):
                        raise _Abort
                    self._small(small)
            elif isinstance(st, cst.If):
                branch = self._branch(st, None)
                if branch is None:
                    raise _Abort
                found = self._returns_or_none(branch)
                if found is not _FELL_THROUGH:
                    return found
            elif isinstance(st, cst.With):
                found = self._returns_or_none(read.statements(st.body))
                if found is not _FELL_THROUGH:
                    return found
            elif not isinstance(st, (cst.FunctionDef, cst.ClassDef)):
                raise _Abort  # a loop or a try: not followed
        return None

    def _returns_or_none(self, body: Sequence[cst.BaseStatement]) -> Any:
        if not any(isinstance(s, cst.Return) for st in body for s in read.walk(st)):
            self._returns(body)
            return _FELL_THROUGH
        return self._returns(body)

    # -- expressions --------------------------------------------------------------------

    def _eval(self, node: cst.CSTNode | None) -> Any:  # noqa: C901 - a small expression evaluator
        if node is None:
            return None
        if isinstance(node, cst.Integer):
            return int(node.evaluated_value)
        if isinstance(node, cst.Float):
            return float(node.evaluated_value)
        if isinstance(node, cst.Name):
            if node.value in ("True", "False"):
                return node.value == "True"
            if node.value == "None":
                return NONE
            if node.value in self.env:
                value = self.env[node.value]
                return None if value is UNKNOWN else value
            return self.ctx.globals.get(node.value)
        if isinstance(node, (cst.Tuple, cst.List)):
            vals: list[Any] = []
            for e in node.elements:
                v = self._eval(e.value)
                if v is None or (isinstance(e, cst.StarredElement) and not isinstance(v, tuple)):
                    return None
                vals += v if isinstance(e, cst.StarredElement) else [v]  # `(*idx.shape, N)`
            return tuple(vals)
        if isinstance(node, cst.UnaryOperation):
            v = self._eval(node.expression)
            if isinstance(node.operator, cst.Minus):
                return None if not isinstance(v, (int, float)) else -v
            if isinstance(node.operator, cst.Not):
                return None if v is None else not v
            return None
        if isinstance(node, cst.BinaryOperation):
            a, b = self._eval(node.left), self._eval(node.right)
            op = _BINARY.get(type(node.operator).__name__)
            # a comparison's bool counts as its int, as in Python (unsloth: `div + (mod != 0)`)
            return op(a, b) if op is not None and all(isinstance(v, int) for v in (a, b)) else None
        if isinstance(node, cst.Comparison):
            return self._compare(node)
        if isinstance(node, cst.BooleanOperation):
            a = self._eval(node.left)
            if a is None:
                return None
            if isinstance(node.operator, cst.And):
                return self._eval(node.right) if a else a
            return a if a else self._eval(node.right)
        if isinstance(node, cst.IfExp):
            test = self._eval(node.test)
            if test is None:
                return None
            return self._eval(node.body if test else node.orelse)
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
            if isinstance(base, TensorValue) and node.attr.value == "ndim":
                return len(base.shape)
            return None
        if isinstance(node, cst.Call):
            return self._call(node)
        return None

    def _dtype(self, node: cst.BaseExpression | None) -> str | None:
        """The dtype a `dtype=` argument gives: torch's default without one, `x.dtype` of a
        tensor read here, a torch dtype by any of its names; None for anything else."""
        if node is None:
            return "float32"
        if isinstance(node, cst.Attribute) and node.attr.value == "dtype":
            base = self._eval(node.value)
            return base.dtype if isinstance(base, TensorValue) else None
        name = (read.dotted(node, self.ctx.names) or "").removeprefix("torch.")
        name = _DTYPE_ALIASES.get(name, name)
        return name if name in TENSOR_DTYPES else None

    def _compare(self, node: cst.Comparison) -> Any:
        left = self._eval(node.left)
        for c in node.comparisons:
            right = self._eval(c.comparator)
            operator = type(c.operator).__name__
            if operator in ("Is", "IsNot"):
                # decided only against None, and only for known values (a tensor is not None)
                if left is None or right is None or (left is not NONE and right is not NONE):
                    return None
                if ((left is NONE) == (right is NONE)) != (operator == "Is"):
                    return False
                left = right
                continue
            op = _COMPARE.get(operator)
            if op is None or not _numbers(left, right):
                return None
            if not op(left, right):
                return False
            left = right
        return True

    def _call(self, node: cst.Call) -> Any:  # noqa: C901 - one case per callable it knows
        name = read.dotted(node.func, self.ctx.names)
        args = [a.value for a in node.args if a.keyword is None and not a.star]
        if name == "triton.cdiv":
            a, b = self._eval(args[0]), self._eval(args[1])
            return None if not isinstance(a, int) or not isinstance(b, int) else -(-a // b)
        if name == "triton.next_power_of_2":
            a = self._eval(args[0])
            return None if not isinstance(a, int) else 1 if a <= 1 else 1 << (a - 1).bit_length()
        if name in ("min", "max") and args:
            vals = [self._eval(a) for a in args]
            if len(vals) == 1 and isinstance(vals[0], tuple):
                vals = list(vals[0])
            if vals and all(isinstance(v, int) for v in vals):
                return min(vals) if name == "min" else max(vals)
            return None
        if name == "divmod" and len(args) == 2:  # unsloth: `div, mod = divmod(vocab_size, MAX_FUSED_SIZE)`
            a, b = self._eval(args[0]), self._eval(args[1])
            return divmod(a, b) if isinstance(a, int) and isinstance(b, int) and b else None
        if name == "int" and args:
            v = self._eval(args[0])
            return v if isinstance(v, int) else None
        if name == "len" and args:
            v = self._eval(args[0])
            if isinstance(v, TensorValue):
                return v.shape[0]
            return len(v) if isinstance(v, tuple) else None
        if name in ("torch.empty", "torch.zeros", "torch.ones", "torch.full"):
            shape = self._shape(args[:1] if name == "torch.full" else args)
            dtype = self._dtype(read.arg(node, "dtype"))
            return TensorValue(shape, dtype) if shape is not None and dtype is not None else None
        if name in ("torch.empty_like", "torch.zeros_like", "torch.ones_like"):
            return self._eval(args[0]) if args else None
        if isinstance(node.func, cst.Attribute):
            base = self._eval(node.func.value)
            if not isinstance(base, TensorValue):
                return None
            method = node.func.attr.value
            if method in ("new_empty", "new_zeros", "new_ones", "new_full"):  # fla: `x.new_empty(N, ND)`
                shape = self._shape(args[:1] if method == "new_full" else args)
                given = read.arg(node, "dtype")
                dtype = base.dtype if given is None else self._dtype(given)
                return TensorValue(shape, dtype) if shape is not None and dtype is not None else None
            return self._method(base, method, args)
        if isinstance(node.func, cst.Name) and node.func.value in self.ctx.functions:
            return self._helper(self.ctx.functions[node.func.value], node)
        return None

    def _shape(self, args: list[cst.BaseExpression]) -> tuple[int, ...] | None:
        """The size an allocation is given: one int, one tuple, or the ints of `*size`."""
        vals = [self._eval(a) for a in args]
        if len(vals) == 1 and isinstance(vals[0], tuple):
            return vals[0] if _ints(*vals[0]) else None  # `torch.empty([])`: a 0-d tensor
        return tuple(vals) if vals and _ints(*vals) else None

    def _helper(self, fn: cst.FunctionDef, call: cst.Call) -> Any:
        if self.depth >= MAX_DEPTH:
            return None
        env = bind(fn, call, self, skip_first=False)
        if env is None:
            return None
        return Evaluator(env, self.ctx, self.depth + 1).call_body(fn)

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


class _FellThrough:
    pass


_FELL_THROUGH = _FellThrough()


def bind(fn: cst.FunctionDef, call: cst.Call, ev: Evaluator, skip_first: bool) -> dict[str, Any] | None:
    """The callee's locals on entry: the call's arguments evaluated by `ev`, bound to `fn`'s
    parameters (after the first one when `skip_first`: `self`, `ctx`), defaults for the rest."""
    if any(a.star for a in call.args):
        return None
    params = [p for p in read.params_of(fn)]
    if skip_first and params:
        params = params[1:]
    env: dict[str, Any] = {p.name.value: UNKNOWN for p in params}
    positional = [a for a in call.args if a.keyword is None]
    for p, a in zip(params, positional, strict=False):
        env[p.name.value] = _or_unknown(ev.value(a.value))
    given = {p.name.value for p in params[: len(positional)]}
    for a in call.args:
        if a.keyword is not None and a.keyword.value in env:
            env[a.keyword.value] = _or_unknown(ev.value(a.value))
            given.add(a.keyword.value)
    defaults = Evaluator({}, ev.ctx, ev.depth)
    for p in params:
        if p.name.value not in given and p.default is not None:
            env[p.name.value] = _or_unknown(defaults.value(p.default))
    return env


def _or_unknown(v: Any) -> Any:
    return UNKNOWN if v is None else v


def _public(v: Any) -> Any:
    """What a caller sees of a value: None for Python's None and for a tuple holding it."""
    if v is NONE or (isinstance(v, tuple) and any(_public(x) is None for x in v)):
        return None
    return v


def _ints(*vals: Any) -> bool:
    return all(isinstance(v, int) and not isinstance(v, bool) for v in vals)


def _numbers(*vals: Any) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals)


def _block_holding(st: cst.BaseStatement, stop: cst.CSTNode) -> list[cst.BaseStatement]:
    for child in read.walk(st):
        if isinstance(child, cst.IndentedBlock) and any(n is stop for s in child.body for n in read.walk(s)):
            return list(child.body)
    return []


_BINARY = {
    "Add": lambda a, b: a + b,
    "Subtract": lambda a, b: a - b,
    "Multiply": lambda a, b: a * b,
    "FloorDivide": lambda a, b: a // b,
    "Modulo": lambda a, b: a % b,
    "LeftShift": lambda a, b: a << b if isinstance(a, int) and isinstance(b, int) and 0 <= b < 64 else None,
    "RightShift": lambda a, b: a >> b if isinstance(a, int) and isinstance(b, int) and b >= 0 else None,
}
_COMPARE = {
    "LessThan": lambda a, b: a < b,
    "LessThanEqual": lambda a, b: a <= b,
    "GreaterThan": lambda a, b: a > b,
    "GreaterThanEqual": lambda a, b: a >= b,
    "Equal": lambda a, b: a == b,
    "NotEqual": lambda a, b: a != b,
}
