"""One source model of an uploaded kernel module, read by validation, tier 0 and the rules.

The module's text is parsed once (libcst, format-preserving, for the rewrites; `ast` of the same
text on demand for the readers that are ast-based) and the questions every reader asks are
answered once, here: what the imports mean (`names`), which functions are kernels and what
their parameters are (`kernels`), where each kernel is launched and which argument binds which
parameter (`launches`), what a grid is (`grid`), and what values reach a launch on the module's
input cases (`launch_values`). Models are cached by the sha256 of the text, and by the identity
of a tree the rules edited, so every reader of one version shares one parse.

Plain Python: no Django (STYLE.md 1); the module is never imported or executed.
"""

from __future__ import annotations

import ast
import functools
import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from diagnosis.engine.proposers.base import CaseShape
from diagnosis.engine.srcmodel import read
from diagnosis.engine.srcmodel.calls import CallGraph
from diagnosis.engine.srcmodel.kernels import Kernel, find_kernels
from diagnosis.engine.srcmodel.launches import (
    LAUNCH_OPTIONS,
    Grid,
    Launch,
    find_launches,
    grid_of,
    meta_reads,
)
from diagnosis.engine.srcmodel.names import Names, activate, active, collect, normalize, respell
from diagnosis.engine.srcmodel.values import (
    UNKNOWN,
    Context,
    Evaluator,
    TensorValue,
    bind,
    case_inputs,
)


class SourceModelError(Exception):
    """The text parses as Python but libcst cannot read it (syntax newer than it knows)."""


class SourceModel:
    """The facts of one module text. Build with `model_of(source)`; never mutated after."""

    def __init__(self, source: str, tree: cst.Module) -> None:
        self.source = source
        self.tree = tree
        self.names: Names = collect(tree)
        # top-level kernels by name, and every kernel anywhere (nested ones too) in source order
        self.kernels, self.all_kernels = find_kernels(tree, self.names)
        self.launches: list[Launch] = find_launches(tree, self.kernels)
        for launch in self.launches:
            launch.model = self
        self.calls = CallGraph(tree, set(self.kernels))
        self._ast: ast.Module | None = None
        self._positions: Any = None
        self._context: Context | None = None

    # -- readers ------------------------------------------------------------------------

    @property
    def ast_tree(self) -> ast.Module:
        """The same text parsed by `ast`, for readers written against it (tier 0)."""
        if self._ast is None:
            self._ast = ast.parse(self.source)
        return self._ast

    def activate(self) -> SourceModel:
        """Make this module's imports the ones canonical names are read through (read.dotted)."""
        activate(self.names)
        return self

    def launches_of(self, kernel: str, handles: bool = True) -> list[Launch]:
        """The launches of `kernel`; with `handles`, also those through `k_tuned = autotune(...)(k)`."""
        return [lc for lc in self.launches if lc.kernel == kernel and (handles or lc.target == kernel)]

    def grid(self, launch: Launch) -> Grid:
        return grid_of(launch, self.tree)

    def position(self, node: cst.CSTNode) -> tuple[int, int]:
        """(line, column in characters) where `node` starts."""
        if self._positions is None:
            self._positions = MetadataWrapper(self.tree, unsafe_skip_copy=True).resolve(PositionProvider)
        start = self._positions[node].start
        return start.line, start.column

    def ast_module_statements(self) -> list[ast.stmt]:
        """The statements of `ast_tree` that `read.module_statements` gives (the same first
        lines), in source order: what the ast-side readers take as the module's own."""
        lines = {self.position(st)[0] for st in read.module_statements(self.tree)}
        out: list[ast.stmt] = []
        todo = list(self.ast_tree.body)
        while todo:
            st = todo.pop()
            if isinstance(st, ast.If | ast.With | ast.Try | ast.TryStar):
                todo.extend(
                    getattr(st, "body", []) + getattr(st, "orelse", []) + getattr(st, "finalbody", [])
                )
                todo.extend(s for h in getattr(st, "handlers", []) for s in h.body)
            elif st.lineno in lines:
                out.append(st)
        return sorted(out, key=lambda st: (st.lineno, st.col_offset))

    # -- values -------------------------------------------------------------------------

    def context(self) -> Context:
        if self._context is None:
            # module constants (`MAX_FUSED_SIZE = 65536`): the module body's straight-line values
            ev = Evaluator({}, Context(self.names, {}, self.calls.functions))
            ev.run(list(self.tree.body))
            self._context = Context(self.names, ev.known(), self.calls.functions)
        return self._context

    def launch_envs(self, launch: Launch, cases: Sequence[CaseShape]) -> list[Evaluator]:
        """Per case: an evaluator of the launch function's locals just before the launch, along
        the first call path from `ModelNew.forward` that reaches it."""
        return self._envs_along(launch, cases, self.calls.path(launch.function))

    def launch_envs_per_path(self, launch: Launch, cases: Sequence[CaseShape]) -> list[list[Evaluator]]:
        """`launch_envs` along each call path that reaches the launch (a helper that forward
        calls for q and again for k launches with each one's values): one list per path, each
        with one evaluator per case."""
        paths = self.calls.paths(launch.function)
        return [self._envs_along(launch, cases, path) for path in paths] or [self.launch_envs(launch, cases)]

    def _envs_along(self, launch: Launch, cases: Sequence[CaseShape], path: list | None) -> list[Evaluator]:
        ctx = self.context()
        out = []
        for case in cases:
            inputs = case_inputs(case)
            if path is None:  # not reached from ModelNew.forward: its own parameters take the inputs
                ev = _entry_evaluator(launch.function, inputs, ctx)
            else:
                entry = path[0].caller if path else launch.function
                ev = _entry_evaluator(entry, inputs, ctx)
                for step in path:
                    ev.run(read.statements(step.caller.body), stop=step.call)
                    env = bind(step.callee.fn, step.call, ev, step.callee.skip_first) or {}
                    if self.calls.outer.get(id(step.callee.fn)) is step.caller:
                        env = {**ev.env, **env}  # a nested function reads its caller's locals
                    ev = Evaluator(env, ctx)
            ev.run(read.statements(launch.function.body), stop=launch.call)
            out.append(ev)
        return out

    def launch_values(
        self, launch: Launch, kernel: Kernel, cases: Sequence[CaseShape]
    ) -> list[dict[str, Any]]:
        """Per case: kernel parameter -> its value at this launch, where the shapes tell it, else
        (integers only) where the baseline's recorded launch of this kernel does; along the first
        call path that reaches the launch."""
        return self._values(launch, kernel, cases, self.launch_envs(launch, cases))

    def launch_values_per_path(
        self, launch: Launch, kernel: Kernel, cases: Sequence[CaseShape]
    ) -> list[list[dict[str, Any]]]:
        """`launch_values` along each call path that reaches the launch (`launch_envs_per_path`)."""
        return [self._values(launch, kernel, cases, envs) for envs in self.launch_envs_per_path(launch, cases)]

    def _values(
        self, launch: Launch, kernel: Kernel, cases: Sequence[CaseShape], envs: list[Evaluator]
    ) -> list[dict[str, Any]]:
        bound = launch.bound(kernel)
        out = []
        for ev, case in zip(envs, cases, strict=True):
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


def _entry_evaluator(fn: cst.FunctionDef, inputs: list[Any], ctx: Context) -> Evaluator:
    params = [p.name.value for p in read.params_of(fn)]
    if params and params[0] == "self":
        params = params[1:]
    env: dict[str, Any] = {p: UNKNOWN for p in params}
    for name, value in zip(params, inputs, strict=False):
        if value is not None:
            env[name] = value
    return Evaluator(env, ctx)


# ---------------------------------------------------------------------------------------
# the cache

_MAX_CACHED = 48
_BY_TEXT: OrderedDict[str, SourceModel] = OrderedDict()
_BY_TREE: OrderedDict[int, SourceModel] = OrderedDict()


def _remember(key: str | None, model: SourceModel) -> SourceModel:
    if key is not None:
        _BY_TEXT[key] = model
        _BY_TEXT.move_to_end(key)
        while len(_BY_TEXT) > _MAX_CACHED:
            _BY_TEXT.popitem(last=False)
    # the model holds its tree, so the id is not reused while the entry lives
    _BY_TREE[id(model.tree)] = model
    _BY_TREE.move_to_end(id(model.tree))
    while len(_BY_TREE) > _MAX_CACHED:
        _BY_TREE.popitem(last=False)
    return model


def model_of(source: str) -> SourceModel:
    """The model of `source`, built once per text. Raises SyntaxError when the text is not
    Python, SourceModelError when only libcst cannot read it."""
    key = hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()
    found = _BY_TEXT.get(key)
    if found is not None:
        _BY_TEXT.move_to_end(key)
        return found
    try:
        tree = cst.parse_module(source)
    except cst.ParserSyntaxError as exc:
        ast.parse(source)  # a SyntaxError for text that is not Python at all
        raise SourceModelError(str(exc)) from exc
    return _remember(key, SourceModel(source, tree))


def parsed(source: str) -> cst.Module:
    """The tree of `source`: the cached model's when one was built for this text (its nodes'
    children already read), else a parse of its own, kept for the next few readers. For passes
    that only read the tree, or edit a copy (libcst trees are immutable)."""
    key = hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()
    found = _BY_TEXT.get(key)
    return found.tree if found is not None else _parse_kept(source)


@functools.lru_cache(maxsize=8)
def _parse_kept(source: str) -> cst.Module:
    return cst.parse_module(source)


def model_of_tree(tree: cst.Module) -> SourceModel:
    """The model of a tree (one a rule edited, or the one `model_of` parsed), its nodes the
    tree's own: edits planned against it apply to that tree."""
    found = _BY_TREE.get(id(tree))
    if found is not None and found.tree is tree:
        return found
    return _remember(None, SourceModel(tree.code, tree))


__all__ = [
    "LAUNCH_OPTIONS",
    "Grid",
    "Kernel",
    "Launch",
    "Names",
    "SourceModel",
    "SourceModelError",
    "TensorValue",
    "active",
    "meta_reads",
    "model_of",
    "model_of_tree",
    "normalize",
    "parsed",
    "respell",
]
