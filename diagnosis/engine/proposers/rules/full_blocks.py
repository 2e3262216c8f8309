"""MASKING (full blocks): the accesses of every block but the last go without their mask.

A 1-D kernel over `n` elements masks each access with `offs < n`:

    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    ...
    tl.store(out_ptr + offs, y, mask=mask)

The compiler vectorizes a masked access only when it can show the mask constant over each
vector's elements, which needs `n` divisible by the vector width; the JIT passes divisibility by
16 only. Any other `n` (a tensor of 2^26 + 5 elements, or 6001 x 7000) leaves every access one
element per instruction: on the H200, 16-bit element-wise kernels ran such cases at 54-56 %SOL
against 84-88 % for the others. The guarded copy of `hints.aligned_copy` helps where `n` is a
multiple of 8, not an odd `n`. Here every block but the last is full, its mask all true, and a
branch on that drops the mask there:

    mask = offs < n
    if pid * BLOCK <= n - BLOCK:  # a full block
        x = tl.load(x_ptr + offs)
        ...
        tl.store(out_ptr + offs, y)
    else:
        x = tl.load(x_ptr + offs, mask=mask, other=0.0)
        ...
        tl.store(out_ptr + offs, y, mask=mask)

Correct by construction: under the branch's test every element of `offs` is below `n`, so the
mask is all true and an access without it touches what the masked one did; the other branch is
the code as it was. Preconditions (refused otherwise): `offs = <start> + tl.arange(0, BLOCK)`
with `<start>` the program's block (`pid * BLOCK`, or a name bound once to it, BLOCK a
constexpr), `mask = offs < n` with `n` a runtime parameter, each of the three names bound once
and `n` never; the statements from the first that reads the mask to the end of the kernel are
the ones copied; accesses name their mask by keyword or position. Backed by tier 3's finding that names `n` as the mask bound that blocks vectorization,
or, without findings, by a timed case whose `n` is not a multiple of 16.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import libcst as cst

from diagnosis.engine.evidence import Family
from diagnosis.engine.proposers.rules import Rewrite, RuleInput, transform
from diagnosis.engine.proposers.rules import cst_util as cu
from diagnosis.engine.proposers.rules.hints import blocking_args, offsets_statements
from diagnosis.engine.proposers.rules.pairs import LOAD_ARGS, STORE_ARGS
from diagnosis.engine.srcmodel.read import arg

# positional order of the arguments (Triton's signatures)
ACCESS_ARGS = {"tl.load": LOAD_ARGS, "tl.store": STORE_ARGS}


@dataclass
class _Plan:
    test: str  # `start <= n - BLOCK`
    segment: list[cst.BaseStatement]  # copied into both branches
    unmasked: list[tuple[cst.Call, cst.Call]]  # each access whose mask goes in the full branch, without it


def _unmasked(call: cst.Call, name: str) -> cst.Call:
    """The access without its mask (and a load's `other`, which only the mask reads)."""
    order = ACCESS_ARGS[name]
    keep = [
        a
        for i, a in enumerate(call.args)
        if (a.keyword.value if a.keyword is not None else order[i]) not in ("mask", "other")
    ]
    keep[-1] = keep[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return call.with_changes(args=keep)


def _bound(value: cst.BaseExpression, offs: str) -> str | None:
    """`n` of `offs < n`."""
    if not (isinstance(value, cst.Comparison) and len(value.comparisons) == 1):
        return None
    target = value.comparisons[0]
    if not (isinstance(target.operator, cst.LessThan) and isinstance(value.left, cst.Name)):
        return None
    if value.left.value != offs or not isinstance(target.comparator, cst.Name):
        return None
    return target.comparator.value


def _start(statement: cst.SimpleStatementLine) -> cst.BaseExpression:
    """The side of `offs = <start> + tl.arange(0, BLOCK)` that is not the arange."""
    ((_, value),) = cu.simple_assigns(statement)
    assert isinstance(value, cst.BinaryOperation)
    return value.left if cu.is_call(value.right, "tl.arange") else value.right


def _plan(kernel: cu.Kernel, launches: list[cu.Launch], inp: RuleInput) -> _Plan | None:
    bindings = cu.Bindings(kernel.node)
    body = cu.body_statements(kernel.node.body)
    runtime = set(kernel.runtime_params)
    named = blocking_args(inp, kernel)
    by_finding = any(f.args.get("blockers") for f in inp.findings if f.kernel in (None, "", kernel.name))
    masks = [
        (c, name, arg(c, "mask", order.index("mask")))
        for name, order in ACCESS_ARGS.items()
        for c in kernel.calls(name)
    ]
    reads = cu.name_loads(kernel.node.body, bindings.target_ids)
    for offs_st, offs, block in offsets_statements(kernel, cast=True):
        if bindings.single(offs) is None:
            continue
        for i, st in enumerate(body):
            pairs = cu.simple_assigns(st)
            if len(pairs) != 1 or bindings.single(pairs[0][0]) is None:
                continue
            mask, value = pairs[0]
            n = _bound(value, offs)
            if n is None or n not in runtime or n in bindings.by_name:
                continue
            if by_finding and n not in named:
                continue
            calls = [(c, name) for c, name, m in masks if isinstance(m, cst.Name) and m.value == mask]
            # every read of the mask is a whole access's mask, and every masked access reads it:
            # a mask combined with another (`row_mask[:, None] & col_mask[None, :]`) stays, and a
            # copy that drops it from a store alone is a branch for nothing
            if not calls or reads[mask] != len(calls) or sum(m is not None for *_, m in masks) != len(calls):
                continue
            segment = body[i + 1 :]
            first = next(j for j, s in enumerate(segment) if mask in cu.names_in(s))
            segment = segment[first:]  # every read of the mask is in it: none can come before
            # not `start + BLOCK <= n`: where the last block ends at 2^31, that sum overflows int32
            test = f"{cu.code(_start(offs_st))} <= {n} - {block}"
            if isinstance(segment[0], cst.If) and cu.code(segment[0].test) == test:
                continue  # done already
            if not by_finding and not _odd_case(kernel, launches, inp, n):
                continue
            return _Plan(test, segment, [(c, _unmasked(c, name)) for c, name in calls])
    return None


def _odd_case(kernel: cu.Kernel, launches: list[cu.Launch], inp: RuleInput, n: str) -> bool:
    """Some timed launch passes an `n` that is not a multiple of 16 (the JIT's specialization)."""
    timed = [c for c in inp.context.cases if c.timed]
    return any(
        isinstance(v := values.get(n), int) and not isinstance(v, bool) and v % 16
        for launch in launches
        if launch.kernel == kernel.name
        for values in cu.launch_values(launch, kernel, timed)
    )


@transform(Family.MASKING, before="aligned_copy_for_mask_bounds")
def unmasked_full_blocks(source: str, inp: RuleInput) -> Rewrite | None:
    """Ahead of the guarded copy: where both apply, this one serves every `n`, odd ones too."""
    tree = cu.parse(source)
    if tree is None:
        return None
    kernels = cu.find_kernels(tree)
    launches = cu.find_launches(tree, kernels)
    edits: list[tuple[cst.CSTNode, Any]] = []
    done: list[str] = []
    for k in kernels.values():
        plan = _plan(k, launches, inp) if inp.wants(k.name) else None
        if plan is None:
            continue
        full = [cu.replace_in(s, plan.unmasked) for s in plan.segment]
        branch = cst.parse_statement(f"if {plan.test}:\n    pass\nelse:\n    pass\n")
        assert isinstance(branch, cst.If) and isinstance(branch.orelse, cst.Else)
        head = plan.segment[0]
        full[0] = full[0].with_changes(leading_lines=[])
        branch = branch.with_changes(
            body=branch.body.with_changes(body=full),
            orelse=branch.orelse.with_changes(
                body=branch.orelse.body.with_changes(
                    body=[head.with_changes(leading_lines=[]), *plan.segment[1:]]
                )
            ),
            leading_lines=[
                *head.leading_lines,
                cst.EmptyLine(
                    comment=cst.Comment("# a full block: its accesses need no mask, so they vectorize")
                ),
            ],
        )
        edits.append((head, branch))
        edits += [(s, cst.RemoveFromParent()) for s in plan.segment[1:]]
        done.append(k.name)
    if not edits:
        return None
    new = cu.replace(tree, edits)
    return Rewrite(
        source=cu.emit(new, tree),
        family=Family.MASKING,
        kernels=tuple(done),
        mechanism=(
            f"{', '.join(done)}: every block but the last is full, so its loads and stores go without the mask "
            "(and a load's `other`) in a branch on that; the last block runs the code as it was."
        ),
        effect=(
            "a mask `offs < n` keeps every access one element per instruction unless `n` is a known multiple of "
            "the vector width, and the JIT tells the compiler divisibility by 16 only; without the mask the full "
            "blocks' accesses are contiguous runs from an aligned start, which compile to 128-bit vector loads "
            "and stores whatever `n` is. The gain is largest for 16-bit elements, whose scalar accesses bound "
            "an element-wise kernel by instructions rather than bytes."
        ),
    )
