"""Small readers over libcst nodes, shared by the source model and the rules.

Dotted names are read *canonically*: `lang.load` is `tl.load` when the module imported
`triton.language as lang`, `jit` is `triton.jit` after `from triton import jit`. Which module's
imports apply is given explicitly (`names=`) or is the module being read now (names.active()).
Nothing here guesses: an expression that cannot be read is None.
"""

from __future__ import annotations

import libcst as cst

from diagnosis.engine.srcmodel.names import Names, active
from diagnosis.engine.srcmodel.nodes import children, walk  # noqa: F401 (read.walk, read.children)
from diagnosis.engine.srcmodel.scope import binds, every_module_statement, module_statements, statements  # noqa: F401 (read.*)


def code(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


def literal(node: cst.CSTNode | None) -> str | None:
    """`tl.program_id` for the expression `tl.program_id` as written; None for anything but names."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = literal(node.value)
        return None if base is None else f"{base}.{node.attr.value}"
    return None


def dotted(node: cst.CSTNode | None, names: Names | None = None) -> str | None:
    """The canonical dotted name of a name or attribute chain (import aliases undone)."""
    text = literal(node)
    if text is None:
        return None
    names = names if names is not None else active()
    return names.resolve(text) if names is not None else text


def call_name(node: cst.CSTNode, names: Names | None = None) -> str | None:
    return dotted(node.func, names) if isinstance(node, cst.Call) else None


def is_call(node: cst.CSTNode, *wanted: str, names: Names | None = None) -> bool:
    return isinstance(node, cst.Call) and dotted(node.func, names) in wanted


def int_literal(node: cst.CSTNode | None) -> int | None:
    if isinstance(node, cst.Integer):
        return int(node.evaluated_value)
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        inner = int_literal(node.expression)
        return None if inner is None else -inner
    return None


def string_literal(node: cst.CSTNode | None) -> str | None:
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def arg(call: cst.Call, name: str, position: int | None = None) -> cst.BaseExpression | None:
    """The argument `name` of a call, by keyword or (given `position`) by position."""
    for i, a in enumerate(call.args):
        if a.keyword is not None and a.keyword.value == name:
            return a.value
        if position is not None and a.keyword is None and a.star == "" and i == position:
            return a.value
    return None


def params_of(fn: cst.FunctionDef) -> list[cst.Param]:
    """Every parameter a call can bind by position or keyword, in order."""
    p = fn.params
    return [*p.posonly_params, *p.params, *p.kwonly_params]


def decorator_target(d: cst.Decorator) -> cst.BaseExpression:
    """`triton.autotune` for `@triton.autotune(...)`, the decorator itself otherwise."""
    node = d.decorator
    return node.func if isinstance(node, cst.Call) else node


def params_of_lambda(node: cst.Lambda) -> list[str]:
    p = node.params
    return [x.name.value for x in (*p.posonly_params, *p.params, *p.kwonly_params)]


def first_only(node: cst.BaseExpression | None) -> bool:
    """`xs[:1]` or `xs[0:1]`: at most one element, whatever `xs` holds."""
    if not isinstance(node, cst.Subscript) or len(node.slice) != 1:
        return False
    part = node.slice[0].slice
    return (
        isinstance(part, cst.Slice)
        and part.step is None
        and (part.lower is None or int_literal(part.lower) == 0)
        and int_literal(part.upper) == 1
    )


def bound_names(statement: cst.CSTNode) -> set[str]:
    """Every name `statement` binds anywhere in it (assignments, loops, `with ... as`, walrus)."""
    out: set[str] = set()
    for n in walk(statement):
        target = None
        if isinstance(n, cst.AssignTarget | cst.AugAssign | cst.AnnAssign | cst.For):
            target = n.target
        elif isinstance(n, cst.NamedExpr):
            target = n.target
        elif isinstance(n, cst.AsName):
            target = n.name
        if target is not None:
            out |= {t.value for t in walk(target) if isinstance(t, cst.Name)}
    return out
