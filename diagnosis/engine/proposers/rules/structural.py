"""Helpers the structural rewrites share (tile_strided, split_reduction, two_stage,
fuse_partials): import-alias spelling, grids, kernel facts read through aliases, and
parameter and launch edits.

`cst_util` compares names as written (`tl.load`); these rewrites also read kernels written
against other aliases (`import triton.language as lang`, `from triton.language import
constexpr`). `Spelling` undoes a module's aliases into `tl.X` / `triton.X` and writes new code
back in the module's own spelling. Candidates to move into the source model once it exists.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from dataclasses import dataclass

import libcst as cst

from diagnosis.engine.proposers.rules import RuleInput
from diagnosis.engine.proposers.rules import cst_util as cu
from diagnosis.engine.srcmodel.nodes import NodeMemo

REFERENCE_SMS = 132  # an H100/H200-class GPU when the device is unknown

# `tl.arange` / `triton.cdiv` at the start of a name, not `x.tl.y` or `my_tl.z`
_TL = re.compile(r"(?<![\w.])tl\.")
_TRITON = re.compile(r"(?<![\w.])triton\.")


@dataclass(frozen=True)
class Module:
    """A module as the structural rewrites read it: its tree, spelling, kernels and launches,
    and every name it uses (new names avoid them)."""

    tree: cst.Module
    sp: Spelling
    kernels: dict[str, cu.Kernel]
    launches: list[cu.Launch]
    taken: set[str]

    @classmethod
    def of(cls, source: str) -> Module | None:
        """None when the source does not parse, or imports no triton or names no torch (the
        rewrites write `triton.cdiv` and `torch.empty`)."""
        tree = cu.parse(source)
        sp = Spelling.of(tree) if tree is not None else None
        if tree is None or sp is None or "torch" not in cu.all_names(tree):
            return None
        kernels = cu.find_kernels(tree)
        return cls(tree, sp, kernels, cu.find_launches(tree, kernels), cu.all_names(tree))


def sm_count(inp: RuleInput) -> int:
    """The SMs of the rule input's device, or of an H100/H200-class GPU when it names none."""
    return inp.context.device.sm_count if inp.context.device is not None else REFERENCE_SMS


# every structural rule reads the same module's spelling
_SPELLINGS = NodeMemo(64)


@dataclass(frozen=True)
class Spelling:
    """How one module names triton and triton.language."""

    aliases: dict[str, str]  # local name -> canonical dotted prefix ("tl", "triton", "tl.load")
    tl: str  # the local name of triton.language
    triton: str  # the local name of triton

    @classmethod
    def of(cls, tree: cst.Module) -> Spelling | None:
        """None when the module does not import triton itself (the rewrites write `triton.cdiv`)."""
        return _SPELLINGS.get(tree, lambda: cls._read(tree))

    @classmethod
    def _read(cls, tree: cst.Module) -> Spelling | None:
        aliases: dict[str, str] = {}
        imports = (n for n in cu.walk(tree) if type(n) in (cst.Import, cst.ImportFrom))  # see cu.all_names
        for node in imports:
            if isinstance(node, cst.Import):
                for a in node.names:
                    name = cu.dotted(a.name)
                    if name is None:
                        continue
                    local = cu.dotted(a.asname.name) if a.asname is not None else name.split(".")[0]
                    aliases[local or name] = _canonical_module(
                        name if a.asname is not None else name.split(".")[0]
                    )
            elif isinstance(node, cst.ImportFrom) and not node.relative and node.module is not None:
                module = cu.dotted(node.module)
                if module is None or isinstance(node.names, cst.ImportStar):
                    continue
                for a in node.names:
                    name = cu.dotted(a.name)
                    local = cu.dotted(a.asname.name) if a.asname is not None else name
                    if name and local:
                        aliases[local] = _canonical_module(f"{module}.{name}")
        tl = next((k for k, v in aliases.items() if v == "tl"), None)
        triton = next((k for k, v in aliases.items() if v == "triton"), None)
        if triton is None:
            return None
        return cls(aliases, tl or f"{triton}.language", triton)

    def canon(self, node: cst.CSTNode | None) -> str | None:
        """`tl.load` for `lang.load`, `triton.cdiv` for `tr.cdiv`; names it does not know as written."""
        text = cu.dotted(node)
        if text is None:
            return None
        head, _, rest = text.partition(".")
        mapped = self.aliases.get(head)
        if mapped is None:
            return text
        full = f"{mapped}.{rest}" if rest else mapped
        return _canonical_module(full)

    def call(self, node: cst.CSTNode) -> str | None:
        return self.canon(node.func) if isinstance(node, cst.Call) else None

    def is_call(self, node: cst.CSTNode, *names: str) -> bool:
        return isinstance(node, cst.Call) and self.canon(node.func) in names

    def write(self, text: str) -> str:
        """Code written with `tl.` and `triton.` prefixes, in this module's spelling."""
        text = _TL.sub(f"{self.tl}.", text)
        return _TRITON.sub(f"{self.triton}.", text)

    def expr(self, text: str) -> cst.BaseExpression:
        return cu.expr(self.write(text))

    def stmt(self, text: str) -> cst.BaseStatement:
        return cu.stmt(self.write(text))


def _canonical_module(name: str) -> str:
    if name == "triton.language" or name.startswith("triton.language."):
        return "tl" + name[len("triton.language") :]
    return name


def constexprs(kernel: cu.Kernel, sp: Spelling) -> list[str]:
    """The kernel's constexpr parameters, annotated through any alias of triton.language."""
    out = []
    for p in kernel.node.params.params:
        ann = p.annotation.annotation if p.annotation is not None else None
        name = sp.canon(ann)
        if name in ("tl.constexpr", "constexpr") or p.name.value in kernel.constexprs:
            out.append(p.name.value)
    return out


def constexpr_annotation(kernel: cu.Kernel, sp: Spelling) -> str:
    """How the kernel annotates its constexprs (`tl.constexpr`, `constexpr`), for new ones: the
    interpreter takes only those two spellings, not another alias of triton.language."""
    consts = constexprs(kernel, sp)
    for p in kernel.node.params.params:
        if p.name.value in consts and p.annotation is not None:
            return cu.code(p.annotation.annotation)
    return sp.write("tl.constexpr")


def memory_params(kernel: cu.Kernel, sp: Spelling) -> tuple[set[str], set[str]]:
    """(pointer parameters loaded from, those stored or atomically updated to), as
    `cu.memory_params` reads them but through the module's aliases; "?" for an unknown base."""
    bindings = cu.Bindings(kernel.node)
    loads: set[str] = set()
    stores: set[str] = set()
    for call in (n for n in cu.walk(kernel.node.body) if isinstance(n, cst.Call)):
        name = sp.call(call) or ""
        ptr = cu.arg(call, "pointer", 0)
        if ptr is None or not (name == "tl.load" or name == "tl.store" or name.startswith("tl.atomic_")):
            continue
        (loads if name == "tl.load" else stores).update(cu.base_params(kernel, ptr, bindings))
    return loads, stores


def host_code(
    sp: Spelling, node: cst.BaseExpression | None, bound: dict[str, cst.BaseExpression]
) -> str | None:
    """A loop bound or step as wrapper code: a literal, the argument of the parameter it names,
    or `tl.cdiv` of those."""
    if node is None:
        return None
    if cu.int_literal(node) is not None:
        return cu.code(node)
    if isinstance(node, cst.Name) and node.value in bound:
        return cu.operand(bound[node.value])
    if sp.is_call(node, "tl.cdiv") and isinstance(node, cst.Call) and len(node.args) == 2:
        a, b = (host_code(sp, x.value, bound) for x in node.args)
        return sp.write(f"triton.cdiv({a}, {b})") if a is not None and b is not None else None
    return None


def second_stage(kernel: cu.Kernel, launch: cu.Launch, sp: Spelling) -> bool:
    """The kernel loads a tensor its wrapper allocated (`torch.empty(...)` and the like), or from
    a base it cannot name: those are someone's partials, and the kernel is their second stage."""
    bound = launch.bound(kernel)
    wb = cu.Bindings(launch.reading_scope)
    loads, _ = memory_params(kernel, sp)
    for p in loads:
        arg = bound.get(p)
        b = wb.single(arg.value) if isinstance(arg, cst.Name) else None
        allocated = b is not None and b.value is not None and (cu.call_name(b.value) or "").startswith("torch.")
        if p == "?" or allocated:
            return True
    return False


def bound_names(node: cst.CSTNode) -> set[str]:
    """Names an assignment, augmented assignment or `for` target under `node` binds."""
    out: set[str] = set()
    for n in cu.walk(node):
        if isinstance(n, (cst.AssignTarget, cst.AugAssign, cst.AnnAssign, cst.For)):
            out |= {t.value for t in cu.walk(n.target) if isinstance(t, cst.Name)}
    return out


def parens(node: cst.BaseExpression) -> cst.BaseExpression:
    """`node` parenthesized unless it is an atom (or already is), to stand as an operand or take
    the place of a name: libcst prints the tree as built and adds no parentheses itself."""
    atoms = (cst.Name, cst.Call, cst.Attribute, cst.Subscript, cst.Integer, cst.Float)
    if isinstance(node, atoms) or node.lpar:
        return node
    return node.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def same_code(a: cst.CSTNode | None, b: cst.CSTNode | None) -> bool:
    """Two expressions written the same way (layout and redundant parentheses aside)."""
    if a is None or b is None:
        return False
    return _normal(a) == _normal(b)


def _normal(node: cst.CSTNode) -> str:
    return ast.unparse(cu.expr_ast(node))


@dataclass
class Grid:
    """A launch grid of literal rank: its element expressions and how to write a new one."""

    elements: list[cst.BaseExpression]
    node: cst.BaseExpression  # the tuple (or the lambda's body) to replace
    meta: str | None  # the lambda's parameter, when the grid is `lambda meta: (...)`


def read_grid(launch: cu.Launch) -> Grid | None:
    """The grid of `launch` when it is a tuple or list, a `lambda meta: (...)`, or a local
    name bound once to one of those."""
    grid = launch.grid
    if isinstance(grid, cst.Name):
        b = cu.Bindings(launch.reading_scope).single(grid.value)
        if b is None or b.value is None:
            return None
        grid = b.value
    meta = None
    if isinstance(grid, cst.Lambda):
        params = grid.params
        if len(params.params) != 1 or params.kwonly_params or isinstance(params.star_arg, cst.Param):
            return None
        meta = params.params[0].name.value
        grid = grid.body
    if not isinstance(grid, (cst.Tuple, cst.List)):
        return None
    if any(isinstance(e, cst.StarredElement) for e in grid.elements):
        return None
    return Grid([e.value for e in grid.elements], grid, meta)


def add_kwargs(call: cst.Call, kwargs: Sequence[tuple[str, str]]) -> cst.Call:
    """`call` with `name=value` arguments appended (`**value` for the name "**"), in the call's
    layout: one argument per line stays so, and a line break before the closing parenthesis
    stays before it."""
    if not kwargs:
        return call
    args = list(call.args)
    new = [cst.Arg(cu.expr(v), star="**") if k == "**" else cu.keyword_arg(k, cu.expr(v)) for k, v in kwargs]
    if args:
        last = args[-1]
        sep = _separator(last.comma, args[-2].comma if len(args) > 1 else None)
        args[-1] = last.with_changes(comma=sep, whitespace_after_arg=cst.SimpleWhitespace(""))
        new = [n.with_changes(comma=sep) for n in new[:-1]] + [
            new[-1].with_changes(comma=last.comma, whitespace_after_arg=last.whitespace_after_arg)
        ]
    return call.with_changes(args=[*args, *new])


def _separator(last: object, before: object) -> cst.Comma:
    """The comma to put after what was the last item of a list: when items are one per line,
    the one between the two last items (a trailing comma breaks to the closing bracket's
    indentation, not the items'), or the trailing one of a single item; else `, ` (several
    items on a line keep to their line, whatever the trailing comma does)."""
    if isinstance(before, cst.Comma):
        if "\n" in cu.code(before):
            return before
    elif isinstance(last, cst.Comma) and "\n" in cu.code(last):
        return last
    return cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))


def param_slot(kernel: cu.Kernel, launch: cu.Launch, consts: Sequence[str]) -> int:
    """Where a new runtime parameter goes: before the constexprs when the launch binds none of
    them by position (so nothing shifts), else at the end."""
    params = kernel.params
    first = next((i for i, p in enumerate(params) if p in consts), len(params))
    return first if len(launch.positional) <= first else len(params)


def add_param(
    fn: cst.FunctionDef, name: str, annotation: str | None, at: int | None = None, default: str | None = None
) -> cst.FunctionDef:
    """`fn` with one more positional parameter at index `at` (default: the end), keeping the
    layout of the list. Raises ValueError where a parameter without default would follow one
    with a default."""
    params = list(fn.params.params)
    at = len(params) if at is None else at
    if default is None and any(p.default is not None for p in params[:at]):
        raise ValueError("a parameter without default cannot follow one with a default")
    space = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    new = cst.Param(
        name=cst.Name(name),
        annotation=cst.Annotation(cu.expr(annotation)) if annotation else None,
        default=cu.expr(default) if default is not None else None,
        equal=cst.AssignEqual(cst.SimpleWhitespace(" "), cst.SimpleWhitespace(" "))
        if default is not None and annotation
        else cst.MaybeSentinel.DEFAULT,
        comma=space,
    )
    if at == len(params) and params:
        last = params[-1]
        params[-1] = last.with_changes(
            comma=_separator(last.comma, params[-2].comma if len(params) > 1 else None)
        )
        new = new.with_changes(comma=last.comma)
    elif params:
        # in the middle: the new one takes the separator of the one before it
        before = params[at - 1].comma if at > 0 else params[0].comma
        new = new.with_changes(comma=before if isinstance(before, cst.Comma) else space)
    return fn.with_changes(params=fn.params.with_changes(params=[*params[:at], new, *params[at:]]))
