"""Missing and needless masks on loads and stores.

A load or store whose offsets come from ``tl.arange`` moved by a program id or a loop
variable reads past the end of the tensor unless the size is a multiple of the block.
Without a mask, and without an ``assert n % BLOCK == 0`` in the wrapper (or a
``@triton.heuristics`` flag guarding the unmasked branch), that is a correctness bug, not a
speed question. Offsets wrapped with ``% size`` (the tutorial GEMM's rows) stay in bounds, and
so does a scratch buffer the wrapper allocates with the block as one of its dimensions (each
program's partials in ``torch.empty((programs, BLOCK))``): its size is a multiple of the block
by construction, as an assert would say.

A mask that can never be false is informational: it costs a compare per element and can
keep the compiler from proving the access contiguous.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from diagnosis.engine.evidence import Family, Finding, Severity, Tier, register_code
from diagnosis.engine.tier0.registry import rule
from diagnosis.engine.tier0.source import ATOMICS, KernelContext, Resolver, call_arg

MISSING_MASK = register_code(
    "T0-MISSING-MASK",
    Tier.TRIAGE,
    Family.MASKING,
    "{kernel}: tl.{op} at offsets {offsets} moved by the program id or loop has no mask and nothing "
    "asserts the size is a multiple of the block: the last block reads or writes out of bounds",
    "Missing mask",
)
NEEDLESS_MASK = register_code(
    "T0-NEEDLESS-MASK",
    Tier.TRIAGE,
    Family.MASKING,
    "{kernel}: the mask of tl.{op} is always true ({why})",
    "Needless mask",
)

_MASK_POSITION = {"load": 1, "store": 2, **{a: 2 for a in ATOMICS}}
_CLAMPS = frozenset({"minimum", "maximum", "where", "clamp"})


def _mask(call: ast.Call, op: str) -> ast.expr | None:
    return call_arg(call, _MASK_POSITION.get(op, 99), "mask")


def _escapes(ctx: KernelContext, node: ast.AST, seen: set[str]) -> bool:
    """True when an arange-derived offset reaches ``node`` without a ``%`` or clamp bounding it."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        return False
    if isinstance(node, ast.Call):
        name = ctx.tl_name(node)
        if name == "arange":
            return not _exact_extent(ctx, node)
        if name in _CLAMPS or name in ("load", "make_block_ptr", "advance"):
            return False
    if isinstance(node, ast.Name):
        if node.id in seen:
            return False
        seen.add(node.id)
        return any(_escapes(ctx, e, seen) for _, e in ctx.defs.get(node.id, ()))
    return any(_escapes(ctx, child, seen) for child in ast.iter_child_nodes(node))


def _exact_extent(ctx: KernelContext, arange: ast.Call) -> bool:
    """``tl.arange(0, B)`` where every launch passes B as a tensor size (``BLOCK_M=m``): the
    block is exactly one dimension, so moving it by whole blocks stays in bounds."""
    if len(arange.args) < 2 or not isinstance(arange.args[1], ast.Name):
        return False
    values = [v for v, _ in ctx.constexpr_values(arange.args[1].id)]
    return bool(values) and all(v.kind == "shape" and not v.known for v in values)


def _reached(ctx: KernelContext, node: ast.expr) -> Iterator[ast.AST]:
    """Every node of `node`, and of the definitions of the kernel's locals it reads, through
    theirs in turn (each local once)."""
    seen: set[str] = set()
    stack: list[ast.AST] = [node]
    while stack:
        for sub in ast.walk(stack.pop()):
            yield sub
            if isinstance(sub, ast.Name) and sub.id not in seen:
                seen.add(sub.id)
                stack.extend(e for _, e in ctx.defs.get(sub.id, ()))


def _block_pointer(ctx: KernelContext, ptr: ast.expr) -> bool:
    blocks = ("make_block_ptr", "advance", "make_tensor_descriptor")
    return any(isinstance(sub, ast.Call) and ctx.tl_name(sub) in blocks for sub in _reached(ctx, ptr))


def _asserted_names(ctx: KernelContext) -> set[str]:
    """Names the launching wrappers (or the kernel) assert divisible: ``assert n % BLOCK == 0``."""
    names: set[str] = set()
    bodies: list[ast.AST] = [ctx.node]
    for site in ctx.launches:
        if site.resolver.function is not None:
            bodies.append(site.resolver.function)
    for body in bodies:
        for node in ast.walk(body):
            test = None
            if isinstance(node, ast.Assert):
                test = node.test
            elif (
                isinstance(node, ast.Call)
                and ctx.tl_name(node) in ("static_assert", "device_assert")
                and node.args
            ):
                test = node.args[0]
            if test is None:
                continue
            for sub in ast.walk(test):
                if isinstance(sub, ast.BinOp) and isinstance(sub.op, ast.Mod):
                    names |= {n.id for n in ast.walk(sub.left) if isinstance(n, ast.Name)}
                    names.add("*")
    return names


def _arange_extents(ctx: KernelContext, ptr: ast.expr) -> list[ast.expr]:
    """The extents ``X`` of the ``tl.arange(0, X)`` an address is built from, through its names."""
    return [
        sub.args[1]
        for sub in _reached(ctx, ptr)
        if isinstance(sub, ast.Call) and ctx.tl_name(sub) == "arange" and len(sub.args) == 2
    ]


def _block_shaped_buffer(ctx: KernelContext, ptr: ast.expr) -> bool:
    """Every launch passes the tensor ``ptr`` moves through as one its wrapper allocates
    (``torch.empty((n, grid[0], 32))``, ``z.new_empty(...)``) with each block of the address as
    one of the dimensions: a scratch area of whole blocks, which no partial last block can
    leave."""
    bases = ctx.deps(ptr).params & ctx.pointer_params()
    extents = _arange_extents(ctx, ptr)
    if len(bases) != 1 or not extents or not ctx.launches:
        return False
    (base,) = bases
    for site in ctx.launches:
        dims = site.allocated_dims(base)
        for extent in extents:
            # a constexpr is what the launch passes; a literal or a module constant is itself
            passed = site.values.get(extent.id) if isinstance(extent, ast.Name) else None
            block = passed or Resolver(ctx.module).resolve(extent, ctx.line)
            if block.as_int() not in dims:
                return False
    return True


def _guarded_by_constexpr(ctx: KernelContext, call: ast.Call) -> bool:
    """Inside ``if EVEN_K:`` (a constexpr or heuristic flag): the other branch masks."""
    for node in ctx.enclosing(call, ast.If):
        assert isinstance(node, ast.If)
        names = {n.id for n in ast.walk(node.test) if isinstance(n, ast.Name)}
        if names & (set(ctx.constexprs) | set(ctx.heuristics)):
            return True
    return False


@rule(MISSING_MASK.code)
def missing_mask(ctx: KernelContext) -> Iterator[Finding]:
    asserted = None
    for op, call, ptr in ctx.memory_ops():
        if _mask(call, op) is not None or has_boundary_check(call):
            continue
        deps = ctx.deps(ptr)
        if not deps.arange or not (deps.pids or deps.loop_vars):
            continue
        if not _escapes(ctx, ptr, set()) or _block_pointer(ctx, ptr) or _guarded_by_constexpr(ctx, call):
            continue
        if asserted is None:
            asserted = _asserted_names(ctx)
        if asserted or _block_shaped_buffer(ctx, ptr):
            continue
        yield Finding(
            MISSING_MASK.code,
            Severity.HIGH,
            {"kernel": ctx.name, "op": op, "offsets": ast.unparse(ptr)},
            lines=(call.lineno,),
            kernel=ctx.name,
        )


def has_boundary_check(call: ast.Call) -> bool:
    return any(kw.arg == "boundary_check" for kw in call.keywords)


def _arange_of(ctx: KernelContext, node: ast.expr) -> str | None:
    """The bound X when ``node`` is exactly ``tl.arange(0, X)`` (directly or through one name)."""
    if isinstance(node, ast.Name):
        defn = ctx.definition(node.id)
        if defn is None:
            return None
        node = defn
    if isinstance(node, ast.Call) and ctx.tl_name(node) == "arange" and len(node.args) == 2:
        start = node.args[0]
        if isinstance(start, ast.Constant) and start.value == 0:
            return ast.unparse(node.args[1])
    return None


@rule(NEEDLESS_MASK.code)
def needless_mask(ctx: KernelContext) -> Iterator[Finding]:
    asserted: set[str] | None = None
    for op, call, _ in ctx.memory_ops():
        mask = _mask(call, op)
        if isinstance(mask, ast.Name):
            mask = ctx.definition(mask.id)
        if not (isinstance(mask, ast.Compare) and len(mask.ops) == 1 and isinstance(mask.ops[0], ast.Lt)):
            continue
        bound = mask.comparators[0]
        bound_text = ast.unparse(bound)
        why = None
        if _arange_of(ctx, mask.left) == bound_text:
            why = f"{ast.unparse(mask.left)} = tl.arange(0, {bound_text}) is always below {bound_text}"
        elif isinstance(bound, ast.Name) and bound.id in ctx.runtime_params and ctx.launches:
            if asserted is None:
                asserted = _asserted_names(ctx)
            args = [site.args.get(bound.id) for site in ctx.launches]
            if all(isinstance(a, ast.Name) and a.id in asserted for a in args):
                why = f"the wrapper asserts {bound.id} is a multiple of the block"
        if why is None:
            continue
        yield Finding(
            NEEDLESS_MASK.code,
            Severity.INFO,
            {"kernel": ctx.name, "op": op, "why": why},
            lines=(call.lineno,),
            kernel=ctx.name,
        )
