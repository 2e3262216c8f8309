"""Extract a library's kernels and launch code, with every module-level definition they use.

Starting from a few names in one module of a wheel (the launch function, usually), the closure
follows each free global name to the statement that binds it: definitions in the same module,
`from pkg.mod import name` (relative or absolute) into other modules of the wheel, and
attribute uses on an imported module of the wheel (`tle.program_id`). The statements come out
as the library wrote them (their source lines, dedented when they sat inside a module-level
`if`), so launches, decorators and helpers keep their style.

What cannot run standalone is substituted by a shim that the library's rules name (an identity
decorator for a launch-caching wrapper, literal values for device probes); module-level
`if` tests are resolved by the rules to the branch that runs on CUDA (an H200 with triton
3.6), and `try` blocks keep their body. Imports outside the wheel must be the standard library,
torch, triton or numpy.
"""

from __future__ import annotations

import ast
import builtins
import symtable
import sys
import textwrap
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from bench.wild.wheels import WheelSource

ALLOWED_EXTERNAL = frozenset({"torch", "triton", "numpy"}) | frozenset(sys.stdlib_module_names)
_BUILTINS = frozenset(dir(builtins))


class ExtractError(Exception):
    """The closure reached something it cannot bring along: an undefined name, a third-party import,
    a module-level `if` the rules do not decide, or two different definitions of one name."""


@dataclass(frozen=True)
class Shim:
    """The stand-in for one library definition that cannot run standalone.

    `source` binds `name` in the generated module; `deps` are wheel names it refers to (pulled in
    by the closure like any other), `imports` the import lines it needs. `module` "*" stands in
    for that name in every module of the wheel.
    """

    module: str
    name: str
    source: str
    reason: str
    imports: tuple[str, ...] = ()
    deps: tuple[tuple[str, str], ...] = ()


class ShimFactory(Protocol):
    """A shim whose code depends on how the kernels use it (flag_gems' `runtime.get_tuned_config`)."""

    module: str
    name: str
    reason: str

    def collect(self, node: ast.AST, alias: str, wheel: WheelSource) -> list[tuple[str, str]]:
        """Record the uses of `alias` in one extracted statement; return the wheel names they need."""
        ...

    def render(self) -> tuple[str, tuple[str, ...]]:
        """The shim's code (binding `name`) and the import lines it needs."""
        ...


@dataclass(frozen=True)
class LibraryRules:
    """How to take one library's code out of its package: shims and module-level branch choices."""

    shims: tuple[Shim, ...] = ()
    factories: tuple[Callable[[], ShimFactory], ...] = ()
    # `ast.unparse` of a module-level if-test -> whether its body (True) or its else (False) runs
    branches: dict[str, bool] = field(default_factory=dict)

    def branch(self, test: ast.expr) -> bool | None:
        normalized = {_normalize(k): v for k, v in self.branches.items()}
        return normalized.get(ast.unparse(test))


def _normalize(expr: str) -> str:
    return ast.unparse(ast.parse(expr, mode="eval").body)


# --- one module of the wheel ----------------------------------------------------------------


@dataclass(frozen=True)
class Stmt:
    """A module-level statement of the wheel, as text that runs at the top of a new file."""

    module: str
    line: int  # first line in the wheel's file (decorators included)
    text: str
    node: ast.stmt
    branch: str | None  # the module-level `if` that was resolved to reach it


@dataclass(frozen=True)
class _Def:
    stmts: tuple[Stmt, ...]


@dataclass(frozen=True)
class _ImportName:  # from target import name
    target: str
    name: str
    line: int


@dataclass(frozen=True)
class _ImportModule:  # import target [as alias]
    target: str
    bound_whole: bool  # `import a.b` binds `a`, `import a.b as c` binds a.b
    line: int


@dataclass(frozen=True)
class _Unresolved:  # bound only inside a module-level `if` the rules do not decide
    test: str
    line: int


_Binding = _Def | _ImportName | _ImportModule | _Unresolved


class ModuleInfo:
    """The top-level bindings of one wheel module after resolving its module-level branches."""

    def __init__(self, wheel: WheelSource, name: str, rules: LibraryRules) -> None:
        self.name = name
        self.file = wheel.member(name)
        self.is_package = wheel.is_package(name)
        self._lines = wheel.source(name).splitlines()
        tree = ast.parse(wheel.source(name), filename=self.file)
        self.bindings: dict[str, _Binding] = {}
        self.star_imports: list[str] = []
        defs: dict[str, list[Stmt]] = {}
        for node, branch, unresolved in _flatten(tree.body, rules, None):
            if unresolved is not None:
                for bound in _bound_names(node):
                    self.bindings.setdefault(bound, _Unresolved(unresolved, node.lineno))
                continue
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        self.bindings[alias.asname] = _ImportModule(alias.name, False, node.lineno)
                    else:
                        # `import torch` and `import torch.distributed.tensor` both bind torch: keep the first
                        head = alias.name.split(".")[0]
                        previous = self.bindings.get(head)
                        if not (isinstance(previous, _ImportModule) and previous.bound_whole):
                            self.bindings[head] = _ImportModule(alias.name, True, node.lineno)
                continue
            if isinstance(node, ast.ImportFrom):
                target = self._absolute(node)
                for alias in node.names:
                    if alias.name == "*":  # looked into only for names bound nowhere else
                        self.star_imports.append(target)
                        continue
                    self.bindings[alias.asname or alias.name] = _ImportName(target, alias.name, node.lineno)
                continue
            stmt = Stmt(name, _first_line(node), self._text(node), node, branch)
            for bound in _bound_names(node):
                # `X = {}` then `X.update(...)` is one binding; a def after an import replaces it
                if not isinstance(self.bindings.get(bound), _Def):
                    defs[bound] = []
                defs[bound].append(stmt)
                self.bindings[bound] = _Def(tuple(defs[bound]))

    def _absolute(self, node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        parts = self.name.split(".")
        base = parts if self.is_package else parts[:-1]
        base = base[: len(base) - (node.level - 1)]
        return ".".join(base + ([node.module] if node.module else []))

    def _text(self, node: ast.stmt) -> str:
        lines = self._lines[_first_line(node) - 1 : node.end_lineno]
        indent = node.col_offset
        out = [line[indent:] if line[:indent].strip() == "" else line.lstrip() for line in lines]
        return "\n".join(out)


def _first_line(node: ast.stmt) -> int:
    decorators = getattr(node, "decorator_list", [])
    return min([node.lineno] + [d.lineno for d in decorators])


def _flatten(
    body: list[ast.stmt], rules: LibraryRules, branch: str | None
) -> Iterable[tuple[ast.stmt, str | None, str | None]]:
    """(statement, the branch that reached it, the undecided if-test that hides it)."""
    for node in body:
        if isinstance(node, ast.If):
            test = ast.unparse(node.test)
            taken = rules.branch(node.test)
            if taken is None:
                for inner in ast.walk(node):
                    if isinstance(inner, ast.stmt) and inner is not node:
                        yield inner, branch, test
                continue
            label = f"`if {test}:` {'body' if taken else 'else'} (the branch that runs on CUDA)"
            yield from _flatten(node.body if taken else node.orelse, rules, label)
        elif isinstance(node, ast.Try):
            yield from _flatten(node.body + node.orelse + node.finalbody, rules, branch)
        else:
            yield node, branch, None


def _bound_names(node: ast.stmt) -> list[str]:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [node.name]
    if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        names = []
        for target in targets:
            if isinstance(target, ast.Name | ast.Tuple | ast.List | ast.Starred):
                names += [n.id for n in ast.walk(target) if isinstance(n, ast.Name)]
        return names
    if isinstance(node, ast.Import | ast.ImportFrom):
        return [a.asname or a.name.split(".")[0] for a in node.names]
    return []


def free_globals(text: str) -> set[str]:
    """Global names a top-level statement reads (at definition time or later, in any nested scope)."""
    top = symtable.symtable(text, "<stmt>", "exec")
    names = {s.get_name() for s in top.get_symbols() if s.is_referenced()}
    stack = list(top.get_children())
    while stack:
        table = stack.pop()
        names |= {s.get_name() for s in table.get_symbols() if s.is_referenced() and s.is_global()}
        stack.extend(table.get_children())
    return names


def _attribute_uses(node: ast.AST, alias: str) -> tuple[set[str], bool]:
    """Attributes read on `alias` in `node`, and whether `alias` is also used bare."""
    attrs: set[str] = set()
    inside: set[int] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == alias:
            attrs.add(n.attr)
            inside.add(id(n.value))
    bare = any(
        isinstance(n, ast.Name) and n.id == alias and id(n) not in inside and isinstance(n.ctx, ast.Load)
        for n in ast.walk(node)
    )
    return attrs, bare


# --- the closure ----------------------------------------------------------------------------


@dataclass
class _Item:
    key: tuple
    text: str
    comment: str | None = None
    deps: list[tuple] = field(default_factory=list)


@dataclass(frozen=True)
class ModuleRef:
    """A wheel module reached as a value (`from flag_gems.utils import triton_lang_extension as tle`)."""

    target: str
    factory: tuple[str, str] | None = None  # the shim factory standing in for it


@dataclass
class _Namespace:
    alias: str
    target: str
    members: dict[str, str] = field(default_factory=dict)  # attribute -> name bound in the output


@dataclass(frozen=True)
class Extracted:
    """The closure, ready to write: import lines, then the code blocks in dependency order."""

    imports: tuple[str, ...]
    blocks: tuple[str, ...]
    sources: tuple[tuple[str, tuple[int, ...]], ...]  # wheel file -> first lines of what was taken
    shims: tuple[tuple[str, str], ...]  # "module.name" -> reason
    names: frozenset[str]  # every name the blocks bind at module level

    def code(self) -> str:
        return "\n".join(self.imports) + "\n\n\n" + "\n\n\n".join(self.blocks) + "\n"


class Extractor:
    """Collects the closure of some names of one library; `extract()` gives the result."""

    def __init__(self, wheel: WheelSource, rules: LibraryRules) -> None:
        self.wheel = wheel
        self.rules = rules
        self._shims = {(s.module, s.name): s for s in rules.shims}
        self._factories: dict[tuple[str, str], ShimFactory] = {}
        for make in rules.factories:
            factory = make()
            self._factories[(factory.module, factory.name)] = factory
        self._modules: dict[str, ModuleInfo] = {}
        self._items: dict[tuple, _Item] = {}
        self._order: list[tuple] = []  # discovery order (for stable output)
        self._bound: dict[str, tuple] = {}  # output name -> the item that binds it
        self._imports: dict[str, str] = {}  # output name -> import line
        self._namespaces: dict[str, _Namespace] = {}
        self._used_shims: dict[str, str] = {}
        self._active: set[tuple[str, str]] = set()
        self._done: dict[tuple[str, str], str | ModuleRef] = {}

    def module(self, name: str) -> ModuleInfo:
        if name not in self._modules:
            if not self.wheel.has_module(name):
                raise ExtractError(f"module {name} is not in {self.wheel.path.name}")
            self._modules[name] = ModuleInfo(self.wheel, name, self.rules)
        return self._modules[name]

    # names -----------------------------------------------------------------------------------

    def require(self, module: str, name: str) -> str:
        """Bring `module.name` into the output; the name it is bound to there."""
        out = self._resolve(module, name)
        if isinstance(out, ModuleRef):
            raise ExtractError(f"{module}.{name} is a module; only its attributes can be extracted")
        return out

    def _resolve(self, module: str, name: str) -> str | ModuleRef:
        key = (module, name)
        if key in self._done:
            return self._done[key]
        if key in self._active:  # a cycle through function bodies: the name is being bound already
            return name
        self._active.add(key)
        try:
            out = self._resolve_uncached(module, name)
        finally:
            self._active.discard(key)
        self._done[key] = out
        return out

    def _resolve_uncached(self, module: str, name: str) -> str | ModuleRef:
        if (module, name) in self._shims:
            return self._add_shim(self._shims[(module, name)])
        if ("*", name) in self._shims and self.wheel.owns(module):  # the same stand-in in every module
            return self._add_shim(self._shims[("*", name)])
        if (module, name) in self._factories:
            factory = self._factories[(module, name)]
            self._used_shims[f"{module}.{name}"] = factory.reason
            return ModuleRef(f"{module}.{name}", factory=(module, name))
        info = self.module(module)
        binding = info.bindings.get(name)
        if binding is None:
            sub = f"{module}.{name}"
            if info.is_package and self.wheel.has_module(sub):
                return ModuleRef(sub)
            for target in info.star_imports:
                if self.wheel.owns(target) and name in self.module(target).bindings:
                    return self._import_name(info, name, _ImportName(target, name, 0))
            raise ExtractError(f"{info.file}: `{name}` is not defined at module level")
        if isinstance(binding, _Unresolved):
            raise ExtractError(
                f"{info.file}:{binding.line}: `{name}` is bound under `if {binding.test}:`; "
                "the library's rules must decide that branch or shim the name"
            )
        if isinstance(binding, _ImportModule):
            return self._import_module(info, name, binding)
        if isinstance(binding, _ImportName):
            return self._import_name(info, name, binding)
        return self._add_defs(name, binding)

    def _import_module(self, info: ModuleInfo, name: str, binding: _ImportModule) -> str | ModuleRef:
        target = binding.target.split(".")[0] if binding.bound_whole else binding.target
        if self.wheel.owns(target):
            return ModuleRef(target)
        line = f"import {binding.target}" if binding.bound_whole else f"import {binding.target} as {name}"
        if binding.bound_whole and binding.target.split(".")[0] != name:
            raise ExtractError(f"{info.file}:{binding.line}: unexpected import binding {name}")
        return self._add_import(info, name, line, binding.target, binding.line)

    def _import_name(self, info: ModuleInfo, name: str, binding: _ImportName) -> str | ModuleRef:
        if not self.wheel.owns(binding.target):
            line = f"from {binding.target} import {binding.name}"
            if binding.name != name:
                line += f" as {name}"
            return self._add_import(info, name, line, binding.target, binding.line)
        out = self._resolve(binding.target, binding.name)
        if isinstance(out, ModuleRef) or out == name:
            return out
        self._bind(
            name,
            ("alias", name),
            f"{name} = {out}",
            f"{info.file}:{binding.line} imports it as {name}",
            [self._bound[out]],
        )
        return name

    def _add_import(self, info: ModuleInfo, name: str, line: str, target: str, lineno: int) -> str:
        if target.split(".")[0] not in ALLOWED_EXTERNAL:
            raise ExtractError(
                f"{info.file}:{lineno}: `{name}` comes from {target}, which is neither the standard "
                "library nor torch/triton/numpy; the rules must shim it"
            )
        previous = self._imports.get(name)
        if previous is not None and _imported_object(previous, name) != _imported_object(line, name):
            raise ExtractError(f"`{name}` is imported two ways: `{previous}` and `{line}`")
        if previous is not None:  # `from triton import language as tl` is `import triton.language as tl`
            return name
        if name in self._bound and self._bound[name][0] != "import":
            raise ExtractError(f"`{name}` is both imported ({line}) and defined")
        self._imports[name] = line
        self._bound[name] = ("import", line)
        return name

    def _add_shim(self, shim: Shim) -> str:
        key = ("shim", shim.module, shim.name)
        deps = [self._key_of(self.require(m, n)) for m, n in shim.deps]
        where = "every module's " if shim.module == "*" else f"{shim.module}."
        self._bind(shim.name, key, shim.source, f"shim for {where}{shim.name}: {shim.reason}", deps)
        for line in shim.imports:
            self._add_import_line(line)
        label = f"{shim.name} (in every module)" if shim.module == "*" else f"{shim.module}.{shim.name}"
        self._used_shims[label] = shim.reason
        return shim.name

    def _add_import_line(self, line: str) -> None:
        node = ast.parse(line).body[0]
        assert isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names:
            bound = alias.asname or alias.name.split(".")[0]
            self._imports.setdefault(bound, line)
            self._bound.setdefault(bound, ("import", line))

    def _add_defs(self, name: str, binding: _Def) -> str:
        keys = {("stmt", s.module, s.line) for s in binding.stmts}
        if name in self._bound and self._bound[name] not in keys:
            existing = self._items.get(self._bound[name])
            # the same text in two modules (`logger = logging.getLogger(__name__)`) is one definition
            if existing is not None and existing.key[0] == "stmt" and existing.text == binding.stmts[0].text:
                return name
            raise ExtractError(
                f"`{name}` is defined in {binding.stmts[0].module} and already bound by {self._bound[name]}; "
                "two definitions of one name cannot share a module"
            )
        for stmt in binding.stmts:
            key = ("stmt", stmt.module, stmt.line)
            if key in self._items:
                continue
            self._check_local_imports(stmt)
            comment = f"{self.module(stmt.module).file}:{stmt.line}"
            if stmt.branch:
                comment += f", from the {stmt.branch}"
            item = _Item(key, stmt.text, comment)
            self._items[key] = item
            for bound in _bound_names(stmt.node):
                self._bound.setdefault(bound, key)
            item.deps = self._deps_of(stmt)
            self._order.append(key)
        return name

    def _check_local_imports(self, stmt: Stmt) -> None:
        """An import inside a function runs when it is called: it must work standalone too."""
        for node in ast.walk(stmt.node):
            if node is stmt.node or not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            if isinstance(node, ast.ImportFrom) and node.level:
                target = self.wheel.package
            else:
                target = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
            head = (target or "").split(".")[0]
            if head == self.wheel.package or head not in ALLOWED_EXTERNAL:
                raise ExtractError(
                    f"{self.module(stmt.module).file}:{node.lineno}: `{ast.unparse(node)}` inside the code "
                    "taken; the rules must shim its function"
                )

    def _bind(self, name: str, key: tuple, text: str, comment: str | None, deps: list[tuple]) -> None:
        if name in self._bound and self._bound[name] != key:
            raise ExtractError(f"`{name}` would be bound twice ({self._bound[name]} and {key})")
        if key not in self._items:
            self._items[key] = _Item(key, text, comment, deps)
            self._order.append(key)
        self._bound[name] = key

    def _key_of(self, out_name: str) -> tuple:
        return self._bound[out_name]

    def _deps_of(self, stmt: Stmt) -> list[tuple]:
        deps: list[tuple] = []
        info = self.module(stmt.module)
        own = set(_bound_names(stmt.node))
        for name in sorted(free_globals(stmt.text)):
            if name.startswith("__") and name.endswith("__"):
                continue
            if name not in info.bindings:
                if name in _BUILTINS or name in own:
                    continue
                if info.is_package and self.wheel.has_module(f"{stmt.module}.{name}"):
                    pass
                else:
                    raise ExtractError(f"{info.file}:{stmt.line}: `{name}` is not defined at module level")
            if name in own and isinstance(info.bindings.get(name), _Def):
                continue
            out = self._resolve(stmt.module, name)
            if isinstance(out, ModuleRef):
                deps.append(self._namespace_use(stmt, name, out))
            elif out in self._bound:  # not yet bound only while a cycle through bodies resolves
                deps.append(self._bound[out])
        return deps

    def _namespace_use(self, stmt: Stmt, alias: str, ref: ModuleRef) -> tuple:
        if ref.factory is not None:
            factory = self._factories[ref.factory]
            needed = factory.collect(stmt.node, alias, self.wheel)
            key = ("factory", factory.module, factory.name)
            if alias != factory.name:
                raise ExtractError(
                    f"{factory.module}.{factory.name} is used as `{alias}`; the shim binds its own name"
                )
            item = self._items.get(key)
            if item is None:
                item = _Item(key, "", f"shim for {factory.module}.{factory.name}: {factory.reason}")
                self._items[key] = item
                self._bound[alias] = key
            item.deps += [self._bound[self.require(m, n)] for m, n in needed]
            if key not in self._order:
                self._order.append(key)
            return key
        attrs, bare = _attribute_uses(stmt.node, alias)
        if bare:
            raise ExtractError(
                f"{self.module(stmt.module).file}:{stmt.line}: the module {ref.target} is used as a value "
                f"(`{alias}`), not only through its attributes"
            )
        space = self._namespaces.get(alias)
        if space is None:
            space = self._namespaces[alias] = _Namespace(alias, ref.target)
        elif space.target != ref.target:
            raise ExtractError(f"`{alias}` names two modules: {space.target} and {ref.target}")
        key = ("namespace", alias)
        if key not in self._items:
            self._items[key] = _Item(
                key,
                "",
                f"the library's module {ref.target}, imported as `{alias}`: "
                "a namespace holding the members used here",
            )
            self._bound[alias] = key
            self._order.append(key)
            self._add_import_line("import types")
        item = self._items[key]
        for attr in sorted(attrs):
            if attr not in space.members:
                out = self.require(ref.target, attr)
                space.members[attr] = out
                item.deps.append(self._bound[out])
        return key

    # output ----------------------------------------------------------------------------------

    def extract(self) -> Extracted:
        for alias, space in self._namespaces.items():
            lines = [f'{alias} = types.ModuleType("{space.target}")']
            lines += [f"{alias}.{attr} = {out}" for attr, out in sorted(space.members.items())]
            self._items[("namespace", alias)].text = "\n".join(lines)
        for key, factory in self._factories.items():
            item = self._items.get(("factory", *key))
            if item is not None:
                text, imports = factory.render()
                item.text = text
                for line in imports:
                    self._add_import_line(line)
        ordered = self._topological()
        blocks = []
        sources: dict[str, list[int]] = {}
        for key in ordered:
            item = self._items[key]
            comment = "".join(f"# {line}\n" for line in textwrap.wrap(item.comment or "", 100))
            blocks.append(comment + item.text)
            if key[0] == "stmt":
                sources.setdefault(self.module(key[1]).file, []).append(key[2])
        names = frozenset(self._bound)
        imports = tuple(dict.fromkeys(self._imports.values()))
        return Extracted(
            imports=tuple(sorted(imports, key=_import_order)),
            blocks=tuple(blocks),
            sources=tuple((f, tuple(sorted(lines))) for f, lines in sources.items()),
            shims=tuple(sorted(self._used_shims.items())),
            names=names,
        )

    def _topological(self) -> list[tuple]:
        """Items after what they use, otherwise in discovery order (cycles through bodies are fine)."""
        out: list[tuple] = []
        state: dict[tuple, int] = {}

        def visit(key: tuple) -> None:
            if state.get(key):
                return
            state[key] = 1
            for dep in sorted(self._items[key].deps, key=_source_order):
                if dep in self._items:
                    visit(dep)
            state[key] = 2
            out.append(key)

        for key in self._order:
            visit(key)
        return out


def _imported_object(line: str, name: str) -> str:
    """The dotted path of what an import line binds to `name` (`from a import b as c` -> a.b)."""
    node = ast.parse(line).body[0]
    for alias in node.names:  # type: ignore[attr-defined]
        if isinstance(node, ast.Import):
            if alias.asname == name:
                return alias.name
            if alias.asname is None and alias.name.split(".")[0] == name:
                return name
        elif (alias.asname or alias.name) == name:
            return f"{node.module}.{alias.name}"
    return line


def _source_order(key: tuple) -> tuple:
    """Statements of one module in their file's order; everything else after, by name."""
    return (0, key[1], key[2]) if key[0] == "stmt" else (1, str(key), 0)


def _import_order(line: str) -> tuple[int, str, str]:
    module = line.split()[1]
    group = 0 if module.split(".")[0] in sys.stdlib_module_names else 1
    return (group, module, line)


def extract(wheel: WheelSource, rules: LibraryRules, module: str, names: Iterable[str]) -> Extracted:
    """The closure of `names` (bound in `module`), bound under those same names in the output."""
    ex = Extractor(wheel, rules)
    for name in names:
        out = ex.require(module, name)
        if out != name:
            raise ExtractError(f"{module}.{name} came out as {out}")
    return ex.extract()
