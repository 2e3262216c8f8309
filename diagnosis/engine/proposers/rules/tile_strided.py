"""COALESCE (tiled strided walk): a kernel whose program index is the contiguous axis of an
access while its block walks a strided axis gets the program axis inside its tile.

Matches a kernel with one program axis, `p = tl.program_id(0)` bound once at the top of its
body, launched once on a grid `(G,)` (a tuple, `lambda meta: (G,)` or a name bound to either)
where G is also passed for a parameter `n`; some load or store adds `p` with unit stride to a
block index multiplied by a stride (`x_ptr + rows * stride + p`, a column walked one element
per lane: each lane's 4 bytes pull a sector of their own, the neighbouring program pulls the
next 4). Every program then computes on 1-D blocks along that axis, scalars and reductions
along it. It rewrites the kernel so that each program takes BLOCK_P consecutive values of p:

    p = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P);  p_mask = p < n

every block `v` along the walked axis meets the program axis as `v[:, None]` and every
per-program value as `p[None, :]` (tiles BLOCK x BLOCK_P), reductions along the walked axis
name `axis=0`, loop-carried accumulators start at the tile's shape, every load and store whose
address depends on p gains `& p_mask`, and the grid becomes `(cdiv(G, BLOCK_P),)`.

The program index may also come split into digits by `%` and `//` (`i_n, i_h = i_nh // H,
i_nh % H`, or a jit helper such as fla's `unflatten_program_id(B * H)` that returns `pid % X,
pid // X`): then the digit `i_h = low % H` that an access adds with unit stride is the walked
program value, and the rewrite takes BLOCK_H heads per program by writing `tl.cdiv(H, BLOCK_H)`
for the factor H of every divisor applied to a value still holding that digit, and of the grid
(see `_split_indices`). Triton's
coalescing pass then orders each access's lanes along whichever tile axis is contiguous for it
(the program axis for the walked column, the block axis for a row written out), converting the
tile between the two layouts through shared memory where a transpose needs it, so a separate
`tl.trans` is not written.

Correct by construction: lane j of program q computes exactly what program q * BLOCK_P + j
computed before. Every value is computed element by element along the new axis, reductions and
scans run along the old axis only, and control flow (loop bounds) does not depend on p, so all
lanes run the same statements; lanes past n are masked in every access that depends on p, and
their other values reach nothing but their own masked stores. Preconditions (refused
otherwise): assignments, `for` loops, and `if` statements, conditional expressions and bare
returns whose tests are the same for every lane (constexpr flags, loop counters, values
loaded per program: never p); no while or break, no existing 2-D block, subscript, dot, atomic
or call outside the listed tl functions, no other program_id or num_programs, a name rebound
with a different shape only as an accumulator started from a literal, `tl.zeros` or
`tl.full`, and tiles of at most 8192 elements. A walked block the autotuner chooses counts at the
largest value its configs give it (`for BT in [32, 64, 128, 256]`); configs that cannot be read
leave the kernel as it is.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import libcst as cst

from diagnosis.engine.evidence import Family
from diagnosis.engine.proposers.rules import Rewrite, RuleInput, transform
from diagnosis.engine.proposers.rules import cst_util as cu
from diagnosis.engine.proposers.rules.structural import (
    Grid,
    Spelling,
    add_kwargs,
    add_param,
    constexpr_annotation,
    constexprs,
    parens,
    read_grid,
    same_code,
)
from diagnosis.engine.srcmodel.read import params_of

# value kinds, as bits: per program (P), along the walked block axis (R), both (RP)
S, P, R, RP = 0, 1, 2, 3

REDUCTIONS = frozenset({"tl.sum", "tl.max", "tl.min", "tl.argmax", "tl.argmin", "tl.xor_sum"})
SCANS = frozenset({"tl.cumsum", "tl.cumprod"})
ELEMENTWISE = frozenset(
    {
        "tl.exp", "tl.exp2", "tl.log", "tl.log2", "tl.sqrt", "tl.sqrt_rn", "tl.rsqrt", "tl.abs",
        "tl.maximum", "tl.minimum", "tl.where", "tl.sigmoid", "tl.fma", "tl.erf", "tl.cos", "tl.sin",
        "tl.floor", "tl.ceil", "tl.clamp", "tl.fdiv", "tl.div_rn", "tl.cdiv",
    }
)  # fmt: skip
LOOPS = frozenset({"range", "tl.range", "tl.static_range"})
TILE_ELEMENTS = 4096  # per program: 32 fp32 registers per thread per tile value at 4 warps
MAX_TILE_ELEMENTS = 8192
MIN_P, MAX_P = 8, 32  # 8 fp32 lanes fill a 32-byte sector; 32 fill a 128-byte line


class _Refuse(Exception):
    """The kernel is outside what the rewrite can prove correct."""


@dataclass
class _Kernel:
    """What the typing pass learnt about one kernel."""

    kernel: cu.Kernel
    pid: str  # the per-program value that becomes the tile's second axis
    index: list[cst.SimpleStatementLine]  # the statements that compute it (left to _plan)
    sp: Spelling
    fixed: frozenset[str] = frozenset()  # names those statements bind that nothing may rebind
    uniform: frozenset[str] = frozenset()  # the ones a rebinding must keep the same for all lanes
    env: dict[str, int] = field(default_factory=dict)
    memo: dict[int, int] = field(default_factory=dict)
    defs: list[tuple[str, cst.BaseExpression, bool]] = field(default_factory=list)  # name, value, augmented
    memory: list[cst.Call] = field(default_factory=list)  # every tl.load / tl.store
    loops: list[cst.For] = field(default_factory=list)
    branches: list[cst.If] = field(default_factory=list)

    # -- kinds ---------------------------------------------------------------------------

    def of(self, node: cst.CSTNode) -> int:
        key = id(node)
        if key not in self.memo:
            self.memo[key] = self._of(node)
        return self.memo[key]

    def _of(self, node: cst.CSTNode) -> int:  # noqa: C901 - one case per expression form
        if isinstance(node, cst.Name):
            if node.value == self.pid:
                return P
            return self.env.get(node.value, S)
        if isinstance(node, (cst.Integer, cst.Float, cst.SimpleString)):
            return S
        if isinstance(node, cst.Attribute):
            head, chain = node, []
            while isinstance(head, cst.Attribute):
                chain.append(head.attr.value)
                head = head.value
            if cu.dotted(node) is None:
                raise _Refuse(f"attribute {cu.code(node)}")
            if isinstance(head, cst.Name) and self.of(head) != S and chain[-1] != "dtype":
                raise _Refuse(f"attribute {cu.code(node)}")
            return S  # a module attribute, or the element type of a block (`p.dtype.element_ty`)
        if isinstance(node, cst.BinaryOperation):
            return self.of(node.left) | self.of(node.right)
        if isinstance(node, cst.UnaryOperation):
            if isinstance(node.operator, cst.Not):
                raise _Refuse("not")
            return self.of(node.expression)
        if isinstance(node, cst.Comparison):
            kind = self.of(node.left)
            for c in node.comparisons:
                kind |= self.of(c.comparator)
            return kind
        if isinstance(node, cst.Call):
            return self._call(node)
        if isinstance(node, cst.IfExp):  # `a if REVERSE else b`: every lane takes the same side
            if self.of(node.test) != S:
                raise _Refuse("a conditional expression on a per-lane test")
            return self.of(node.body) | self.of(node.orelse)
        if isinstance(node, cst.BooleanOperation):
            if self.of(node.left) != S or self.of(node.right) != S:
                raise _Refuse("a boolean operation on blocks")
            return S
        raise _Refuse(f"expression {type(node).__name__}")

    def _call(self, node: cst.Call) -> int:  # noqa: C901
        name = self.sp.call(node)
        if any(a.star for a in node.args):
            raise _Refuse("star arguments")
        values = [a.value for a in node.args]
        if name == "tl.arange":
            if any(self.of(v) for v in values):
                raise _Refuse("arange bound per program")
            return R
        if name in ("tl.zeros", "tl.full"):
            shape = values[0] if values else None
            if not isinstance(shape, (cst.List, cst.Tuple)) or len(shape.elements) > 1:
                raise _Refuse("a block that is not 1-D")
            if any(self.of(v) for v in values[1:]) or any(self.of(e.value) for e in shape.elements):
                raise _Refuse("zeros of a per-program value")
            return R if shape.elements else S  # `tl.zeros([], ...)` is a scalar
        if name in ("tl.load", "tl.store"):
            kind = S
            for v in values:
                kind |= self.of(v)
            return kind
        if name in REDUCTIONS or name in SCANS:
            operand = cu.arg(node, "input", 0)
            axis = cu.arg(node, "axis", 1)
            allowed = ("input", "axis", "reverse") if name in SCANS else ("input", "axis")
            extra = [a for a in node.args if a.keyword is not None and a.keyword.value not in allowed]
            reverse = cu.arg(node, "reverse")
            if operand is None or extra or sum(a.keyword is None for a in node.args) > 2:
                raise _Refuse("reduction options")
            if reverse is not None and self.of(reverse) != S:
                raise _Refuse("a per-lane scan direction")
            if axis is not None and cu.int_literal(axis) not in (0, -1) and cu.dotted(axis) != "None":
                raise _Refuse("reduction axis")
            kind = self.of(operand)
            if not kind & R:
                raise _Refuse("reduction of a scalar")
            return kind if name in SCANS else kind & ~R
        if name in ELEMENTWISE or name in LOOPS:
            kind = S
            for v in values:
                kind |= self.of(v)
            return kind
        if name in ("float", "int") and all(isinstance(v, (cst.SimpleString, cst.Integer)) for v in values):
            return S
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "to":
            if any(self.of(v) for v in values):
                raise _Refuse("a cast to a per-program type")
            return self.of(func.value)
        raise _Refuse(f"call {cu.code(node.func)}")

    # -- statements ----------------------------------------------------------------------

    def collect(self, block: cst.BaseSuite, top: bool) -> None:
        for st in cu.body_statements(block):
            if any(st is s for s in self.index):
                continue
            if isinstance(st, cst.If):  # its test must be the same for every lane (see infer)
                self.branches.append(st)
                self.collect(st.body, False)
                orelse = st.orelse
                if isinstance(orelse, cst.Else):
                    self.collect(orelse.body, False)
                elif isinstance(orelse, cst.If):
                    self.collect(cst.IndentedBlock(body=[orelse]), False)
                continue
            if isinstance(st, cst.For):
                if not isinstance(st.target, cst.Name) or st.orelse is not None or st.asynchronous:
                    raise _Refuse("loop form")
                if not self.sp.is_call(st.iter, *LOOPS):
                    raise _Refuse("loop iterator")
                self.loops.append(st)
                self.collect(st.body, False)
                continue
            if not isinstance(st, cst.SimpleStatementLine):
                raise _Refuse(f"statement {type(st).__name__}")
            for small in st.body:
                self._small(small, top)

    def _small(self, small: cst.BaseSmallStatement, top: bool) -> None:
        if isinstance(small, cst.Assign) and len(small.targets) == 1:
            pairs = _pairs(small)
            if pairs is None:
                raise _Refuse("assignment form")
            for name, value in pairs:
                if name == self.pid or name in self.fixed:
                    raise _Refuse("the program index is rebound")
                self.defs.append((name, value, False))
        elif isinstance(small, cst.AugAssign) and isinstance(small.target, cst.Name):
            if small.target.value == self.pid or small.target.value in self.fixed:
                raise _Refuse("the program index is rebound")
            self.defs.append((small.target.value, small.value, True))
        elif isinstance(small, cst.Return) and small.value is None:
            pass  # under tests that are the same for every lane: all of them return together
        elif isinstance(small, cst.Expr) and self.sp.is_call(small.value, "tl.store"):
            pass
        elif isinstance(small, cst.Expr) and isinstance(small.value, cst.SimpleString) and top:
            pass  # a docstring
        elif not isinstance(small, cst.Pass):
            raise _Refuse(f"statement {type(small).__name__}")

    def infer(self) -> None:
        """Kinds of every local: the join over its definitions, to a fixed point (a loop-carried
        accumulator takes the kind of what is added to it)."""
        for _ in range(2 * len(self.defs) + 2):
            self.memo.clear()
            changed = False
            for name, value, augmented in self.defs:
                kind = self.of(value) | (self.env.get(name, S) if augmented else S)
                if kind | self.env.get(name, S) != self.env.get(name, S):
                    self.env[name] = kind | self.env.get(name, S)
                    changed = True
            if not changed:
                break
        self.memo.clear()
        for loop in self.loops:
            if self.of(loop.iter):
                raise _Refuse("a loop bound that depends on the program")
        for branch in self.branches:
            if self.of(branch.test):
                raise _Refuse("a branch on a per-program or per-lane value")
        if any(self.env.get(name, S) != S for name in self.uniform):
            raise _Refuse("a per-program value rebound to a block")
        mine = {id(n) for st in self.index for n in cu.walk(st)}
        for node in cu.walk(self.kernel.node.body):
            if id(node) in mine:
                continue
            if self.sp.is_call(node, "tl.program_id", "tl.num_programs"):
                raise _Refuse("another program_id or num_programs")
            if isinstance(node, (cst.Subscript, cst.Lambda)):
                raise _Refuse(type(node).__name__)
            if isinstance(node, cst.Call):
                self.of(node)  # refuses calls outside the list, wherever they are
                if self.sp.is_call(node, "tl.load", "tl.store"):
                    self.memory.append(node)
                ptr = cu.arg(node, "pointer", 0)
                if self.sp.is_call(node, "tl.store") and ptr is not None and self.of(node) != self.of(ptr):
                    raise _Refuse("a store whose value has an axis its address lacks (programs race)")


def _pairs(small: cst.Assign) -> list[tuple[str, cst.BaseExpression]] | None:
    """`name = value` and `a, b = x, y` as (name, value) pairs; None for other targets."""
    target = small.targets[0].target
    if isinstance(target, cst.Name):
        return [(target.value, small.value)]
    value = small.value
    if (
        isinstance(target, cst.Tuple)
        and isinstance(value, cst.Tuple)
        and len(target.elements) == len(value.elements)
        and all(isinstance(e.value, cst.Name) for e in target.elements)
        and not any(isinstance(e, cst.StarredElement) for e in value.elements)
    ):
        return [(t.value.value, v.value) for t, v in zip(target.elements, value.elements, strict=True)]  # type: ignore[attr-defined]
    return None


def _pid_statement(kernel: cu.Kernel, sp: Spelling) -> tuple[str, cst.SimpleStatementLine, cst.Call] | None:
    for st in cu.body_statements(kernel.node.body):
        for name, value in cu.simple_assigns(st):
            if _is_program_id(value, sp):
                assert isinstance(st, cst.SimpleStatementLine) and isinstance(value, cst.Call)
                return (name, st, value) if len(st.body) == 1 else None
    return None


def _terms(
    k: _Kernel, node: cst.BaseExpression, bindings: cu.Bindings, depth: int = 0
) -> list[cst.BaseExpression]:
    """The addends of an address, through locals bound once."""
    if depth > 8:
        return [node]
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
        return _terms(k, node.left, bindings, depth + 1) + _terms(k, node.right, bindings, depth + 1)
    if isinstance(node, cst.Name) and node.value != k.pid:
        b = bindings.single(node.value)
        if b is not None and b.value is not None and k.of(node) != S:
            return _terms(k, b.value, bindings, depth + 1)
    return [node]


def _walks_a_column(k: _Kernel) -> cst.Call | None:
    """A load or store that adds the program index with unit stride to a block index
    multiplied by a stride, and has no block index with unit stride."""
    bindings = cu.Bindings(k.kernel.node)
    for call in k.memory:
        ptr = cu.arg(call, "pointer", 0)
        if ptr is None:
            continue
        terms = _terms(k, ptr, bindings)
        program = any(isinstance(t, cst.Name) and t.value == k.pid for t in terms)
        strided = unit = False
        for t in terms:
            if not k.of(t) & R:
                continue
            if isinstance(t, cst.BinaryOperation) and isinstance(t.operator, cst.Multiply):
                factor = t.right if k.of(t.left) & R else t.left
                if k.of(factor) == S and cu.int_literal(factor) != 1:
                    strided = True
                    continue
            unit = True
        if program and strided and not unit:
            return call
    return None


# ---------------------------------------------------------------------------------------
# the rewrite of the kernel body


class _Writer:
    def __init__(self, k: _Kernel, block: str, mask: str, widen: dict[int, cst.BaseExpression]) -> None:
        self.k, self.block, self.mask, self.widen = k, block, mask, widen

    def wrap(self, node: cst.BaseExpression, kind: int) -> cst.BaseExpression:
        template = cu.expr("_[:, None]" if kind == R else "_[None, :]")
        assert isinstance(template, cst.Subscript)
        return template.with_changes(value=node)

    def expand(self, node: cst.BaseExpression) -> cst.BaseExpression:
        """`node` (a block along one axis) written for a tile: the expansion pushed down to
        the names and calls it is computed from, `rows[:, None] * stride` rather than
        `(rows * stride)[:, None]`."""
        kind = self.k.of(node)
        if isinstance(node, cst.BinaryOperation):
            return node.with_changes(left=self.side(node.left), right=self.side(node.right))
        if isinstance(node, cst.Comparison):
            return node.with_changes(
                left=self.side(node.left),
                comparisons=[c.with_changes(comparator=self.side(c.comparator)) for c in node.comparisons],
            )
        if isinstance(node, cst.UnaryOperation):
            return node.with_changes(expression=self.side(node.expression))
        return self.wrap(self.rebuild(node), kind)

    def side(self, node: cst.BaseExpression) -> cst.BaseExpression:
        return self.rebuild(node) if self.k.of(node) == S else self.expand(node)

    def within(self, node: cst.BaseExpression, kind: int) -> cst.BaseExpression:
        """`node` as an operand of an expression of `kind`."""
        if kind == RP and self.k.of(node) in (R, P):
            return self.expand(node)
        return self.rebuild(node)

    def rebuild(self, node: cst.BaseExpression) -> cst.BaseExpression:
        kind = self.k.of(node)
        if isinstance(node, cst.BinaryOperation):
            return node.with_changes(left=self.within(node.left, kind), right=self.within(node.right, kind))
        if isinstance(node, cst.Comparison):
            return node.with_changes(
                left=self.within(node.left, kind),
                comparisons=[
                    c.with_changes(comparator=self.within(c.comparator, kind)) for c in node.comparisons
                ],
            )
        if isinstance(node, cst.UnaryOperation):
            return node.with_changes(expression=self.rebuild(node.expression))
        if isinstance(node, cst.IfExp):
            return node.with_changes(body=self.within(node.body, kind), orelse=self.within(node.orelse, kind))
        if isinstance(node, cst.Call):
            return self.call(node)
        return node

    def call(self, node: cst.Call) -> cst.Call:
        name = self.k.sp.call(node)
        if name in ("tl.load", "tl.store"):
            return self.memory(node, name)
        if name in REDUCTIONS or name in SCANS:
            operand = cu.arg(node, "input", 0)
            assert operand is not None
            args = [
                a.with_changes(value=self.rebuild(a.value)) if a.value is operand else a for a in node.args
            ]
            if self.k.of(operand) == RP:
                axis = cu.arg(node, "axis", 1)
                if axis is None:
                    args[-1] = args[-1].with_changes(
                        comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
                    )
                    args.append(cu.keyword_arg("axis", cu.expr("0")))
                else:
                    args = [a.with_changes(value=cu.expr("0")) if a.value is axis else a for a in args]
            return node.with_changes(args=args)
        if name in ELEMENTWISE:
            kind = self.k.of(node)
            return node.with_changes(
                args=[a.with_changes(value=self.within(a.value, kind)) for a in node.args]
            )
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "to":
            return node.with_changes(func=func.with_changes(value=self.rebuild(func.value)))
        return node

    def memory(self, node: cst.Call, name: str) -> cst.Call:
        ptr = cu.arg(node, "pointer", 0)
        assert ptr is not None
        masked = bool(self.k.of(ptr) & P)
        kind = self.k.of(node) | (P if masked else S)
        mask_arg = cu.arg(node, "mask", 1 if name == "tl.load" else 2)
        pmask: cst.BaseExpression = cst.Name(self.mask)
        if kind == RP:
            pmask = self.wrap(pmask, P)
        args = []
        for a in node.args:
            value = self.within(a.value, kind)
            if masked and a.value is mask_arg:
                value = cst.BinaryOperation(parens(value), cst.BitAnd(), pmask)
            args.append(a.with_changes(value=value))
        if masked and mask_arg is None:
            args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            args.append(cu.keyword_arg("mask", pmask))
        return node.with_changes(args=args)

    def value(self, node: cst.BaseExpression) -> cst.BaseExpression:
        return self.widen[id(node)] if id(node) in self.widen else self.rebuild(node)

    def block_of(self, suite: cst.BaseSuite) -> cst.BaseSuite:
        assert isinstance(suite, cst.IndentedBlock)
        return suite.with_changes(body=[self.statement(s) for s in suite.body])

    def statement(self, st: cst.BaseStatement) -> Any:
        if any(st is s for s in self.k.index):
            return st
        if isinstance(st, cst.For):
            return st.with_changes(body=self.block_of(st.body))
        if isinstance(st, cst.If):
            orelse = st.orelse
            if isinstance(orelse, cst.Else):
                orelse = orelse.with_changes(body=self.block_of(orelse.body))
            elif isinstance(orelse, cst.If):
                orelse = self.statement(orelse)
            return st.with_changes(body=self.block_of(st.body), orelse=orelse)
        assert isinstance(st, cst.SimpleStatementLine)
        return st.with_changes(body=[self.small(s) for s in st.body], leading_lines=self.shape_notes(st))

    def shape_notes(self, st: cst.SimpleStatementLine) -> Sequence[cst.EmptyLine]:
        """A shape comment above a block that becomes a tile names the tile: fla's `# [BT]`
        over `b_s = tl.load(...)` reads `# [BT, BLOCK_H]` after the rewrite."""
        names = [
            t.target.value
            for s in st.body
            if isinstance(s, cst.Assign)
            for t in s.targets
            if isinstance(t.target, cst.Name)
        ]
        if len(names) != 1 or self.k.env.get(names[0], S) != RP or not st.leading_lines:
            return st.leading_lines
        *above, last = st.leading_lines
        comment = last.comment.value if last.comment is not None else ""
        shape = re.fullmatch(r"#(\s*)\[([^\[\],]+)\]\s*", comment)
        if shape is None:
            return st.leading_lines
        new = f"#{shape.group(1)}[{shape.group(2).strip()}, {self.block}]"
        return [*above, last.with_changes(comment=cst.Comment(new))]

    def small(self, small: cst.BaseSmallStatement) -> cst.BaseSmallStatement:
        if isinstance(small, cst.Assign):
            if isinstance(small.targets[0].target, cst.Tuple):
                assert isinstance(small.value, cst.Tuple)
                return small.with_changes(
                    value=small.value.with_changes(
                        elements=[e.with_changes(value=self.value(e.value)) for e in small.value.elements]
                    )
                )
            return small.with_changes(value=self.value(small.value))
        if isinstance(small, cst.AugAssign):
            assert isinstance(small.target, cst.Name)
            kind = self.k.env.get(small.target.value, S)
            return small.with_changes(value=self.within(small.value, kind))
        if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
            return small.with_changes(value=self.rebuild(small.value))
        return small


def _widen(k: _Kernel, block: str) -> dict[int, cst.BaseExpression]:
    """New initial values for names whose later definitions have a larger shape: a block
    accumulator becomes a tile, a scalar one a vector over the program axis."""
    out: dict[int, cst.BaseExpression] = {}
    for name, value, augmented in k.defs:
        need, have = k.env.get(name, S), k.of(value)
        if augmented or need == have:
            continue
        if have == R and need == RP and k.sp.is_call(value, "tl.zeros", "tl.full"):
            assert isinstance(value, cst.Call)
            shape = value.args[0].value
            assert isinstance(shape, (cst.List, cst.Tuple))
            tile = cu.expr(f"[{cu.code(shape.elements[0].value)}, {block}]")
            out[id(value)] = value.with_changes(
                args=[value.args[0].with_changes(value=tile), *value.args[1:]]
            )
            continue
        literal = value.expression if isinstance(value, cst.UnaryOperation) else value
        if have == S and need == P and k.sp.is_call(value, "tl.zeros", "tl.full"):
            assert isinstance(value, cst.Call)  # `tl.zeros([], dtype=...)`
            out[id(value)] = value.with_changes(
                args=[value.args[0].with_changes(value=cu.expr(f"[{block}]")), *value.args[1:]]
            )
            continue
        if have == S and need == P:
            if isinstance(literal, cst.Integer):
                dtype = "tl.int32"
            elif isinstance(literal, cst.Float) or (
                isinstance(literal, cst.Call) and cu.call_name(literal) == "float"
            ):
                dtype = "tl.float32"
            else:
                raise _Refuse(f"{name} starts from {cu.code(value)}")
            zero = isinstance(literal, (cst.Integer, cst.Float)) and not float(literal.evaluated_value)
            text = (
                f"tl.zeros([{block}], dtype={dtype})"
                if zero
                else f"tl.full([{block}], {cu.code(value)}, dtype={dtype})"
            )
            out[id(value)] = k.sp.expr(text)
            continue
        raise _Refuse(f"{name} changes shape")
    return out


# ---------------------------------------------------------------------------------------
# the plan for one kernel and its launch


@dataclass
class _Plan:
    kernel: cu.Kernel
    launch: cu.Launch
    new_kernel: cst.FunctionDef
    edits: list[tuple[cst.CSTNode, Any]]
    block: str
    width: int


def _launch_int(
    launch: cu.Launch, kernel: cu.Kernel, param: str, tree: cst.Module, inp: RuleInput
) -> int | None:
    """The largest value a constexpr takes at the launch: a literal, a local or module name
    bound once to one, the parameter's default, what the shape cases give, or the largest the
    autotuner's configs give it."""
    if kernel.supplied.get(param) == "autotune":
        known = param in kernel.tuned_values and not kernel.supplied_unknown
        return max(kernel.tuned_values[param]) if known else None
    bound = launch.bound(kernel).get(param, kernel.defaults.get(param))
    value = cu.resolve_int(bound, cu.Bindings(launch.reading_scope))
    if value is None and isinstance(bound, cst.Name):
        value = cu.module_ints(tree).get(bound.value)
    if value is not None:
        return value
    seen = (
        [v.get(param) for v in cu.launch_values(launch, kernel, inp.context.cases)]
        if bound is not None
        else []
    )
    if seen and all(isinstance(v, int) for v in seen):
        return max(seen)
    return None


def _block_extent(k: _Kernel, launch: cu.Launch, tree: cst.Module, inp: RuleInput) -> int | None:
    sizes = []
    consts = constexprs(k.kernel, k.sp)
    for call in cu.walk(k.kernel.node.body):
        if not k.sp.is_call(call, "tl.arange"):
            continue
        assert isinstance(call, cst.Call)
        ends = [cu.arg(call, "start", 0), cu.arg(call, "end", 1)]
        ints = []
        for e in ends:
            n = cu.int_literal(e)
            if n is None and isinstance(e, cst.Name) and e.value in consts:
                n = _launch_int(launch, k.kernel, e.value, tree, inp)
            ints.append(n)
        if ints[0] is None or ints[1] is None:
            return None
        sizes.append(ints[1] - ints[0])
    return max(sizes) if sizes else None


@dataclass
class _Index:
    """How a kernel's program index reaches the value that becomes the tile's second axis,
    and how the rewrite writes it: the statements that compute it, the parameter its lanes are
    masked to, and the new grid."""

    pid: str
    statements: list[cst.SimpleStatementLine]
    bound: str  # the kernel parameter the lanes are masked to
    fixed: frozenset[str]
    uniform: frozenset[str]
    write: Callable[[str], dict[int, cst.SimpleStatementLine]]  # block name -> new statements by old id
    grid: Callable[[str], cst.BaseExpression]  # the block size as code -> the new grid axis


def _whole_index(
    kernel: cu.Kernel, sp: Spelling, launch: cu.Launch, axis: cst.BaseExpression
) -> _Index | None:
    """`p = tl.program_id(0)` on a grid `(n,)` that passes n for a parameter: program q takes
    the values q * BLOCK + j."""
    found = _pid_statement(kernel, sp)
    if found is None:
        return None
    pid, statement, call = found
    bound = launch.bound(kernel)
    consts = constexprs(kernel, sp)
    n = next(
        (p for p in kernel.params if p not in consts and p in bound and same_code(bound[p], axis)),
        None,
    )
    if n is None or n in cu.Bindings(kernel.node).by_name:
        return None
    assign = statement.body[0]
    assert isinstance(assign, cst.Assign)

    def write(block: str) -> dict[int, cst.SimpleStatementLine]:
        value = sp.expr(f"{cu.code(call)} * {block} + tl.arange(0, {block})")
        return {id(statement): statement.with_changes(body=[assign.with_changes(value=value)])}

    def grid(size: str) -> cst.BaseExpression:
        return sp.expr(f"triton.cdiv({cu.code(axis)}, {size})")

    return _Index(pid, [statement], n, frozenset({pid}), frozenset(), write, grid)


# ---------------------------------------------------------------------------------------
# a program index split into digits

ROOT = ""  # the program index itself, as the left operand of a split


def _is_program_id(node: cst.CSTNode, sp: Spelling) -> bool:
    """`tl.program_id(0)` (or `axis=0`)."""
    return (
        isinstance(node, cst.Call)
        and sp.is_call(node, "tl.program_id")
        and cu.int_literal(cu.arg(node, "axis", 0)) == 0
    )


def _program_index(node: cst.CSTNode, sp: Spelling) -> bool:
    """`tl.program_id(0)`, cast or not (`tl.program_id(0).to(tl.int64)`)."""
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "to":
        node = node.func.value
    return _is_program_id(node, sp)


@dataclass
class _Digit:
    """One value of a split: `name = left % divisor` ("%"), `left // divisor` ("//") or the
    program index itself ("="); `node` is the `%` operation when it is in the kernel."""

    name: str
    op: str
    left: str
    divisor: cst.BaseExpression | None
    node: cst.BinaryOperation | None
    statement: cst.SimpleStatementLine


def _is_none(test: cst.BaseExpression, bound: dict[str, cst.BaseExpression]) -> bool | None:
    """`X is None` / `X is not None` for a parameter X bound at a call; None when unknown."""
    if not (
        isinstance(test, cst.Comparison) and isinstance(test.left, cst.Name) and len(test.comparisons) == 1
    ):
        return None
    target = test.comparisons[0]
    if not (isinstance(target.comparator, cst.Name) and target.comparator.value == "None"):
        return None
    value = bound.get(test.left.value)
    if value is None or (isinstance(value, cst.Name) and value.value != "None"):
        return None  # unbound, or a name that may hold None
    none = isinstance(value, cst.Name)
    if isinstance(target.operator, cst.Is):
        return none
    return not none if isinstance(target.operator, cst.IsNot) else None


def _helper_digits(
    call: cst.Call, helper: cu.Kernel, sp: Spelling
) -> list[tuple[str, cst.BaseExpression | None]] | None:
    """What a jit helper that splits the program index returns at this call, per element: "="
    for the index, or "%" / "//" with the call's argument it divides by. The helper's body:
    `pid = tl.program_id(0)` (cast or not), tests of a parameter against None, and a return
    of a tuple of `pid`, `pid % X` and `pid // X` for parameters X (fla's
    `unflatten_program_id`)."""
    if any(a.star for a in call.args):
        return None
    params = [p.name.value for p in params_of(helper.node)]
    bound: dict[str, cst.BaseExpression] = {}
    for name, a in zip(params, [a for a in call.args if a.keyword is None], strict=False):
        bound[name] = a.value
    bound.update({a.keyword.value: a.value for a in call.args if a.keyword is not None})
    passed = {id(v) for v in bound.values()}
    for p in params_of(helper.node):
        if p.name.value not in bound and p.default is not None:
            bound[p.name.value] = p.default
    pid = None
    body = cu.body_statements(helper.node.body)
    while body:
        st = body.pop(0)
        if isinstance(st, cst.If):
            taken = _is_none(st.test, bound)
            if taken is None or isinstance(st.orelse, cst.If):
                return None
            if taken:
                body = cu.body_statements(st.body)
            elif st.orelse is not None:
                body = cu.body_statements(st.orelse.body)
            continue
        if not isinstance(st, cst.SimpleStatementLine) or len(st.body) != 1:
            return None
        small = st.body[0]
        if isinstance(small, cst.Expr) and isinstance(small.value, cst.SimpleString):
            continue  # the docstring
        assigned = cu.simple_assigns(st)
        if pid is None and len(assigned) == 1 and _program_index(assigned[0][1], sp):
            pid = assigned[0][0]
            continue
        if pid is None or not isinstance(small, cst.Return) or not isinstance(small.value, cst.Tuple):
            return None
        out: list[tuple[str, cst.BaseExpression | None]] = []
        for e in small.value.elements:
            v = e.value
            if isinstance(v, cst.Name) and v.value == pid:
                out.append(("=", None))
            elif (
                isinstance(v, cst.BinaryOperation)
                and isinstance(v.operator, (cst.Modulo, cst.FloorDivide))
                and isinstance(v.left, cst.Name)
                and v.left.value == pid
                and isinstance(v.right, cst.Name)
                and id(bound.get(v.right.value)) in passed
            ):
                out.append(("%" if isinstance(v.operator, cst.Modulo) else "//", bound[v.right.value]))
            else:
                return None
        return out
    return None


def _digits(kernel: cu.Kernel, sp: Spelling, helpers: dict[str, cu.Kernel]) -> list[_Digit] | None:
    """The top-level statements that split the program index, as digits; None when a
    statement mixes the split with other values or splits it some other way."""
    digits: list[_Digit] = []
    held = {ROOT}  # names that still hold every digit of the index (or the low ones)
    for st in cu.body_statements(kernel.node.body):
        if not isinstance(st, cst.SimpleStatementLine) or len(st.body) != 1:
            continue
        small = st.body[0]
        if not isinstance(small, cst.Assign) or len(small.targets) != 1:
            continue
        target = small.targets[0].target
        found: list[_Digit | None] = []
        helper = helpers.get(cu.call_name(small.value) or "") if isinstance(small.value, cst.Call) else None
        if helper is not None and isinstance(target, cst.Tuple):
            assert isinstance(small.value, cst.Call)
            parts = _helper_digits(small.value, helper, sp)
            names = [e.value.value for e in target.elements if isinstance(e.value, cst.Name)]
            if parts is None or len(parts) != len(names) or len(names) != len(target.elements):
                return None
            found = [_Digit(n, op, ROOT, d, None, st) for n, (op, d) in zip(names, parts, strict=True)]
        else:
            pairs = _pairs(small)
            if pairs is None:
                continue
            for name, v in pairs:
                if _program_index(v, sp):
                    found.append(_Digit(name, "=", ROOT, None, None, st))
                elif (
                    isinstance(v, cst.BinaryOperation)
                    and isinstance(v.operator, (cst.Modulo, cst.FloorDivide))
                    and (
                        _program_index(v.left, sp) or (isinstance(v.left, cst.Name) and v.left.value in held)
                    )
                ):
                    left = v.left.value if isinstance(v.left, cst.Name) else ROOT
                    op = "%" if isinstance(v.operator, cst.Modulo) else "//"
                    found.append(_Digit(name, op, left, v.right, v, st))
                else:
                    found.append(None)
        if all(d is None for d in found):
            continue
        if any(d is None for d in found):
            return None
        for d in found:
            assert d is not None
            digits.append(d)
            if d.op in ("=", "%"):
                held.add(d.name)
    return digits


def _factors(node: cst.BaseExpression) -> list[cst.BaseExpression]:
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply):
        return _factors(node.left) + _factors(node.right)
    return [node]


def _has_factor(node: cst.BaseExpression, factor: cst.BaseExpression) -> bool:
    """`node` is a product with `factor` among its factors exactly once."""
    return sum(same_code(f, factor) for f in _factors(node)) == 1


def _with_factor(
    node: cst.BaseExpression, match: Callable[[cst.BaseExpression], bool], new: cst.BaseExpression
) -> cst.BaseExpression | None:
    """`node`, a product, with its one factor that `match`es replaced by `new`."""
    hits = [f for f in _factors(node) if match(f)]
    if len(hits) != 1:
        return None
    return new if hits[0] is node else cu.replace_in(node, [(hits[0], new)])


def _split_indices(
    kernel: cu.Kernel,
    sp: Spelling,
    launch: cu.Launch,
    axis: cst.BaseExpression,
    helpers: dict[str, cu.Kernel],
) -> list[_Index]:
    """A program index split into digits (`i_n, i_h = pid // H, pid % H`; fla's
    `i_bh, i_t = unflatten_program_id(B * H)` then `i_b, i_h = i_bh // H, i_bh % H`), one
    candidate per digit `fast = low % R` for a kernel parameter R. The digit becomes the tile's
    axis: every divisor applied to a value still holding it must have R as a factor, and so
    must the grid; the rewrite writes `tl.cdiv(R, BLOCK)` for R in each, so the digit's radix
    becomes cdiv(R, BLOCK) and every other digit keeps its values, and
    `fast = (low % tl.cdiv(R, BLOCK)) * BLOCK + tl.arange(0, BLOCK)`: lane j of digit b stands
    for the old digit b * BLOCK + j, masked to R."""
    digits = _digits(kernel, sp, helpers)
    if not digits or sum(d.op == "=" for d in digits) > 1:
        return []
    bindings = cu.Bindings(kernel.node)
    bound = launch.bound(kernel)
    statements = list({id(d.statement): d.statement for d in digits}.values())
    inside = {id(n) for st in statements for n in cu.walk(st)}
    held = {d.name for d in digits if d.op in ("=", "%")}
    read_outside = {
        n.value for n in cu.walk(kernel.node.body) if isinstance(n, cst.Name) and id(n) not in inside
    }
    out = []
    for fast in digits:
        radix = fast.divisor
        if fast.op != "%" or fast.node is None or not isinstance(radix, cst.Name):
            continue
        r = radix.value
        if r not in kernel.params or r in bindings.by_name or r not in bound:
            continue
        low = held - {fast.name}
        if low & read_outside or any(
            len(bindings.by_name.get(d.name, [])) != 1 for d in digits if d.op != "//"
        ):
            continue
        others = [d for d in digits if d is not fast and d.op != "="]
        if any(d.divisor is None or not _has_factor(d.divisor, radix) for d in others):
            continue
        if any(cu.names_in(d.divisor) & held for d in others if d.divisor is not None):
            continue
        if not _has_factor(axis, bound[r]):
            continue
        out.append(_split_index(fast, others, statements, r, low, sp, axis, bound[r], digits))
    return out


def _split_index(
    fast: _Digit,
    others: list[_Digit],
    statements: list[cst.SimpleStatementLine],
    r: str,
    low: set[str],
    sp: Spelling,
    axis: cst.BaseExpression,
    launched: cst.BaseExpression,
    digits: list[_Digit],
) -> _Index:
    assert fast.node is not None

    def write(block: str) -> dict[int, cst.SimpleStatementLine]:
        radix = sp.expr(f"tl.cdiv({r}, {block})")
        edits: dict[int, tuple[cst.CSTNode, Any]] = {}
        for d in others:
            assert d.divisor is not None
            new = _with_factor(d.divisor, lambda f: isinstance(f, cst.Name) and f.value == r, radix)
            edits[id(d.divisor)] = (d.divisor, new)
        left = cu.code(fast.node.left)
        edits[id(fast.node)] = (
            fast.node,
            sp.expr(f"({left} % tl.cdiv({r}, {block})) * {block} + tl.arange(0, {block})"),
        )
        return {id(st): cu.replace_in(st, list(edits.values())) for st in statements}

    def grid(size: str) -> cst.BaseExpression:
        new = _with_factor(
            axis, lambda f: same_code(f, launched), sp.expr(f"triton.cdiv({cu.code(launched)}, {size})")
        )
        assert new is not None
        return new

    high = frozenset(d.name for d in digits if d.op == "//")
    return _Index(fast.name, statements, r, frozenset(low | {fast.name}), high, write, grid)


def _plan(
    kernel: cu.Kernel,
    launches: list[cu.Launch],
    tree: cst.Module,
    sp: Spelling,
    inp: RuleInput,
    helpers: dict[str, cu.Kernel],
) -> _Plan | None:
    mine = [lc for lc in launches if lc.kernel == kernel.name]
    if len(mine) != 1 or mine[0].has_star_args:
        return None
    launch = mine[0]
    grid = read_grid(launch)
    if grid is None or len(grid.elements) != 1:
        return None
    axis = grid.elements[0]
    whole = _whole_index(kernel, sp, launch, axis)
    for index in [whole] if whole is not None else _split_indices(kernel, sp, launch, axis, helpers):
        plan = _plan_with(kernel, launch, grid, index, tree, sp, inp)
        if plan is not None:
            return plan
    return None


def _plan_with(
    kernel: cu.Kernel,
    launch: cu.Launch,
    grid: Grid,
    index: _Index,
    tree: cst.Module,
    sp: Spelling,
    inp: RuleInput,
) -> _Plan | None:
    k = _Kernel(kernel, index.pid, index.statements, sp, index.fixed, index.uniform)
    try:
        k.collect(kernel.node.body, True)
        k.infer()
        if _walks_a_column(k) is None:
            return None
        extent = _block_extent(k, launch, tree, inp)
        if extent is None or extent <= 0:
            return None
        width = min(MAX_P, max(MIN_P, TILE_ELEMENTS // extent))
        if extent * width > MAX_TILE_ELEMENTS:
            return None
        taken = cu.all_names(kernel.node) | set(kernel.params)
        block = cu.fresh_name(f"BLOCK_{index.bound.upper()}", taken)
        mask = cu.fresh_name(f"{index.pid}_mask", taken)
        writer = _Writer(k, block, mask, _widen(k, block))
        body = writer.block_of(kernel.node.body)
    except _Refuse:
        return None
    assert isinstance(body, cst.IndentedBlock)
    written = index.write(block)
    masks = cst.SimpleStatementLine(
        [cst.Assign([cst.AssignTarget(cst.Name(mask))], cu.expr(f"{index.pid} < {index.bound}"))]
    )
    new_body = []
    for old, new in zip(cu.body_statements(kernel.node.body), body.body, strict=True):
        new_body.append(written.get(id(old), new))
        if any(index.pid == name for name, _ in cu.simple_assigns(old)) and id(old) in written:
            new_body.append(masks)
    try:
        fn = add_param(
            kernel.node.with_changes(body=body.with_changes(body=new_body)),
            block,
            constexpr_annotation(kernel, sp),
            default=str(width) if any(p.default is not None for p in kernel.node.params.params) else None,
        )
    except ValueError:
        return None
    size = f'{grid.meta}["{block}"]' if grid.meta else str(width)
    new_grid = cst.Tuple([cst.Element(index.grid(size), comma=cst.Comma())])
    edits: list[tuple[cst.CSTNode, Any]] = []
    call = launch.call
    if cu.holds(call, grid.node):
        call = cu.replace_in(call, [(grid.node, new_grid)])
    else:
        edits.append((grid.node, new_grid))
    edits.append((launch.call, add_kwargs(call, [(block, str(width))])))
    return _Plan(kernel, launch, fn, edits, block, width)


@transform(Family.COALESCE)
def tile_strided_walk(source: str, inp: RuleInput) -> Rewrite | None:
    tree = cu.parse(source)
    if tree is None:
        return None
    sp = Spelling.of(tree)
    if sp is None:
        return None
    kernels = cu.find_kernels(tree)
    launches = cu.find_launches(tree, kernels)
    plans = [
        p for k in kernels.values() if inp.wants(k.name) and (p := _plan(k, launches, tree, sp, inp, kernels))
    ]
    if not plans:
        return None
    edits: list[tuple[cst.CSTNode, Any]] = []
    for p in plans:
        edits.append((p.kernel.node, p.new_kernel))
        edits.extend(p.edits)
    new = cu.replace(tree, edits)
    names = ", ".join(p.kernel.name for p in plans)
    widths = ", ".join(f"{p.block}={p.width}" for p in plans)
    return Rewrite(
        source=cu.emit(new, tree),
        family=Family.COALESCE,
        kernels=tuple(p.kernel.name for p in plans),
        mechanism=(
            f"{names}: each program takes {widths} consecutive values of its program index as the second axis "
            "of its tile (block[:, None], index[None, :]), so the access that walked a column one element per "
            "lane reads along the contiguous axis; reductions along the walked axis say axis=0, accumulators "
            "start at the tile's shape, accesses that depend on the index are masked to its bound, and the "
            "grid shrinks by that factor."
        ),
        effect=(
            "adjacent lanes of the walked access now touch adjacent addresses: each 32-byte sector serves 8 fp32 "
            "lanes instead of one (up to 8x fewer memory transactions on that access; the neighbouring "
            "programs' sectors were partly served by L2 before, so expect less on DRAM time); an access that "
            "was contiguous along the block stays coalesced, through a layout conversion in shared memory. "
            "Not measured on hardware yet."
        ),
    )
