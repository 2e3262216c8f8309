"""Launches that could be one: intermediates that round-trip through memory.

``ModelNew.forward`` is followed statement by statement (through module-level helper
functions and methods, a few calls deep) and every tensor gets a token. A launch reads the
tokens bound to the pointer parameters its kernel loads from and writes those it stores to.
When one launch reads what an earlier one wrote, the intermediate is written to memory and
read back; fused, it would stay in registers. The gain counts tensors moved and assumes they
have the same size (true for element-wise chains), except tensors written only with reduction
results (partials, row statistics), which count as negligible; a chain whose only
intermediates are such results is not reported. Launches in different branches of one `if`
(a library's dispatch by shape: `if dim == last: inner[...] else: non_inner[...]`), or one in a
branch that returns and one after the `if`, never run in the same call: no such pair is
reported.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field

from diagnosis.engine.escalation import modest_gain
from diagnosis.engine.evidence import Family, Finding, Severity, Tier, register_code
from diagnosis.engine.tier0.registry import rule
from diagnosis.engine.tier0.source import ATOMICS, ModuleContext, call_arg

UNFUSED = register_code(
    "T0-UNFUSED-LAUNCHES",
    Tier.TRIAGE,
    Family.FUSION,
    "ModelNew.forward writes {intermediates} intermediate tensor(s) to memory and reads them back in a "
    "later launch ({edges}): one fused kernel would move about {bound}x fewer bytes (tensors of equal "
    "size assumed, gain halved)",
    "Unfused launches",
)
SAME_INPUT = register_code(
    "T0-SAME-INPUT-RELOADED",
    Tier.TRIAGE,
    Family.FUSION,
    "the input {tensor} is loaded by {count} launches ({kernels}): a fused kernel would read it once "
    "(tensors of equal size assumed, gain halved)",
    "Same input loaded by several launches",
)

_MAX_DEPTH = 4
_VIEW_METHODS = frozenset(
    {
        "contiguous",
        "view",
        "reshape",
        "flatten",
        "view_as",
        "squeeze",
        "unsqueeze",
        "t",
        "transpose",
        "permute",
    }
)


@dataclass
class _Launch:
    kernel: str
    line: int
    reads: set[str] = field(default_factory=set)
    writes: set[str] = field(default_factory=set)
    small: set[str] = field(default_factory=set)  # written only with reduction results
    # the branches taken to reach it: ((call, `if` statement), 0 for its body or 1 for its else)
    path: frozenset[tuple[tuple[int, int], int]] = frozenset()

    def excludes(self, other: _Launch) -> bool:
        """The two sit in different branches of one `if`: no call runs both."""
        return any((node, 1 - branch) in other.path for node, branch in self.path)


class _Tracer:
    """A small abstract interpreter over the wrapper code: names -> tensor tokens."""

    def __init__(self, ctx: ModuleContext) -> None:
        self.ctx = ctx
        self.launches: list[_Launch] = []
        self.fresh = itertools.count()
        self.access = {name: _param_access(ctx, name) for name in ctx.kernels}
        self.path: frozenset[tuple[tuple[int, int], int]] = frozenset()
        # which call of a helper the tracer is in: two calls of one helper may branch apart
        self.calls = itertools.count()
        self.call = next(self.calls)

    def run(self) -> list[_Launch]:
        cls = self.ctx.classes.get("ModelNew")
        forward = _method(cls, "forward") if cls is not None else None
        if cls is None or forward is None:
            return []
        env = {a.arg: f"input:{a.arg}" for a in forward.args.args[1:]}
        self.body(forward.body, env, cls, 0)
        return self.launches

    def body(
        self, stmts: list[ast.stmt], env: dict[str, str], cls: ast.ClassDef | None, depth: int
    ) -> str | None:
        returned = None
        outer = self.path  # a branch that returns narrows the path of the rest of this block only
        for stmt in stmts:
            if isinstance(stmt, ast.Assign | ast.AnnAssign):
                value = stmt.value
                token = self.expr(value, env, cls, depth) if value is not None else None
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                for target in targets:
                    self.bind(target, value, token, env, cls, depth)
            elif isinstance(stmt, ast.AugAssign):
                self.expr(stmt.value, env, cls, depth)
            elif isinstance(stmt, ast.Return) and stmt.value is not None:
                returned = self.expr(stmt.value, env, cls, depth)
            elif isinstance(stmt, ast.Expr):
                self.expr(stmt.value, env, cls, depth)
            elif isinstance(stmt, ast.If):
                for branch, stmts_ in enumerate((stmt.body, stmt.orelse)):
                    inner = self.branch(stmts_, ((self.call, id(stmt)), branch), env, cls, depth)
                    returned = returned or inner
                leaves = (_leaves(stmt.body), _leaves(stmt.orelse))
                if leaves[0] != leaves[1]:  # what follows runs only after the branch that stays
                    self.path = self.path | {((self.call, id(stmt)), leaves.index(False))}
            elif isinstance(stmt, ast.For | ast.While | ast.With):
                inner = self.body([*stmt.body, *getattr(stmt, "orelse", [])], env, cls, depth)
                returned = returned or inner
        self.path = outer
        return returned

    def branch(
        self,
        stmts: list[ast.stmt],
        taken: tuple[tuple[int, int], int],
        env: dict[str, str],
        cls: ast.ClassDef | None,
        depth: int,
    ) -> str | None:
        outer = self.path
        self.path = outer | {taken}
        returned = self.body(stmts, env, cls, depth)
        self.path = outer
        return returned

    def bind(
        self,
        target: ast.expr,
        value: ast.expr | None,
        token: str | None,
        env: dict[str, str],
        cls: ast.ClassDef | None,
        depth: int,
    ) -> None:
        if isinstance(target, ast.Name):
            env[target.id] = token or self.new()
        elif isinstance(target, ast.Tuple | ast.List):
            values = value.elts if isinstance(value, ast.Tuple | ast.List) else [None] * len(target.elts)
            for t, v in zip(target.elts, values, strict=False):
                self.bind(t, None, self.expr(v, env, cls, depth) if v is not None else None, env, cls, depth)

    def new(self) -> str:
        return f"new:{next(self.fresh)}"

    def expr(self, node: ast.expr, env: dict[str, str], cls: ast.ClassDef | None, depth: int) -> str | None:
        if isinstance(node, ast.Name):
            return env.get(node.id)
        if isinstance(node, ast.Attribute | ast.Subscript) and not isinstance(node, ast.Call):
            return self.expr(node.value, env, cls, depth)
        if not isinstance(node, ast.Call):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.expr):
                    self.expr(child, env, cls, depth)
            return self.new()
        func = node.func
        if (
            isinstance(func, ast.Subscript)
            and isinstance(func.value, ast.Name)
            and func.value.id in self.ctx.kernels
        ):
            self.launch(func.value.id, node, env, cls, depth)
            return None
        callee = None
        callee_cls = cls
        if isinstance(func, ast.Name) and func.id in self.ctx.functions:
            callee = self.ctx.functions[func.id]
            callee_cls = None
        elif (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id == "self"
            and cls is not None
        ):
            callee = _method(cls, func.attr)
        if callee is not None and depth < _MAX_DEPTH:
            tokens = [self.expr(a, env, cls, depth) for a in node.args]
            params = [a.arg for a in callee.args.args]
            if callee_cls is not None and params and params[0] == "self":
                params = params[1:]
            inner = {p: t for p, t in zip(params, tokens, strict=False) if t is not None}
            for kw in node.keywords:
                if kw.arg is not None and (t := self.expr(kw.value, env, cls, depth)) is not None:
                    inner[kw.arg] = t
            caller, self.call = self.call, next(self.calls)
            returned = self.body(callee.body, inner, callee_cls, depth + 1)
            self.call = caller
            return returned or self.new()
        if isinstance(func, ast.Attribute) and func.attr in _VIEW_METHODS:
            for a in node.args:
                self.expr(a, env, cls, depth)
            return self.expr(func.value, env, cls, depth)
        for a in [*node.args, *(kw.value for kw in node.keywords)]:
            self.expr(a, env, cls, depth)
        return self.new()

    def launch(
        self, kernel: str, node: ast.Call, env: dict[str, str], cls: ast.ClassDef | None, depth: int
    ) -> None:
        params = self.ctx.kernels[kernel].params
        bound = dict(zip(params, node.args, strict=False))
        bound.update({kw.arg: kw.value for kw in node.keywords if kw.arg is not None})
        reads, writes, small = self.access[kernel]
        record = _Launch(kernel, node.lineno, path=self.path)
        for param, arg in bound.items():
            token = self.expr(arg, env, cls, depth)
            if token is None:
                continue
            if param in reads:
                record.reads.add(token)
            if param in writes:
                record.writes.add(token)
            if param in small:
                record.small.add(token)
        self.launches.append(record)


def _method(cls: ast.ClassDef | None, name: str) -> ast.FunctionDef | None:
    if cls is None:
        return None
    for item in cls.body:
        if isinstance(item, ast.FunctionDef) and item.name == name:
            return item
    return None


def _param_access(ctx: ModuleContext, kernel: str) -> tuple[set[str], set[str], set[str]]:
    """(read, written, written-small) pointer parameters of a kernel.

    Written-small: every store to it writes a reduction result (a partial sum per program, a
    mean per row), so the tensor is a fraction of the input's size.
    """
    k = ctx.kernels[kernel]
    pointers = k.pointer_params()
    reads: set[str] = set()
    writes: set[str] = set()
    full: set[str] = set()
    for op, call, ptr in k.memory_ops():
        params = k.deps(ptr).params & pointers
        if op == "load":
            reads |= params
            continue
        writes |= params
        value = call_arg(call, 1, "val" if op in ATOMICS else "value")
        if value is None or not k.is_reduced(value):
            full |= params
        if op in ATOMICS and value is not None:
            reads |= params  # an atomic reads what it updates
    return reads, writes, writes - full


@rule(UNFUSED.code, SAME_INPUT.code, scope="module")
def unfused_launches(ctx: ModuleContext) -> Iterator[Finding]:
    launches = _Tracer(ctx).run()
    if len(launches) < 2:
        return
    edges: list[tuple[_Launch, _Launch]] = []
    intermediates: set[str] = set()
    for j, consumer in enumerate(launches):
        for producer in launches[:j]:
            shared = producer.writes & consumer.reads
            if shared and not producer.excludes(consumer):
                edges.append((producer, consumer))
                intermediates |= shared
    small = set().union(*(launch.small for launch in launches))

    def size(tokens: set[str]) -> int:
        # Tensors of equal size, except reduction results, which are negligible.
        return len(tokens - small)

    total = sum(size(launch.reads) + size(launch.writes) for launch in launches)
    if edges and intermediates - small:
        produced = set().union(*(launch.writes for launch in launches))
        external = set().union(*(launch.reads for launch in launches)) - produced
        outputs = produced - intermediates
        fused = max(1, size(external) + size(outputs))
        bound = total / fused
        consumer_lines = sorted({c.line for _, c in edges})
        producer_lines = sorted({p.line for p, _ in edges} - set(consumer_lines))
        first = next(c for _, c in edges if c.line == consumer_lines[0])
        yield Finding(
            UNFUSED.code,
            Severity.MEDIUM,
            {
                "intermediates": len(intermediates - small),
                "edges": ", ".join(f"{p.kernel} line {p.line} -> {c.kernel} line {c.line}" for p, c in edges),
                "bound": round(bound, 1),
                "launches": len(launches),
            },
            lines=tuple(consumer_lines + producer_lines),
            kernel=first.kernel,
            gain=modest_gain(bound) if bound > 1 else None,
        )
    produced = set().union(*(launch.writes for launch in launches))
    readers: dict[str, list[_Launch]] = {}
    for launch in launches:
        for token in launch.reads - produced:
            readers.setdefault(token, []).append(launch)
    for token, readers_of in readers.items():
        users = _together(readers_of)
        if len(users) < 2:
            continue
        # read once instead of once per launch: the bytes moved, as for unfused launches
        bound = total / max(1, total - (len(users) - 1))
        yield Finding(
            SAME_INPUT.code,
            Severity.MEDIUM if bound > 1 else Severity.LOW,
            {
                "tensor": token.removeprefix("input:"),
                "count": len(users),
                "kernels": ", ".join(f"{u.kernel} line {u.line}" for u in users),
            },
            # The first later reader is the redundant load: it leads.
            lines=tuple(dict.fromkeys([u.line for u in users[1:]] + [users[0].line])),
            kernel=users[1].kernel,
            gain=modest_gain(bound) if bound > 1 else None,
        )


def _leaves(stmts: list[ast.stmt]) -> bool:
    """The block always ends in a `return` or `raise` (through nested `if`s)."""
    if not stmts:
        return False
    last = stmts[-1]
    if isinstance(last, ast.Return | ast.Raise):
        return True
    return isinstance(last, ast.If) and _leaves(last.body) and _leaves(last.orelse)


def _together(launches: list[_Launch]) -> list[_Launch]:
    """The most launches of `launches` that can all run in one call: from each one in turn,
    every later one that no kept launch excludes; the first of the largest such groups."""
    best: list[_Launch] = []
    for i, first in enumerate(launches):
        kept = [first]
        for launch in launches[i + 1 :]:
            if not any(launch.excludes(k) for k in kept):
                kept.append(launch)
        if len(kept) > len(best):
            best = kept
    return best
