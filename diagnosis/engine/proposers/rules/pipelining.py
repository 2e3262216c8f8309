"""PIPELINING: let the dot loop of a GEMM-like kernel be software-pipelined.

Matches a kernel that calls `tl.dot` inside a loop and is launched (or autotuned) with
`num_stages` of 1 or 2, or with `num_warps` of 1 or 2. The launch keyword (or each autotune
config's) becomes `num_stages=3` / `num_warps=4`. Values are read from literals, from locals
or module constants bound once to a literal; anything else is left alone. A local bound once
to the literal and read by the launch alone (sglang's `num_stages = 1` above its launch) has
its literal changed instead: the smallest diff, and no local left unread.

Correct by construction: `num_stages` and `num_warps` are compile options, not semantics; the
kernel computes the same values with any of them. Only the schedule changes: with 3 stages
Triton's pipeliner issues the next tiles' loads (cp.async / TMA) while the current tile's
wgmma runs, which needs the loads to qualify (16-byte aligned, divisible strides).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import libcst as cst

from diagnosis.engine.evidence import Family
from diagnosis.engine.proposers.rules import Rewrite, RuleInput, transform
from diagnosis.engine.proposers.rules import cst_util as cu

STAGES = 3
WARPS = 4


def _value(node: cst.BaseExpression, bindings: cu.Bindings | None, consts: dict[str, int]) -> int | None:
    v = cu.resolve_int(node, bindings)
    if v is None and isinstance(node, cst.Name) and (bindings is None or node.value not in bindings.by_name):
        v = consts.get(node.value)
    return v


def _dot_in_loop(kernel: cu.Kernel) -> bool:
    return any(
        isinstance(loop, (cst.For, cst.While)) and any(cu.is_call(n, "tl.dot") for n in cu.walk(loop.body))
        for loop in cu.walk(kernel.node.body)
    )


def _fix_args(
    args: list[cst.Arg], value_of: Any, site_of: Any = lambda node: node
) -> tuple[list[tuple[cst.CSTNode, Any]], list[str]]:
    """The edits that raise the arguments' stages and warps; `site_of` says which node holds
    an argument's value (the argument itself, or the literal of the local it reads)."""
    edits: list[tuple[cst.CSTNode, Any]] = []
    notes: list[str] = []
    for a in args:
        if a.keyword is None:
            continue
        v = value_of(a.value)
        if a.keyword.value == "num_stages" and v is not None and v < STAGES:
            edits.append((site_of(a.value), cst.Integer(str(STAGES))))
            notes.append(f"num_stages {v} -> {STAGES}")
        elif a.keyword.value == "num_warps" and v is not None and v < WARPS:
            edits.append((site_of(a.value), cst.Integer(str(WARPS))))
            notes.append(f"num_warps {v} -> {WARPS}")
    return edits, notes


def _literal_site(node: cst.BaseExpression, bindings: cu.Bindings, reads: Counter[str]) -> cst.BaseExpression:
    """The int literal of `name = <literal>` where `node` is that name, bound once and read
    nowhere else in the launching function; else `node`."""
    b = bindings.single(node.value) if isinstance(node, cst.Name) else None
    if b is None or cu.int_literal(b.value) is None or reads[node.value] != 1:
        return node
    return b.value


@transform(Family.PIPELINING)
def pipeline_dot_loops(source: str, inp: RuleInput) -> Rewrite | None:
    tree = cu.parse(source)
    if tree is None:
        return None
    consts = cu.module_ints(tree)
    kernels = cu.find_kernels(tree)
    launches = cu.find_launches(tree, kernels)
    edits: list[tuple[cst.CSTNode, Any]] = []
    done: list[str] = []
    notes: list[str] = []
    for k in kernels.values():
        if not inp.wants(k.name) or not _dot_in_loop(k):
            continue
        found: list[tuple[cst.CSTNode, Any]] = []
        what: list[str] = []
        for d in k.node.decorators:
            call = d.decorator
            if cu.decorator_name(d) not in ("triton.autotune", "autotune") or not isinstance(call, cst.Call):
                continue
            for n in cu.walk(call):
                if cu.is_call(n, "triton.Config", "Config"):
                    e, w = _fix_args(list(n.args), lambda x: _value(x, None, consts))
                    found += e
                    what += w
        for lc in (lc for lc in launches if lc.kernel == k.name):
            wb = cu.Bindings(lc.reading_scope)
            reads = cu.name_loads(lc.reading_scope.body, wb.target_ids)
            e, w = _fix_args(
                list(lc.call.args),
                lambda x, wb=wb: _value(x, wb, consts),
                lambda x, wb=wb, reads=reads: _literal_site(x, wb, reads),
            )
            found += e
            what += w
        if found:
            edits += found
            done.append(k.name)
            notes.append(f"{k.name}: {', '.join(sorted(set(what)))}")
    if not edits:
        return None
    new = cu.replace(tree, edits)
    return Rewrite(
        source=cu.emit(new, tree),
        family=Family.PIPELINING,
        kernels=tuple(done),
        mechanism="; ".join(notes) + " (compile options only).",
        effect=(
            "with num_stages >= 3 the dot loop's next tiles are loaded asynchronously while the current "
            "tile's MMA runs, hiding global-memory latency; with 4 warps (one warpgroup) Hopper can issue "
            "wgmma. Large for GEMMs that were latency-bound; nothing when the loads do not qualify for "
            "cp.async (then HINTS on strides/alignment come first)."
        ),
    )
