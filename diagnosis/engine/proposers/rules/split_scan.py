"""LAUNCH_CONFIG (split scan): a kernel whose few programs each walk a long loop carrying a
running total, a scan (a cumulative sum in chunks, each chunk's output offset by the sum of the
chunks before it), is split along that loop into contiguous segments over a new grid axis. A
first launch stores each segment's total; the second runs the kernel on every segment with its
carry starting from the totals of the segments before it.

Matches a kernel launched as split_loop requires (once, as a whole statement, on a grid of rank
1 or 2 that is not one program, with few programs: T1-FEW-PROGRAMS medium or high, or the
shapes; program axes below the grid's rank; no jit helper that writes memory), autotuned or not:
an autotune by the kernel's own decorator, under `@triton.heuristics` at most, is kept on the
totals copy, and the scan copy runs at the config it chose (`<name>_totals.best_config`, through
`.fn` of each heuristics wrapper): two autotuners could choose two chunk sizes, and segments of
so many iterations would then cover different elements. fla releases its global cumsum so.
Its body holds one loop, a top-level `for v in range(...)`, the kernel's last statement (no
other loop, no `return`, `break` or `continue`), with:

- a carry: a local bound before the loop, once, to `tl.zeros(shape, dtype=D)` (a scalar or a
  1-D tile of a literal or constexpr size, D not possibly a 64-bit integer), which the loop
  only updates, `c += e` or `c = c + e`, where neither e nor a test of an `if` above the
  update reads c; other statements of the loop may read it (that is the scan);
- nothing else carried: every other name the loop binds is bound, on every path, before an
  iteration reads it;
- every write a `tl.store` statement in the loop (no atomics), to a pointer no load of the
  kernel reads (no scan in place).

The rewrite keeps the kernel and adds two copies, each with two more parameters (the float64
totals buffer and the number of segments S, passed by keyword), both on the grid plus an axis
of S programs. Segment s takes the iterations [s * L, min((s + 1) * L, N)), L = cdiv(N, S).

- `<name>_totals` walks its segment with the stores removed (and what only they read) and
  stores its carry into its own row of the buffer `[S, programs, tile]`;
- `<name>_scan` is the kernel on its segment, its carry first adding the totals of the
  segments before it, read as one masked block of MOST_SPLITS rows and summed (a loop over
  them would wait on each load in turn).

Correct by construction: the carry entering iteration k is the zeros plus the increments of
the iterations before k. The increments read neither the carry nor anything carried, so the
totals launch computes the same increments, by the same statements; the scan launch's segment s
starts from the sum of the totals of segments 0..s-1, which is the carry the whole loop had at
its first iteration. Only the order of the float additions changes, and the totals are float64.
The wrapper picks S from the programs an SM holds (2048 threads over the launch's warps),
bounded by the iterations where it can compute them and by MOST_SPLITS, and keeps the kernel
as it was where S = 1 or where the launch already has as many programs as the device has SMs:
the input is read twice, which a grid that keeps every SM busy does not repay.
"""

from __future__ import annotations

import libcst as cst

from diagnosis.engine.evidence import Family
from diagnosis.engine.proposers.rules import Rewrite, RuleInput, transform
from diagnosis.engine.proposers.rules import cst_util as cu
from diagnosis.engine.proposers.rules.split_loop import (
    Stages,
    _block,
    _few_programs,
    _local_names,
    _reads,
    _renamed,
    _row,
    _Split,
    _tile_lines,
    single_range_loop,
    split_kernels,
    splittable_launch,
    zeros_shape,
)
from diagnosis.engine.proposers.rules.structural import (
    Spelling,
    bound_names,
    constexprs,
)
from diagnosis.engine.proposers.rules.two_stage import accumulator_update

THREADS_PER_SM = 2048
MOST_SPLITS = 64  # the scan copy reads the totals before it as one block of this many
WRITES = ("tl.store", "tl.atomic_", "tl.device_print", "tl.device_assert", "tl.debug_barrier")


def _match(
    kernel: cu.Kernel, launches: list[cu.Launch], sp: Spelling, inp: RuleInput, writers: set[str]
) -> _Split | None:
    launched = splittable_launch(kernel, launches, sp, tuned=True)
    if launched is None:
        return None
    launch, rank = launched
    body = cu.body_statements(kernel.node.body)
    loop = single_range_loop(kernel, sp, rank, writers)
    if loop is None or loop is not body[-1]:
        return None
    step = loop.iter.args[2].value if len(loop.iter.args) == 3 else None
    counts_up = (
        step is None
        or (cu.int_literal(step) or 0) > 0
        or (isinstance(step, cst.Name) and step.value in constexprs(kernel, sp))
    )
    out = _stores_in_loop(kernel, sp, loop) if counts_up else None  # a segment's bounds assume it counts up
    carry = _carry(kernel, sp, loop, body[:-1]) if out is not None else None
    shape = zeros_shape(kernel, sp, carry[1], inp) if carry is not None else None
    if carry is None or shape is None or len(shape) > 1 or not _few_programs(launch, kernel, inp):
        return None  # (a carry of rank 2 would need a rank-3 block of totals)
    return _Split(kernel, launch, sp, rank, loop, carry[0], shape, out)


def _stores_in_loop(kernel: cu.Kernel, sp: Spelling, loop: cst.For) -> str | None:
    """The pointer parameter of the loop's first store, when every write of the kernel is a
    `tl.store` statement in the loop and no load reads a pointer the stores write."""
    calls = [n for n in cu.walk(kernel.node.body) if isinstance(n, cst.Call)]
    writes = [c for c in calls if (sp.call(c) or "").startswith(WRITES)]
    statements = {id(st.body[0].value) for st in cu.walk(loop.body) if _is_store(sp, st)}
    if not writes or any(id(c) not in statements for c in writes):
        return None
    bindings = cu.Bindings(kernel.node)

    def bases(name: str) -> set[str]:
        out: set[str] = set()
        for c in calls:
            if sp.is_call(c, name):
                ptr = cu.arg(c, "pointer", 0)
                out |= cu.base_params(kernel, ptr, bindings) if ptr is not None else {"?"}
        return out

    stored, loaded = bases("tl.store"), bases("tl.load")
    if "?" in stored | loaded or stored & loaded:
        return None
    ptr = cu.arg(writes[0], "pointer", 0)
    first = cu.base_params(kernel, ptr, bindings) if ptr is not None else set()
    return next(iter(first)) if len(first) == 1 else None


def _is_store(sp: Spelling, st: cst.CSTNode) -> bool:
    return (
        isinstance(st, cst.SimpleStatementLine)
        and len(st.body) == 1
        and isinstance(st.body[0], cst.Expr)
        and sp.is_call(st.body[0].value, "tl.store")
    )


def _carry(
    kernel: cu.Kernel, sp: Spelling, loop: cst.For, head: list[cst.BaseStatement]
) -> tuple[str, cst.Call] | None:
    """(carry, its `tl.zeros` call): the one name the loop carries (see the module docstring)."""
    bindings = cu.Bindings(kernel.node)
    inner = {n for st in cu.body_statements(loop.body) for n in bound_names(st)}
    carried = _carried(loop.body, set(), inner)
    if carried is None or len(carried) != 1:
        return None
    acc = next(iter(carried))
    found = bindings.by_name.get(acc, [])
    if not found or found[0].statement not in head or not sp.is_call(found[0].value, "tl.zeros"):
        return None
    updates = _updates(sp, loop.body, acc)
    if updates is None or len(found) != 1 + updates:
        return None
    init = found[0].value
    assert isinstance(init, cst.Call)
    return acc, init


def _branches(st: cst.If) -> list[cst.BaseSuite]:
    """The blocks an `if` chooses between (an `elif` as a block of its own `if`)."""
    if st.orelse is None:
        return [st.body]
    return [st.body, st.orelse.body if isinstance(st.orelse, cst.Else) else cst.IndentedBlock([st.orelse])]


def _updates(sp: Spelling, block: cst.BaseSuite, acc: str) -> int | None:
    """How many statements update `acc` by `acc += e` (e not reading it) under `block`; None
    when another statement binds it, or the test of an `if` above an update reads it."""
    count = 0
    for st in cu.body_statements(block):
        if isinstance(st, cst.If):
            found = [_updates(sp, b, acc) for b in _branches(st)]
            if None in found or (acc in cu.names_in(st.test) and any(found)):
                return None
            count += sum(n for n in found if n is not None)
            continue
        if not isinstance(st, cst.SimpleStatementLine):
            return None
        if acc not in bound_names(st):
            continue
        upd = accumulator_update(sp, st.body[0], acc) if len(st.body) == 1 else None
        if upd is None or upd[0] != "+" or acc in cu.names_in(upd[1]):
            return None
        count += 1
    return count


def _carried(block: cst.BaseSuite, bound: set[str], inner: set[str]) -> set[str] | None:
    """The names of `inner` (bound in the loop) that an iteration reads before every path binds
    them: what the loop carries. `bound` grows by what the block binds on every path. None for
    a statement this reading does not follow."""
    out: set[str] = set()
    for st in cu.body_statements(block):
        if isinstance(st, cst.If):
            out |= (cu.names_in(st.test) & inner) - bound
            after = []
            for branch in _branches(st):
                b = set(bound)
                found = _carried(branch, b, inner)
                if found is None:
                    return None
                out |= found
                after.append(b)
            bound |= set.intersection(*after) if len(after) == 2 else set()
            continue
        if not isinstance(st, cst.SimpleStatementLine):
            return None
        out |= (_reads(st) & inner) - bound
        bound |= bound_names(st)
    return out


# ---------------------------------------------------------------------------------------
# the rewrite


class _Segment:
    """Kernel code for this program's segment of the loop and the range that walks it."""

    def __init__(self, s: _Split, n_split: str, names: dict[str, str]) -> None:
        taken = cu.all_names(s.kernel.node) | set(names.values())
        self.per, self.first, self.last, count = (
            cu.fresh_name(n, taken) for n in ("per_split", "first", "last", "iterations")
        )
        it = s.loop.iter
        assert isinstance(it, cst.Call)
        args = [a.value for a in it.args]
        start, stop, step = (args + [None])[:3] if len(args) > 1 else (None, args[0], None)
        self.start = None if start is None or cu.int_literal(start) == 0 else cu.operand(start)
        self.step = None if step is None or cu.int_literal(step) == 1 else cu.operand(step)
        stop_text = cu.operand(stop)
        if self.start is None and self.step is None:
            trips = cu.code(stop)
        else:
            span = f"{stop_text} - {self.start}" if self.start else cu.code(stop)
            trips = s.sp.write(f"tl.cdiv({span}, {self.step})") if self.step else span
        named = (
            [] if trips.isidentifier() else [f"{count} = {trips}"]
        )  # `range(0, n, BLOCK)` walks cdiv(n, BLOCK)
        trips = trips if trips.isidentifier() else count
        self.lines = [
            *named,
            f"{names['split']} = {s.sp.write(f'tl.program_id({s.rank})')}",
            f"{self.per} = {s.sp.write(f'tl.cdiv({trips}, {n_split})')}",
            f"{self.first} = {names['split']} * {self.per}",
            f"{self.last} = {s.sp.write(f'tl.minimum({self.first} + {self.per}, {trips})')}",
        ]
        step_arg = f", {self.step}" if self.step else ""
        self.iter = cu.expr(f"{cu.code(it.func)}({self._at(self.first)}, {self._at(self.last)}{step_arg})")

    def _at(self, k: str) -> str:
        """The loop value of iteration `k`."""
        off = f"{k} * {self.step}" if self.step else k
        return f"{self.start} + {off}" if self.start else off


def _kernel_pure(sp: Spelling):
    def pure(node: cst.CSTNode) -> bool:
        for n in cu.walk(node):
            if not isinstance(n, cst.Call):
                continue
            name = sp.call(n) or ""
            method = isinstance(n.func, cst.Attribute) and n.func.attr.value == "to"
            if not method and (not name.startswith("tl.") or name.startswith(WRITES)):
                return False
        return True

    return pure


def _commented(statements: list[cst.BaseStatement], comment: str) -> list[cst.BaseStatement]:
    statements[0] = statements[0].with_changes(
        leading_lines=[cst.EmptyLine(indent=False), cst.EmptyLine(comment=cst.Comment(f"# {comment}"))]
    )
    return statements


def _totals_kernel(s: _Split, name: str, buf: str, n_split: str) -> cst.FunctionDef:
    names = _local_names(s, buf)
    seg = _Segment(s, n_split, names)
    stores = [st for st in cu.walk(s.loop.body) if _is_store(s.sp, st)]
    head = _commented(_block(s, seg.lines), "this program's segment of the loop")
    total = _commented(
        _block(
            s, [*_tile_lines(s, names), f"tl.store({_row(s, names, names['split'])}, {s.acc}.to(tl.float64))"]
        ),
        "the segment's total",
    )
    loop = cu.replace_in(s.loop, [(s.loop.iter, seg.iter), *((st, cst.RemoveFromParent()) for st in stores)])
    fn = cu.replace_in(s.kernel.node, [(s.loop, cst.FlattenSentinel([*head, loop, *total]))])
    return _renamed(s, cu.drop_dead(fn, _kernel_pure(s.sp)), name, buf, n_split)


def _scan_kernel(s: _Split, name: str, buf: str, n_split: str) -> cst.FunctionDef:
    names = _local_names(s, buf)
    seg = _Segment(s, n_split, names)
    taken = cu.all_names(s.kernel.node) | set(names.values())
    before, totals = cu.fresh_name("before", taken), cu.fresh_name("totals", taken)
    # every earlier segment's total in one load: a loop over them would wait on each in turn
    offsets: list[str] = []  # a tile's rows of totals: their offsets on a line of their own
    if s.shape:
        size = cu.operand(s.shape[0])
        at = cu.fresh_name("offsets", taken)
        row = f"({before}[:, None] * {names['programs']} + {names['tile']}) * {size}"
        offsets = [f"{at} = {row} + {names['lanes']}[None, :]"]
        rows = f"{names['buf']} + {at}"
        mask = f"({before} < {names['split']})[:, None]"
    else:
        rows = f"{names['buf']} + {before} * {names['programs']} + {names['tile']}"
        mask = f"{before} < {names['split']}"
    lines = [
        *seg.lines,
        *_tile_lines(s, names),
        f"{before} = tl.arange(0, {MOST_SPLITS})",
        *offsets,
        f"{totals} = tl.load({rows}, mask={mask}, other=0.0)",
        f"{s.acc} += tl.sum({totals}, axis=0).to({s.acc}.dtype)",
    ]
    head = _commented(
        _block(s, lines), "this program's segment of the loop, carrying the totals of those before it"
    )
    loop = s.loop.with_changes(iter=seg.iter, leading_lines=[cst.EmptyLine(indent=False)])
    fn = cu.replace_in(s.kernel.node, [(s.loop, cst.FlattenSentinel([*head, loop]))])
    # an autotuned kernel's scan runs at the config its totals' autotuner chose (split_loop._plan)
    tuned = {cu.code(d) for d in s.kernel.autotune_decorators()}
    fn = fn.with_changes(decorators=[d for d in fn.decorators if cu.code(d) not in tuned])
    return _renamed(s, fn, name, buf, n_split)


def _stop(s: _Split, stop: cst.BaseExpression) -> cst.BaseExpression:
    """A loop stop the kernel computes once from parameters it never rebinds (fla's `NT =
    tl.cdiv(T, BT)`), as that expression, so the wrapper bounds the split count by the
    iterations; else the stop itself."""
    bindings = cu.Bindings(s.kernel.node)
    b = bindings.single(stop.value) if isinstance(stop, cst.Name) else None
    if b is None or b.value is None or any(n in bindings.by_name for n in cu.names_in(b.value)):
        return stop
    return b.value


def _stages(s: _Split) -> Stages:
    warps = cu.int_literal(getattr(s.launch.options(s.kernel).get("num_warps"), "value", None)) or 4
    return Stages(
        ("_totals", _totals_kernel),
        ("_scan", _scan_kernel),
        max(1, THREADS_PER_SM // (32 * warps)),
        "a grid that leaves SMs idle is split over the programs an SM holds",
        second_split=True,
        stop=_stop,
        most=MOST_SPLITS,
        idle_only=True,
    )


@transform(Family.LAUNCH_CONFIG, first=True)
def split_carried_scan(source: str, inp: RuleInput) -> Rewrite | None:
    split = split_kernels(source, inp, _match, _stages)
    if split is None:
        return None
    new, done = split
    names = ", ".join(done)
    return Rewrite(
        source=new,
        family=Family.LAUNCH_CONFIG,
        kernels=tuple(done),
        mechanism=(
            f"{names}: the loop each program walked alone, carrying a running total, is split into contiguous "
            "segments over a new grid axis; a first launch stores each segment's total (float64), a second "
            "runs the kernel on every segment with its carry starting from the totals before it."
        ),
        effect=(
            "the grid launched fewer programs than the device has SMs, each walking its whole scan in "
            "order: split, the segments run at once. The input is read twice (totals, then the scan), so "
            "the split is taken only at launches of fewer programs than SMs (on an H200, fla's global "
            "cumsum: 1.8x at 128 programs, 3.8x at 64, 0.69x when 1024 were split too)."
        ),
    )
