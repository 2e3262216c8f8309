"""The kernels of a module: which functions are Triton kernels and what their parameters are.

A kernel is a function whose decorator stack holds `triton.jit` under any import alias
(`@jit`, `@tr.jit`, `@triton.jit(do_not_specialize=...)`), under any `@triton.autotune` and
`@triton.heuristics`; or a module-level function the module rebinds to its jitted self, the
same stack written as calls (unsloth's `f = triton.jit(f)`, then `f = triton.heuristics({...})(f)`:
`Kernel.wrapped_by`). A constexpr is a parameter annotated `tl.constexpr` through any alias
(`lang.constexpr`, `constexpr`). Constexprs the autotuner's configs or the heuristics supply are
recorded as such: a launch does not pass them, and a rewrite that passed them would clash.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from diagnosis.engine.srcmodel import read
from diagnosis.engine.srcmodel.names import Names

JIT = "triton.jit"
AUTOTUNE = "triton.autotune"
HEURISTICS = "triton.heuristics"
CONFIG = "triton.Config"


@dataclass(repr=False, eq=False)
class Kernel:
    """One `@triton.jit` function and what its signature and decorators say."""

    name: str
    node: cst.FunctionDef
    names: Names
    params: list[str]
    constexprs: list[str]
    defaults: dict[str, cst.BaseExpression]
    decorators: tuple[str, ...]  # canonical names, outermost first
    # constexpr -> "autotune" or "heuristics": supplied at launch by the decorators (or by a
    # module-level handle `k_tuned = triton.autotune(...)(k)`), never passed by the launch
    supplied: dict[str, str] = field(default_factory=dict)
    supplied_unknown: bool = False  # an autotune whose configs cannot be read: any constexpr may be
    # constexpr -> every value the autotuner's configs give it, where each config's can be read (an
    # int literal, or a comprehension's name over a literal list: `for BT in [32, 64]`)
    tuned_values: dict[str, frozenset[int]] = field(default_factory=dict)
    heuristics: dict[str, cst.BaseExpression] = field(default_factory=dict)  # constexpr -> its lambda
    handles: tuple[str, ...] = ()  # module names bound to `triton.autotune(...)(k)`
    top_level: bool = True
    # its autotune holds one config at most: `configs=[one]`, or a computed list cut `[:1]`
    single_config: bool = False
    # the module statements `f = triton.jit(f)`, `f = triton.heuristics(...)(f)` that make a plain
    # function `f` this kernel, in order; empty for a decorated kernel
    wrapped_by: tuple[cst.SimpleStatementLine, ...] = ()

    @property
    def autotuned(self) -> bool:
        """An autotuner chooses some of its launch options: by decorator or through a handle."""
        return AUTOTUNE in self.decorators or bool(self.handles)

    @property
    def runtime_params(self) -> list[str]:
        return [p for p in self.params if p not in self.constexprs]

    def jit_decorators(self, keep_heuristics: bool = True) -> list[cst.Decorator]:
        """The decorators a copy of the kernel keeps: `jit` and, by default, the heuristics (they
        compute constexprs from the launch's arguments, which the copy still gets)."""
        keep = {JIT, HEURISTICS} if keep_heuristics else {JIT}
        return [d for d in self.node.decorators if read.dotted(read.decorator_target(d), self.names) in keep]

    def autotune_decorators(self) -> list[cst.Decorator]:
        """Its `@triton.autotune(...)` decorators (a handle's autotune is not among them)."""
        return [d for d in self.node.decorators if read.dotted(read.decorator_target(d), self.names) == AUTOTUNE]

    @property
    def autotuner_path(self) -> str | None:
        """How its autotuner is reached from its name: "" when `@triton.autotune` is the outermost
        decorator, one `.fn` for each `@triton.heuristics` above it; None without one decorator
        autotune, or with anything else above it."""
        if self.decorators.count(AUTOTUNE) != 1 or self.handles:
            return None
        outer = self.decorators[: self.decorators.index(AUTOTUNE)]
        return ".fn" * len(outer) if all(d == HEURISTICS for d in outer) else None

    def calls(self, *wanted: str) -> list[cst.Call]:
        return [n for n in read.walk(self.node.body) if read.is_call(n, *wanted, names=self.names)]

    @property
    def has_dot(self) -> bool:
        return bool(self.calls("tl.dot"))

    @property
    def atomics(self) -> list[cst.Call]:
        return [
            n
            for n in read.walk(self.node.body)
            if isinstance(n, cst.Call) and (read.call_name(n, self.names) or "").startswith("tl.atomic_")
        ]

    def program_axes(self) -> dict[str, int]:
        """Local names bound straight to `tl.program_id(axis)`, with the axis."""
        out: dict[str, int] = {}
        for s in read.statements(self.node.body):
            if not isinstance(s, cst.SimpleStatementLine):
                continue
            for small in s.body:
                if not (isinstance(small, cst.Assign) and len(small.targets) == 1):
                    continue
                target = small.targets[0].target
                if isinstance(target, cst.Name) and read.is_call(
                    small.value, "tl.program_id", names=self.names
                ):
                    axis = read.int_literal(read.arg(small.value, "axis", 0))  # type: ignore[arg-type]
                    if axis is not None:
                        out[target.value] = axis
        return out


def find_kernels(tree: cst.Module, names: Names) -> tuple[dict[str, Kernel], list[Kernel]]:
    """(top-level kernels by name, the last definition winning as Python's does; every kernel
    anywhere in the module, nested ones included, in source order)."""
    top: dict[str, Kernel] = {}
    every: list[Kernel] = []
    top_ids = {id(st) for st in read.module_statements(tree)}
    for node in read.walk(tree):
        if not isinstance(node, cst.FunctionDef):
            continue
        decorators = tuple(read.dotted(read.decorator_target(d), names) or "" for d in node.decorators)
        if JIT not in decorators:  # a bare `@jit` the module did not import from Triton is not Triton's
            continue
        kernel = _kernel(node, names, decorators, id(node) in top_ids, tree)
        every.append(kernel)
        if kernel.top_level:
            top[kernel.name] = kernel
    for kernel in _wrapped(tree, names, top):
        top[kernel.name] = kernel
        every.append(kernel)
    for handle, target, dec in _handles(tree, names):
        if target in top:
            k = top[target]
            k.handles = (*k.handles, handle)
            _add_configs(k, dec, tree, names)
    return top, every


def _wrapped(tree: cst.Module, names: Names, decorated: dict[str, Kernel]) -> list[Kernel]:
    """The module-level functions a module statement rebinds to themselves jitted, `f =
    triton.jit(f)` (`triton.jit(do_not_specialize=[...])(f)`), with the wrappers later
    statements add (`f = triton.heuristics({...})(f)`, `f = triton.autotune(...)(f)`) as its
    decorator stack, outermost first; in source order. A function that module-level code reads
    before the jit (at import, not inside a function's body) is left out: that code saw another
    object."""
    plain: dict[str, cst.FunctionDef] = {}
    stacks: dict[str, list[tuple[cst.SimpleStatementLine, list[tuple[str, cst.Call | None]]]]] = {}
    for st in read.module_statements(tree):
        if isinstance(st, cst.FunctionDef) and st.name.value not in decorated:
            plain[st.name.value] = st
            stacks.pop(st.name.value, None)
            continue
        rebound = _rebinding(st, names)
        if rebound is not None and rebound[0] in plain:
            name, wrappers = rebound
            if name in stacks or JIT in (w for w, _ in wrappers):
                stacks.setdefault(name, []).append((st, wrappers))
                continue
        if not isinstance(st, cst.FunctionDef | cst.ClassDef):
            for name in [n for n in plain if n not in stacks and _mentions(st, n)]:
                del plain[name]
    out = []
    for name, steps in stacks.items():
        wrappers = [w for _, ws in reversed(steps) for w in ws]  # a later statement wraps outside
        # the wrappers up to the jit are the function's own (the innermost must be the jit)
        if wrappers[-1][0] != JIT:
            continue
        kernel = _kernel(plain[name], names, tuple(w for w, _ in wrappers), True, tree, wrappers)
        kernel.wrapped_by = tuple(st for st, _ in steps)
        out.append(kernel)
    return out


def _rebinding(st: cst.CSTNode, names: Names) -> tuple[str, list[tuple[str, cst.Call | None]]] | None:
    """(f, the wrappers, outermost first, each with the call that holds its options) for a
    statement `f = w1(...)(w2(f))` whose wrappers are all Triton's jit, heuristics or autotune."""
    if not isinstance(st, cst.SimpleStatementLine) or len(st.body) != 1:
        return None
    small = st.body[0]
    if not isinstance(small, cst.Assign):
        return None
    if len(small.targets) != 1 or not isinstance(small.targets[0].target, cst.Name):
        return None
    value: cst.BaseExpression = small.value
    wrappers: list[tuple[str, cst.Call | None]] = []
    while isinstance(value, cst.Call) and len(value.args) == 1 and not value.args[0].keyword:
        options = value.func if isinstance(value.func, cst.Call) else None
        wrapper = read.dotted(options.func if options is not None else value.func, names)
        if wrapper not in (JIT, HEURISTICS, AUTOTUNE) or (wrapper != JIT and options is None):
            return None
        wrappers.append((wrapper, options))
        value = value.args[0].value
    name = small.targets[0].target.value
    if not wrappers or not isinstance(value, cst.Name) or value.value != name:
        return None
    return name, wrappers


def _mentions(node: cst.CSTNode, name: str) -> bool:
    return any(isinstance(n, cst.Name) and n.value == name for n in read.walk(node))


def _kernel(
    node: cst.FunctionDef,
    names: Names,
    decorators: tuple[str, ...],
    top: bool,
    module: cst.Module,
    wrappers: list[tuple[str, cst.Call | None]] | None = None,
) -> Kernel:
    params: list[str] = []
    constexprs: list[str] = []
    defaults: dict[str, cst.BaseExpression] = {}
    for p in read.params_of(node):
        params.append(p.name.value)
        ann = p.annotation.annotation if p.annotation else None
        if read.dotted(ann, names) in ("tl.constexpr", "constexpr") or read.string_literal(ann) in (
            "tl.constexpr",
            "constexpr",
        ):
            constexprs.append(p.name.value)
        if p.default is not None:
            defaults[p.name.value] = p.default
    kernel = Kernel(node.name.value, node, names, params, constexprs, defaults, decorators, top_level=top)
    if wrappers is None:
        calls = [d.decorator if isinstance(d.decorator, cst.Call) else None for d in node.decorators]
        wrappers = list(zip(decorators, calls, strict=True))
    for name, call in wrappers:
        if name == AUTOTUNE and call is not None:
            configs = read.arg(call, "configs", 0)
            if isinstance(configs, cst.Name):
                configs = _module_value(module, configs.value)
            kernel.single_config = read.first_only(configs) or (
                isinstance(configs, (cst.List, cst.Tuple)) and len(configs.elements) == 1
            )
            _add_configs(kernel, call, module, names)
        elif name == HEURISTICS and call is not None:
            table = read.arg(call, "values", 0)
            if isinstance(table, cst.Dict):
                for el in table.elements:
                    key = read.string_literal(el.key) if isinstance(el, cst.DictElement) else None
                    if key is None:
                        kernel.supplied_unknown = True
                        continue
                    kernel.heuristics[key] = el.value
                    kernel.supplied.setdefault(key, "heuristics")
            else:
                kernel.supplied_unknown = True
    return kernel


def _add_configs(kernel: Kernel, call: cst.Call, tree: cst.Module, names: Names) -> None:
    """Record what one autotune (a decorator or a handle's) supplies; a constexpr some earlier
    source supplied with values unknown stays unknown."""
    values, unknown = _config_values(call, tree, names)
    for p, ints in values.items():
        known = kernel.tuned_values.get(p) if p in kernel.supplied else frozenset()
        kernel.supplied.setdefault(p, "autotune")
        merged = _union(known, ints)
        if merged is None:
            kernel.tuned_values.pop(p, None)
        else:
            kernel.tuned_values[p] = merged
    kernel.supplied_unknown |= unknown


def _union(a: frozenset[int] | None, b: frozenset[int] | None) -> frozenset[int] | None:
    """The values two sources give one constexpr; None (unknown) when either is."""
    return None if a is None or b is None else a | b


def _config_values(
    call: cst.Call, tree: cst.Module, names: Names
) -> tuple[dict[str, frozenset[int] | None], bool]:
    """The constexprs an autotune's configs set, each with the values they give it (None where
    some cannot be read), and whether some config could not be read."""
    configs = read.arg(call, "configs", 0)
    if isinstance(configs, cst.Name):
        configs = _module_value(tree, configs.value)
    elements: list[cst.BaseExpression] = []
    loops: dict[str, frozenset[int] | None] = {}
    if isinstance(configs, (cst.List, cst.Tuple)):
        elements = [e.value for e in configs.elements]
    elif isinstance(configs, cst.ListComp):
        elements = [configs.elt]
        loops = _comprehension_ints(configs)
    else:
        return {}, True
    out: dict[str, frozenset[int] | None] = {}
    unknown = False
    for e in elements:
        if not read.is_call(e, CONFIG, "Config", names=names):
            unknown = True
            continue
        kwargs = read.arg(e, "kwargs", 0)  # type: ignore[arg-type]
        if not isinstance(kwargs, cst.Dict):
            unknown = True
            continue
        for el in kwargs.elements:
            key = read.string_literal(el.key) if isinstance(el, cst.DictElement) else None
            if key is None:
                unknown = True
                continue
            n = read.int_literal(el.value)
            ints = frozenset({n}) if n is not None else None
            if ints is None and isinstance(el.value, cst.Name):
                ints = loops.get(el.value.value)
            out[key] = _union(out.get(key, frozenset()), ints)
    return out, unknown


def _comprehension_ints(comp: cst.ListComp) -> dict[str, frozenset[int] | None]:
    """Each name a comprehension's `for` binds: the ints of the literal list or tuple it walks
    (None for any other iterable, or a name bound twice)."""
    out: dict[str, frozenset[int] | None] = {}
    clause: cst.CompFor | None = comp.for_in
    while clause is not None:
        if isinstance(clause.target, cst.Name):
            items = clause.iter.elements if isinstance(clause.iter, cst.List | cst.Tuple) else []
            ints = {read.int_literal(e.value) for e in items}
            known = bool(ints) and None not in ints and clause.target.value not in out
            out[clause.target.value] = frozenset(i for i in ints if i is not None) if known else None
        clause = clause.inner_for_in
    return out


def _module_value(tree: cst.Module, name: str) -> cst.BaseExpression | None:
    found = None
    for st in read.module_statements(tree):
        if not isinstance(st, cst.SimpleStatementLine):
            continue
        for small in st.body:
            if isinstance(small, cst.Assign) and any(
                isinstance(t.target, cst.Name) and t.target.value == name for t in small.targets
            ):
                found = small.value
    return found


def _handles(tree: cst.Module, names: Names) -> list[tuple[str, str, cst.Call]]:
    """(handle, kernel, autotune call) for module statements `h = triton.autotune(...)(k)`, also
    through `triton.heuristics(...)` between them."""
    out = []
    for st in read.module_statements(tree):
        if not isinstance(st, cst.SimpleStatementLine):
            continue
        for small in st.body:
            if not (
                isinstance(small, cst.Assign)
                and len(small.targets) == 1
                and isinstance(small.targets[0].target, cst.Name)
            ):
                continue
            value: cst.BaseExpression = small.value
            tune: cst.Call | None = None
            while isinstance(value, cst.Call) and isinstance(value.func, cst.Call) and len(value.args) == 1:
                wrapper = read.dotted(value.func.func, names)
                if wrapper == AUTOTUNE and tune is None:
                    tune = value.func
                elif wrapper != HEURISTICS:
                    break
                value = value.args[0].value
            if tune is not None and isinstance(value, cst.Name):
                out.append((small.targets[0].target.value, value.value, tune))
    return out
