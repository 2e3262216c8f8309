"""LAUNCH_CONFIG: replace fixed block sizes and warps by an `@triton.autotune` space.

Matches a `@triton.jit` kernel without `@triton.autotune` that is launched from exactly one
place, where some constexpr arguments are int literals (`BLOCK_SIZE=1024`, or a local bound
once to a literal), or where the block is `triton.next_power_of_2(...)` of the row (then only
`num_warps` is tuned), or where the block is a loop's step that the wrapper computes some other
way (`min(MAX_FUSED_SIZE, triton.next_power_of_2(n))`) and every tile access of the kernel is
masked (then the step is tuned over the streaming range 1024-8192). It adds the autotune
decorator (configs sized by the kernel's kind and the shape cases, key = the size arguments),
removes the tuned constexprs and `num_warps`/`num_stages` from the launch and turns the grid
into `lambda meta: (...)` with the block constants replaced by `meta["NAME"]`. A kernel whose
`@triton.autotune` holds a single config (written out, or a computed list cut to one), which
tunes nothing, gets it widened into the same space instead (`_widen_single_configs`, at the end
of this module).

Correct by construction when: the kernel is written for any power-of-two block (masked), the
grid's only dependence on the block is through the constants it rewrites (every axis whose
program id the kernel multiplies by a tuned block must mention it), no other launch argument
depends on the block (e.g. a partial-sum buffer or a count of programs), and running the
kernel several times is harmless, because the autotuner runs every config while benchmarking:
no atomics, and a tensor the kernel both reads and writes (one parameter loaded and stored, or
one wrapper expression passed for a loaded and a stored parameter) is named in the autotuner's
`restore_value`, which puts it back after every benchmarking run.
"""

from __future__ import annotations

import ast
import math
import re
from collections import Counter
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import libcst as cst

from diagnosis.engine import sol
from diagnosis.engine.evidence import Family
from diagnosis.engine.proposers.rules import Rewrite, RuleInput, transform
from diagnosis.engine.proposers.rules import cst_util as cu
from diagnosis.engine.srcmodel import Grid, meta_reads, read

ELEMENTWISE_BLOCKS = (1024, 2048, 4096, 8192)
ELEMENTWISE_WARPS = (4, 8)
# (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages): the usual Hopper set for 16-bit inputs
GEMM_16BIT = (
    (128, 256, 64, 8, 3),
    (256, 128, 64, 8, 3),
    (128, 128, 64, 8, 4),
    (128, 128, 64, 4, 4),
    (128, 64, 64, 4, 4),
    (64, 128, 64, 4, 4),
    (128, 128, 32, 4, 4),
    (64, 64, 64, 4, 5),
)
# fp32 operands take twice the shared memory per stage: smaller K tiles and fewer stages
GEMM_32BIT = (
    (128, 128, 32, 8, 3),
    (128, 128, 32, 4, 3),
    (128, 64, 32, 4, 4),
    (64, 128, 32, 4, 4),
    (64, 64, 32, 4, 4),
    (128, 256, 32, 8, 3),
)
GEMM_SMALL = ((64, 64, 32, 4, 3), (64, 32, 32, 4, 3), (32, 64, 32, 4, 3), (32, 32, 32, 2, 3), (16, 16, 16, 1, 2))
ROW_WARPS = (2, 4, 8, 16)
# a row of at most this many elements on every case: one warp gives its threads up to 16-byte
# vectors (IR_THIN_TILE: 128 bf16 on four warps load 2 bytes a thread), sixteen would idle
NARROW_ROW = 256
NARROW_ROW_WARPS = (1, 2, 4, 8)
MAX_CONFIGS = 8
# where the tiled space starts for a block the kernel only steps a loop by, when the wrapper
# computes it (`min(MAX_FUSED, triton.next_power_of_2(n))`): a streaming loop's usual range
LOOP_BLOCK = 2048
MAX_BLOCK = 16384

# runtime scalars that are not sizes (left out of the autotune key)
SCALAR_NAME = re.compile(r"eps|alpha|beta|gamma|scale|slope|temp|momentum|^p$|^lo$|^hi$|min|max|clamp|seed")
LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")
# What a config chosen per shape may reorder, where a comment fixes the geometry on purpose
# (cu.geometry_fixed_on_purpose); an element-wise kernel computes the same values at any block
# and warps.
REORDERED = ("tl.sum", "tl.dot", "tl.dot_scaled", "tl.reduce", "tl.cumsum", "tl.cumprod", "tl.associative_scan")


@dataclass
class Plan:
    kernel: cu.Kernel
    launch: cu.Launch
    kind: str  # elementwise, gemm, row, tiled
    tuned: dict[str, int]  # constexpr -> its value at the launch
    configs: list[str]  # `triton.Config(...)` sources
    key: list[str]
    edits: list[tuple[cst.CSTNode, Any]] = field(default_factory=list)
    dead: set[str] = field(default_factory=set)  # wrapper locals that may be left unread
    # kernel parameter -> wrapper expression: grid sizes the kernel is not given, passed so
    # that the autotune key sees them (the kernel does not read them)
    key_args: dict[str, cst.BaseExpression] = field(default_factory=dict)
    # Size dispatch (see `_dispatch`): problems up to `fixed_up_to` (in `size_unit`) keep the
    # parent's fixed launch; None: every launch goes through the autotuner.
    fixed_up_to: int | None = None
    size_unit: str = ""  # "M*N*K" (GEMM: a product of key sizes) or "bytes" (tensor arguments)
    size_expr: str = ""  # the wrapper expression of that size
    tuned_grid: cst.BaseExpression | None = None
    tuned_name: str = ""  # the autotuned handle of the kernel, `KERNEL_tuned`
    positional_kept: int = 0  # positional arguments the launch keeps (key arguments go after them)
    dropped: set[int] = field(default_factory=set)  # ids of the launch arguments that go
    keywords: dict[int, str] = field(default_factory=dict)  # positional arguments passed by keyword now
    # parameters the kernel writes that a launch may also read (the same parameter, or the same
    # wrapper expression passed for a loaded one): the autotuner restores them after each
    # benchmarking run, so every config starts from the data the launch passed
    restore: list[str] = field(default_factory=list)
    # tuned block -> the tiles that hold each case's row, when the space has them (`_row_tiles`)
    row_tiles: dict[str, list[int]] = field(default_factory=dict)


def _pow2(v: int) -> bool:
    return v > 0 and v & (v - 1) == 0


def _config(values: dict[str, int], warps: int, stages: int | None = None) -> str:
    inner = ", ".join(f'"{k}": {v}' for k, v in values.items())
    stages_text = f", num_stages={stages}" if stages is not None else ""
    return f"triton.Config({{{inner}}}, num_warps={warps}{stages_text})"


def _role(name: str) -> str | None:
    """M, N or K for a GEMM block constexpr named like BLOCK_M / BLOCK_SIZE_N / BK."""
    m = re.search(r"(?i)(?:^|_|BLOCK|B)([MNK])$", name)
    return m.group(1).upper() if m else None


def _block_role(name: str, sized: Collection[str] = ()) -> str | None:
    """The GEMM role of a block constexpr (BLOCK_SIZE_M, BN, or one that sizes a `tl.arange` of
    the kernel, in `sized`: flag_gems' TILE_M); None for others (GROUP_SIZE_M, DIVISIBLE_M)."""
    block = "BLOCK" in name.upper() or re.fullmatch(r"(?i)B[MNK]", name) or name in sized
    return _role(name) if block else None


def _float_inputs(inp: RuleInput) -> set[str]:
    return {
        d.removeprefix("torch.")
        for c in inp.context.cases
        for s, d in zip(c.shapes, c.dtypes, strict=False)
        if s and d.removeprefix("torch.").startswith(("float", "bfloat"))
    }


def _fp32_operands(inp: RuleInput, source: str) -> bool:
    """fp32 inputs: from the shape cases, else from the module text (no 16-bit dtype named)."""
    floats = _float_inputs(inp)
    if floats:
        return "float32" in floats
    return not re.search(r"float16|bfloat16|\.half\(\)|\bhalf\b", source)


def _gemm_configs(
    tuned: dict[str, int], inp: RuleInput, values: list[dict[str, Any]], source: str, sized: set[str]
) -> list[str] | None:
    roles: dict[str, str] = {}
    rest: dict[str, int] = {}  # other tuned constexprs (e.g. GROUP_SIZE_M) keep their value
    for name, v in tuned.items():
        r = _block_role(name, sized)
        if r is None:
            rest[name] = v
            continue
        if r in roles:
            return None
        roles[r] = name
    if set(roles) != {"M", "N", "K"}:
        return None
    table = GEMM_32BIT if _fp32_operands(inp, source) else GEMM_16BIT
    # prune tiles larger than every case's problem (the size parameters named M, N, K)
    limits: dict[str, int] = {}
    for role in "MNK":
        sizes = [v.get(role, v.get(role.lower())) for v in values]
        if sizes and all(isinstance(x, int) for x in sizes):
            limits[role] = max(1 << (max(sizes) - 1).bit_length(), 16)
    kept = [
        row for row in table
        if all(row[i] <= limits.get(role, 1 << 30) for i, role in enumerate("MNK"))
    ]
    if len(kept) < 2:  # small problems: smaller tiles, still at least 16 wide for tl.dot
        small = [row for row in GEMM_SMALL if all(row[i] <= limits.get(role, 1 << 30) for i, role in enumerate("MNK"))]
        kept = list(dict.fromkeys(kept + small))[:4] or list(GEMM_SMALL[-2:])
    return [
        _config({roles["M"]: bm, roles["N"]: bn, roles["K"]: bk, **rest}, w, s)
        for bm, bn, bk, w, s in kept
    ]


def _tiled_configs(
    tuned: dict[str, int],
    tile_axes: set[str] = frozenset(),
    row_tiles: dict[str, list[int]] | None = None,
    fixed: int = 1,
) -> list[str]:
    """`fixed`: the elements of a tile's axes that keep their block (a head dim beside the
    tuned rows), so that no tile passes MAX_BLOCK elements."""
    row_tiles = row_tiles or {}
    names = list(tuned)
    if len(names) == 1:
        (name,) = names
        v = tuned[name]
        out = []
        for b in dict.fromkeys((v, v * 2, v * 4, v // 2)):
            if 16 <= b and (b == v or b * fixed <= MAX_BLOCK):
                for w in (4, 8):
                    out.append(_config({name: b}, w))
        if name not in tile_axes:
            # tiles that walk a case's whole row in one step, past the neighbourhood above
            return out[:MAX_CONFIGS] + [_config({name: b}, _row_tile_warps(b)) for b in row_tiles.get(name, ())]
        # one axis of a 2-D tile whose other axes stay fixed: the converted block is as likely
        # too big as too small, and smaller tiles on fewer warps make more programs of less work
        for b, w in ((v, 2), (v // 2, 2), (v // 4, 2), (v // 4, 4)):
            if 16 <= b:
                out.append(_config({name: b}, w))
        return out[: MAX_CONFIGS + 4]
    a, b = names[0], names[1]
    va, vb = tuned[a], tuned[b]
    rest = {n: tuned[n] for n in names[2:]}
    combos = [(va, vb), (va * 2, vb * 2), (va * 2, vb), (va, vb * 2), (va // 2, vb * 2),
              (va * 2, vb // 2), (va * 4, vb), (va, vb * 4)]
    out = []
    for x, y in dict.fromkeys(combos):
        if x < 1 or y < 1 or x * y > MAX_BLOCK:
            continue
        warps = 4 if x * y <= 4096 else 8
        out.append(_config({a: x, b: y, **rest}, warps))
    # a tile of rows x a chunk of each row, the chunk stepping a loop along the row: one row a
    # program, the chunk its whole row (the rows a program holds then fit L2 for a second pass)
    wide = [
        _config({a: 1, b: t, **rest} if row == b else {a: t, b: 1, **rest}, _row_tile_warps(t))
        for row in (a, b)
        for t in row_tiles.get(row, ())
    ]
    return out[:MAX_CONFIGS] + wide


def _block_space(
    kernel: cu.Kernel,
    tuned: dict[str, int],
    inp: RuleInput,
    values: list[dict[str, Any]],
    source: str,
    kept: dict[str, int] | None = None,
) -> tuple[str, list[str], dict[str, list[int]]]:
    """The kind ("gemm", "elementwise", "tiled"), the configs for the kernel's tuned blocks and
    the row tiles among them (`_row_tiles`). `kept`: the launch's literal blocks that keep their
    value (whole tiles), for the size of a tile where no case gives it."""
    if kernel.has_dot:
        configs = _gemm_configs(tuned, inp, values, source, _arange_sizes(kernel))
        return ("gemm", configs, {}) if configs is not None else ("tiled", _tiled_configs(tuned), {})
    tile_axes = _tile_axes(kernel)
    # one block of a 1-D kernel; an axis of a 2-D tile (`rows[:, None]` beside a tile's fixed
    # other axis) is tiled: 1024-8192 rows of 256 columns would be a tile of millions
    if len(tuned) == 1 and not tile_axes and not cu.has_loops(kernel) and not cu.has_reductions(kernel):
        (name,) = tuned
        configs = [_config({name: b}, w) for b in ELEMENTWISE_BLOCKS for w in ELEMENTWISE_WARPS]
        return "elementwise", configs, {}
    row_tiles = _row_tiles(kernel, tuned, values, tile_axes)
    kept = kept or {}
    fixed = math.prod(
        max((v for vals in values if isinstance(v := vals.get(c), int)), default=kept.get(c, 1))
        for c in tile_axes - set(tuned)
    )
    return "tiled", _tiled_configs(tuned, tile_axes, row_tiles, fixed), row_tiles


def _row_extents(kernel: cu.Kernel, block: str) -> set[str]:
    """Runtime parameters whose extent a loop walks in steps of `block`: those its range reads
    together with the block, through the locals it is computed from (`range(0, n, BLOCK)`,
    `range(tl.cdiv(n, BLOCK))`, flag_gems' `range(0, prev_multiple_of(N, TILE_N), TILE_N)` and
    `range(0, N // TILE_N)`)."""
    bindings = cu.Bindings(kernel.node)
    out: set[str] = set()
    for loop in cu.walk(kernel.node.body):
        if not isinstance(loop, cst.For) or not cu.is_call(loop.iter, "range", "tl.range", names=kernel.names):
            continue
        names = {n for part in cu.closure(loop.iter, bindings, set()) for n in cu.names_in(part)}
        if block in names:
            out |= {p for p in names if p in kernel.params and p not in kernel.constexprs}
    return out


def _row_tiles(
    kernel: cu.Kernel, tuned: dict[str, int], values: list[dict[str, Any]], tile_axes: set[str]
) -> dict[str, list[int]]:
    """Tuned block -> the powers of two that hold each case's row (at most MAX_BLOCK) past the
    tiled space's own (four times the launch's block), for a block that steps a loop along a
    row, so the walk can be one step: the one block tuned (not one axis of a 2-D tile), or of
    two the one on the tile's last axis (`offs[None, :]`, the axis a thread's elements run
    along) while the other sizes the first. Where the kernel has a path for a row in one tile
    (flag_gems' `ONE_TILE_PER_CTA`, read from the block the autotuner picked) that path runs;
    else the loop takes one iteration. On the H200, flag_gems' own softmax and argmax, which
    size the tile by the row, ran at 79 and 78 %SOL where their first conversions tuned over
    64-512 elements reached 66 and 57."""
    names = list(tuned)
    if len(names) == 2:
        first, last = _tile_axis_blocks(kernel)
        names = [n for n in names if n in last and n not in first and set(tuned) - {n} <= first]
    elif len(names) != 1 or names[0] in tile_axes:
        return {}
    out = {}
    for name in names:
        rows = [vals.get(p) for p in _row_extents(kernel, name) for vals in values]
        tiles = {min(1 << (n - 1).bit_length(), MAX_BLOCK) for n in rows if isinstance(n, int) and n > 1}
        if wide := sorted(t for t in tiles if t > tuned[name] * 4):
            out[name] = wide
    return out


def _row_tile_warps(block: int) -> int:
    """Warps for a tile of `block` elements: about 16 elements a thread from 2048 up."""
    return 4 if block < 2048 else 8 if block < 4096 else 16


def _read_back(kernel: cu.Kernel, launch: cu.Launch, loads: set[str], stores: set[str]) -> list[str]:
    """Parameters the kernel stores that the launch also reads: the same parameter, or the same
    wrapper expression passed for a loaded one (in place: benchmarking runs would read their own
    output unless the autotuner restores them)."""
    passed = {p: cu.code(a.value) for p, a in launch.bound_args(kernel).items()}
    read_there = {passed[p] for p in loads if p in passed}
    return sorted(p for p in stores if p in loads or passed.get(p) in read_there)


def _arange_sizes(kernel: cu.Kernel) -> set[str]:
    """The sizes of the kernel's `tl.arange` blocks, as written."""
    return _arange_sizes_in(kernel.calls("tl.arange"), kernel)


def _switches(kernel: cu.Kernel) -> set[str]:
    """Constexprs the kernel reads only as the whole test of an `if` (`if USE_GDC:`, `if not
    HAS_BIAS:`), or not at all: they choose code, and size nothing the rule tunes or keys on."""
    tests: Counter[str] = Counter()
    for n in cu.walk(kernel.node.body):
        if isinstance(n, cst.If):
            test = n.test
            if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
                test = test.expression
            if isinstance(test, cst.Name):
                tests[test.value] += 1
    uses = _name_uses(kernel)
    return {p for p in kernel.constexprs if uses[p] == tests[p]}


def _name_uses(kernel: cu.Kernel) -> Counter[str]:
    """How often each name occurs in the kernel's body."""
    return Counter(n.value for n in cu.walk(kernel.node.body) if isinstance(n, cst.Name))


def _closure_nodes(node: cst.CSTNode, bindings: cu.Bindings) -> Iterator[cst.CSTNode]:
    """Every node of `node` and of the locals it reads, transitively."""
    for part in cu.closure(node, bindings, set()):
        yield from cu.walk(part)


def _stepped_blocks(kernel: cu.Kernel) -> set[str]:
    """Constexprs a loop of the kernel steps by (`for i in range(0, n, BLOCK)`), when every load
    and store of a tile (an address reading a `tl.arange` or a block size) is masked: any power
    of two then walks the same elements."""
    steps = {
        h[1] for n in cu.walk(kernel.node.body) if isinstance(n, cst.For) and (h := cu.loop_header(n, kernel))
    }
    if not steps:
        return set()
    bindings = cu.Bindings(kernel.node)
    blocks = _arange_sizes(kernel)
    for call in kernel.calls("tl.load", "tl.store"):
        mask = cu.arg(call, "mask", 1 if cu.call_name(call, kernel.names) == "tl.load" else 2)
        pointer = cu.arg(call, "pointer", 0)
        if mask is None and (
            pointer is None
            or any(
                cu.is_call(n, "tl.arange", names=kernel.names) or (isinstance(n, cst.Name) and n.value in blocks)
                for n in _closure_nodes(pointer, bindings)
            )
        ):
            return set()
    return steps


def _walking_blocks(kernel: cu.Kernel) -> set[str]:
    """Constexprs that walk an extent in steps of their value: multiplied by anything but a
    literal (`pid * BLOCK`, `k * BLOCK_K`), a divisor (`tl.cdiv(n, BLOCK)`, `n // BLOCK`), read
    by a loop's iterable (`range(0, n, BLOCK)`) or added in place (`offs += BLOCK`,
    `tl.advance(p, (0, BLOCK_K))`). A block that does none of these sizes one tile that holds
    its whole extent (lmdeploy's top-k router: `tl.arange(0, BLOCK_SIZE)` masked to
    `< NUM_EXPERTS`, 192 experts in a block of 256, no loop, one row a program): a smaller
    block would drop the elements past it, so its value is the launch's to keep."""
    consts = set(kernel.constexprs)

    def names(node: cst.CSTNode) -> set[str]:
        return cu.names_in(node) & consts

    out: set[str] = set()
    for n in cu.walk(kernel.node.body):
        if isinstance(n, cst.BinaryOperation) and isinstance(n.operator, cst.Multiply):
            for a, b in ((n.left, n.right), (n.right, n.left)):
                if isinstance(a, cst.Name) and a.value in consts and cu.int_literal(b) is None:
                    out.add(a.value)
        elif isinstance(n, cst.BinaryOperation) and isinstance(n.operator, cst.FloorDivide):
            out |= names(n.right)
        elif cu.is_call(n, "tl.cdiv", names=kernel.names) and len(n.args) == 2:
            out |= names(n.args[1].value)
        elif cu.is_call(n, "tl.advance", names=kernel.names):
            out |= names(n)
        elif isinstance(n, (cst.For, cst.While)):
            out |= names(n.iter if isinstance(n, cst.For) else n.test)
        elif isinstance(n, cst.AugAssign) and isinstance(n.operator, (cst.AddAssign, cst.SubtractAssign)):
            out |= names(n.value)
    return out


def _tile_axes(kernel: cu.Kernel) -> set[str]:
    """Constexprs that size one axis of a tile of two or more (`offs[:, None]` of an arange)."""
    bindings = cu.Bindings(kernel.node)
    out: set[str] = set()
    for n in cu.walk(kernel.node.body):
        if isinstance(n, cst.Subscript) and any(
            isinstance(e.slice, cst.Index) and cu.code(e.slice.value) == "None" for e in n.slice
        ):
            out |= _arange_sizes_in(_closure_nodes(n.value, bindings), kernel)
    return out & set(kernel.constexprs)


def _tile_axis_blocks(kernel: cu.Kernel) -> tuple[set[str], set[str]]:
    """(constexprs sizing a tile's first axis `offs[:, None]`, those sizing its last `offs[None, :]`)."""
    bindings = cu.Bindings(kernel.node)
    first: set[str] = set()
    last: set[str] = set()
    for n in cu.walk(kernel.node.body):
        if not isinstance(n, cst.Subscript) or len(n.slice) != 2:
            continue
        parts = [cu.code(e.slice.value) if isinstance(e.slice, cst.Index) else ":" for e in n.slice]
        side = first if parts == [":", "None"] else last if parts == ["None", ":"] else None
        if side is None:
            continue
        # the aranges of the offsets themselves (`offs = start + tl.arange(0, B)`), not of
        # every value a reduced vector was computed from
        parts = [n.value]
        if isinstance(n.value, cst.Name):
            parts += [b.value for b in bindings.by_name.get(n.value.value, []) if b.value is not None]
        side |= _arange_sizes_in((c for part in parts for c in cu.walk(part)), kernel)
    return first & set(kernel.constexprs), last & set(kernel.constexprs)


def _arange_sizes_in(nodes: Iterable[cst.CSTNode], kernel: cu.Kernel) -> set[str]:
    """The sizes of the `tl.arange` calls among `nodes`, as written."""
    return {cu.code(c.args[-1].value) for c in nodes if cu.is_call(c, "tl.arange", names=kernel.names) and c.args}


def _launch_int(launch: cu.Launch, name: str, bindings: cu.Bindings, consts: dict[str, int]) -> int | None:
    """A launch option's value (num_warps=8, a local or module constant); None when absent or
    not a constant."""
    arg = launch.keywords.get(name)
    if arg is None:
        return None
    value = cu.resolve_int(arg.value, bindings)
    if value is None and isinstance(arg.value, cst.Name) and arg.value.value not in bindings.by_name:
        value = consts.get(arg.value.value)
    return value


def _own_warps(launch: cu.Launch, bindings: cu.Bindings, consts: dict[str, int], inp: RuleInput) -> list[int]:
    """The warps the parent launches with: its constant, or, where the wrapper computes them
    (`BLOCK_SIZE, num_warps = calculate_settings(n)`: 32 for a row of 32768), each case's value
    evaluated at the launch along every call path that reaches it (a helper called for q and
    again for k), so the autotuner, keyed by the sizes, can keep every launch's own choice.
    Triton's default four where the launch passes none or they cannot be told."""
    fixed = _launch_int(launch, "num_warps", bindings, consts)
    if fixed is not None:
        return [fixed]
    arg = launch.keywords.get("num_warps")
    if arg is None or not inp.context.cases:
        return [4]
    envs = launch.model.launch_envs_per_path(launch, inp.context.cases)
    seen = [ev(arg.value) for path in envs for ev in path]
    if not all(isinstance(w, int) and not isinstance(w, bool) and _pow2(w) for w in seen):
        return [4]
    return sorted(set(seen))


# A timed case whose speed-of-light time is below this is launch-bound: the kernel ends before
# the host has issued the next launch, so the autotuner's host work on every call (Autotuner.run
# builds the key and argument dicts before the JIT's own launch path) adds to the forward's time
# and a better tile cannot show. Measured on the H200 (`git show c20b434:bench/probe_autotune.py`, 21_, 2026-11-30):
# on a 1024x1024x2048 case (SOL 4.3 us) the autotuner timed its chosen tiles at 16.6 us against
# 30.5 us for the fixed ones, yet the autotuned forward took 34.0 us, the parent's 34.8 us; in
# the verify job, with a second operator compiling on the host, 48.8 us, so the rewrite lost
# on that case and with it the 1.6-1.9x of the large cases. Nor does launching the tuned config
# without the autotuner pay there: on an H100 (2026-12-05, 01_gemm's kernel at 1024^3, a probe
# timing 200 back-to-back calls) the fixed launch took 16.0 us a call for a 16.7 us kernel, the
# autotuned one 24.0 us for 11.1 us, and the JIT launched straight with the tuned config 17.0 us:
# the launch's own host path, not the tile, bounds such a case.
LAUNCH_BOUND_SOL_US = 8.0
# A timed case whose measured time leaves less than this above its speed-of-light time has too
# little to win from tuning to pay for the autotuner's host work on every call. Measured on the
# H200 (2026-11-30, fourth session): alone on one GPU, 24_rmsnorm_silu_gate's autotuned
# candidate lost 15 and 19 us on its two shortest cases (15 and 18 us of headroom, measured
# time minus speed-of-light time) and gained 7 % on the others; beside another operator
# (--jobs 2), autotuned candidates of 12, 13, 15 and 18 lost 2-32 us on cases of 27-57 us.
# 01_gemm's 2048^3 case (50 us measured, 33 us of headroom) gained 1.65x from its tiles. The
# line between is a judgement from these few cases.
AUTOTUNE_HEADROOM_US = 20.0


def _none_on_some_path(value: cst.BaseExpression) -> bool:
    """`None`, or a conditional or `or`/`and` with a branch that is."""
    if isinstance(value, cst.IfExp):
        return _none_on_some_path(value.body) or _none_on_some_path(value.orelse)
    if isinstance(value, cst.BooleanOperation):
        return _none_on_some_path(value.left) or _none_on_some_path(value.right)
    return isinstance(value, cst.Name) and value.value == "None"


def _may_be_none(tree: cst.Module) -> set[str]:
    """The expressions (as written) the module lets be None: tested against None (`if bias is not
    None:`), a parameter defaulting to None, or assigned a value that can be None (`mean = ...
    if not is_rms_norm else None`). A launch's size dispatch reads no `.nbytes` of these: the
    timed cases may all pass a tensor (fla's gated layer norm: its optional weight and bias, its
    `mean` under RMS norm), and the call that passes none would fail on the rewrite alone."""
    out: set[str] = set()
    for node in cu.walk(tree):
        if isinstance(node, cst.Comparison):
            sides = [node.left, *(c.comparator for c in node.comparisons)]
            if any(_none_on_some_path(side) for side in sides):
                out |= {cu.code(side) for side in sides if not _none_on_some_path(side)}
        elif isinstance(node, cst.Param) and node.default is not None and _none_on_some_path(node.default):
            out.add(node.name.value)
        elif isinstance(node, (cst.Assign, cst.AnnAssign)) and node.value is not None and _none_on_some_path(node.value):
            for target in [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]:
                out.add(cu.code(target))
    return out


def _dispatch(plan: Plan, inp: RuleInput, values: list[dict[str, Any]]) -> None:
    """Keep the fixed launch for launch-bound problem sizes when the timed cases have both kinds.

    A case is launch-bound when its speed-of-light time (the baseline profile's; else from the
    sizes and the device's datasheet peaks) is under LAUNCH_BOUND_SOL_US, or when the baseline's
    measured time leaves less than AUTOTUNE_HEADROOM_US above it. The launch tells the
    sizes apart at run time by a size it can compute: for a GEMM the product of the key sizes
    the cases determine (M*N*K, or M*K when N comes from the module's weights), otherwise the
    bytes of the tensor arguments. The limit lies between the largest launch-bound case and the
    smallest other one (geometric middle); the cases must be separable by that size. Nothing
    changes without a device, or when the timed cases are all on one side: all large is the
    plain autotune rewrite, all small gains nothing from tuning anyway.
    """
    spec = inp.context.device
    launch = plan.launch
    if spec is None or launch.statement is None:
        return
    bound = launch.bound(plan.kernel)
    pairs = [(c, v) for c, v in zip(inp.context.cases, values, strict=False) if c.timed]
    if len(pairs) < 2:
        return
    names = [k for k in plan.key if k in bound and all(isinstance(v.get(k), int) for _, v in pairs)]
    optional = _may_be_none(launch.model.tree)
    tensors = [
        p for p in bound
        if all(isinstance(v.get(p), cu.TensorValue) for _, v in pairs)
        and cu.code(bound[p]) not in optional and not _none_on_some_path(bound[p])
    ]  # fmt: skip
    if plan.kind != "gemm" and tensors:
        sizes = [sum(v[p].numel() * _itemsize(v[p].dtype) for p in tensors) for _, v in pairs]
        plan.size_unit = "bytes"
        plan.size_expr = " + ".join(f"{cu.operand(bound[p])}.nbytes" for p in tensors)
    # a GEMM's key sizes; otherwise those the recorded launches gave, with the profile's SOL
    elif names and (plan.kind == "gemm" or all(c.sol_us for c, _ in pairs)):
        sizes = [math.prod(v[k] for k in names) for _, v in pairs]
        plan.size_unit = "*".join(names)
        plan.size_expr = " * ".join(cu.operand(bound[k]) for k in names)
    else:
        return
    sol_us = [c.sol_us for c, _ in pairs]
    if not all(sol_us):  # no profile: the datasheet peaks and the sizes, where they say it all
        sol_us = [_sol_us(plan, v, spec, all_sizes=plan.size_unit.split("*") == plan.key) for _, v in pairs]
        if not all(sol_us):
            return
    bound_by_launch = [
        t < LAUNCH_BOUND_SOL_US or (c.time_us is not None and c.time_us - t < AUTOTUNE_HEADROOM_US)
        for (c, _), t in zip(pairs, sol_us, strict=True)
    ]
    small = [n for n, b in zip(sizes, bound_by_launch, strict=True) if b]
    large = [n for n, b in zip(sizes, bound_by_launch, strict=True) if not b]
    if small and large and max(small) < min(large):
        plan.fixed_up_to = math.isqrt(max(small) * min(large))


def _sol_us(plan: Plan, vals: dict[str, Any], spec: Any, all_sizes: bool) -> float | None:
    """A case's speed-of-light time from its sizes: a GEMM's 2*M*N*K FLOPs (every key size
    known: a batch count outside the key would be missed) at the tensor-core peak of its
    operands' dtype, else its tensor arguments' bytes."""
    tensors = [v for v in vals.values() if isinstance(v, cu.TensorValue)]
    if plan.kind == "gemm":
        floats = [t.dtype for t in tensors if t.dtype.startswith(("float", "bfloat"))]
        rate = sol.peak_tflops(spec, floats[0]) if floats and all_sizes else None
        if not rate:
            return None
        flops = 2 * math.prod(vals[k] for k in plan.key if isinstance(vals.get(k), int))
        return flops / (rate * 1e12) * 1e6
    if spec.peak_bw_gbs <= 0 or not tensors:
        return None
    return sum(t.numel() * _itemsize(t.dtype) for t in tensors) / (spec.peak_bw_gbs * 1e9) * 1e6


def _itemsize(dtype: str) -> int:
    name = dtype.removeprefix("torch.")
    if name.endswith("64"):
        return 8
    if name.endswith("32"):
        return 4
    if name.endswith("16"):
        return 2
    return 1


def _key(kernel: cu.Kernel, launch: cu.Launch, values: list[dict[str, Any]]) -> list[str]:
    """The size arguments: runtime ints that are not pointers, strides, float scalars or
    sentinels compared with loaded values."""
    bound = launch.bound(kernel)
    loads, stores = cu.memory_params(kernel)
    sentinels = _sentinels(kernel)
    key = []
    for p in kernel.params:
        if p in kernel.constexprs or p not in bound or p in loads | stores or p in sentinels:
            continue
        low = p.lower()
        if low.endswith("ptr") or "stride" in low or SCALAR_NAME.search(low):
            continue
        if isinstance(bound[p], cst.Float) or isinstance(bound[p], cst.Attribute) and SCALAR_NAME.search(
            bound[p].attr.value.lower()
        ):
            continue
        if cu.is_call(bound[p], "float"):  # liger's `float(gate_multiplier)`: a scalar, not a size
            continue
        vals = [v.get(p) for v in values]
        if any(isinstance(v, (cu.TensorValue, float)) for v in vals):
            continue
        key.append(p)
    return key


def _sentinels(kernel: cu.Kernel) -> set[str]:
    """Runtime parameters the kernel reads only in `==` or `!=` against a value it loaded
    (sglang's `loc != reserved_skip_index`): a marker in the data, not a size of the problem,
    so no autotune key."""
    bindings = cu.Bindings(kernel.node)
    compared: Counter[str] = Counter()
    for n in cu.walk(kernel.node.body):
        if not isinstance(n, cst.Comparison) or len(n.comparisons) != 1:
            continue
        if not isinstance(n.comparisons[0].operator, cst.Equal | cst.NotEqual):
            continue
        sides = (n.left, n.comparisons[0].comparator)
        for this, other in (sides, sides[::-1]):
            reads = (m for part in cu.closure(other, bindings, set()) for m in cu.walk(part))
            loaded = any(cu.is_call(m, "tl.load", names=kernel.names) for m in reads)
            if isinstance(this, cst.Name) and loaded:
                compared[this.value] += 1
    uses = _name_uses(kernel)
    return {p for p in kernel.runtime_params if compared[p] and compared[p] == uses[p]}


def _constexpr_sizes(
    kernel: cu.Kernel, launch: cu.Launch, values: list[dict[str, Any]], blocks: set[str]
) -> list[str]:
    """The size arguments of a kernel that takes its sizes as constexprs (liger-kernel's
    `n_cols: tl.constexpr`): constexprs that size no `tl.arange` (`blocks`) and whose value is
    an integer above 1 in some case. An autotune key may name a constexpr; each value compiles
    anew anyway."""
    bound = launch.bound(kernel)
    key = []
    for p in kernel.params:
        if p not in kernel.constexprs or p in blocks or p not in bound or SCALAR_NAME.search(p.lower()):
            continue
        vals = [v.get(p) for v in values]
        if vals and all(type(v) is int for v in vals) and any(v > 1 for v in vals):
            key.append(p)
    return key


def _grid_sizes_outside_key(
    kernel: cu.Kernel, launch: cu.Launch, bindings: cu.Bindings, key: list[str], blocks: set[str]
) -> tuple[list[tuple[int, cst.BaseExpression]], list[str]] | None:
    """(axis, size expression) of each grid size the key does not see, and the kernel's own
    parameters that pass such a size (to join the key as they are).

    The autotuner caches its choice per key; a grid axis sized by something the kernel is not
    given (`(n_rows,)`, `(B, cdiv(D, BLOCK_D))`) then shares one config between problems of
    different sizes, chosen on whichever ran first (in the verify job: a 37-row check input).
    The sizes of an axis are its factors (`cdiv(D, meta["BD"]) * NT` has two), each the factor
    or X of `cdiv(X, block)`; one is seen when every name it reads is a key value (or a local
    bound to one), a block constant (`blocks`: wrapper names of the tuned constexprs) or
    `triton`. None: not analysable, or a size that depends on a block.
    """
    grid = launch.model.grid(launch)
    if not _readable(grid):
        return None
    meta = {grid.meta} if grid.meta else set()
    bound = launch.bound(kernel)
    covered = {cu.code(bound[k]) for k in key if k in bound}
    passed = {cu.code(e): p for p, e in bound.items() if p not in key}

    def seen(name: str) -> bool:
        if name in covered or name in blocks or name in meta or cu.dotted(cst.Name(name)) in ("triton", "triton.cdiv"):
            return True
        b = bindings.single(name)
        return b is not None and b.value is not None and cu.code(b.value) in covered

    out: list[tuple[int, cst.BaseExpression]] = []
    params: list[str] = []
    for axis, element in enumerate(grid.elements):
        for size in _factors(element):
            if cu.is_call(size, "triton.cdiv", "cdiv") and len(size.args) == 2:
                size = size.args[0].value
            if cu.int_literal(size) is not None or cu.code(size) in covered or all(map(seen, cu.names_in(size))):
                continue
            if cu.names_in(size) & blocks or (grid.meta and meta_reads(size, grid.meta)):
                return None  # a size that depends on the block cannot be passed as it is
            given = passed.get(cu.code(size))  # the kernel's own parameter for this size
            if given is not None:
                if given not in params:
                    params.append(given)
                continue
            # evaluated again at the launch: every name in it must mean there what it meant in the grid
            if any(len(bindings.by_name.get(n, [])) > 1 for n in cu.names_in(size)):
                return None
            out.append((axis, size))
    return out, params


def _factors(node: cst.BaseExpression) -> list[cst.BaseExpression]:
    """`a * b * c` -> [a, b, c]; anything else -> [node]."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply):
        return _factors(node.left) + _factors(node.right)
    return [node]


def _readable(grid: Grid) -> bool:
    """A grid whose axes this rule can read: a tuple, or a lambda or a function defined beside
    the launch (`def grid(meta): return (...)`, reading the launch's locals) over `meta`."""
    if grid.elements is None:
        return False
    if grid.form == "tuple":
        return True
    over_meta = grid.form == "lambda" or (grid.form == "function" and grid.local)
    return over_meta and grid.meta is not None


def _add_key_args(plan: Plan, sizes: list[tuple[int, cst.BaseExpression]]) -> bool:
    """Give the kernel one unread parameter per size (after the launch's positional arguments,
    passed by keyword) and put it in the key; False when the signature does not allow it."""
    kernel, launch = plan.kernel, plan.launch
    params = kernel.node.params
    if params.star_arg is not cst.MaybeSentinel.DEFAULT or params.kwonly_params or params.star_kwarg:
        return False
    at = plan.positional_kept
    if at > len(kernel.params) or any(p in kernel.defaults for p in kernel.params[:at]):
        return False
    # the kernel's own locals too: `NT = tl.cdiv(T, BT)` in the kernel must not hide the parameter
    taken = set(kernel.params) | set(launch.keywords) | cu.all_names(kernel.node)
    for axis, size in sizes:
        base = size.value if isinstance(size, cst.Name) else f"grid_size_{axis}"
        if base in taken:  # a size read only by the autotune key
            base = f"{base}_key"
        name = cu.fresh_name(base, taken) if base in taken else base
        taken.add(name)
        plan.key_args[name] = size
        plan.key.append(name)
    return True


def _row_warps(rowwise: set[str], values: list[dict[str, Any]]) -> tuple[int, ...]:
    widths = [vals.get(b) for b in rowwise for vals in values]
    if widths and all(isinstance(w, int) and w <= NARROW_ROW for w in widths):
        return NARROW_ROW_WARPS
    return ROW_WARPS


def _literal_bindings(
    launch: cu.Launch, kernel: cu.Kernel, bindings: cu.Bindings, values: list[dict[str, Any]]
) -> tuple[dict[str, int], dict[str, str], set[str]]:
    """(tuned constexpr -> value, wrapper name -> constexpr, constexprs the wrapper sizes by
    the row: `triton.next_power_of_2(n)`, or a block whose value follows the case)."""
    tuned: dict[str, int] = {}
    names: dict[str, str] = {}
    rowwise: set[str] = set()
    bound = launch.bound_args(kernel)
    for name, a in bound.items():  # by position or by keyword
        if name not in kernel.constexprs:
            continue
        value = a.value
        v = cu.int_literal(value)
        if v is None and isinstance(value, cst.Name):
            b = bindings.single(value.value)
            if b is not None and b.value is not None:
                v = cu.int_literal(b.value)
                if v is not None:
                    names[value.value] = name
                elif cu.is_call(b.value, "triton.next_power_of_2"):
                    rowwise.add(name)
        elif cu.is_call(value, "triton.next_power_of_2"):
            rowwise.add(name)
        if v is not None:
            tuned[name] = v
        elif name not in rowwise:
            # `BLOCK_SIZE, num_warps = calculate_settings(n_cols)`: a power of two that follows
            # the shape case by case is sized by the row, as next_power_of_2 is
            seen = [x for vals in values if (x := vals.get(name)) is not None]
            if all(isinstance(x, int) and _pow2(x) for x in seen) and len(set(seen)) > 1:
                rowwise.add(name)
    # a constexpr the launch leaves to its literal default is the launch's block as much as one it passes
    for name, default in kernel.defaults.items():
        v = cu.int_literal(default)
        if name in kernel.constexprs and name not in bound and name not in kernel.supplied and v is not None:
            tuned[name] = v
    return tuned, names, rowwise


def _rewrite_axes(
    plan: Plan, bindings: cu.Bindings, names: dict[str, str], meta: str, axes_in: list[cst.BaseExpression]
) -> list[cst.BaseExpression] | None:
    """The grid's axes with block constants replaced by meta[...]; None when unsafe."""
    launch, kernel = plan.launch, plan.kernel
    literal_sourced = {c: v for c, v in plan.tuned.items() if c not in names.values()}
    bound_text = {cu.code(e): p for p, e in launch.bound(kernel).items()}
    pairs = cu.cdiv_pairs(kernel)
    axes = cu.axis_blocks(kernel)
    out = []
    for i, value in enumerate(axes_in):
        # indirect dependence (a local computed from the block) cannot be rewritten
        others = [n for n in cu.names_in(value) if n not in names and n != meta]
        for n in others:
            if cu.depends_on_block(cu.closure(cst.Name(n), bindings, set()), names, plan.tuned):
                return None
        edits: list[tuple[cst.CSTNode, Any]] = []
        for lit in cu.divisor_literals(value):
            v = cu.int_literal(lit)
            cands = {c for c, cv in literal_sourced.items() if cv == v}
            if not cands:
                continue
            choice = _disambiguate(value, lit, cands, bound_text, pairs, axes.get(i, set()))
            if choice is None:
                return None
            edits.append((lit, cu.expr(f'{meta}["{choice}"]')))
        new_value = cu.replace_in(value, edits) if edits else value
        if cu.names_in(new_value) & set(names):  # else the axis itself: a grid that needs no change stays
            new_value = cu.subst_names(
                new_value, lambda n: cu.expr(f'{meta}["{names[n.value]}"]') if n.value in names else None
            )
        if not (axes.get(i, set()) & set(plan.tuned)) <= meta_reads(new_value, meta):
            return None  # an axis the kernel tiles by a tuned block must follow it
        out.append(new_value)
    return out


def _rewrite_grid(plan: Plan, bindings: cu.Bindings, names: dict[str, str], meta: str) -> cst.BaseExpression | None:
    """The grid expression with block constants replaced by meta[...] (a tuple, or the lambda
    with its body rewritten over its own parameter); None when unsafe."""
    grid = plan.launch.model.grid(plan.launch)
    if grid.form == "function":  # kept only where it reads every tuned block from meta already
        if not _readable(grid):
            return None
        axes = _rewrite_axes(plan, bindings, names, grid.meta, grid.elements)
        unchanged = axes is not None and all(a is b for a, b in zip(axes, grid.elements, strict=True))
        return grid.node if unchanged else None
    if grid.form == "lambda":
        lam = grid.node
        assert isinstance(lam, cst.Lambda)
        if grid.meta is None or grid.elements is None:
            return None
        axes = _rewrite_axes(plan, bindings, names, grid.meta, grid.elements)
        if axes is None:
            return None
        if all(a is b for a, b in zip(axes, grid.elements, strict=True)):
            return lam
        if isinstance(lam.body, (cst.Tuple, cst.List)):
            body = lam.body.with_changes(elements=[e.with_changes(value=v) for e, v in zip(lam.body.elements, axes, strict=True)])
        else:
            body = axes[0]
        return lam.with_changes(body=body)
    if grid.form != "tuple" or not isinstance(grid.node, cst.Tuple):
        return None
    axes = _rewrite_axes(plan, bindings, names, meta, [e.value for e in grid.node.elements])
    if axes is None:
        return None
    return grid.node.with_changes(elements=[e.with_changes(value=v) for e, v in zip(grid.node.elements, axes, strict=True)])


def _disambiguate(
    element: cst.BaseExpression,
    lit: cst.Integer,
    cands: set[str],
    bound_text: dict[str, str],
    pairs: dict[str, set[str]],
    axis_cands: set[str],
) -> str | None:
    if len(cands) == 1:
        return next(iter(cands))
    for n in cu.walk(element):
        if cu.is_call(n, "triton.cdiv", "cdiv") and len(n.args) == 2 and n.args[1].value is lit:
            param = bound_text.get(cu.code(n.args[0].value))
            hit = pairs.get(param or "", set()) & cands
            if len(hit) == 1:
                return next(iter(hit))
    hit = axis_cands & cands
    if len(hit) == 1:
        return next(iter(hit))
    return None


def _plan(
    tree: cst.Module, source: str, kernel: cu.Kernel, launches: list[cu.Launch], inp: RuleInput
) -> Plan | None:
    mine = [lc for lc in launches if lc.kernel == kernel.name]
    # Heuristics the source does not spell out (`@triton.heuristics(get_config("bmm"))`) may
    # supply any constexpr the launch does not pass; the tuned ones are all passed at the launch
    # (_literal_bindings), and the autotuner goes above the heuristics, which then read its choice.
    # A constexpr a heuristic sets itself takes the heuristic's value over the launch's and any
    # config's (triton 3.6 `Heuristics.run` assigns it after the autotuner): it is not tuned.
    if kernel.autotuned or len(mine) != 1:
        return None
    launch = mine[0]
    # a `**d` may pass switches and launch metadata (sglang's `USE_GDC` and `launch_pdl`), not a
    # block, a size or an option the autotuner takes over
    if launch.may_pass((set(kernel.params) - _switches(kernel)) | set(LAUNCH_OPTIONS)):
        return None
    if kernel.atomics:
        return None  # the autotuner re-runs the kernel: atomics would accumulate
    if kernel.calls(*REORDERED) and cu.geometry_fixed_on_purpose(launch):
        return None  # the author fixed the geometry for the numerics' sake
    loads, stores = cu.memory_params(kernel)
    if "?" in stores or ("?" in loads and stores):
        return None  # a write, or a read, whose tensor cannot be told: it may alias anything
    bindings = cu.Bindings(launch.reading_scope)
    # what the launch receives along every call path (a helper called for q and again for k);
    # the size dispatch alone reads the first path's values case by case
    values = cu.launch_values_every_path(launch, kernel, inp.context.cases)
    tuned, names, rowwise = _literal_bindings(launch, kernel, bindings, values)
    # only block sizes are tuned (a constexpr that sizes a tl.arange); flags such as
    # HAS_BIAS=1 or ACTIVATION=2 keep their value at the launch
    blocks = _arange_sizes(kernel)
    tuned = {c: v for c, v in tuned.items() if _pow2(v) and c in blocks and c not in kernel.heuristics}
    # a block that is one whole tile (`_walking_blocks`) keeps its value: only the warps are tuned
    walking = _walking_blocks(kernel)
    kept = {c: v for c, v in tuned.items() if c not in walking}
    rowwise |= set(kept)
    tuned = {c: v for c, v in tuned.items() if c in walking}
    names = {n: c for n, c in names.items() if c in tuned}
    # a loop step the wrapper computes (not a literal, not the row's next power of two) is
    # tuned from the streaming range: the kernel walks the same elements with any of them
    bound = launch.bound_args(kernel)
    for c in sorted(_stepped_blocks(kernel) & blocks - set(tuned) - rowwise):
        if c in bound and c not in kernel.supplied:
            tuned[c] = LOOP_BLOCK
            if isinstance(bound[c].value, cst.Name):
                names[bound[c].value.value] = c
    sizes = _constexpr_sizes(kernel, launch, values, blocks)
    key = _key(kernel, launch, values) or sizes
    if not key:
        return None
    plan = Plan(kernel, launch, "", tuned, [], key)
    plan.restore = _read_back(kernel, launch, loads, stores)
    # the launch loses the tuned constexprs (by position or keyword) and the launch options;
    # positional arguments after a dropped one are passed by keyword so they bind as before
    plan.dropped, plan.keywords = cu.unbind_args(launch, kernel, set(tuned))
    plan.dropped |= {id(a) for k, a in launch.options(kernel).items() if k in LAUNCH_OPTIONS}
    plan.positional_kept = sum(1 for a in launch.positional if id(a) not in plan.dropped | set(plan.keywords))
    outside = _grid_sizes_outside_key(kernel, launch, bindings, key, set(names))
    if outside is None or (outside[0] and not _add_key_args(plan, outside[0])):
        return None  # the autotuner could not tell apart problems the grid tells apart
    plan.key += outside[1]
    # beside runtime sizes, a constexpr that differs between the cases is one too (a row length
    # passed as a constexpr beside a runtime count; not GROUP_SIZE_M=8)
    plan.key += [c for c in sizes if c not in plan.key and len({v.get(c) for v in values}) > 1]
    if not tuned:
        if not rowwise:
            return None
        plan.kind = "row"
        configs = [_config({}, w) for w in _row_warps(rowwise, values)]
    else:
        plan.kind, configs, plan.row_tiles = _block_space(kernel, tuned, inp, values, source, kept)
    # The parent's own configuration is always in the space, so the autotuner can only pick
    # something at least as fast on every shape (up to timing noise): without it, a space
    # tuned for big problems lost 26% on the smallest GEMM case of the H200 smoke run. (A loop
    # step the wrapper computed has no one value to keep: the space starts at LOOP_BLOCK.)
    consts = cu.module_ints(tree)
    stages = _launch_int(launch, "num_stages", bindings, consts)
    own = [_config(tuned, w, stages) for w in _own_warps(launch, bindings, consts, inp)]
    configs = _distinct([*own, *configs])
    if len(configs) < 2:
        return None
    plan.configs = configs
    _dispatch(plan, inp, cu.launch_values(launch, kernel, inp.context.cases))
    if plan.fixed_up_to is not None:
        plan.tuned_name = cu.fresh_name(f"{kernel.name}_tuned", cu.all_names(tree))

    # every other launch argument must not depend on a tuned block
    for a in launch.call.args:
        if id(a) in plan.dropped:
            continue
        if cu.depends_on_block(cu.closure(a.value, bindings, set()), names, tuned):
            return None

    taken = cu.all_names(launch.reading_scope)
    meta = "meta" if "meta" not in taken else cu.fresh_name("meta", taken)
    if tuned:
        new_grid = _rewrite_grid(plan, bindings, names, meta)
        if new_grid is None:
            return None
        old_grid = launch.model.grid(launch).node
        if new_grid is old_grid:
            pass  # a lambda that reads its blocks from meta already: it stays as it is
        elif f'{meta}["' not in cu.code(new_grid) and not isinstance(new_grid, cst.Lambda):
            pass  # the grid does not depend on the tuned blocks: it stays as it is
        elif not isinstance(new_grid, cst.Lambda):
            new_grid = cst.Lambda(
                params=cst.Parameters(params=[cst.Param(cst.Name(meta))]),
                body=new_grid if isinstance(new_grid, cst.Tuple) else cst.Tuple([cst.Element(new_grid)]),
            )
        if plan.fixed_up_to is not None:  # the fixed launch keeps its grid; the tuned one gets its own
            plan.tuned_grid = new_grid
        elif isinstance(new_grid, cst.Lambda) and new_grid is not old_grid:
            b = bindings.single(launch.grid.value) if isinstance(launch.grid, cst.Name) else None
            if b is not None and b.value is not None and _reads(launch, launch.grid.value, bindings) == 1:
                plan.edits.append((b.value, new_grid))
            else:  # an inline grid, or one shared with other launches: this launch gets its own
                plan.edits.append((launch.grid, new_grid))

    added = [cu.keyword_arg(n, v) for n, v in plan.key_args.items()]
    if plan.key_args:
        # after the arguments the launch still passes by position, and after the kernel's other
        # runtime parameters where the launch passes those by keyword (fla's kernels: all of them)
        firsts = (i for i, p in enumerate(kernel.params) if p in kernel.constexprs or p in kernel.defaults)
        at = max(plan.positional_kept, next(firsts, len(kernel.params)))
        plan.edits.append((kernel.node.params, cu.insert_params(kernel, at, list(plan.key_args))))
    if plan.fixed_up_to is not None:
        plan.edits.append((launch.statement, _dispatch_statement(plan, tree, plan.dropped, added)))
        return plan
    plan.edits.append((launch.call, _DropArgs(plan.dropped, added, plan.keywords)))

    plan.dead = set(names) | ({launch.grid.value} if isinstance(launch.grid, cst.Name) else set())
    # locals that only fed a launch option (`num_warps=num_warps`) go with it
    plan.dead |= {a.value.value for k, a in launch.options(kernel).items() if k in LAUNCH_OPTIONS and isinstance(a.value, cst.Name)}
    return plan


def limit_name(plan: Plan) -> str:
    return f"{plan.kernel.name.upper()}_FIXED_UP_TO"


def _dispatch_statement(plan: Plan, tree: cst.Module, dropped: set[int], added: list[cst.Arg]) -> cst.If:
    """`if <size> <= LIMIT: <the parent's launch> else: <the autotuned launch>`."""
    launch = plan.launch
    assert launch.statement is not None
    fixed_call = cu.drop_args(launch.call, launch.call, set(), added)
    grid = plan.tuned_grid if plan.tuned_grid is not None else launch.grid
    assert isinstance(launch.call.func, cst.Subscript)
    tuned_func = cu.launched(launch.call.func, grid, plan.tuned_name)
    tuned_call = cu.drop_args(launch.call, launch.call, dropped, added, plan.keywords).with_changes(func=tuned_func)

    def line(call: cst.Call) -> cst.SimpleStatementLine:
        return cst.SimpleStatementLine([cst.Expr(call)])

    test = cu.expr(f"{plan.size_expr} <= {limit_name(plan)}")
    return cst.If(
        test=test,
        body=cst.IndentedBlock([line(fixed_call)]),
        orelse=cst.Else(cst.IndentedBlock([line(tuned_call)])),
        leading_lines=launch.statement.leading_lines,
    )


def _tuned_definition(plan: Plan, tree: cst.Module) -> list[cst.BaseStatement]:
    """The module-level limit and autotuned handle that follow a dispatched kernel."""
    assert plan.fixed_up_to is not None
    unit = "bytes of its tensor arguments" if plan.size_unit == "bytes" else plan.size_unit
    comment = (
        f"# {plan.kernel.name}: problems up to this size ({unit}) are launch-bound\n"
        f"# (speed-of-light time under {LAUNCH_BOUND_SOL_US:g} us, or a measured time less than\n"
        f"# {AUTOTUNE_HEADROOM_US:g} us above it) and keep the fixed launch: the autotuner's host\n"
        "# work on every call would outlast what a better tile could save.\n"
    )
    limit = cu.stmt(f"\n\n{comment}{limit_name(plan)} = {plan.fixed_up_to:_}\n")
    tuned = cu.stmt(f"{plan.tuned_name} = triton.autotune{_autotune_args(plan)}({plan.kernel.name})\n")
    return [limit, tuned]


def _reads(launch: cu.Launch, name: str, bindings: cu.Bindings) -> int:
    return cu.name_loads(launch.reading_scope.body, bindings.target_ids)[name]


@dataclass
class _DropArgs:
    """Marker edit: drop these arguments (by identity) from the call and append `add`,
    keeping the call's other edits."""

    ids: set[int]
    add: list[cst.Arg] = field(default_factory=list)
    keywords: dict[int, str] = field(default_factory=dict)


@dataclass
class _Decorate:
    decorators: list[cst.Decorator]


@dataclass
class _Follow:
    """Marker edit: these module statements follow the (edited) kernel definition."""

    statements: list[cst.BaseStatement]


class _Apply(cst.CSTTransformer):
    def __init__(self, edits: list[tuple[cst.CSTNode, Any]]) -> None:
        self.edits = cu.edit_map(edits)

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode) -> Any:
        new = self.edits.get(id(original_node))
        if new is None:
            return updated_node
        if isinstance(new, cu.GridAt):
            assert isinstance(updated_node, cst.Subscript)
            return new.apply(updated_node)
        if isinstance(new, _DropArgs):
            assert isinstance(original_node, cst.Call) and isinstance(updated_node, cst.Call)
            return cu.drop_args(original_node, updated_node, new.ids, new.add, new.keywords)
        if isinstance(new, _Decorate):
            assert isinstance(updated_node, cst.FunctionDef)
            return updated_node.with_changes(decorators=new.decorators)
        if isinstance(new, _Follow):
            return cst.FlattenSentinel([updated_node, *new.statements])
        return new


def _distinct(configs: list[str]) -> list[str]:
    """`configs` in order without repeats, whatever order each spells its blocks in (the
    parent's `{"BM": 128, "BK": 64, "BN": 256}` is the GEMM table's `{"BM": 128, "BN": 256, ...}`)."""

    def same(config: str) -> tuple:
        call = ast.parse(config, mode="eval").body
        assert isinstance(call, ast.Call)
        blocks = ast.literal_eval(call.args[0])
        return tuple(sorted(blocks.items())), tuple(sorted((k.arg, ast.literal_eval(k.value)) for k in call.keywords))

    seen: set[tuple] = set()
    out = []
    for c in configs:
        if (key := same(c)) not in seen:
            seen.add(key)
            out.append(c)
    return out


def _configs_text(configs: list[str]) -> str:
    """`[` then one config per line, as the autotune decorator's `configs=` argument reads."""
    return "[\n" + "".join(f"        {c},\n" for c in configs) + "    ]"


def _autotune_args(plan: Plan) -> str:
    keys = ", ".join(f'"{k}"' for k in plan.key)
    restore = ", ".join(f'"{p}"' for p in plan.restore)
    return f"(\n    configs={_configs_text(plan.configs)},\n    key=[{keys}],\n" + (
        f"    restore_value=[{restore}],\n)" if plan.restore else ")"
    )


def _decorator(plan: Plan) -> cst.Decorator:
    return cu.make_decorator(f"triton.autotune{_autotune_args(plan)}")


@transform(Family.LAUNCH_CONFIG)
def autotune_launch_config(source: str, inp: RuleInput) -> Rewrite | None:
    tree = cu.parse(source)
    if tree is None:
        return None
    kernels = cu.find_kernels(tree)
    launches = cu.find_launches(tree, kernels)
    plans = [p for k in kernels.values() if inp.wants(k.name) and (p := _plan(tree, source, k, launches, inp))]
    widen, widened, widened_names = _widen_single_configs(tree, source, kernels, launches, inp)
    if not plans and not widen:
        return None
    edits: list[tuple[cst.CSTNode, Any]] = list(widen)
    for p in plans:
        edits.extend(p.edits)
        if p.fixed_up_to is not None:
            edits.append((p.kernel.node, _Follow(_tuned_definition(p, tree))))
            continue
        # right above the heuristics (they may read the tuned blocks), else right above the jit;
        # a library's own wrapper above them (flag_gems' @libentry()) stays outermost
        decs = p.kernel.decorators
        at = decs.index("triton.heuristics") if "triton.heuristics" in decs else decs.index("triton.jit")
        decorators = list(p.kernel.node.decorators)
        decorators.insert(at, _decorator(p))
        edits.append((p.kernel.node, _Decorate(decorators)))
    new = tree.visit(_Apply(edits))
    for _ in range(3):  # removing `grid = (... BLOCK ...)` can leave `BLOCK = 1024` unread
        new = cu.remove_dead_locals(new, {p.kernel.name for p in plans}, set().union(*(p.dead for p in plans)))
    kinds = ", ".join(f"{p.kernel.name} ({p.kind}, {len(p.configs)} configs, key {p.key})" for p in plans)
    added = (
        f"added @triton.autotune to {kinds}; the fixed block sizes and num_warps left the launch "
        "and the grid reads the chosen block from meta."
        if plans
        else ""
    )
    if widened:
        added += (" " if added else "") + (
            f"widened the one-config @triton.autotune of {', '.join(widened)}: "
            "the key and the other autotune arguments are unchanged (with one config the autotuner "
            "benchmarks nothing)."
        )
    return Rewrite(
        source=cu.emit(new, tree),
        family=Family.LAUNCH_CONFIG,
        kernels=(*(p.kernel.name for p in plans), *widened_names),
        mechanism=(
            added + "".join(
                f" {p.kernel.name}: problems up to {p.fixed_up_to:_} ({p.size_unit}) are launch-bound "
                f"(speed-of-light time under {LAUNCH_BOUND_SOL_US:g} us on this device, or measured less "
                f"than {AUTOTUNE_HEADROOM_US:g} us above it) and keep the "
                f"fixed launch; larger ones launch {p.tuned_name}, the autotuned kernel."
                for p in plans
                if p.fixed_up_to is not None
            )
        ),
        effect=" ".join(part for part in (_effect(plans), WIDEN_EFFECT if widened else "") if part),
    )


def _effect(plans: list[Plan]) -> str:
    parts = []
    for p in plans:
        if p.kind == "gemm":
            parts.append(
                f"{p.kernel.name}: 64x64-class tiles with default warps/stages reuse each loaded tile "
                "little; 128x128-256 tiles with 8 warps and 3-4 stages let wgmma and cp.async pipelining "
                "keep the tensor cores busy (typically the largest single win for a first-conversion GEMM)."
            )
        elif p.kind == "elementwise":
            parts.append(
                f"{p.kernel.name}: memory-bound; larger blocks and 8 warps give more bytes in flight per "
                "SM and fewer programs. Expect a modest gain (a few to ~20%) where 1024-wide blocks "
                "underfill the memory system."
            )
        elif p.kind == "row" and _config({}, 1) in p.configs:
            parts.append(
                f"{p.kernel.name}: rows of at most {NARROW_ROW} elements on 4 warps leave each thread one "
                "or two elements, loaded a few bytes at a time; on 1-2 warps each thread loads a vector "
                "of up to 16 bytes and more programs fit on an SM."
            )
        elif p.kind == "row":
            parts.append(
                f"{p.kernel.name}: one row per program with the default 4 warps holds many elements per "
                "thread for wide rows (register pressure, little parallelism per row); 8-16 warps spread "
                "the row."
            )
        else:
            parts.append(
                f"{p.kernel.name}: the tile shape and warps are chosen per shape instead of fixed; gain "
                "depends on the shape (moderate, measured by the gate)."
            )
        for name, tiles in p.row_tiles.items():
            parts.append(
                f"Configs with {name} = {', '.join(map(str, tiles))} "
                "hold a case's whole row (one row a program where the tile has rows), so the loop "
                "along it takes one step (the kernel's one-tile path where it has one), on 4-16 warps "
                "by size."
            )
    return " ".join(parts)


# ---------------------------------------------------------------- widen a one-config autotune
# LAUNCH_CONFIG (widen): an `@triton.autotune` with a single config becomes a real space.
#
# A kernel written with one config (`configs=[triton.Config({"BLOCK_SIZE": 1024}, num_warps=4)]`,
# common in first conversions and LLM-written kernels) goes through the autotuner but never
# tunes: with one config there is nothing to benchmark, so the block and warps are as fixed as a
# literal launch, and `autotune_launch_config` refuses it because it is already autotuned. This
# transform keeps the decorator (its key, its other arguments) and replaces the one config by
# the space LAUNCH_CONFIG gives the same kernel kind, the original config first: elementwise
# blocks 1024-8192 on 4 or 8 warps, GEMM tiles by operand width and problem size, or the tiled
# space around the block.
#
# A config with a `pre_hook` (a TMA kernel's hook setting each descriptor's block from the
# config: flag_gems' hopper `mm`) keeps it on every config of the space. A list the module
# computes and cuts to one entry (`[c for c in make_configs() if ...][:1]`) is widened too when
# the kernel is a GEMM: the tuned blocks are the BLOCK_M/N/K constexprs no launch passes, the
# space replaces the whole expression, and the hook is the one every `pre_hook=` in it (and in
# the module's functions it calls) names. The decorator may be a module function that only
# forwards to `triton.autotune` (srcmodel.names: flag_gems' `libtuner`).
#
# Correct by construction when the kernel is already correct for any config the autotuner may
# pick, as LAUNCH_CONFIG's premise: the launch passes none of the tuned constexprs (the autotuner
# supplies them), so the grid already reads them from `meta`. Refused: a config option that is
# not a literal (`maxnreg=R`, a hook that is not one module name, two hooks), block values that
# are not powers of two, a computed config on a kernel that is not a GEMM (no values to widen
# around), a constexpr beside the blocks (a group size: fla's matmul, Triton's tutorial) unless
# the GEMM space keeps its value, atomics (benchmarking runs would accumulate), and a kernel
# that stores into a tensor it loads unless the autotuner already restores it (`restore_value`):
# one config was never benchmarked, several are.

WIDEN_OPTIONS = ("num_warps", "num_stages")
WIDEN_EFFECT = (
    "With a single config the autotuner benchmarks nothing: the block and warps were as fixed as a "
    "literal launch; the space lets it pick per shape (gain depends on the shape; measured by the gate)."
)


@dataclass(frozen=True)
class _OneConfig:
    """What an autotune of at most one config says: the node to replace, the config's constexpr
    values (None: the module computes it, `[...][:1]`), warps, stages and its pre_hook."""

    configs: cst.BaseExpression
    values: dict[str, int] | None
    warps: int = 4
    stages: int | None = None
    hook: str | None = None


def _single_config(call: cst.Call, names: Any, tree: cst.Module) -> _OneConfig | None:
    """The one config of `autotune(configs=[one])` or `autotune(configs=<computed>[:1])`."""
    configs = read.arg(call, "configs", 0)
    if read.first_only(configs):
        return _computed_config(configs, names, tree)
    if not isinstance(configs, cst.List) or len(configs.elements) != 1:
        return None
    config = configs.elements[0].value
    if not read.is_call(config, "triton.Config", "Config", names=names):
        return _computed_config(configs, names, tree)
    assert isinstance(config, cst.Call)
    kwargs = read.arg(config, "kwargs", 0)
    if not isinstance(kwargs, cst.Dict):
        return _computed_config(configs, names, tree)
    values: dict[str, int] = {}
    for el in kwargs.elements:
        key = read.string_literal(el.key) if isinstance(el, cst.DictElement) else None
        value = read.int_literal(el.value) if isinstance(el, cst.DictElement) else None
        if key is None or value is None:
            return None
        values[key] = value
    options: dict[str, int] = {}
    hook = None
    for a in config.args[1:]:
        if a.keyword is not None and a.keyword.value == "pre_hook" and isinstance(a.value, cst.Name):
            hook = a.value.value  # sets what each config needs (a TMA descriptor's block): kept on every one
            continue
        value = read.int_literal(a.value)
        if a.keyword is None or a.keyword.value not in WIDEN_OPTIONS or value is None:
            return None  # maxnreg, a computed option: not ours to rewrite
        options[a.keyword.value] = value
    return _OneConfig(configs, values, options.get("num_warps", 4), options.get("num_stages"), hook)


def _computed_config(configs: cst.BaseExpression, names: Any, tree: cst.Module) -> _OneConfig | None:
    """A one-config list the module computes: its values are unknown, its pre_hook is the one
    every `pre_hook=` in the expression, and in the module's functions it calls, names."""
    hooks: set[str] = set()
    seen: set[str] = set()
    todo: list[tuple[cst.CSTNode, set[str]]] = [(configs, set())]
    while todo:
        node, params = todo.pop()
        for n in read.walk(node):
            if isinstance(n, cst.Arg) and n.keyword is not None and n.keyword.value == "pre_hook":
                if not isinstance(n.value, cst.Name):
                    return None
                if n.value.value not in params:  # a function's own `pre_hook` passed on: its default counts
                    hooks.add(n.value.value)
            elif isinstance(n, cst.Param) and n.name.value == "pre_hook" and n.default is not None:
                if not isinstance(n.default, cst.Name):
                    return None
                hooks.add(n.default.value)
            elif isinstance(n, cst.Call) and isinstance(n.func, cst.Name) and n.func.value not in seen:
                seen.add(n.func.value)
                fn = cu.find_function(tree, n.func.value)
                if fn is not None:
                    todo.append((fn, {p.name.value for p in read.params_of(fn)}))
    hooks.discard("None")
    if len(hooks) > 1 or not hooks <= set(names.bound):
        return None
    return _OneConfig(configs, None, hook=next(iter(hooks), None))


def _with_hook(config: str, hook: str | None) -> str:
    return config if hook is None else f"{config[:-1]}, pre_hook={hook})"


def _configs_list(configs: list[str]) -> cst.List:
    node = cu.expr(_configs_text(configs))
    assert isinstance(node, cst.List)
    return node


def _configs_edit(tune: cst.Call, configs: cst.BaseExpression, widened: list[str]) -> tuple[cst.CSTNode, Any]:
    """The edit that puts `widened` in place of `configs`; an autotune call written on one line is
    laid out one argument per line, as the list needs."""
    if "\n" in cu.code(tune):
        return configs, _configs_list(widened)
    lines = []
    for a in tune.args:
        value = _configs_text(widened) if a.value is configs else cu.code(a.value)
        lines.append(f"    {a.keyword.value}={value},\n" if a.keyword is not None else f"    {value},\n")
    return tune, cu.expr(f"{cu.code(tune.func)}(\n{''.join(lines)})")


def _widen_single_configs(
    tree: cst.Module, source: str, kernels: dict[str, cu.Kernel], launches: list[cu.Launch], inp: RuleInput
) -> tuple[list[tuple[cst.CSTNode, Any]], list[str], list[str]]:
    """(edits, "kernel (kind, n configs)" descriptions, kernel names) for every wanted kernel
    whose @triton.autotune holds one config that can be widened."""
    edits: list[tuple[cst.CSTNode, Any]] = []
    done: list[str] = []
    names: list[str] = []
    for kernel in kernels.values():
        if not inp.wants(kernel.name) or kernel.handles or kernel.atomics:
            continue
        tune = next(
            (
                d.decorator
                for d in kernel.node.decorators
                if isinstance(d.decorator, cst.Call)
                and read.dotted(read.decorator_target(d), kernel.names) == "triton.autotune"
            ),
            None,
        )
        found = _single_config(tune, kernel.names, tree) if tune is not None else None
        if found is None:
            continue
        mine = [launch for launch in launches if launch.kernel == kernel.name]
        if found.values is None:  # computed: the tuned blocks are the constexprs no launch passes
            passed = {p for launch in mine for p in launch.bound_args(kernel)}
            tuned = {
                p: 0 for p in kernel.constexprs if p not in passed and p not in kernel.defaults and p not in kernel.heuristics
            }
        else:
            tuned = found.values
        if not tuned:
            continue  # `triton.Config({})` (fla's Ascend kernels): no block to widen the space by
        loads, stores = cu.memory_params(kernel)
        in_place = "?" in stores or "?" in loads or any(_read_back(kernel, launch, loads, stores) for launch in mine)
        if in_place and read.arg(tune, "restore_value") is None:
            continue  # benchmarking runs would read their own output
        values = cu.launch_values(mine[0], kernel, inp.context.cases) if len(mine) == 1 else []
        if not {n for n in tuned if n in _arange_sizes(kernel)} <= _walking_blocks(kernel):
            continue  # a block that is one whole tile keeps its value (`_walking_blocks`)
        kind, extra, _ = _block_space(kernel, tuned, inp, values, source)
        if kind == "gemm":
            sized = _arange_sizes(kernel)
            if any(_block_role(n, sized) is None for n in tuned) if found.values is None else not all(
                _pow2(v) for n, v in tuned.items() if _block_role(n, sized)
            ):
                continue  # a computed config's other constexprs have no value to keep
        else:
            sized = {n for n in tuned if n in _arange_sizes(kernel)}
            if found.values is None or not sized or not all(_pow2(tuned[n]) for n in sized):
                continue
            if sized != set(tuned):
                continue  # a group size or flag beside the blocks: only the GEMM space keeps its value
        first = [] if found.values is None else [_config(tuned, found.warps, found.stages)]
        widened = [_with_hook(c, found.hook) for c in _distinct([*first, *extra])]
        if len(widened) < 2:
            continue
        edits.append(_configs_edit(tune, found.configs, widened))
        how = "its config first" if found.values is not None else "in place of the one config its list computes"
        hook = f", each with pre_hook={found.hook}" if found.hook else ""
        done.append(f"{kernel.name} ({kind}, {len(widened)} configs, {how}{hook})")
        names.append(kernel.name)
    return edits, done, names
