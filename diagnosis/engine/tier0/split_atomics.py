"""Split reductions finished with atomics: a reduction spread over a second grid axis whose
programs all add into the same outputs.

A row sum launched on (rows, column blocks) whose programs `tl.atomic_add(out + row, partial)`
serializes, per output, as many atomics as there are programs along the split axis, and makes
the float result depend on their order. T0-ATOMIC-REDUCTION says that a reduction ends in an
atomic; this rule names the split axis and how many programs contend for each address, which
is what the BLOCK_REDUCTION split rewrite removes (a loop over the split axis in one program
per output, or partials reduced by a second kernel).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from diagnosis.engine.evidence import Family, Finding, Severity, Tier, register_code
from diagnosis.engine.tier0.registry import rule
from diagnosis.engine.tier0.source import KernelContext, call_arg

SPLIT_ATOMIC = register_code(
    "T0-SPLIT-ATOMIC-REDUCTION",
    Tier.TRIAGE,
    Family.BLOCK_REDUCTION,
    "{kernel} splits a reduction over grid axis {axis} ({programs} programs along it) and finishes it with "
    "tl.{atomic} at an address that does not depend on that axis: that many programs contend for every "
    "{target}; loop over the split inside one program per output, or reduce per-split partials in a "
    "second kernel",
    "Split reduction finished with atomics",
)


def _program_axes(ctx: KernelContext) -> set[int]:
    axes = set()
    for call in ctx.tl_calls("program_id"):
        axis = call_arg(call, 0, "axis")
        axes.add(axis.value if isinstance(axis, ast.Constant) and isinstance(axis.value, int) else -1)
    return axes


@rule(SPLIT_ATOMIC.code)
def split_atomic_reduction(ctx: KernelContext) -> Iterator[Finding]:
    axes = _program_axes(ctx)
    if len(axes) < 2 or -1 in axes:
        return
    for call in ctx.tl_calls("atomic_add", "atomic_max", "atomic_min"):
        ptr, value, mask = call_arg(call, 0, "pointer"), call_arg(call, 1, "val"), call_arg(call, 2, "mask")
        if ptr is None or value is None or not ctx.deps(value).reduced:
            continue
        address = ctx.deps(ptr).pids | ctx.deps(mask).pids
        split = sorted(ctx.deps(value).pids - address)
        if not split or not address:
            continue
        axis = split[0]
        counts = []
        for site in ctx.launches:
            if site.grid is not None and len(site.grid) > axis:
                dim = site.grid[axis]
                counts.append(str(dim.as_int()) if dim.known else dim.text)
        scalar = not ctx.deps(ptr).arange
        yield Finding(
            SPLIT_ATOMIC.code,
            Severity.HIGH if scalar else Severity.MEDIUM,
            {
                "kernel": ctx.name,
                "axis": axis,
                "programs": " or ".join(dict.fromkeys(counts)) or "several",
                "atomic": ctx.tl_name(call),
                "target": "output" if scalar else "output of the block",
            },
            lines=(call.lineno,),
            kernel=ctx.name,
        )
