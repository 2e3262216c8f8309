"""Straight-line kernel code after a rewrite, tidied the way its author would have written it.

Flattening loops (SINGLE_PASS) and joining kernels (FUSION) leave code nobody writes by hand:
the loop variable pinned to its first value (`start = 0` then `cols = start + tl.arange(0, B)`),
the same index computation and the same load once per former pass, a new variable that only
renames an old one (`x = x_vals`). Each function here takes the statements of one straight-line
block and changes them only where the values are provably the same: a name pinned to 0 is
replaced by 0 and `0 + e` folded to `e`; a load repeated with nothing stored in between is read
once, into the name the code already gives it where it can; an assignment that binds a name to
the value it already holds is dropped. Comments on a dropped statement move to the next one.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from typing import Any

import libcst as cst

from diagnosis.engine.proposers.rules import cst_util as cu

PURE_CALLS = frozenset({"tl.arange", "tl.zeros", "tl.full"})
CONSTANT_CALLS = frozenset({"float", "int"})  # `float("inf")`: a constant, whatever it is called with


# ---------------------------------------------------------------------------------------
# canonical values of straight-line code


class Canon:
    """Canonical text of expressions over straight-line statements.

    Names bound to pure expressions (arithmetic, comparisons, tl.arange) are expanded, other
    names carry a version that changes when they are rebound to something different, so two
    expressions with the same canonical text have the same value.
    """

    def __init__(self) -> None:
        self.pure: dict[str, ast.expr] = {}
        self.version: dict[str, int] = {}
        self.last_key: dict[str, str] = {}

    def tree(self, node: cst.BaseExpression) -> ast.expr:
        parsed = cu.expr_ast(node)
        return self._subst(parsed)

    def _subst(self, node: ast.expr) -> ast.expr:
        canon = self

        class T(ast.NodeTransformer):
            def visit_Name(self, n: ast.Name) -> ast.AST:
                if n.id in canon.pure:
                    return canon.pure[n.id]
                return ast.Name(id=f"{n.id}__v{canon.version.get(n.id, 0)}", ctx=ast.Load())

        return T().visit(node)

    def key(self, node: cst.BaseExpression) -> str:
        return ast.unparse(self.tree(node))

    def bind(self, name: str, value: cst.BaseExpression) -> None:
        tree = self.tree(value)
        if is_pure(value):
            # the name no longer holds what it was last loaded with: a later identical load
            # (`x = tl.load(...)` after `x = x / t`) reads it again, it repeats nothing
            self.clobber(name)
            self.pure[name] = tree
            return
        self.pure.pop(name, None)
        key = ast.unparse(tree)
        if self.last_key.get(name) != key:
            self.version[name] = self.version.get(name, 0) + 1
            self.last_key[name] = key

    def clobber(self, name: str) -> None:
        self.pure.pop(name, None)
        self.version[name] = self.version.get(name, 0) + 1
        self.last_key.pop(name, None)

    def state(self, name: str) -> tuple[bool, int]:
        return name in self.pure, self.version.get(name, 0)


def is_pure(value: cst.BaseExpression) -> bool:
    for n in cu.walk(value):
        if isinstance(n, cst.Call) and cu.call_name(n) not in PURE_CALLS:
            return False
        if isinstance(n, (cst.Subscript, cst.Lambda, cst.NamedExpr)):
            return False
    return True


def assigned(node: cst.CSTNode) -> set[str]:
    out: set[str] = set()
    for n in cu.walk(node):
        if isinstance(n, cst.AssignTarget):
            out |= {t.value for t in cu.walk(n.target) if isinstance(t, cst.Name)}
        elif isinstance(n, (cst.AugAssign, cst.AnnAssign, cst.For, cst.NamedExpr)):
            out |= {t.value for t in cu.walk(n.target) if isinstance(t, cst.Name)}
    return out


def writes_memory(node: cst.CSTNode) -> bool:
    return any(
        isinstance(n, cst.Call)
        and ((name := cu.call_name(n) or "") == "tl.store" or name.startswith("tl.atomic_"))
        for n in cu.walk(node)
    )


def _single_assign(st: cst.BaseStatement) -> tuple[str, cst.BaseExpression] | None:
    """(name, value) of a statement line that is exactly `name = value`."""
    if isinstance(st, cst.SimpleStatementLine) and len(st.body) == 1:
        small = st.body[0]
        if (
            isinstance(small, cst.Assign)
            and len(small.targets) == 1
            and isinstance(small.targets[0].target, cst.Name)
        ):
            return small.targets[0].target.value, small.value
    return None


def _carry_comments(body: list[cst.BaseStatement], dropped: set[int]) -> list[cst.BaseStatement]:
    """`body` without the statements at `dropped`, their leading lines moved to the next one."""
    out: list[cst.BaseStatement] = []
    pending: list[cst.EmptyLine] = []
    for i, st in enumerate(body):
        if i in dropped:
            pending += list(st.leading_lines)
            continue
        if pending:
            own = list(st.leading_lines)
            if pending[-1].comment is not None:  # a carried comment sits right above the statement
                while own and own[0].comment is None:
                    own.pop(0)
            st = st.with_changes(leading_lines=_one_blank_run([*pending, *own]))
            pending = []
        out.append(st)
    return out


def _one_blank_run(lines: list[cst.EmptyLine]) -> list[cst.EmptyLine]:
    """`lines` with each run of blank lines cut to one: the blank lines of the statements that
    went and of the one that stays would otherwise stack up (ruff E303's two blank lines)."""
    out: list[cst.EmptyLine] = []
    for line in lines:
        blank = line.comment is None
        if not (blank and out and out[-1].comment is None):
            out.append(line)
    return out


# ---------------------------------------------------------------------------------------
# a name pinned to 0


def pin_zero(body: list[cst.BaseStatement], index: int, scalars: set[str]) -> list[cst.BaseStatement]:
    """`body[index]` is `name = 0` (a loop variable on its only iteration): `name` is replaced
    by 0 in the statements up to its next binding, `0 + e`, `e + 0`, `e - 0` fold to `e` and
    `0 * s` to 0 for a scalar `s` (an int or one of `scalars`); the binding goes when nothing
    reads it any more."""
    found = _single_assign(body[index])
    if found is None or cu.int_literal(found[1]) != 0:
        return body
    name = found[0]
    end = next((j for j in range(index + 1, len(body)) if name in assigned(body[j])), len(body))
    segment = body[index + 1 : end]
    new = [_Pin(name, scalars).fold(st) for st in segment]
    still_read = any(name in cu.names_in(st) for st in new) or (end < len(body) and name in _reads(body[end]))
    out = [*body[: index + 1], *new, *body[end:]]
    return _carry_comments(out, set() if still_read else {index})


def _reads(st: cst.BaseStatement) -> set[str]:
    return cu.names_in(st)


class _Pin(cst.CSTTransformer):
    def __init__(self, name: str, scalars: set[str]) -> None:
        self.name = name
        self.scalars = scalars
        self.zeros: set[int] = set()

    def fold(self, st: cst.BaseStatement) -> Any:
        return st.visit(self)

    def _zero(self) -> cst.Integer:
        z = cst.Integer("0")
        self.zeros.add(id(z))
        return z

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> Any:
        return updated_node.with_changes(attr=original_node.attr)

    def leave_Arg(self, original_node: cst.Arg, updated_node: cst.Arg) -> Any:
        return updated_node.with_changes(keyword=original_node.keyword)

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> Any:
        return self._zero() if original_node.value == self.name else updated_node

    def leave_BinaryOperation(
        self, original_node: cst.BinaryOperation, updated_node: cst.BinaryOperation
    ) -> Any:
        left, right, op = updated_node.left, updated_node.right, updated_node.operator
        zl, zr = id(left) in self.zeros, id(right) in self.zeros
        result: cst.BaseExpression | None = None
        if isinstance(op, cst.Add) and (zl or zr):
            result = right if zl else left
        elif isinstance(op, cst.Subtract) and zr:
            result = left
        elif isinstance(op, cst.Multiply) and (zl or zr) and self._scalar(right if zl else left):
            result = self._zero()
        if result is None:
            return updated_node
        if updated_node.lpar and not isinstance(result, (cst.Name, cst.Integer, cst.Call, cst.Attribute)):
            result = result.with_changes(lpar=updated_node.lpar, rpar=updated_node.rpar)
        elif not updated_node.lpar and result.lpar and isinstance(result, (cst.Name, cst.Integer, cst.Call)):
            result = result.with_changes(lpar=[], rpar=[])
        return result

    def _scalar(self, node: cst.BaseExpression) -> bool:
        return (
            isinstance(node, cst.Integer)
            or id(node) in self.zeros
            or (isinstance(node, cst.Name) and node.value in self.scalars)
        )


# ---------------------------------------------------------------------------------------
# repeated loads


def merge_loads(body: list[cst.BaseStatement], taken: set[str]) -> tuple[list[cst.BaseStatement], int]:
    """Give identical loads of straight-line `body` one variable; returns the new body and
    how many loads were removed. The variable is the name the code itself binds one of them to
    (`x = tl.load(...)`) where nothing else binds or reads that name in between, else a new one."""
    canon = Canon()
    occurrences: list[tuple[int, cst.Call, str, int]] = []  # (statement index, call, key, epoch)
    after: list[dict[str, tuple[bool, int]]] = []  # the state after each statement
    epoch = 0
    for i, st in enumerate(body):
        if isinstance(st, cst.SimpleStatementLine):
            for small in st.body:
                for n in cu.walk(small):
                    if cu.is_call(n, "tl.load"):
                        occurrences.append((i, n, canon.key(n), epoch))
                if (
                    isinstance(small, cst.Assign)
                    and len(small.targets) == 1
                    and isinstance(small.targets[0].target, cst.Name)
                ):
                    canon.bind(small.targets[0].target.value, small.value)
                else:
                    for name in assigned(small):
                        canon.clobber(name)
        else:
            for name in assigned(st):
                canon.clobber(name)
        after.append(dict(_snapshot(canon)))
        if writes_memory(st):
            epoch += 1  # loads after a store may see it: never merged across one

    groups: dict[tuple[str, int], list[tuple[int, cst.Call]]] = {}
    for i, call, key, ep in occurrences:
        groups.setdefault((key, ep), []).append((i, call))
    edits: list[tuple[cst.CSTNode, Any]] = []
    hoists: dict[int, list[cst.BaseStatement]] = {}
    removed = 0
    for members in groups.values():
        if len(members) < 2:
            continue
        first_i, first_call = members[0]
        own = _own_name(body, members, after)
        if own is not None:
            name, at = own
            if at != first_i:  # the name takes the first load, where it is first read
                hoists.setdefault(first_i, []).append(
                    cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(cst.Name(name))], first_call)])
                )
            # the named load stays where it is first, or moves there; every other one reads the name
            edits += [(call, cst.Name(name)) for i, call in members if at != first_i or i != at]
        else:
            var = cu.fresh_name(_var_base(first_call), taken)
            hoists.setdefault(first_i, []).append(
                cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(cst.Name(var))], first_call)])
            )
            for _, call in members:
                edits.append((call, cst.Name(var)))
        removed += len(members) - 1
    if not removed:
        return body, 0
    new_body: list[cst.BaseStatement] = []
    for i, st in enumerate(body):
        new_st = cu.replace_in(st, edits)
        extra = [h.with_changes(leading_lines=[]) for h in hoists.get(i, [])]
        if extra and isinstance(new_st, cst.SimpleStatementLine | cst.BaseCompoundStatement):
            # the variable takes the statement's leading comment lines
            extra = [extra[0].with_changes(leading_lines=new_st.leading_lines)] + extra[1:]
            new_st = new_st.with_changes(leading_lines=[])
        new_body.extend(extra)
        new_body.append(new_st)
    return new_body, removed


def _snapshot(canon: Canon) -> dict[str, tuple[bool, int]]:
    names = set(canon.pure) | set(canon.version)
    return {n: canon.state(n) for n in names}


def _own_name(
    body: list[cst.BaseStatement],
    members: list[tuple[int, cst.Call]],
    after: list[dict[str, tuple[bool, int]]],
) -> tuple[str, int] | None:
    """(name, statement index) of the first member that is a whole `name = tl.load(...)`, when
    `name` can hold the load for every member: nothing between the first member and it reads or
    binds `name`, and at each later member `name` still holds what that statement bound."""
    first_i = members[0][0]
    for i, call in members:
        found = _single_assign(body[i])
        if found is None or found[1] is not call:
            continue
        name = found[0]
        if any(name in cu.names_in(body[j]) for j in range(first_i, i)):
            return None
        bound = after[i].get(name)
        for j, _ in members:
            if j > i and (j == 0 or after[j - 1].get(name) != bound):
                return None
        return name, i
    return None


def _var_base(call: cst.Call) -> str:
    ptr = cu.arg(call, "pointer", 0)
    base = ptr
    while isinstance(base, cst.BinaryOperation):
        base = base.left
    name = base.value if isinstance(base, cst.Name) else "row"
    for suffix in ("_ptrs", "_ptr", "_row", "_start"):
        name = name.removesuffix(suffix)
    return f"{name}_vals"


# ---------------------------------------------------------------------------------------
# assignments of the value a name already holds


def drop_repeats(body: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
    """`body` without the `name = value` statements that rebind `name` to the value it holds
    (`x = x`, or the same expression of the same inputs again; a load only with nothing stored in
    between), and with `name = other` where another name still holds that value (a later pass
    that recomputes what an earlier one named differently: `propagate_copies` then folds it)."""
    canon = Canon()
    epoch = 0
    bound_at: dict[str, int] = {}  # the epoch of each name's binding
    holder: dict[str, str] = {}  # canonical key of a non-pure value -> the name that holds it
    dropped: set[int] = set()
    out = list(body)
    for i, st in enumerate(body):
        found = _single_assign(st)
        if found is not None:
            name, value = found
            if isinstance(value, cst.Name) and value.value == name:
                dropped.add(i)
                continue
            key = canon.key(value)
            loads = any(cu.is_call(n, "tl.load") for n in cu.walk(value))
            pure = is_pure(value)
            same = _pure_same(canon, name, value) if pure else canon.last_key.get(name) == key
            if same and (not loads or bound_at.get(name) == epoch):
                dropped.add(i)
                continue
            # a constant (`-float("inf")`) is clearer written again than as a copy of another name
            other = holder.get(key) if not pure and cu.names_in(value) - CONSTANT_CALLS else None
            if other is not None and other != name and (not loads or bound_at.get(other) == epoch):
                out[i] = st.with_changes(body=[st.body[0].with_changes(value=cst.Name(other))])
            _forget(holder, name)
            canon.bind(name, value)
            bound_at[name] = epoch
            if not pure and name not in cu.names_in(value):
                holder.setdefault(canon.last_key[name], name)
        else:
            for name in assigned(st):
                canon.clobber(name)
                _forget(holder, name)
        if writes_memory(st):
            epoch += 1
    return _carry_comments(out, dropped) if dropped or out != body else body


def _forget(holder: dict[str, str], name: str) -> None:
    for key in [k for k, v in holder.items() if v == name]:
        del holder[key]


def _pure_same(canon: Canon, name: str, value: cst.BaseExpression) -> bool:
    return name in canon.pure and ast.unparse(canon.pure[name]) == ast.unparse(canon.tree(value))


# ---------------------------------------------------------------------------------------
# a name that only renames another


def propagate_copies(
    body: list[cst.BaseStatement], params: set[str], written: Iterable[cst.CSTNode] = ()
) -> list[cst.BaseStatement]:
    """`body` without the `a = b` statements (both names, `a` no parameter) where `b` keeps its
    value while `a` holds the copy: `a`'s reads up to its next binding read `b` instead (the
    right-hand side of that binding too, when it is a plain `a = ...`). Copies the author wrote
    (any `a = b` under `written`, the kernels the rewrite started from) are theirs and stay."""
    theirs = {(a, b.value) for node in written for st in cu.walk(node) if (f := _single_assign(st)) for a, b in [f]
              if isinstance(b, cst.Name)}  # fmt: skip
    dropped: set[int] = set()
    out = list(body)
    for i in range(len(body)):
        found = _single_assign(out[i])
        if found is None or not isinstance(found[1], cst.Name) or found[0] in params:
            continue
        a, b = found[0], found[1].value
        if a == b or (a, b) in theirs:
            continue
        end = next((j for j in range(i + 1, len(out)) if a in assigned(out[j])), len(out))
        if any(b in assigned(s) for s in out[i + 1 : end + 1]):
            continue  # b changes while a still holds the copy
        again = _single_assign(out[end]) if end < len(out) else None
        if end < len(out) and a in cu.names_in(out[end]) and (again is None or again[0] != a):
            continue  # its next binding reads a some other way (`a += 1`)
        if end < len(out) and not isinstance(out[end], cst.SimpleStatementLine):
            if any(a in cu.names_in(s) for s in out[end:]):
                continue  # rebound only on some paths: later reads may still read the copy

        def to_b(n: cst.Name, a: str = a, b: str = b) -> cst.BaseExpression | None:
            return cst.Name(b) if n.value == a else None

        out[i + 1 : end] = [cu.subst_names(s, to_b) for s in out[i + 1 : end]]
        if again is not None:
            small = out[end].body[0]  # type: ignore[attr-defined]
            out[end] = out[end].with_changes(
                body=[small.with_changes(value=cu.subst_names(small.value, to_b))]
            )
        dropped.add(i)
    return _carry_comments(out, dropped) if dropped else body


# ---------------------------------------------------------------------------------------
# a local nothing reads


def drop_unread(body: list[cst.BaseStatement], names: set[str]) -> list[cst.BaseStatement]:
    """`body` without the `name = value` statements of `names` that nothing after them reads,
    where `value` only computes (no load, store or other call with an effect)."""
    dropped: set[int] = set()
    for i, st in enumerate(body):
        found = _single_assign(st)
        if found is None or found[0] not in names:
            continue
        calls = [cu.call_name(n) or "" for n in cu.walk(found[1]) if isinstance(n, cst.Call)]
        if any(
            not c.startswith("tl.") or c in ("tl.load", "tl.store") or c.startswith("tl.atomic_")
            for c in calls
        ):
            continue
        if not any(found[0] in cu.names_in(later) for later in body[i + 1 :]):
            dropped.add(i)
    return _carry_comments(body, dropped) if dropped else body


# ---------------------------------------------------------------------------------------
# accumulators on their one step

FLOAT_CALLS = frozenset({"tl.exp", "tl.exp2", "tl.log", "tl.log2", "tl.sqrt", "tl.rsqrt", "tl.sigmoid",
                         "tl.cos", "tl.sin", "tl.erf", "tl.fdiv", "tl.math.exp", "tl.math.log"})  # fmt: skip
FOLLOW_CALLS = frozenset({"tl.sum", "tl.max", "tl.min", "tl.abs", "tl.maximum", "tl.minimum", "tl.where"})
FLOAT_TYPES = frozenset({"tl.float16", "tl.bfloat16", "tl.float32", "tl.float64"})


def _identity(value: cst.BaseExpression) -> str | None:
    """'int0' for `0`, 'zero' for `0.0`, 'ninf' for `-float("inf")` or `float("-inf")`, 'pinf'
    for `float("inf")`: the start of a sum, a running max, a running min."""
    if cu.int_literal(value) == 0:
        return "int0"  # `0 + e` is `e` with its own type, whatever `e` is
    if isinstance(value, cst.Float) and float(value.value) == 0.0:
        return "zero"
    neg = isinstance(value, cst.UnaryOperation) and isinstance(value.operator, cst.Minus)
    inner = value.expression if neg else value
    if cu.is_call(inner, "float") and len(inner.args) == 1 and isinstance(inner.args[0].value, cst.SimpleString):
        text = inner.args[0].value.evaluated_value
        if text in ("inf", "-inf"):
            return "ninf" if neg != (text == "-inf") else "pinf"
    return None


def _floating(node: cst.BaseExpression, env: dict[str, cst.BaseExpression], depth: int = 0) -> bool:
    """Whether `node` is certainly a floating-point value: `0.0 + e` is then `e` with its type."""
    if depth > 8:
        return False
    if isinstance(node, cst.Float):
        return True
    if isinstance(node, cst.Name):
        return node.value in env and _floating(env[node.value], env, depth + 1)
    if isinstance(node, cst.UnaryOperation):
        return _floating(node.expression, env, depth + 1)
    if isinstance(node, cst.BinaryOperation):
        if isinstance(node.operator, cst.Divide):
            return True
        if isinstance(node.operator, (cst.Add, cst.Subtract, cst.Multiply, cst.Power)):
            return _floating(node.left, env, depth + 1) or _floating(node.right, env, depth + 1)
        return False
    if isinstance(node, cst.Call):
        name = cu.call_name(node) or ""
        if name in FLOAT_CALLS:
            return True
        if isinstance(node.func, cst.Attribute) and node.func.attr.value == "to" and node.args:
            return cu.dotted(node.args[0].value) in FLOAT_TYPES
        if name in FOLLOW_CALLS:
            values = [a.value for a in node.args if a.keyword is None]
            values = values[1:] if name == "tl.where" else values
            return any(_floating(v, env, depth + 1) for v in values)
    return False


class _Identities(cst.CSTTransformer):
    """One statement with the names that still hold their starting value folded away where the
    value is the operation's identity: `tl.maximum(m, e)` for `m = -inf` is `e`, and the online
    rescale `s * tl.exp(m - n) + e` for `s = 0`, `m = -inf` is `e` (its `0 * exp(-inf - n)` is 0
    unless `n` is -inf too, where `e`'s `exp(x - n)` is NaN as the original's is)."""

    def __init__(self, pinned: dict[str, str]) -> None:
        self.pinned = pinned

    def _is(self, node: cst.BaseExpression, kind: str) -> bool:
        return isinstance(node, cst.Name) and _kind_is(self.pinned.get(node.value), kind)

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        name = cu.call_name(updated)
        kind = {"tl.maximum": "ninf", "tl.minimum": "pinf"}.get(name or "")
        args = updated.args
        if kind is None or len(args) != 2 or any(a.keyword is not None or a.star for a in args):
            return updated
        a, b = args[0].value, args[1].value
        if self._is(a, kind):
            return b
        if self._is(b, kind):
            return a
        return updated

    def leave_BinaryOperation(self, original: cst.BinaryOperation, updated: cst.BinaryOperation) -> Any:
        if not isinstance(updated.operator, cst.Add):
            return updated
        for scaled, rest in ((updated.left, updated.right), (updated.right, updated.left)):
            if self._rescaled_zero(scaled):
                return rest.with_changes(lpar=updated.lpar, rpar=updated.rpar) if updated.lpar else rest
        return updated

    def _rescaled_zero(self, node: cst.BaseExpression) -> bool:
        if not (isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply)):
            return False
        for zero, factor in ((node.left, node.right), (node.right, node.left)):
            if self._is(zero, "zero") and cu.is_call(factor, "tl.exp") and len(factor.args) == 1:
                diff = factor.args[0].value
                if (isinstance(diff, cst.BinaryOperation) and isinstance(diff.operator, cst.Subtract)
                        and self._is(diff.left, "ninf")):  # fmt: skip
                    return True
        return False


def fold_identities(body: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
    """Straight-line code that starts accumulators at their identity and steps them once, as a
    flattened loop does, written as that one step: `m = -float("inf")` then `m = tl.maximum(m,
    tl.max(x, axis=0))` is `m = tl.max(x, axis=0)`; `s = 0.0` then `s += e` is `s = e` where `e`
    is certainly floating-point (or the start is the integer 0); the online softmax's `s = s *
    tl.exp(m - n) + e` is `s = e`. A start nothing reads any more goes."""
    pinned: dict[str, str] = {}  # names that hold their identity start -> its kind
    starts: dict[str, int] = {}  # such a name -> the statement that started it
    env: dict[str, cst.BaseExpression] = {}  # the latest value of each name bound once here
    out = list(body)
    for i, st in enumerate(body):
        found = _single_assign(st)
        small = st.body[0] if isinstance(st, cst.SimpleStatementLine) and len(st.body) == 1 else None
        if pinned and small is not None and isinstance(small, (cst.Assign, cst.AugAssign)):
            new = st.visit(_Identities(pinned))
            small = new.body[0]
            start = _sum_from_zero(small, pinned)
            if start == "int0" or (start == "zero" and _floating(small.value, env)):
                new = new.with_changes(body=[cst.Assign([cst.AssignTarget(small.target)], small.value)])
            out[i] = st if new.deep_equals(st) else _one_line(new)
            found = _single_assign(out[i])
        for name in assigned(out[i]):
            pinned.pop(name, None)
            env.pop(name, None)
        if found is not None:
            name, value = found
            kind = _identity(value)
            if kind is not None:
                pinned[name], starts[name] = kind, i
            else:
                env[name] = value
    dropped = set()
    for name, i in starts.items():
        end = next((j for j in range(i + 1, len(out)) if name in assigned(out[j])), len(out) - 1)
        if not any(name in cu.names_in(_value_of(out[j])) for j in range(i + 1, end + 1)):
            dropped.add(i)
    changed = dropped or any(o is not b for o, b in zip(out, body, strict=True))
    return _carry_comments(out, dropped) if changed else body


def _kind_is(kind: str | None, wanted: str) -> bool:
    return kind == wanted or (wanted == "zero" and kind == "int0")


def _sum_from_zero(small: cst.BaseSmallStatement, pinned: dict[str, str]) -> str | None:
    """The start's kind ('int0' or 'zero') of `s += e` where `s` still holds its start of 0."""
    if isinstance(small, cst.AugAssign) and isinstance(small.operator, cst.AddAssign) and isinstance(small.target, cst.Name):
        kind = pinned.get(small.target.value)
        return kind if _kind_is(kind, "zero") else None
    return None


def _value_of(st: cst.BaseStatement) -> cst.CSTNode:
    """What a statement reads: an assignment's value, or the whole statement."""
    found = _single_assign(st)
    return found[1] if found is not None else st


def _one_line(st: cst.SimpleStatementLine, width: int = 100) -> cst.SimpleStatementLine:
    """A folded statement whose value kept the line breaks of what it lost (`s * tl.exp(m - n)
    + tl.sum(\n    ...\n)`), on one line where it fits in `width` columns at an indentation of 4."""
    small = st.body[0]
    if not isinstance(small, cst.Assign) or "\n" not in cu.code(small.value):
        return st
    if any(isinstance(n, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)) for n in cu.walk(small.value)):
        return st  # ast.unparse would requote them
    flat = ast.unparse(ast.parse(cu.code(small.value).strip(), mode="eval"))
    line = f"{cu.code(small.targets[0].target)} = {flat}"
    if 4 + len(line) > width:
        return st
    return st.with_changes(body=[small.with_changes(value=cu.expr(flat))])
