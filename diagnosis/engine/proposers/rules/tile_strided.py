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
address depends on p gains `& p_mask`, and the grid becomes `(cdiv(G, BLOCK_P),)`. Triton's
coalescing pass then orders each access's lanes along whichever tile axis is contiguous for it
(the program axis for the walked column, the block axis for a row written out), converting the
tile between the two layouts through shared memory where a transpose needs it, so a separate
`tl.trans` is not written.

Correct by construction: lane j of program q computes exactly what program q * BLOCK_P + j
computed before. Every value is computed element by element along the new axis, reductions and
scans run along the old axis only, and control flow (loop bounds) does not depend on p, so all
lanes run the same statements; lanes past n are masked in every access that depends on p, and
their other values reach nothing but their own masked stores. Preconditions (refused
otherwise): straight-line statements and `for` loops only (no if, while, return, break), no
existing 2-D block, subscript, dot, atomic or call outside the listed tl functions, no other
program_id or num_programs, a name rebound with a different shape only as an accumulator
started from a literal, `tl.zeros` or `tl.full`, and tiles of at most 8192 elements.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import libcst as cst

from diagnosis.engine.evidence import Family
from diagnosis.engine.proposers.rules import Rewrite, RuleInput, transform
from diagnosis.engine.proposers.rules import cst_util as cu
from diagnosis.engine.proposers.rules.structural import (
    Spelling,
    add_kwargs,
    add_param,
    constexpr_annotation,
    constexprs,
    parens,
    read_grid,
    same_code,
)

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
    pid: str
    pid_statement: cst.SimpleStatementLine
    sp: Spelling
    env: dict[str, int] = field(default_factory=dict)
    memo: dict[int, int] = field(default_factory=dict)
    defs: list[tuple[str, cst.BaseExpression, bool]] = field(default_factory=list)  # name, value, augmented
    memory: list[cst.Call] = field(default_factory=list)  # every tl.load / tl.store
    loops: list[cst.For] = field(default_factory=list)

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
            head = node
            while isinstance(head, cst.Attribute):
                head = head.value
            if cu.dotted(node) is None or (isinstance(head, cst.Name) and self.of(head) != S):
                raise _Refuse(f"attribute {cu.code(node)}")
            return S
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
            if not isinstance(shape, (cst.List, cst.Tuple)) or len(shape.elements) != 1:
                raise _Refuse("a block that is not 1-D")
            if any(self.of(v) for v in values[1:]) or self.of(shape.elements[0].value):
                raise _Refuse("zeros of a per-program value")
            return R
        if name in ("tl.load", "tl.store"):
            kind = S
            for v in values:
                kind |= self.of(v)
            return kind
        if name in REDUCTIONS or name in SCANS:
            operand = cu.arg(node, "input", 0)
            axis = cu.arg(node, "axis", 1)
            extra = [
                a for a in node.args if a.keyword is not None and a.keyword.value not in ("input", "axis")
            ]
            if operand is None or extra or len(node.args) > 2:
                raise _Refuse("reduction options")
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
            if st is self.pid_statement:
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
        if (
            isinstance(small, cst.Assign)
            and len(small.targets) == 1
            and isinstance(small.targets[0].target, cst.Name)
        ):
            name = small.targets[0].target.value
            if name == self.pid:
                raise _Refuse("the program index is rebound")
            self.defs.append((name, small.value, False))
        elif isinstance(small, cst.AugAssign) and isinstance(small.target, cst.Name):
            if small.target.value == self.pid:
                raise _Refuse("the program index is rebound")
            self.defs.append((small.target.value, small.value, True))
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
        mine = set(map(id, cu.walk(self.pid_statement)))
        for node in cu.walk(self.kernel.node.body):
            if id(node) in mine:
                continue
            if self.sp.is_call(node, "tl.program_id", "tl.num_programs"):
                raise _Refuse("another program_id or num_programs")
            if isinstance(node, (cst.Subscript, cst.Lambda, cst.IfExp, cst.BooleanOperation)):
                raise _Refuse(type(node).__name__)
            if isinstance(node, cst.Call):
                self.of(node)  # refuses calls outside the list, wherever they are
                if self.sp.is_call(node, "tl.load", "tl.store"):
                    self.memory.append(node)
                ptr = cu.arg(node, "pointer", 0)
                if self.sp.is_call(node, "tl.store") and ptr is not None and self.of(node) != self.of(ptr):
                    raise _Refuse("a store whose value has an axis its address lacks (programs race)")


def _in(node: cst.CSTNode, container: cst.CSTNode) -> bool:
    return any(n is node for n in cu.walk(container))


def _pid_statement(kernel: cu.Kernel, sp: Spelling) -> tuple[str, cst.SimpleStatementLine, cst.Call] | None:
    for st in cu.body_statements(kernel.node.body):
        for name, value in cu.simple_assigns(st):
            if sp.is_call(value, "tl.program_id") and cu.int_literal(cu.arg(value, "axis", 0)) == 0:
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

    def block_of(self, suite: cst.BaseSuite) -> cst.BaseSuite:
        assert isinstance(suite, cst.IndentedBlock)
        return suite.with_changes(body=[self.statement(s) for s in suite.body])

    def statement(self, st: cst.BaseStatement) -> Any:
        if st is self.k.pid_statement:
            return st
        if isinstance(st, cst.For):
            return st.with_changes(body=self.block_of(st.body))
        assert isinstance(st, cst.SimpleStatementLine)
        return st.with_changes(body=[self.small(s) for s in st.body])

    def small(self, small: cst.BaseSmallStatement) -> cst.BaseSmallStatement:
        if isinstance(small, cst.Assign):
            if id(small.value) in self.widen:
                return small.with_changes(value=self.widen[id(small.value)])
            return small.with_changes(value=self.rebuild(small.value))
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
    bound once to one, the parameter's default, or what the shape cases give."""
    bound = launch.bound(kernel).get(param, kernel.defaults.get(param))
    value = cu.resolve_int(bound, cu.Bindings(launch.function))
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


def _plan(
    kernel: cu.Kernel, launches: list[cu.Launch], tree: cst.Module, sp: Spelling, inp: RuleInput
) -> _Plan | None:
    found = _pid_statement(kernel, sp)
    mine = [lc for lc in launches if lc.kernel == kernel.name]
    if found is None or len(mine) != 1 or mine[0].has_star_args or kernel.autotuned:
        return None
    pid, pid_statement, pid_call = found
    launch = mine[0]
    grid = read_grid(launch)
    if grid is None or len(grid.elements) != 1:
        return None
    k = _Kernel(kernel, pid, pid_statement, sp)
    try:
        k.collect(kernel.node.body, True)
        k.infer()
        if _walks_a_column(k) is None:
            return None
        bound = launch.bound(kernel)
        consts = constexprs(kernel, sp)
        n = next(
            (
                p
                for p in kernel.params
                if p not in consts and p in bound and same_code(bound[p], grid.elements[0])
            ),
            None,
        )
        if n is None or n in cu.Bindings(kernel.node).by_name:
            return None
        extent = _block_extent(k, launch, tree, inp)
        if extent is None or extent <= 0:
            return None
        width = min(MAX_P, max(MIN_P, TILE_ELEMENTS // extent))
        if extent * width > MAX_TILE_ELEMENTS:
            return None
        taken = cu.all_names(kernel.node) | set(kernel.params)
        block = cu.fresh_name(f"BLOCK_{n.upper()}", taken)
        mask = cu.fresh_name(f"{pid}_mask", taken)
        writer = _Writer(k, block, mask, _widen(k, block))
        body = writer.block_of(kernel.node.body)
    except _Refuse:
        return None
    assert isinstance(body, cst.IndentedBlock)
    new_body = []
    for old, new in zip(cu.body_statements(kernel.node.body), body.body, strict=True):
        if old is pid_statement:
            value = sp.expr(f"{cu.code(pid_call)} * {block} + tl.arange(0, {block})")
            assign = pid_statement.body[0]
            assert isinstance(assign, cst.Assign)
            new_body.append(pid_statement.with_changes(body=[assign.with_changes(value=value)]))
            new_body.append(
                cst.SimpleStatementLine(
                    [cst.Assign([cst.AssignTarget(cst.Name(mask))], cu.expr(f"{pid} < {n}"))]
                )
            )
        else:
            new_body.append(new)
    try:
        fn = add_param(
            kernel.node.with_changes(body=body.with_changes(body=new_body)),
            block,
            constexpr_annotation(kernel, sp),
            default=str(width) if any(p.default is not None for p in kernel.node.params.params) else None,
        )
    except ValueError:
        return None
    g = cu.code(grid.elements[0])
    size = f'{grid.meta}["{block}"]' if grid.meta else str(width)
    new_grid = sp.expr(f"(triton.cdiv({g}, {size}),)")
    edits: list[tuple[cst.CSTNode, Any]] = []
    call = launch.call
    if _in(grid.node, call):
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
    plans = [p for k in kernels.values() if inp.wants(k.name) and (p := _plan(k, launches, tree, sp, inp))]
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
