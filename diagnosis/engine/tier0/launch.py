"""Launch configuration: block sizes, warps, autotuning and grid size, read from the source.

Tier 0 does not know the device; where a rule needs one it assumes an H100/H200-class GPU
(132 SMs, 2048 threads and 32 programs per SM), says so in the message, and only acts on
values that resolve to literals. Everything shape-dependent is left to tier 1.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from diagnosis.engine.escalation import modest_gain
from diagnosis.engine.evidence import Family, Finding, Severity, Tier, register_code
from diagnosis.engine.tier0.registry import rule
from diagnosis.engine.tier0.source import (
    REDUCTIONS,
    KernelContext,
    LaunchSite,
    Value,
    subscript_axes,
    unparse,
)

REFERENCE_SMS = 132
MAX_PROGRAMS_PER_SM = 32
MAX_THREADS_PER_SM = 2048
# Bytes that must be in flight per SM to cover DRAM latency: about 3.3 TB/s x 700 ns / 132 SMs.
BYTES_IN_FLIGHT_PER_SM = 16 * 1024
MIN_ELEMENTWISE_BLOCK = 128
MIN_TILE_AREA = 64 * 64
MIN_BLOCK_K = 32
TINY_PROBLEM = 1 << 16  # elements; below this a launch is latency-bound whatever its shape

TINY_BLOCK = register_code(
    "T0-TINY-BLOCK",
    Tier.TRIAGE,
    Family.LAUNCH_CONFIG,
    "{kernel} handles {block} elements per program ({name}={block}, num_warps={num_warps}): at most "
    "{resident} programs fit on an SM, about {in_flight_kib} KiB in flight per SM where ~16 KiB are "
    "needed to hide memory latency; blocks of 1024 or more should help (gain from bytes in flight, "
    "Little's law, halved)",
    "Tiny block",
)
SMALL_TILE = register_code(
    "T0-SMALL-TILE",
    Tier.TRIAGE,
    Family.LAUNCH_CONFIG,
    "{kernel} computes {bm}x{bn} output tiles with BLOCK_K={bk}: below 64x64 (or BLOCK_K < 32) "
    "each loaded byte feeds few FLOPs and tl.dot's MMA shapes go underused (gain from tile "
    "arithmetic intensity against 128x128, halved)",
    "Small GEMM tile",
)
ONE_WARP = register_code(
    "T0-ONE-WARP",
    Tier.TRIAGE,
    Family.LAUNCH_CONFIG,
    "{kernel} is launched with num_warps=1 for blocks of up to {block} elements: 32 threads per program "
    "caps an SM at half its threads and serializes the block in few lanes",
    "One warp",
)
NO_AUTOTUNE = register_code(
    "T0-NO-AUTOTUNE",
    Tier.TRIAGE,
    Family.LAUNCH_CONFIG,
    "{kernel} is launched with fixed {constexprs} over shape-dependent {sizes} and has no "
    "@triton.autotune: one configuration serves every shape",
    "No autotune",
)
ONE_CONFIG = register_code(
    "T0-ONE-CONFIG",
    Tier.TRIAGE,
    Family.LAUNCH_CONFIG,
    "{kernel} is autotuned over a single config over shape-dependent {sizes}: with one config the "
    "autotuner benchmarks nothing, so one configuration serves every shape",
    "Autotune over one config",
)
GRID_SMALL = register_code(
    "T0-GRID-SMALL",
    Tier.TRIAGE,
    Family.LAUNCH_CONFIG,
    "{kernel} is launched on {programs} program(s): an H100-class GPU has 132 SMs, so at most "
    "{programs} of them work (gain from the idle SMs, capped at 16x, halved)",
    "Grid far smaller than the device",
)
GRID_LARGE = register_code(
    "T0-GRID-LARGE",
    Tier.TRIAGE,
    Family.LAUNCH_CONFIG,
    "{kernel} is launched on {programs} programs ({reason})",
    "Grid far larger than the device",
)


def _num_warps(value: Value | None) -> int:
    n = value.as_int() if value is not None else None
    return n if n is not None and n > 0 else 4


def _is_elementwise_1d(ctx: KernelContext) -> bool:
    if ctx.tl_calls("dot", *REDUCTIONS):
        return False
    return not any(subscript_axes(n) for n in ctx.walk())


def _site_value(ctx: KernelContext, site: LaunchSite, name: str) -> Value | None:
    """A constexpr's value at a launch site, from the call or a @triton.heuristics default."""
    return site.values.get(name) or ctx.param_default(name)


def _arange_constexprs(ctx: KernelContext) -> list[str]:
    names = []
    for text, _ in ctx.arange_bounds():
        if text in ctx.constexprs and text not in names:
            names.append(text)
    return names


def _little(block: int, num_warps: int, loads: int) -> tuple[int, float, float | None]:
    resident = max(1, min(MAX_PROGRAMS_PER_SM, MAX_THREADS_PER_SM // (32 * num_warps)))
    in_flight = resident * block * 4 * max(1, loads)
    bound = BYTES_IN_FLIGHT_PER_SM / in_flight
    return resident, in_flight / 1024, modest_gain(bound) if bound > 1.05 else None


def _tiny_problem(ctx: KernelContext) -> bool:
    """Every input is known and small: a few programs cover it whatever the configuration."""
    biggest = ctx.module.max_input_numel()
    return biggest is not None and biggest < TINY_PROBLEM


@rule(TINY_BLOCK.code)
def tiny_block(ctx: KernelContext) -> Iterator[Finding]:
    if not _is_elementwise_1d(ctx) or _tiny_problem(ctx):
        return
    bounds = _arange_constexprs(ctx)
    if len(bounds) != 1:
        return
    name = bounds[0]
    loads = len(ctx.tl_calls("load"))
    if ctx.autotune is not None and ctx.autotune.configs:
        sizes = [(c.kwargs[name].as_int(), c.num_warps) for c in ctx.autotune.configs if name in c.kwargs]
        known = [(b, w) for b, w in sizes if b is not None]
        if known and len(known) == len(sizes) and max(b for b, _ in known) < MIN_ELEMENTWISE_BLOCK:
            block, warps = max(known, key=lambda bw: bw[0])
            yield _tiny(ctx, name, block, warps or 4, loads, (ctx.autotune.line,))
        return
    for site in ctx.launches:
        value = _site_value(ctx, site, name)
        block = value.as_int() if value is not None else None
        if block is None or block >= MIN_ELEMENTWISE_BLOCK:
            continue
        lines = (site.line,) + (
            (value.line,) if value is not None and value.line and value.line != site.line else ()
        )
        yield _tiny(ctx, name, block, _num_warps(site.num_warps), loads, lines)


def _tiny(
    ctx: KernelContext, name: str, block: int, warps: int, loads: int, lines: tuple[int, ...]
) -> Finding:
    resident, kib, gain = _little(block, warps, loads)
    return Finding(
        TINY_BLOCK.code,
        Severity.HIGH if block <= 32 else Severity.MEDIUM,
        {
            "kernel": ctx.name,
            "name": name,
            "block": block,
            "num_warps": warps,
            "resident": resident,
            "in_flight_kib": round(kib, 1),
        },
        lines=lines,
        kernel=ctx.name,
        gain=gain,
    )


def _gemm_axes(ctx: KernelContext) -> tuple[str, str, str] | None:
    """(M, N, K) block constexprs of a tl.dot kernel: K is the one the dot's loop steps by."""
    dots = ctx.tl_calls("dot")
    if not dots:
        return None
    k_names: list[str] = []
    for dot in dots:
        for loop in ctx.enclosing_loops(dot):
            for node in ast.walk(loop.iter if isinstance(loop, ast.For) else loop.test):
                text = unparse(node)
                if text in ctx.constexprs and text not in k_names:
                    k_names.append(text)
    aranges = _arange_constexprs(ctx)
    k_names = [k for k in k_names if k in aranges] or k_names
    if len(k_names) != 1:
        by_suffix = [n for n in aranges if n.upper().endswith("K")]
        if len(by_suffix) != 1:
            return None
        k_names = by_suffix
    k = k_names[0]
    others = [n for n in aranges if n != k]
    m = next((n for n in others if n.upper().endswith("M")), None)
    n_ = next((n for n in others if n.upper().endswith("N")), None)
    if m is None or n_ is None:
        if len(others) != 2:
            return None
        m, n_ = others
    return m, n_, k


@rule(SMALL_TILE.code)
def small_gemm_tile(ctx: KernelContext) -> Iterator[Finding]:
    axes = _gemm_axes(ctx)
    if axes is None:
        return
    m, n, k = axes
    if ctx.autotune is not None and ctx.autotune.configs:
        tiles = []
        for cfg in ctx.autotune.configs:
            vals = [cfg.kwargs.get(a) for a in axes]
            ints = [v.as_int() if v is not None else None for v in vals]
            if any(i is None for i in ints):
                return  # a config we cannot read: do not judge the space
            tiles.append(tuple(ints))
        if not tiles:
            return
        best = max(tiles, key=lambda t: (t[0] * t[1], t[2]))
        if any(t[0] * t[1] >= MIN_TILE_AREA for t in tiles) and any(t[2] >= MIN_BLOCK_K for t in tiles):
            return
        yield _small_tile(ctx, best, (ctx.autotune.line,))
        return
    for site in ctx.launches:
        vals = [_site_value(ctx, site, a) for a in (m, n, k)]
        ints = [v.as_int() if v is not None else None for v in vals]
        if any(i is None for i in ints):
            continue
        bm, bn, bk = ints
        assert bm is not None and bn is not None and bk is not None
        if bm * bn >= MIN_TILE_AREA and bk >= MIN_BLOCK_K:
            continue
        yield _small_tile(ctx, (bm, bn, bk), (site.line,))


def _small_tile(ctx: KernelContext, tile: tuple[int, int, int], lines: tuple[int, ...]) -> Finding:
    bm, bn, bk = tile
    gain = None
    if bm * bn < MIN_TILE_AREA:
        intensity = bm * bn / (bm + bn)
        gain = modest_gain(min(64.0 / intensity, 4.0))  # 128x128 has intensity 64
    return Finding(
        SMALL_TILE.code,
        Severity.MEDIUM,
        {"kernel": ctx.name, "bm": bm, "bn": bn, "bk": bk},
        lines=lines,
        kernel=ctx.name,
        gain=gain,
    )


@rule(ONE_WARP.code)
def one_warp(ctx: KernelContext) -> Iterator[Finding]:
    bounds = _arange_constexprs(ctx)
    if ctx.autotune is not None and ctx.autotune.configs:
        if all(c.num_warps == 1 for c in ctx.autotune.configs):
            blocks = [c.kwargs[b].as_int() for c in ctx.autotune.configs for b in bounds if b in c.kwargs]
            biggest = max((b for b in blocks if b is not None), default=None)
            if biggest is None or biggest > 128:
                yield _one_warp(ctx, biggest, (ctx.autotune.line,))
        return
    for site in ctx.launches:
        if site.num_warps is None or site.num_warps.as_int() != 1:
            continue
        blocks = [v.as_int() for b in bounds if (v := _site_value(ctx, site, b)) is not None]
        biggest = max((b for b in blocks if b is not None), default=None)
        # A program of at most 128 elements is right-sized for one warp.
        if biggest is not None and biggest <= 128:
            continue
        yield _one_warp(ctx, biggest, (site.line,))


def _one_warp(ctx: KernelContext, block: int | None, lines: tuple[int, ...]) -> Finding:
    return Finding(
        ONE_WARP.code,
        Severity.LOW,
        {"kernel": ctx.name, "block": block if block is not None else "?"},
        lines=lines,
        kernel=ctx.name,
    )


def _loop_steps(ctx: KernelContext) -> set[str]:
    out: set[str] = set()
    for loop in ctx.loops():
        if isinstance(loop, ast.For):
            for node in ast.walk(loop.iter):
                if isinstance(node, ast.Name) and node.id in ctx.constexprs:
                    out.add(node.id)
    return out


@rule(NO_AUTOTUNE.code)
def no_autotune(ctx: KernelContext) -> Iterator[Finding]:
    if ctx.autotune is not None:
        return
    tunable = set(_arange_constexprs(ctx)) | _loop_steps(ctx)
    for site in ctx.launches:
        fixed = [
            p
            for p in ctx.constexprs
            if p in tunable and (v := site.values.get(p)) is not None and v.kind == "literal" and v.known
        ]
        if site.num_warps is not None and site.num_warps.kind == "literal" and site.num_warps.known:
            fixed.append("num_warps")
        sizes = [p for p in ctx.runtime_params if (v := site.values.get(p)) is not None and v.kind == "shape"]
        if not fixed or not sizes:
            continue
        yield Finding(
            NO_AUTOTUNE.code,
            Severity.LOW,
            {"kernel": ctx.name, "constexprs": ", ".join(fixed), "sizes": ", ".join(sizes)},
            lines=(site.line,),
            kernel=ctx.name,
        )


@rule(ONE_CONFIG.code)
def one_config(ctx: KernelContext) -> Iterator[Finding]:
    if ctx.autotune is None or not ctx.autotune.single:
        return
    shaped = {
        p
        for site in ctx.launches
        for p in ctx.runtime_params
        if (v := site.values.get(p)) is not None and v.kind == "shape"
    }
    # where the wrapper's values cannot be followed, the autotune key names what the author
    # expects to vary
    sizes = sorted(shaped) or [k for k in ctx.autotune.key if k in ctx.runtime_params]
    if sizes:
        yield Finding(
            ONE_CONFIG.code,
            Severity.LOW,
            {"kernel": ctx.name, "sizes": ", ".join(sizes)},
            lines=(ctx.autotune.line,),
            kernel=ctx.name,
        )


def _second_stage(ctx: KernelContext, site: LaunchSite) -> bool:
    """A small grid over buffers the wrapper allocated (the partials of a two-stage reduction)
    reads what an earlier launch wrote, which is small by construction."""
    loads = {
        p for _, call, ptr in ctx.memory_ops() if ctx.tl_name(call) == "load" for p in ctx.deps(ptr).params
    }
    loaded = loads & ctx.pointer_params()
    return bool(loaded) and all(site.local_buffer(p) for p in loaded)


@rule(GRID_SMALL.code, GRID_LARGE.code)
def grid_size(ctx: KernelContext) -> Iterator[Finding]:
    for site in ctx.launches:
        programs = site.programs
        if programs is None or site.grid is None:
            continue
        dims = [d.as_int() or 0 for d in site.grid]
        if len(dims) > 1 and max(dims[1:]) > 65535:
            yield Finding(
                GRID_LARGE.code,
                Severity.HIGH,
                {
                    "kernel": ctx.name,
                    "programs": programs,
                    "reason": "grid axes 1 and 2 are limited to 65535",
                },
                lines=(site.line,),
                kernel=ctx.name,
            )
        elif programs > 1 << 22:
            yield Finding(
                GRID_LARGE.code,
                Severity.LOW,
                {
                    "kernel": ctx.name,
                    "programs": programs,
                    "reason": "millions of programs each do little work; larger blocks or a persistent loop "
                    "amortize the per-program cost",
                },
                lines=(site.line,),
                kernel=ctx.name,
            )
        elif programs < REFERENCE_SMS // 2:
            if _tiny_problem(ctx) or _second_stage(ctx, site):
                continue
            yield Finding(
                GRID_SMALL.code,
                Severity.HIGH if programs <= 8 else Severity.MEDIUM,
                {"kernel": ctx.name, "programs": programs},
                lines=(site.line,),
                kernel=ctx.name,
                gain=modest_gain(min(REFERENCE_SMS / programs, 16.0)),
            )
