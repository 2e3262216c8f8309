"""COALESCE (interleaved pairs): the two halves of an interleaved layout, read or written by two
accesses at `2 * i` and `2 * i + 1`, become one access of a (BLOCK, 2) tile.

Complex numbers stored as (real, imag) pairs, rotary embeddings that rotate adjacent channels
and (x, y) coordinates are read element by element at a stride of two:

    re = tl.load(p + d * 2, mask=m, other=0.0)
    im = tl.load(p + d * 2 + 1, mask=m, other=0.0)
    ...
    tl.store(p + d * 2, new_re, mask=m)
    tl.store(p + d * 2 + 1, new_im, mask=m)

Each access on its own skips every other element: a scalar instruction per element and half of
every sector fetched for the other access (tier 2 reads 16-bit `ld.global.b16`; tier 3 calls it
a strided access). Together the two cover a contiguous run, which one access of the pair tile
reads with vector instructions, `tl.split` taking it apart in registers and `tl.join` putting
the results back together:

    re, im = tl.split(tl.load(p + d[:, None] * 2 + tl.arange(0, 2)[None, :], mask=m[:, None], other=0.0))
    ...
    tl.store(p + d[:, None] * 2 + tl.arange(0, 2)[None, :], tl.join(new_re, new_im), mask=m[:, None])

Correct by construction: element (j, c) of the tile is the address `p + d[j] * 2 + c`, which
the old access of half c read or wrote at lane j, under the same mask, with the same `other`
and the same cache arguments. Preconditions (refused otherwise): the two accesses are
consecutive statements of one block (nothing between them can store), a load pair binds two
different names and the second address does not read the first's; the addresses are the same
sum of terms but for the second's `+ 1`, one term is `i * 2` (or `2 * i`, or a name bound once
to it) with `i` a 1-D block, and every other term is scalar; the masks are 1-D along `i` or
scalar; `other` is scalar and a stored value is a 1-D block, so the pair tile's shape is
(len(i), 2). Shapes are read from the kernel's own statements (`tl.arange` makes a 1-D block,
element-wise operations keep the largest shape of their operands, a loop counter or parameter
is scalar); anything else (a subscript, a reduction, a 2-D block) refuses the pair. Where tier
0-3 findings back the family, only pairs on the lines they name are rewritten.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import libcst as cst

from diagnosis.engine.evidence import Family
from diagnosis.engine.proposers.rules import Rewrite, RuleInput, tidy, transform
from diagnosis.engine.proposers.rules import cst_util as cu

# imported first, so the tiled strided walk is COALESCE's first transform and this one its second
from diagnosis.engine.proposers.rules.tile_strided import LOOPS
from diagnosis.engine.srcmodel import model_of_tree

LOAD_ARGS = ("pointer", "mask", "other", "boundary_check", "padding_option", "cache_modifier", "eviction_policy",
             "volatile")  # fmt: skip
STORE_ARGS = ("pointer", "value", "mask", "boundary_check", "cache_modifier", "eviction_policy")
# calls whose result has another shape than the largest of their operands
RESHAPING = frozenset(
    {
        "tl.sum", "tl.max", "tl.min", "tl.argmax", "tl.argmin", "tl.xor_sum", "tl.reduce", "tl.cumsum",
        "tl.cumprod", "tl.associative_scan", "tl.dot", "tl.dot_scaled", "tl.trans", "tl.permute", "tl.reshape",
        "tl.view", "tl.broadcast_to", "tl.expand_dims", "tl.split", "tl.join", "tl.interleave", "tl.zeros",
        "tl.full", "tl.zeros_like", "tl.full_like", "tl.arange", "tl.histogram", "tl.gather", "tl.sort",
        "tl.flip", "tl.ravel", "tl.make_block_ptr", "tl.advance", "tl.make_tensor_descriptor",
    }
)  # fmt: skip


class _Shapes:
    """Rank of a kernel's expressions: 0 scalar, 1 a 1-D block, None not known."""

    def __init__(self, kernel: cu.Kernel) -> None:
        self.bindings = cu.Bindings(kernel.node)
        self.params = set(kernel.params)
        self.memo: dict[str, int | None] = {}

    def of(self, node: cst.CSTNode) -> int | None:  # noqa: C901 - one case per expression form
        if isinstance(node, (cst.Integer, cst.Float, cst.SimpleString)):
            return 0
        if isinstance(node, cst.Name):
            return 0 if node.value in ("None", "True", "False") else self.name(node.value)
        if isinstance(node, cst.Call):
            fn = cu.call_name(node)
            if fn == "tl.arange":
                return 1
            if fn in ("tl.program_id", "tl.num_programs"):
                return 0
            if isinstance(node.func, cst.Attribute) and node.func.attr.value == "to":
                return self.of(node.func.value)  # `x.to(tl.float32)`
            if fn in RESHAPING:
                return None
            if fn == "tl.load":
                ptr = cu.arg(node, "pointer", 0)
                return self.of(ptr) if ptr is not None else None
            if fn is None or not fn.startswith("tl."):
                return None  # a jit helper or anything else: not read
            return self._widest(
                [a.value for a in node.args if a.keyword is None or a.keyword.value != "dtype"]
            )
        if isinstance(node, cst.BinaryOperation):
            return self._widest([node.left, node.right])
        if isinstance(node, cst.UnaryOperation):
            return self.of(node.expression)
        if isinstance(node, cst.BooleanOperation):
            return self._widest([node.left, node.right])
        if isinstance(node, cst.Comparison):
            return self._widest([node.left, *(c.comparator for c in node.comparisons)])
        if isinstance(node, cst.Subscript):
            return self._subscript(node)
        return None

    def _widest(self, nodes: Sequence[cst.CSTNode]) -> int | None:
        ranks = [self.of(n) for n in nodes]
        return None if any(r is None for r in ranks) else max(ranks, default=0)

    def name(self, name: str) -> int | None:
        if name in self.memo:
            return self.memo[name]
        self.memo[name] = None  # a name read in its own binding (`x = x * 2`) is decided below
        bindings = self.bindings.by_name.get(name, [])
        own = [b for b in bindings if b.value is not None and name in cu.names_in(b.value)]
        ranks: list[int | None] = [0] if name in self.params else []
        ranks += [self._binding(b) for b in bindings if not any(b is o for o in own)]
        rank = ranks[0] if ranks and all(r == ranks[0] for r in ranks) else None
        if rank is not None and own:
            self.memo[name] = rank  # `x = x * 2` keeps x's shape when the rest of it does
            if any(self.of(b.value) != rank for b in own):
                rank = None
        self.memo[name] = rank
        return rank

    def _binding(self, b: cu.Binding) -> int | None:
        if isinstance(b.statement, cst.For):
            it, target = b.statement.iter, b.statement.target
            return (
                0
                if isinstance(it, cst.Call) and cu.call_name(it) in LOOPS and isinstance(target, cst.Name)
                else None
            )
        if b.value is not None:
            return self.of(b.value)
        if b.unpack is not None and cu.is_call(b.unpack, "tl.split") and b.unpack.args:
            whole = self.of(b.unpack.args[0].value)  # `re, im = tl.split(pairs)`: one axis less
            return whole - 1 if whole is not None and whole > 0 else None
        return None

    def _subscript(self, node: cst.Subscript) -> int | None:
        """`x[:, None]`: x's rank plus one per None, when every other element is a whole `:`."""
        whole = news = 0
        for el in node.slice:
            s = el.slice
            if isinstance(s, cst.Slice) and s.lower is None and s.upper is None and s.step is None:
                whole += 1
            elif isinstance(s, cst.Index) and isinstance(s.value, cst.Name) and s.value.value == "None":
                news += 1
            else:
                return None
        return whole + news if self.of(node.value) == whole else None


def _terms(node: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The operands of a chain of `+` (through parentheses)."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
        return _terms(node.left) + _terms(node.right)
    return [node]


def _key(node: cst.CSTNode) -> str:
    return cu.code(node).strip().replace(" ", "")


def _doubled(node: cst.BaseExpression) -> cst.BaseExpression | None:
    """`i` of `i * 2` or `2 * i`."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply):
        if cu.int_literal(node.right) == 2:
            return node.left
        if cu.int_literal(node.left) == 2:
            return node.right
    return None


def _column(node: cst.BaseExpression) -> str:
    """`node[:, None]`, parenthesized where the subscript would bind tighter than `node`."""
    text = cu.code(node).strip()
    if isinstance(node, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)):
        return f"{text}[:, None]"
    return f"({text})[:, None]"


@dataclass
class _Match:
    """Two consecutive statements that one access of the pair tile replaces."""

    first: cst.SimpleStatementLine
    second: cst.SimpleStatementLine
    index: cst.BaseExpression  # `i` of the `i * 2` term
    write: Callable[[str], str]  # the new statement, given the pair tile's offsets
    flat: Callable[[str, str], str] | None = None  # the same through flat offsets and their mask
    mask: cst.BaseExpression | None = None  # the pair's mask, where the flat offsets replace it
    bound: str = ""  # and their mask's bound (`n * 2` of `k < n`)
    size: str = ""  # the block of pairs `i` spans (`BLOCK` of `start + tl.arange(0, BLOCK)`), where known

    @property
    def key(self) -> str:
        return _key(self.index)


def _expanded(terms: list[cst.BaseExpression], shapes: _Shapes) -> list[cst.BaseExpression]:
    """`terms` with each 1-D name bound once to a sum replaced by that sum's terms
    (`x + odd` where `odd = even + 1`: `x + even + 1`)."""
    out: list[cst.BaseExpression] = []
    for t in terms:
        bound = shapes.bindings.single(t.value) if isinstance(t, cst.Name) else None
        value = bound.value if bound is not None else None
        if value is not None and len(_terms(value)) > 1 and shapes.of(t) == 1:
            out += _expanded(_terms(value), shapes)
        else:
            out.append(t)
    return out


def _pair_address(
    first: cst.BaseExpression, second: cst.BaseExpression, shapes: _Shapes
) -> tuple[cst.BaseExpression, Callable[[str], str]] | None:
    """(i, the address given the tile's offsets) when `second` is `first + 1` and `first` holds
    one `i * 2` term."""
    a, b = _terms(first), _expanded(_terms(second), shapes)
    ones = [t for t in b if cu.int_literal(t) == 1]
    if not ones or len(b) != len(a) + 1:
        return None
    rest = list(b)
    rest.remove(ones[0])
    if sorted(map(_key, a)) != sorted(map(_key, rest)):
        return None
    doubled: list[tuple[cst.BaseExpression, cst.BaseExpression]] = []
    for t in a:
        rank = shapes.of(t)
        if rank is None:
            return None
        if rank == 0:
            continue
        index = _doubled(t)
        if index is None and isinstance(t, cst.Name):
            bound = shapes.bindings.single(t.value)
            index = _doubled(bound.value) if bound is not None and bound.value is not None else None
        if index is None or shapes.of(index) != 1:
            return None
        doubled.append((t, index))
    if len(doubled) != 1:
        return None
    term, index = doubled[0]
    return index, lambda tile: " + ".join(tile if t is term else cu.code(t).strip() for t in a)


def _to(node: cst.BaseExpression) -> tuple[cst.BaseExpression, str]:
    """(x, ".to(...)") of `x.to(...)`, else (node, "")."""
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "to":
        return node.func.value, cu.code(node)[len(cu.code(node.func.value)) :].strip()
    return node, ""


def _call_of(statement: cst.BaseStatement, load: bool) -> tuple[cst.Call, str, str] | None:
    """(the tl.load / tl.store call, the bound name or "", the `.to(...)` after a load or "")."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return None
    small = statement.body[0]
    if load:
        if not (isinstance(small, cst.Assign) and len(small.targets) == 1):
            return None
        target = small.targets[0].target
        value, suffix = _to(small.value)
        if isinstance(target, cst.Name) and cu.is_call(value, "tl.load"):
            return value, target.value, suffix
        return None
    if isinstance(small, cst.Expr) and cu.is_call(small.value, "tl.store"):
        return small.value, "", ""
    return None


def _args(call: cst.Call, names: tuple[str, ...]) -> dict[str, cst.BaseExpression] | None:
    out: dict[str, cst.BaseExpression] = {}
    for i, a in enumerate(call.args):
        if a.star:
            return None
        name = a.keyword.value if a.keyword is not None else (names[i] if i < len(names) else None)
        if name is None or name in out:
            return None
        out[name] = a.value
    return out


def _tail(args: dict[str, cst.BaseExpression], shapes: _Shapes, skip: tuple[str, ...]) -> list[str] | None:
    """The arguments after pointer (and value) as keywords, the mask a column of the pair tile."""
    out = []
    for name, v in args.items():
        if name in skip:
            continue
        rank = shapes.of(v) if name in ("mask", "other") else 0
        if rank is None or (name == "other" and rank != 0) or rank > 1:
            return None
        out.append(f"{name}={_column(v) if rank == 1 else cu.code(v).strip()}")
    return out


def _joined(v1: cst.BaseExpression, v2: cst.BaseExpression, fn: str = "tl.join") -> str:
    """`tl.join(a, b)`, a conversion both values end with written once after it."""
    (a, to_a), (b, to_b) = _to(v1), _to(v2)
    if to_a and to_a == to_b:
        return f"{fn}({cu.code(a).strip()}, {cu.code(b).strip()}){to_a}"
    return f"{fn}({cu.code(v1).strip()}, {cu.code(v2).strip()})"


def _match(s1: cst.BaseStatement, s2: cst.BaseStatement, shapes: _Shapes, load: bool) -> _Match | None:
    c1, c2 = _call_of(s1, load), _call_of(s2, load)
    if c1 is None or c2 is None or c1[2] != c2[2]:
        return None
    names = LOAD_ARGS if load else STORE_ARGS
    a1, a2 = _args(c1[0], names), _args(c2[0], names)
    if a1 is None or a2 is None or "pointer" not in a1 or "pointer" not in a2:
        return None
    skip = ("pointer",) if load else ("pointer", "value")
    rest1, rest2 = ({k: _key(v) for k, v in a.items() if k not in skip} for a in (a1, a2))
    if rest1 != rest2:
        return None
    address = _pair_address(a1["pointer"], a2["pointer"], shapes)
    tail = _tail(a1, shapes, skip)
    if address is None or tail is None:
        return None
    index, at = address
    fn = cu.code(c1[0].func).strip()
    run = _run(index, shapes)
    bound = _bound(a1.get("mask"), index, shapes) if run is not None else None
    flat_tail = None
    if run is not None and ("mask" not in a1 or bound is not None):
        # the flat offsets' mask: pair j = t // 2 of flat element t is in when 2 * start + t < 2 * E
        flat_tail = [t for t in tail if not t.startswith("mask=")]
    extra = {
        "mask": a1.get("mask"),
        "bound": _scaled(bound) if bound is not None else "",
        "size": run[1] if run is not None else "",
    }

    def mask(m: str) -> list[str]:
        return [f"mask={m}"] if m else []

    assert isinstance(s1, cst.SimpleStatementLine) and isinstance(s2, cst.SimpleStatementLine)
    if load:
        (_, first, suffix), second = c1, c2[1]
        if first == second or first in cu.names_in(c2[0]):
            return None
        flat = None
        if flat_tail is not None:
            size = run[1]

            def flat(f: str, m: str) -> str:
                loaded = f"{fn}({', '.join([at(f), *mask(m), *flat_tail])}){suffix}"
                return f"{first}, {second} = tl.split(tl.reshape({loaded}, ({size}, 2)))"

        return _Match(
            s1,
            s2,
            index,
            lambda t: f"{first}, {second} = tl.split({fn}({', '.join([at(t), *tail])}){suffix})",
            flat,
            **extra,
        )
    v1, v2 = a1.get("value"), a2.get("value")
    if v1 is None or v2 is None or shapes.of(v1) != 1 or shapes.of(v2) != 1:
        return None
    flat = None
    if flat_tail is not None:

        def flat(f: str, m: str) -> str:
            return f"{fn}({', '.join([at(f), _joined(v1, v2, 'tl.interleave'), *mask(m), *flat_tail])})"

    return _Match(
        s1, s2, index, lambda t: f"{fn}({', '.join([at(t), _joined(v1, v2), *tail])})", flat, **extra
    )


def _scaled(node: cst.BaseExpression) -> str:
    """`node * 2`, parenthesized where the product would bind tighter than `node`."""
    text = cu.code(node).strip()
    if isinstance(node, cst.BinaryOperation) and not isinstance(
        node.operator, (cst.Multiply, cst.FloorDivide)
    ):
        text = f"({text})"
    elif isinstance(node, (cst.BooleanOperation, cst.Comparison, cst.UnaryOperation, cst.IfExp)):
        text = f"({text})"
    return f"{text} * 2"


def _run(index: cst.BaseExpression, shapes: _Shapes) -> tuple[str, str] | None:
    """(the flat offsets, the block size) of an index `start + tl.arange(0, size)` (or a name bound
    once to it), start scalar: its pairs are the run `start * 2 + tl.arange(0, size * 2)`."""
    if isinstance(index, cst.Name):
        bound = shapes.bindings.single(index.value)
        index = bound.value if bound is not None and bound.value is not None else index
    terms = _terms(index)
    ranges = [t for t in terms if cu.is_call(t, "tl.arange") and len(t.args) == 2]
    if len(ranges) != 1 or cu.int_literal(ranges[0].args[0].value) != 0:
        return None
    rest = [t for t in terms if t is not ranges[0]]
    if any(shapes.of(t) != 0 for t in rest):
        return None
    size = ranges[0].args[1].value
    n = cu.int_literal(size)
    run = f"tl.arange(0, {n * 2 if n is not None else _scaled(size)})"
    if len(rest) == 1:
        run = f"{_scaled(rest[0])} + {run}"
    elif rest:
        run = f"({' + '.join(cu.code(t).strip() for t in rest)}) * 2 + {run}"
    return run, cu.code(size).strip()


def _bound(
    mask: cst.BaseExpression | None, index: cst.BaseExpression, shapes: _Shapes
) -> cst.BaseExpression | None:
    """E of a mask `index < E` (or `E > index`, or a name bound once to either), E scalar."""
    if isinstance(mask, cst.Name):
        bound = shapes.bindings.single(mask.value)
        mask = bound.value if bound is not None and bound.value is not None else mask
    if not isinstance(mask, cst.Comparison) or len(mask.comparisons) != 1:
        return None
    op, right = mask.comparisons[0].operator, mask.comparisons[0].comparator
    pairs = {cst.LessThan: (mask.left, right), cst.GreaterThan: (right, mask.left)}
    if type(op) not in pairs:
        return None
    lhs, bound = pairs[type(op)]
    return bound if _key(lhs) == _key(index) and shapes.of(bound) == 0 else None


def _stable(index: cst.BaseExpression, shapes: _Shapes) -> bool:
    """Every name `index` reads is bound once in the kernel (a parameter, a loop counter or one
    assignment), so a statement naming its pair offsets means the same wherever it is read."""
    return all(
        len(shapes.bindings.by_name.get(n, [])) + (n in shapes.params) <= 1 for n in cu.names_in(index)
    )


def _block_matches(
    block: cst.IndentedBlock, shapes: _Shapes, backed: set[int], position, small: Callable[[str], bool]
) -> list[_Match]:
    """The pairs of consecutive statements of `block` (on the backed lines, where any are), but
    those whose block of pairs is `small`."""
    body = list(block.body)
    out: list[_Match] = []
    i = 0
    while i + 1 < len(body):
        s1, s2 = body[i], body[i + 1]
        m = _match(s1, s2, shapes, load=True) or _match(s1, s2, shapes, load=False)
        lines = {position(s1)[0], position(s2)[0]} if m is not None else set()
        if m is None or (backed and not backed & lines) or (m.size and small(m.size)):
            i += 1
            continue
        out.append(m)
        i += 2
    return out


def _offsets_site(index: cst.BaseExpression, shapes: _Shapes) -> cst.SimpleStatementLine | None:
    """The statement that binds `index`, where it is a name bound once by a simple statement:
    the pair offsets named right after it serve every access of the kernel that reads it."""
    bound = shapes.bindings.single(index.value) if isinstance(index, cst.Name) else None
    st = bound.statement if bound is not None and bound.value is not None else None
    return st if isinstance(st, cst.SimpleStatementLine) and len(st.body) == 1 else None


def _edits(blocks: list[list[_Match]], shapes: _Shapes, taken: set[str]) -> list:
    """The edits for every match. The accesses of one index go through its flat offsets where
    every one of them can (a statement naming them), else through the pair tile, named where
    several share it. A name is bound right after the index's own binding (a mask name's flat
    twin after the mask's), or else before the first of its accesses in each block."""
    matches = [m for ms in blocks for m in ms]
    edits: list = []
    plans: dict[str, tuple[str, str, bool, bool] | None] = {}  # key -> name, value, after the index, flat
    masks: dict[str, str] = {}  # a mask's name -> its flat twin's
    after: dict[int, list[cst.BaseStatement]] = {}  # id(site) -> statements inserted after it
    sites: dict[int, cst.SimpleStatementLine] = {}

    def bind_after(site: cst.SimpleStatementLine, text: str) -> None:
        sites[id(site)] = site
        after.setdefault(id(site), []).append(cu.stmt(text))

    for m in matches:
        if m.key in plans:
            continue
        ms = [x for x in matches if x.key == m.key]
        flat = all(x.flat is not None for x in ms) and _stable(m.index, shapes)
        if not (flat or (len(ms) > 1 and _stable(m.index, shapes))):
            plans[m.key] = None
            continue
        name = cu.fresh_name(f"{m.index.value if isinstance(m.index, cst.Name) else 'offs'}_pairs", taken)
        taken.add(name)
        value = _run(m.index, shapes)[0] if flat else f"{_column(m.index)} * 2 + tl.arange(0, 2)[None, :]"
        site = _offsets_site(m.index, shapes)
        plans[m.key] = (name, value, site is not None, flat)
        if site is None:
            continue
        bind_after(site, f"{name} = {value}")
        for x in ms if flat else ():
            mask_site = _offsets_site(x.mask, shapes) if x.mask is not None else None
            if mask_site is not None and x.mask.value not in masks:
                masks[x.mask.value] = cu.fresh_name(f"{x.mask.value}_pairs", taken)
                taken.add(masks[x.mask.value])
                bind_after(mask_site, f"{masks[x.mask.value]} = {name} < {x.bound}")
    for key, extra in after.items():
        edits.append((sites[key], cst.FlattenSentinel([sites[key], *extra])))
    for ms in blocks:
        defined: set[str] = set()
        for m in ms:
            plan = plans[m.key]
            if plan is None:
                new = [cu.stmt(m.write(f"{_column(m.index)} * 2 + tl.arange(0, 2)[None, :]"))]
            else:
                name, value, at_site, flat = plan
                if flat and m.flat is not None:
                    named = masks.get(m.mask.value) if isinstance(m.mask, cst.Name) and at_site else None
                    new = [cu.stmt(m.flat(name, named or (f"{name} < {m.bound}" if m.bound else "")))]
                else:
                    new = [cu.stmt(m.write(name))]
                if not at_site and m.key not in defined:
                    new.insert(0, cu.stmt(f"{name} = {value}"))
                    defined.add(m.key)
            new[0] = new[0].with_changes(leading_lines=m.first.leading_lines)
            edits.append((m.first, cst.FlattenSentinel(new) if len(new) > 1 else new[0]))
            edits.append((m.second, cst.RemovalSentinel.REMOVE))
    return edits


def _drop_unread(tree: cst.Module, kernels: set[str], names: set[str]) -> cst.Module:
    """`tree` without the pure statements binding `names` in `kernels` that nothing reads any
    more (a mask the flat offsets' twin replaced, the odd offsets), then without those binding
    what only they read (the index only that mask read)."""
    names = set(names)
    while True:
        edits = []
        for k in cu.find_kernels(tree).values():
            if k.name not in kernels:
                continue
            bindings = cu.Bindings(k.node)
            reads = cu.name_loads(k.node.body, bindings.target_ids)
            for name in sorted(names):
                b = bindings.single(name)
                if b is None or reads[name] or b.value is None or not tidy.is_pure(b.value):
                    continue
                if isinstance(b.statement, cst.SimpleStatementLine) and len(b.statement.body) == 1:
                    edits.append((b.statement, cst.RemovalSentinel.REMOVE))
                    names |= cu.names_in(b.value)
        if not edits:
            return tree
        tree = cu.replace(tree, edits)


def _too_small(kernel: cu.Kernel, tree: cst.Module, inp: RuleInput, size: str) -> bool:
    """Whether every timed launch runs a block of `size` pairs on more threads than the pair tile
    has pairs: each thread would then hold one element of the tile where `tl.split` needs both of
    a pair, and the compiler moves them between threads through shared memory (H200, liger's
    llama4 rope: 64 pairs on 4 warps, 0.90x). Unknown block or warps (an autotuned kernel): no."""
    timed = [c for c in inp.context.cases if c.timed]
    blocks: list[int] = []
    for launch in cu.find_launches(tree, [kernel.name]):
        option = launch.options(kernel).get("num_warps")
        warps = cu.int_literal(option.value) if option is not None else None if kernel.autotuned else 4
        if warps is None:
            return False
        n = cu.int_literal(cu.expr(size))
        values = [n] if n is not None else [v.get(size) for v in cu.launch_values(launch, kernel, timed)]
        if not values or any(not isinstance(v, int) for v in values):
            return False
        blocks += [v - 32 * warps for v in values]
    return bool(blocks) and all(b < 0 for b in blocks)


@transform(Family.COALESCE)
def interleaved_pairs(source: str, inp: RuleInput) -> Rewrite | None:
    tree = cu.parse(source)
    if tree is None:
        return None
    model = model_of_tree(tree)
    backed = {line for f in inp.findings for line in f.lines}
    edits: list = []
    done: dict[str, int] = {}
    replaced: set[str] = set()  # the index and mask names the accesses read before
    for k in cu.find_kernels(tree).values():
        if not inp.wants(k.name):
            continue
        shapes = _Shapes(k)
        small: dict[str, bool] = {}  # block size -> whether it is too small (read once per size)

        def too_small(size: str, k: cu.Kernel = k, small: dict[str, bool] = small) -> bool:
            if size not in small:
                small[size] = _too_small(k, tree, inp, size)
            return small[size]

        blocks = [
            _block_matches(node, shapes, backed, model.position, too_small)
            for node in cu.walk(k.node.body)
            if isinstance(node, cst.IndentedBlock)
        ]
        count = sum(map(len, blocks))
        if count:
            edits += _edits(blocks, shapes, cu.all_names(k.node))
            done[k.name] = count
            replaced |= {n for ms in blocks for m in ms for n in cu.names_in(m.first) | cu.names_in(m.second)}
    if not edits:
        return None
    new = _drop_unread(cu.replace(tree, edits), set(done), replaced)
    what = "; ".join(f"{k}: {n} pair{'s' if n > 1 else ''} of accesses" for k, n in done.items())
    return Rewrite(
        source=cu.emit(new, tree),
        family=Family.COALESCE,
        kernels=tuple(done),
        mechanism=(
            f"{what} at `2 * i` and `2 * i + 1` merged into one access of the run they cover: flat offsets "
            "`start * 2 + tl.arange(0, BLOCK * 2)`, taken apart with `tl.reshape` and `tl.split` after a load "
            "and written with `tl.interleave`, or, where the index or mask is not such a run, a (BLOCK, 2) tile "
            "with `tl.split` / `tl.join`."
        ),
        effect=(
            "each half of an interleaved layout read alone is a stride-2 access: one scalar instruction per "
            "element, every sector fetched twice; the pair tile is contiguous, so the compiler can give each "
            "thread a vector of adjacent elements and every sector is used once. The gain is largest where "
            "the accesses' instructions, not the bytes, bound the kernel (16-bit elements), and may be small "
            "where the second access hit the first one's lines in L1 anyway."
        ),
    )
