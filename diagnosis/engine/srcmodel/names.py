"""What the names of a module mean: its imports, undone into one canonical spelling.

Kernels are written with `import triton.language as tl`, `import triton as tr`, `from triton
import jit`, `import triton.language as lang`, `from triton.language import constexpr`. Every
reader of the model compares names in one vocabulary: `tl.X` for `triton.language.X` and
`triton.X` for the rest of Triton (`triton.jit`, `triton.autotune`, `triton.cdiv`), whatever the
module wrote. A name the module does not import is read as written.

A module-level function that only forwards its own arguments to Triton's autotuner or heuristics
(flag_gems' `libtuner`, a project's `def autotune(configs, key, **kw): return
triton.autotune(configs, key, **kw)`) is read as that decorator: `@libtuner(configs=..., key=...)`
is an `@triton.autotune` whose `configs` and `key` are where Triton's are. So is a module name
bound once to one (`fla_cache_autotune = triton.autotune`), and one bound once to any other
Triton name (unsloth's `next_power_of_2 = triton.next_power_of_2`).

Rewrites write new code in that vocabulary; `respell` makes it valid in the module it goes to
(`tl.arange` becomes `lang.arange` there, or an import is added).
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import libcst as cst

from diagnosis.engine.srcmodel.nodes import walk
from diagnosis.engine.srcmodel.scope import binds, module_statements

# Where Triton keeps what it also exports at the top (`triton.runtime.jit.jit` is `triton.jit`).
_SAME = {
    "triton.runtime.jit": "triton.jit",
    "triton.runtime.jit.jit": "triton.jit",
    "triton.runtime.autotune": "triton.autotune",
    "triton.runtime.autotuner.autotune": "triton.autotune",
    "triton.runtime.heuristics": "triton.heuristics",
    "triton.runtime.autotuner.heuristics": "triton.heuristics",
    "triton.runtime.Config": "triton.Config",
    "triton.runtime.autotuner.Config": "triton.Config",
}


def normalize(full: str) -> str:
    """The canonical spelling of a fully qualified name."""
    if full == "triton.language":
        return "tl"
    if full.startswith("triton.language."):
        return "tl." + full[len("triton.language.") :]
    return _SAME.get(full, full)


@dataclass(frozen=True)
class Names:
    """The module's imports: local name -> the fully qualified name it stands for."""

    imports: dict[str, str]
    bound: frozenset[str]  # names bound at module level or by any import
    heads: frozenset[str] = frozenset()  # of tl, triton, torch: those the module's code reads
    # local function -> the decorator it forwards to; module name -> the Triton name bound to it
    factories: dict[str, str] = field(default_factory=dict)

    def resolve(self, text: str) -> str:
        """`lang.load` -> `tl.load`; a head the module does not import stays as written."""
        head, dot, rest = text.partition(".")
        if not dot and head in self.factories:
            return self.factories[head]
        full = self.imports.get(head)
        if full is None:
            return text
        return normalize(full + dot + rest)

    def local_for(self, canonical: str) -> str | None:
        """A local name that means `canonical` (a module: `tl`, `triton`), if the module has one."""
        for local, full in self.imports.items():
            if normalize(full) == canonical:
                return local
        return None


def collect(tree: cst.Module) -> Names:
    imports: dict[str, str] = {}
    bound: set[str] = set()

    for node in walk(tree):
        if isinstance(node, cst.Import):
            for alias in node.names:
                full = _dotted(alias.name)
                if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                    imports[alias.asname.name.value] = full
                else:
                    root = full.split(".")[0]
                    imports[root] = root
            bound.update(imports)
        elif isinstance(node, cst.ImportFrom):
            if node.relative or node.module is None or isinstance(node.names, cst.ImportStar):
                continue
            module = _dotted(node.module)
            for alias in node.names:
                name = _dotted(alias.name)
                local = (
                    alias.asname.name.value
                    if alias.asname and isinstance(alias.asname.name, cst.Name)
                    else name
                )
                imports[local] = f"{module}.{name}"
                bound.add(local)
    for st in module_statements(tree):
        bound |= binds(st)
    names = Names(imports, frozenset(bound), frozenset(_used_heads(tree)))
    names.factories.update(_factories(tree, names))
    return names


# The decorators a forwarding factory may stand for, with the parameters Triton takes by position.
_FORWARDED = {"triton.autotune": ("configs", "key"), "triton.heuristics": ("values",)}


def _factories(tree: cst.Module, names: Names) -> dict[str, str]:
    """Module-level functions whose body (a docstring aside) is `return D(...)` for a decorator D
    of `_FORWARDED`, passing only their own parameters: the positional ones at D's positions under
    the same names, keywords as `name=name`."""
    out: dict[str, str] = {}
    assigned = [
        t.target.value
        for st in module_statements(tree)
        if isinstance(st, cst.SimpleStatementLine)
        for small in st.body
        if isinstance(small, cst.Assign)
        for t in small.targets
        if isinstance(t.target, cst.Name)
    ]
    for st in module_statements(tree):
        alias = _alias(st, names)
        if alias is not None and assigned.count(alias[0]) == 1:
            out[alias[0]] = alias[1]
        if not isinstance(st, cst.FunctionDef) or st.decorators:
            continue
        body = (
            [s for s in st.body.body if not _is_docstring(s)]
            if isinstance(st.body, cst.IndentedBlock)
            else []
        )
        if len(body) != 1 or not isinstance(body[0], cst.SimpleStatementLine):
            continue
        ret = body[0].body[0]
        if not (isinstance(ret, cst.Return) and isinstance(ret.value, cst.Call)):
            continue
        target = names.resolve(_dotted(ret.value.func))
        if target in _FORWARDED and _forwards(st, ret.value, _FORWARDED[target]):
            out[st.name.value] = target
    return out


def _alias(st: cst.CSTNode, names: Names) -> tuple[str, str] | None:
    """`name = triton.autotune` at module level (fla's `fla_cache_autotune` where no cache is
    installed), or any other Triton name (unsloth's `next_power_of_2 = triton.next_power_of_2`,
    `triton_cast = tl.cast`): the name and what it stands for."""
    if not (
        isinstance(st, cst.SimpleStatementLine) and len(st.body) == 1 and isinstance(st.body[0], cst.Assign)
    ):
        return None
    small = st.body[0]
    if len(small.targets) != 1 or not isinstance(small.targets[0].target, cst.Name):
        return None
    if not isinstance(small.value, (cst.Name, cst.Attribute)):
        return None
    target = names.resolve(_dotted(small.value))
    triton = target in _FORWARDED or target.startswith(("triton.", "tl."))
    return (small.targets[0].target.value, target) if triton else None


def _forwards(fn: cst.FunctionDef, call: cst.Call, positional: tuple[str, ...]) -> bool:
    params = [p.name.value for p in fn.params.params]
    if params[: len(positional)] != list(positional) or fn.params.posonly_params:
        return False
    given = {*params, *(p.name.value for p in fn.params.kwonly_params)}
    for i, a in enumerate(call.args):
        if not isinstance(a.value, cst.Name) or a.star:
            return False
        if a.keyword is None:
            if i >= len(positional) or a.value.value != positional[i]:
                return False
        elif a.keyword.value != a.value.value or a.value.value not in given:
            return False
    return True


def _is_docstring(st: cst.BaseStatement) -> bool:
    return (
        isinstance(st, cst.SimpleStatementLine)
        and len(st.body) == 1
        and isinstance(st.body[0], cst.Expr)
        and isinstance(st.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def _dotted(node: cst.CSTNode) -> str:
    if isinstance(node, cst.Attribute):
        return f"{_dotted(node.value)}.{node.attr.value}"
    return node.value if isinstance(node, cst.Name) else ""


# ---------------------------------------------------------------------------------------
# the module being read now

_ACTIVE: ContextVar[Names | None] = ContextVar("srcmodel_names", default=None)


def activate(names: Names) -> None:
    """Read canonical names through `names` from now on (the rules read one module at a time)."""
    _ACTIVE.set(names)


def active() -> Names | None:
    return _ACTIVE.get()


# ---------------------------------------------------------------------------------------
# writing new code into the module

# The modules rewrites write names of: (canonical head, the import that binds it as written).
_HEADS = (("tl", "import triton.language as tl"), ("triton", "import triton"), ("torch", "import torch"))


def respell(tree: cst.Module, names: Names) -> cst.Module:
    """`tree` with the canonical heads rewrites wrote (`tl.`, `triton.`, `torch.`) spelled as the
    module spells them: `lang.arange` where it imported `triton.language as lang`, `tr.cdiv` for
    `import triton as tr`; where nothing binds the module, its import is added after the last one.
    Heads the module binds, or already read before the rewrite, are left alone: they were right."""
    spell: dict[str, str] = {}
    add: list[str] = []
    used = _used_heads(tree)
    for head, statement in _HEADS:
        if head not in used or head in names.bound or head in names.heads:
            continue
        local = names.local_for(head)
        if local is not None:
            spell[head] = local
        elif head == "tl" and (tr := names.local_for("triton")) is not None:
            spell[head] = f"{tr}.language"
        else:
            add.append(statement)
    if spell:
        tree = tree.visit(_Respell(spell))
    if add:
        tree = _add_imports(tree, add)
    return tree


def _used_heads(tree: cst.Module) -> set[str]:
    heads = {h for h, _ in _HEADS}
    found: set[str] = set()

    for node in walk(tree, prune=cst.ImportAlias):  # `import triton.language` names no head
        if isinstance(node, cst.Attribute):
            base = node.value
            while isinstance(base, cst.Attribute):
                base = base.value
            if isinstance(base, cst.Name) and base.value in heads:
                found.add(base.value)
    return found


class _Respell(cst.CSTTransformer):
    def __init__(self, spell: dict[str, str]) -> None:
        self.spell = spell

    def visit_ImportAlias(self, node: cst.ImportAlias) -> bool:
        return False

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> Any:
        base = updated_node.value
        if isinstance(base, cst.Name) and base.value in self.spell:
            return updated_node.with_changes(value=cst.parse_expression(self.spell[base.value]))
        return updated_node


def _add_imports(tree: cst.Module, statements: list[str]) -> cst.Module:
    body = list(tree.body)
    last = max(
        (
            i
            for i, st in enumerate(body)
            if isinstance(st, cst.SimpleStatementLine)
            and any(isinstance(s, (cst.Import, cst.ImportFrom)) for s in st.body)
        ),
        default=-1,
    )
    new = [cst.parse_statement(s + "\n") for s in statements]
    return tree.with_changes(body=body[: last + 1] + new + body[last + 1 :])
