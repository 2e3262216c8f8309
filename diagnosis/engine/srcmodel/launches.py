"""Every launch of a kernel, wherever it is, with its arguments bound to the kernel's parameters.

A launch is `k[grid](...)` inside any function: a method of `ModelNew`, a module-level helper
that `forward` calls, a function nested in either; `k` may be the kernel or a module handle of it
(`k_tuned = triton.autotune(...)(k)`). Arguments bind to parameters as Python binds them,
by position or by keyword; keywords that are no parameter are launch options (`num_warps`).
The grid is read as Triton reads it: a tuple (also written in the subscript itself, flag_gems'
`k[M,]` or `k[M, N]`), a `lambda meta: (...)`, a function of `meta`, or a name bound to one of
those: once, or last before the launch with nothing between (each branch of an `if` binding its
own).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import libcst as cst

from diagnosis.engine.srcmodel import read
from diagnosis.engine.srcmodel.kernels import Kernel

LAUNCH_OPTIONS = frozenset({"num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion"})


@dataclass(repr=False, eq=False)
class Launch:
    """One `k[grid](...)` call."""

    kernel: str  # the kernel's function name
    target: str  # the name launched: the kernel, or a handle of it
    call: cst.Call
    grid: cst.BaseExpression
    function: cst.FunctionDef  # the innermost function around the launch
    scope: tuple[cst.FunctionDef, ...]  # every function around it, outermost first
    classname: str  # the class of the outermost function, "" for a module-level function
    statement: cst.SimpleStatementLine | None  # set when the launch is a whole expression statement
    line: cst.SimpleStatementLine | None  # the statement line that holds the launch
    model: Any = None  # the SourceModel it belongs to
    _scope: cst.FunctionDef | None = field(default=None, init=False)  # reading_scope, once read

    @property
    def qualname(self) -> str:
        """`ModelNew.forward`, `softmax`, `outer.inner`."""
        parts = [f.name.value for f in self.scope]
        return ".".join([self.classname, *parts] if self.classname else parts)

    @property
    def reading_scope(self) -> cst.FunctionDef:
        """The function whose locals the launch may read: the outermost around it (unsloth's
        launches sit in a nested `def run()` and read the `block` their enclosing function
        computed), or the innermost where a kernel is defined inside the outer one (its body
        holds no local of the launch's). Every rule asks, several times: it is found once."""
        outer = self.scope[0]
        if outer is self.function or self.model is None:
            return self.function
        if self._scope is None:
            kernels = {id(k.node) for k in self.model.all_kernels}
            nested = any(isinstance(n, cst.FunctionDef) and id(n) in kernels for n in read.walk(outer.body))
            # a parameter of a function in between hides the outer binding of its name
            inner = {p.name.value for fn in self.scope[1:] for p in read.params_of(fn)}
            outer_names = {p.name.value for p in read.params_of(outer)} | read.bound_names(outer.body)
            self._scope = self.function if nested or inner & outer_names else outer
        return self._scope

    @property
    def positional(self) -> list[cst.Arg]:
        return [a for a in self.call.args if a.keyword is None and a.star == ""]

    @property
    def keywords(self) -> dict[str, cst.Arg]:
        return {a.keyword.value: a for a in self.call.args if a.keyword is not None}

    @property
    def has_star_args(self) -> bool:
        """Whether the call passes `*args` or `**kwargs`: a rule that rebuilds its arguments
        would have to place them."""
        return any(a.star for a in self.call.args)

    @property
    def hides_args(self) -> bool:
        """Whether `*args` or `**kwargs` may pass something a reader of this launch must know:
        false only for `**d` whose keys are all read (`star_keys`) and none of which is a
        parameter of the kernel or a launch option (liger's `**kernel_args`, which only an XPU
        branch fills, with `grf_mode`). A rule that only edits keywords may then leave the `**d`
        where it is; one that knows which names matter to it asks `may_pass`."""
        if not self.has_star_args:
            return False
        kernel = self.model.kernels.get(self.kernel) if self.model is not None else None
        return kernel is None or self.may_pass(set(kernel.params) | LAUNCH_OPTIONS)

    def may_pass(self, names: set[str] | frozenset[str]) -> bool:
        """Whether this launch's `*args` or `**d` may pass any of `names`: true for a `*args`
        and for a dict whose keys are not all read."""
        if not self.has_star_args:
            return False
        keys = self.star_keys
        return keys is None or bool(keys & names)

    @property
    def star_keys(self) -> frozenset[str] | None:
        """The keywords this launch's `**d` arguments may pass; None for a `*args` or a dict
        whose keys are not all read. `d` is a local dict (`dict_keys`) or a literal written in
        the launch (sglang's `**({"launch_pdl": True} if use_pdl else {})`), or what a module-level
        function returns (`**launch_kwargs()`)."""
        keys: set[str] = set()
        for a in self.call.args:
            if a.star == "*":
                return None
            if a.star == "**":
                module = self.model.tree if self.model else None
                if isinstance(a.value, cst.Name):
                    found = dict_keys(self.function, a.value.value, module)
                else:
                    found = _literal_keys(a.value, module)
                if found is None:
                    return None
                keys |= found
        return frozenset(keys)

    def bound_args(self, kernel: Kernel) -> dict[str, cst.Arg]:
        """Kernel parameter -> the argument that binds it, by position or by keyword."""
        out: dict[str, cst.Arg] = dict(zip(kernel.params, self.positional, strict=False))
        for name, a in self.keywords.items():
            if name in kernel.params:
                out[name] = a
        return out

    def bound(self, kernel: Kernel) -> dict[str, cst.BaseExpression]:
        """Kernel parameter -> the launch expression that feeds it."""
        return {p: a.value for p, a in self.bound_args(kernel).items()}

    def options(self, kernel: Kernel) -> dict[str, cst.Arg]:
        """Launch keywords that are no parameter of the kernel (`num_warps=8`)."""
        return {k: a for k, a in self.keywords.items() if k not in kernel.params}

    def by_position(self, kernel: Kernel, param: str) -> bool:
        """Whether `param` is passed positionally here."""
        a = self.bound_args(kernel).get(param)
        return a is not None and a.keyword is None


@dataclass(frozen=True)
class SubscriptGrid(cst.Tuple):
    """The grid of `k[M,](...)` or `k[M, N](...)`: the subscript's elements read as the tuple
    Triton receives. It is no node of the module (its elements are), so an edit that replaces it
    as a whole is made on `subscript` (`cst_util.edit_map`)."""

    subscript: cst.Subscript | None = field(default=None, compare=False, repr=False)


def subscript_grid(func: cst.Subscript) -> cst.BaseExpression | None:
    """What the subscript of a launch `func(...)` gives Triton as its grid: the one expression of
    `k[grid]`, a `SubscriptGrid` for `k[M,]` and `k[M, N]`; None for a slice (`k[1:2]`)."""
    if not func.slice or not all(isinstance(e.slice, cst.Index) for e in func.slice):
        return None
    first = func.slice[0]
    if len(func.slice) == 1 and not isinstance(first.comma, cst.Comma):
        return first.slice.value
    return SubscriptGrid([cst.Element(e.slice.value, comma=e.comma) for e in func.slice], subscript=func)


def dict_keys(function: cst.FunctionDef, name: str, module: cst.Module | None) -> set[str] | None:
    """Every key the local dict `name` of `function` may hold, wherever in `function` it is
    filled: `name = {"K": v}`, `name["K"] = v`, a module-level helper `f(name)` that only
    stores literal keys into its parameter (liger's `set_large_grf_mode(kernel_args)`), or
    `name = f()` and `flag, name = f()` where a module-level `f` returns such a dict (sglang's
    `enable_pdl, pdl_kwargs = get_pdl_launch_metadata()`). Read whatever the branches: a key set
    in any of them counts; `name.update(...)` adds its keys (`_updated_keys`). None when `name`
    is used any other way (a parameter, passed to another function, `name.setdefault(...)`)."""
    return _dict_keys(function, name, module, 0)


def _dict_keys(function: cst.FunctionDef, name: str, module: cst.Module | None, depth: int) -> set[str] | None:
    if name in {p.name.value for p in read.params_of(function)}:
        return None
    keys: set[str] = set()
    uses = 0  # the uses of `name` accounted for, against every one there is
    bound = False  # else a global (`**LAUNCH_KW`): `_global_keys`
    for n in read.walk(function.body):
        if isinstance(n, cst.Assign):
            for t in n.targets:
                if isinstance(t.target, cst.Name) and t.target.value == name:
                    literal = _literal_keys(n.value, module, depth)
                elif (at := _unpacked_at(t.target, name)) is not None:
                    literal = _returned_keys(n.value, at, module, depth)
                else:
                    continue
                if literal is None:
                    return None
                keys |= literal
                uses += 1
                bound = True
        key = _stored_key(n, name)
        if key is not None:
            keys.add(key)
            uses += 1
        elif isinstance(n, cst.Arg) and n.star == "**" and isinstance(n.value, cst.Name) and n.value.value == name:
            uses += 1
        elif isinstance(n, cst.Return) and isinstance(n.value, cst.Name) and n.value.value == name:
            uses += 1  # a helper's own dict, read by `_returned_keys`
        elif (updated := _updated_keys(n, name, module, depth)) is not False:
            if updated is None:
                return None
            keys |= updated
            uses += 1
        elif isinstance(n, cst.Call) and module is not None:
            at = [i for i, a in enumerate(n.args) if not a.star and isinstance(a.value, cst.Name) and a.value.value == name]
            if at:
                helper = _helper_keys(n, at, module)
                if helper is None:
                    return None
                keys |= helper
                uses += len(at)
    every = sum(1 for n in read.walk(function.body) if isinstance(n, cst.Name) and n.value == name)
    if uses != every:
        return None
    if not bound:
        return _global_keys(name, module, depth) if not keys else None
    return keys


def _updated_keys(node: cst.CSTNode, name: str, module: cst.Module | None, depth: int) -> set[str] | None | bool:
    """The keys `name.update(...)` adds (sglang's `kwargs.update({"ENABLE_PDL": True, "launch_pdl":
    True})`): a dict `_literal_keys` reads, or keywords. None for an update from anything else;
    False where `node` is no update of `name`."""
    if not (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and isinstance(node.func.value, cst.Name)
        and node.func.value.value == name
        and node.func.attr.value == "update"
    ):
        return False
    keys: set[str] = set()
    for a in node.args:
        if a.star or (a.keyword is None and len(node.args) > 1):
            return None
        found = {a.keyword.value} if a.keyword is not None else _literal_keys(a.value, module, depth)
        if found is None:
            return None
        keys |= found
    return keys


def _global_keys(name: str, module: cst.Module | None, depth: int) -> set[str] | None:
    """The keys of a module-level dict `name` (sglang's `_AMD_LAUNCH_KWARGS = {...} if _IS_HIP
    else {}`): bound at the module's level only, in any branch, by `name = ...` of what
    `_literal_keys` reads, and used nowhere but as `**name`. None for anything else (filled or
    updated anywhere, bound in a function by `global`, imported, annotated)."""
    if module is None:
        return None
    keys: set[str] = set()
    bindings = [st for st in read.every_module_statement(module) if name in read.binds(st)]
    for st in bindings:
        small = st.body[0] if isinstance(st, cst.SimpleStatementLine) and len(st.body) == 1 else None
        if not (isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name)):
            return None
        found = _literal_keys(small.value, module, depth + 1)
        if found is None:
            return None
        keys |= found
    stars = every = 0
    for n in read.walk(module):
        if isinstance(n, cst.Name) and n.value == name:
            every += 1
        elif isinstance(n, cst.Arg) and n.star == "**" and isinstance(n.value, cst.Name) and n.value.value == name:
            stars += 1
    return keys if bindings and len(bindings) + stars == every else None


def _literal_keys(node: cst.BaseExpression, module: cst.Module | None = None, depth: int = 0) -> set[str] | None:
    """The keys of a dict literal of string keys, of `dict(K=v, ...)`, of either of those a
    conditional chooses (sglang's `pdl_kwargs = {"launch_pdl": True} if use_pdl else {}`), or of
    what a call of a module-level function returns (`_returned_keys`)."""
    if isinstance(node, cst.IfExp):
        body, orelse = _literal_keys(node.body, module, depth), _literal_keys(node.orelse, module, depth)
        return None if body is None or orelse is None else body | orelse
    if isinstance(node, cst.Call) and read.literal(node.func) == "dict":
        if any(a.keyword is None for a in node.args):
            return None  # dict(other), dict(**other): keys from elsewhere
        return {a.keyword.value for a in node.args}
    if isinstance(node, cst.Call):
        return _returned_keys(node, None, module, depth)
    if not isinstance(node, cst.Dict):
        return None
    keys = [read.string_literal(e.key) if isinstance(e, cst.DictElement) else None for e in node.elements]
    return None if any(k is None for k in keys) else set(keys)


def _stored_key(node: cst.CSTNode, name: str) -> str | None:
    """"K" for the statement `name["K"] = v`."""
    if not (isinstance(node, cst.Assign) and len(node.targets) == 1):
        return None
    target = node.targets[0].target
    if not (
        isinstance(target, cst.Subscript)
        and isinstance(target.value, cst.Name)
        and target.value.value == name
        and len(target.slice) == 1
        and isinstance(target.slice[0].slice, cst.Index)
    ):
        return None
    return read.string_literal(target.slice[0].slice.value)


# how many module-level functions deep a dict's keys are followed (a helper returning another's)
RETURN_DEPTH = 3


def _unpacked_at(target: cst.BaseExpression, name: str) -> int | None:
    """Where `name` stands in the unpacking target `a, name = ...` (no starred element)."""
    if not isinstance(target, cst.Tuple | cst.List) or any(isinstance(e, cst.StarredElement) for e in target.elements):
        return None
    at = [i for i, e in enumerate(target.elements) if isinstance(e.value, cst.Name) and e.value.value == name]
    return at[0] if len(at) == 1 else None


def _returned_keys(call: cst.BaseExpression, at: int | None, module: cst.Module | None, depth: int) -> set[str] | None:
    """The keys of the dict a module-level function returns when `call` calls it, or of the
    element `at` of the tuple it returns: every `return` of its own body must give one that
    `_literal_keys` reads or a local dict of it that `dict_keys` reads. None for anything else."""
    if not isinstance(call, cst.Call) or module is None or depth >= RETURN_DEPTH:
        return None
    fn = _module_def(module, read.literal(call.func))
    if fn is None:
        return None
    # its own returns, not those of a function or lambda nested in it
    returns = [n for n in read.walk(fn.body, prune=(cst.FunctionDef, cst.Lambda)) if isinstance(n, cst.Return)]
    if not returns:
        return None
    keys: set[str] = set()
    for r in returns:
        value = r.value
        if at is not None:
            elements = value.elements if isinstance(value, cst.Tuple) else ()
            if len(elements) <= at or any(isinstance(e, cst.StarredElement) for e in elements):
                return None
            value = elements[at].value
        if isinstance(value, cst.Name):
            found = _dict_keys(fn, value.value, module, depth + 1)
        else:
            found = _literal_keys(value, module, depth + 1) if value is not None else None
        if found is None:
            return None
        keys |= found
    return keys


def _helper_keys(call: cst.Call, at: list[int], module: cst.Module) -> set[str] | None:
    """The keys a module-level function stores into the parameters the dict binds at `at`."""
    fn = _module_def(module, read.literal(call.func))
    params = read.params_of(fn) if fn is not None else []
    if fn is None or any(call.args[i].keyword is not None or i >= len(params) for i in at):
        return None
    keys: set[str] = set()
    for i in at:
        param = params[i].name.value
        stored = [k for n in read.walk(fn.body) if (k := _stored_key(n, param)) is not None]
        if len(stored) != sum(1 for n in read.walk(fn.body) if isinstance(n, cst.Name) and n.value == param):
            return None  # the helper reads it, or passes it on
        keys.update(stored)
    return keys


class _Finder:
    """The launches under a tree, with the classes, functions and statement line around each: a
    walk over `read.children` (a libcst visitor would rebuild every node it passes)."""

    def __init__(self, targets: dict[str, str]) -> None:
        self.targets = targets  # launched name -> kernel name
        self.classes: list[str] = []
        self.functions: list[cst.FunctionDef] = []
        self.class_depth: list[int] = []  # how many functions were open when each class opened
        self.lines: list[cst.SimpleStatementLine] = []
        self.found: list[Launch] = []

    def visit(self, node: cst.CSTNode) -> None:
        if isinstance(node, cst.Call):
            self.visit_Call(node)
        scope = self._enter(node)
        for child in read.children(node):
            self.visit(child)
        if scope is not None:
            scope.pop()
            if scope is self.classes:
                self.class_depth.pop()

    def _enter(self, node: cst.CSTNode) -> list | None:
        """Open the scope `node` opens (the list it was pushed on), if any."""
        if isinstance(node, cst.ClassDef):
            self.classes.append(node.name.value)
            self.class_depth.append(len(self.functions))
            return self.classes
        if isinstance(node, cst.FunctionDef):
            self.functions.append(node)
            return self.functions
        if isinstance(node, cst.SimpleStatementLine):
            self.lines.append(node)
            return self.lines
        return None

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if not (isinstance(func, cst.Subscript) and self.functions):
            return
        name = read.literal(func.value)
        grid = subscript_grid(func)
        if name is None or grid is None:
            return
        for kernel in self._kernels(name, node):
            self._add(kernel, name, node, grid)

    def _kernels(self, name: str, call: cst.Call) -> list[str]:
        """The kernels a launch of `name` may start: the kernel or handle it names, or those a
        local it reads is bound to where it runs (`fx = rms_norm if plain else gemma_norm`, unsloth;
        `kernel = _combine_splitk_kernel`, sglang), or by any of its bindings where no one of them
        is the one that reaches the launch (a kernel chosen in the branches of an `if`). A launch through a local names the local as
        its target, so a rule, which edits the launches of its kernel's own names, leaves it."""
        if name in self.targets:
            return [self.targets[name]]
        function = self.functions[-1]
        if name in {p.name.value for p in read.params_of(function)}:
            return []
        value = bound_at(function, name, call)
        # where no one binding reaches the launch, each of the local's bindings may
        values = [value] if value is not None else [v for _, v in _bindings(function, name)]
        options = [o for v in values for o in ([v.body, v.orelse] if isinstance(v, cst.IfExp) else [v])]
        names = [read.literal(v) if isinstance(v, cst.Name | cst.Attribute) else None for v in options]
        if not names or not all(n in self.targets for n in names):
            return []
        return list(dict.fromkeys(self.targets[n] for n in names if n is not None))

    def _add(self, kernel: str, name: str, node: cst.Call, grid: cst.BaseExpression) -> None:
        line = self.lines[-1] if self.lines else None
        whole = (
            line is not None
            and len(line.body) == 1
            and isinstance(line.body[0], cst.Expr)
            and line.body[0].value is node
        )
        # the class only names the scope when its body holds the outermost function directly
        classname = self.classes[-1] if self.classes and self.class_depth[-1] == 0 else ""
        self.found.append(
            Launch(
                kernel=kernel,
                target=name,
                call=node,
                grid=grid,
                function=self.functions[-1],
                scope=tuple(self.functions),
                classname=classname,
                statement=line if whole else None,
                line=line,
            )
        )


def find_launches(tree: cst.Module, kernels: dict[str, Kernel]) -> list[Launch]:
    """Every launch of a top-level kernel or of one of its handles, in source order."""
    targets = {name: name for name in kernels}
    for k in kernels.values():
        for h in k.handles:
            targets.setdefault(h, k.name)
    finder = _Finder(targets)
    finder.visit(tree)
    return finder.found


# ---------------------------------------------------------------------------------------
# grids


@dataclass(repr=False, eq=False)
class Grid:
    """What a launch's grid expression is, after following a local name bound once."""

    form: str  # tuple, lambda, function, other
    node: cst.BaseExpression  # the expression (the lambda, the tuple, the name of the function)
    elements: list[cst.BaseExpression] | None  # the axes: of the tuple, or of the lambda's body tuple
    meta: str | None  # the lambda's or the function's parameter (what `meta["BLOCK"]` reads)
    binding: cst.BaseExpression | None  # the value of the local the grid was read through
    local: bool = False  # a function defined in the launch's own function (it reads its locals)


def grid_of(launch: Launch, module: cst.Module) -> Grid:
    node = launch.grid
    binding = None
    if isinstance(node, cst.Name):
        value = bound_at(launch.function, node.value, launch.call)
        if value is None:
            value = _enclosing_value(launch, node.value)
        if isinstance(value, cst.FunctionDef):  # the `def` of one branch reaches the launch
            return _function_grid(node, value, binding, local=True)
        if value is not None:
            node = binding = value
    if isinstance(node, (cst.Tuple, cst.List)):
        return Grid("tuple", node, [e.value for e in node.elements], None, binding)
    if isinstance(node, cst.Lambda):
        params = read.params_of_lambda(node)
        body = node.body
        elements = [e.value for e in body.elements] if isinstance(body, (cst.Tuple, cst.List)) else [body]
        return Grid("lambda", node, elements, params[0] if len(params) == 1 else None, binding)
    if isinstance(node, cst.Name):
        local = _local_def(launch.function, node.value)
        fn = local or _module_def(module, node.value)
        if fn is not None:
            return _function_grid(node, fn, binding, local=local is not None)
    return Grid("other", node, None, None, binding)


def _function_grid(node: cst.Name, fn: cst.FunctionDef, binding: cst.BaseExpression | None, local: bool) -> Grid:
    params = [p.name.value for p in read.params_of(fn)]
    returns = [n for n in read.walk(fn.body) if isinstance(n, cst.Return) and n.value is not None]
    elements = None
    if len(returns) == 1 and isinstance(returns[0].value, (cst.Tuple, cst.List)):
        elements = [e.value for e in returns[0].value.elements]
    meta = params[0] if len(params) == 1 else None
    return Grid("function", node, elements, meta, binding, local=local)


def _module_def(module: cst.Module, name: str | None) -> cst.FunctionDef | None:
    """The first module-level `def name`."""
    defs = (st for st in read.module_statements(module) if isinstance(st, cst.FunctionDef))
    return next((st for st in defs if st.name.value == name), None)


def _local_def(function: cst.FunctionDef, name: str) -> cst.FunctionDef | None:
    """The function `name` defined in `function`'s body (`def grid(meta): return (...)` beside
    the launch), when that def is the name's only binding there; a local def hides a module-level
    one of the same name."""
    defs = [n for n in read.walk(function.body) if isinstance(n, cst.FunctionDef) and n.name.value == name]
    if len(defs) != 1 or any(node is not defs[0] for node, _ in _bindings(function, name)):
        return None
    return defs[0]


def meta_reads(node: cst.CSTNode, meta: str) -> set[str]:
    """The keys `K` of every `meta["K"]` under `node`."""
    out: set[str] = set()
    for n in read.walk(node):
        if (
            isinstance(n, cst.Subscript)
            and isinstance(n.value, cst.Name)
            and n.value.value == meta
            and len(n.slice) == 1
            and isinstance(n.slice[0].slice, cst.Index)
        ):
            key = read.string_literal(n.slice[0].slice.value)
            if key is not None:
                out.add(key)
    return out


def _bindings(function: cst.FunctionDef, name: str) -> list[tuple[cst.CSTNode, cst.BaseExpression | None]]:
    """Every binding of `name` in `function`'s body: (the binding node, the value where it is a
    plain `name = value`, else None)."""
    found: list[tuple[cst.CSTNode, cst.BaseExpression | None]] = []
    for n in read.walk(function.body):
        if isinstance(n, cst.Assign):
            for t in n.targets:
                if isinstance(t.target, cst.Name) and t.target.value == name:
                    found.append((n, n.value))
                elif any(isinstance(x, cst.Name) and x.value == name for x in read.walk(t.target)):
                    found.append((n, None))
        elif isinstance(n, cst.AnnAssign) and n.value is None:
            continue  # a bare annotation (`n_rows: int`) binds nothing
        elif isinstance(n, (cst.AugAssign, cst.AnnAssign, cst.For, cst.NamedExpr)):
            if any(isinstance(x, cst.Name) and x.value == name for x in read.walk(n.target)):
                found.append((n, None))
        elif isinstance(n, cst.AsName) and isinstance(n.name, cst.Name) and n.name.value == name:
            found.append((n, None))
        elif isinstance(n, cst.FunctionDef) and n.name.value == name:
            found.append((n, n))  # fla: `def grid(meta)` in one branch, `grid = (N, T)` in another
        elif isinstance(n, cst.ClassDef) and n.name.value == name:
            found.append((n, None))
    return found


def _enclosing_value(launch: Launch, name: str) -> cst.BaseExpression | None:
    """The value of a name a launch in a nested function reads from the function around it
    (`grid = (...)` before `def run(): k[grid](...)`): that of its one binding there, none where
    the nested function binds the name itself or the outer one binds it more than once (it
    could be rebound between the `def` and the call)."""
    scope = launch.reading_scope
    fn = launch.function
    if scope is fn or name in {p.name.value for p in read.params_of(fn)} or _bindings(fn, name):
        return None
    found = _bindings(scope, name)
    return found[0][1] if len(found) == 1 else None


def bound_at(function: cst.FunctionDef, name: str, at: cst.CSTNode) -> cst.BaseExpression | None:
    """The value `name` has where `at` (a node of `function`'s body) runs: that of its only
    binding when that is a plain `name = value` (none for a parameter), or that of the plain `name = value` statement that last binds it
    before `at`, in `at`'s block or one around it, when nothing between that statement and
    `at` binds it, as where each branch binds its own grid:

        if dim == 0:
            grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]),)
            k_rows[grid](...)
        else:
            grid = lambda meta: (triton.cdiv(N, meta["BLOCK_N"]),)
            k_cols[grid](...)

    `at` runs only after that statement and the ones between them have run, so any other
    binding (in another branch, before it, after the statement that holds `at`) is overwritten
    before `at` reads the name. "Between" includes all of the statement that holds `at` in
    that block: a loop in it could rebind the name after `at`, for its next round. None
    otherwise."""
    if name in {p.name.value for p in read.params_of(function)}:
        return None
    found = _bindings(function, name)
    if len(found) <= 1:
        return found[0][1] if found else None
    paths = _paths(function.body, {id(at), *(id(n) for n, _ in found)})
    here = paths.get(id(at))
    if here is None:
        return None
    sites = [(paths[id(n)], value) for n, value in found]

    def inside(
        statement: cst.CSTNode, depth: int
    ) -> list[tuple[tuple[cst.CSTNode, ...], cst.BaseExpression | None]]:
        return [(path, v) for path, v in sites if len(path) > depth and path[depth] is statement]

    for depth in range(len(here) - 2, -1, -1):  # the blocks around `at`, innermost first
        block, current = here[depth], here[depth + 1]
        if not isinstance(block, cst.IndentedBlock):
            continue
        before = list(block.body)[: [id(st) for st in block.body].index(id(current))]
        for statement in reversed(before):
            binds = inside(statement, depth + 1)
            if not binds:
                continue
            (path, value), *more = binds
            # one plain `name = value` line (or a `def name`), and nothing in the statement
            # around `at` binds it
            plain = not more and value is not None and len(path) == depth + (2 if value is path[-1] else 3)
            return value if plain and not inside(current, depth + 1) else None
    return None


def _paths(root: cst.CSTNode, targets: set[int]) -> dict[int, tuple[cst.CSTNode, ...]]:
    """For each node under `root` whose id is in `targets`: the nodes from `root` down to it."""
    out: dict[int, tuple[cst.CSTNode, ...]] = {}

    def visit(node: cst.CSTNode, above: tuple[cst.CSTNode, ...]) -> None:
        path = (*above, node)
        if id(node) in targets:
            out[id(node)] = path
        for child in read.children(node):
            visit(child, path)

    visit(root, ())
    return out
