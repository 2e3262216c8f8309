"""Which wrapper function calls which: the path from `ModelNew.forward` to a launch.

A launch in a module-level helper (`softmax(x)`, as Triton's tutorials and kernel libraries
write them), a method reached through `self`, an autograd `Function` reached through `.apply`,
or a function nested in any of these, gets its values from `forward`'s inputs through the calls
on that path. Calls are resolved by name only: a callee is a module-level function, a function
defined in an enclosing function, a method of the caller's class, or a method of a module class.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import libcst as cst

from diagnosis.engine.srcmodel import read

ENTRY = ("ModelNew", "forward")


@dataclass(frozen=True, eq=False)
class Callee:
    fn: cst.FunctionDef
    skip_first: bool  # the call does not pass the first parameter (`self`, `ctx`, `cls`)


@dataclass(frozen=True, eq=False)
class Step:
    """One call on the path: `call`, made in `caller`, enters `callee`."""

    caller: cst.FunctionDef
    call: cst.Call
    callee: Callee


class CallGraph:
    def __init__(self, tree: cst.Module, kernels: set[str]) -> None:
        self.functions: dict[str, cst.FunctionDef] = {}
        self.classes: dict[str, dict[str, cst.FunctionDef]] = {}
        self.class_of: dict[int, str] = {}  # id(method) -> its class
        self.outer: dict[int, cst.FunctionDef] = {}  # id(nested function) -> the function around it
        for st in read.module_statements(tree):
            if isinstance(st, cst.FunctionDef) and st.name.value not in kernels:
                self.functions[st.name.value] = st
            elif isinstance(st, cst.ClassDef):
                methods = {
                    s.name.value: s for s in read.statements(st.body) if isinstance(s, cst.FunctionDef)
                }
                self.classes[st.name.value] = methods
                for m in methods.values():
                    self.class_of[id(m)] = st.name.value
        for fn in [*self.functions.values(), *(m for ms in self.classes.values() for m in ms.values())]:
            self._nest(fn)

    def _nest(self, fn: cst.FunctionDef) -> None:
        for inner in _defs(fn.body):
            self.outer[id(inner)] = fn
            self._nest(inner)

    def entry(self) -> cst.FunctionDef | None:
        return self.classes.get(ENTRY[0], {}).get(ENTRY[1])

    def callees(self, fn: cst.FunctionDef) -> list[tuple[cst.Call, Callee]]:
        out = []
        for node in _walk_own(fn.body):
            if isinstance(node, cst.Call):
                callee = self.resolve(fn, node)
                if callee is not None:
                    out.append((node, callee))
        return out

    def resolve(self, fn: cst.FunctionDef, call: cst.Call) -> Callee | None:
        func = call.func
        if isinstance(func, cst.Name):
            scope: cst.FunctionDef | None = fn
            while scope is not None:
                found = next((d for d in _defs(scope.body) if d.name.value == func.value), None)
                if found is not None:
                    return Callee(found, skip_first=False)
                scope = self.outer.get(id(scope))
            if func.value in self.functions:
                return Callee(self.functions[func.value], skip_first=False)
            return None
        if not (isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name)):
            return None
        owner, attr = func.value.value, func.attr.value
        method = self._outermost(fn)
        cls = self.class_of.get(id(method))
        params = read.params_of(method)
        if cls is not None and params and owner == params[0].name.value:  # self.helper(...)
            target = self.classes[cls].get(attr)
            return Callee(target, skip_first=not _static(target)) if target is not None else None
        if owner in self.classes:
            methods = self.classes[owner]
            if attr == "apply" and "forward" in methods:  # an autograd Function: forward(ctx, ...)
                return Callee(methods["forward"], skip_first=True)
            target = methods.get(attr)
            if target is not None:
                return Callee(target, skip_first=_decorated(target, "classmethod"))
        return None

    def _outermost(self, fn: cst.FunctionDef) -> cst.FunctionDef:
        while id(fn) in self.outer:
            fn = self.outer[id(fn)]
        return fn

    def path(self, target: cst.FunctionDef, entry: cst.FunctionDef | None = None) -> list[Step] | None:
        """The calls from `entry` (default `ModelNew.forward`) to `target`, shortest first; [] when
        `target` is the entry, None when no path is found."""
        start = entry if entry is not None else self.entry()
        if start is None:
            return None
        if start is target:
            return []
        seen = {id(start)}
        queue: deque[tuple[cst.FunctionDef, list[Step]]] = deque([(start, [])])
        while queue:
            fn, steps = queue.popleft()
            if len(steps) >= 8:
                continue
            for call, callee in self.callees(fn):
                if id(callee.fn) in seen:
                    continue
                path = [*steps, Step(fn, call, callee)]
                if callee.fn is target:
                    return path
                seen.add(id(callee.fn))
                queue.append((callee.fn, path))
        return None

    def paths(self, target: cst.FunctionDef, limit: int = 8) -> list[list[Step]]:
        """Every call path from `ModelNew.forward` to `target`, each call site its own (a helper
        called for q and again for k is two paths), shortest first, at most `limit`; [[]] when
        `target` is the entry, [] when none is found. No path passes a function twice."""
        start = self.entry()
        if start is None:
            return []
        if start is target:
            return [[]]
        found: list[list[Step]] = []
        queue: deque[tuple[cst.FunctionDef, list[Step]]] = deque([(start, [])])
        while queue and len(found) < limit:
            fn, steps = queue.popleft()
            if len(steps) >= 8:
                continue
            on_path = {id(start), *(id(s.callee.fn) for s in steps)}
            for call, callee in self.callees(fn):
                if id(callee.fn) in on_path:
                    continue
                path = [*steps, Step(fn, call, callee)]
                if callee.fn is target:
                    found.append(path)
                else:
                    queue.append((callee.fn, path))
        return found[:limit]


def _defs(block: cst.CSTNode) -> list[cst.FunctionDef]:
    """Functions defined in a block, at any depth of its if/with/try blocks, not inside other
    functions or classes."""
    out: list[cst.FunctionDef] = []

    def visit(node: cst.CSTNode) -> None:
        for child in read.children(node):
            if isinstance(child, cst.FunctionDef):
                out.append(child)
            elif not isinstance(child, (cst.ClassDef, cst.Lambda)):
                visit(child)

    visit(block)
    return out


def _walk_own(node: cst.CSTNode):  # noqa: ANN202 - a generator of nodes
    """The nodes of a function body, without entering nested functions or classes."""
    yield node
    for child in read.children(node):
        if isinstance(child, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            continue
        yield from _walk_own(child)


def _decorated(fn: cst.FunctionDef, name: str) -> bool:
    return any(read.literal(read.decorator_target(d)) == name for d in fn.decorators)


def _static(fn: cst.FunctionDef) -> bool:
    return _decorated(fn, "staticmethod")
