"""FUSION (a finish through torch): the wrapper's torch reduction over a kernel's partials is
skipped where the reduced axis holds one element.

fla's `logsumexp_fwd` stores one partial per block of each row (`z = x.new_empty(N, ND)`, `ND =
cdiv(D, B)` with `B = min(next_power_of_2(D), 65536)`) and finishes with `z.logsumexp(-1)`. For
every row of at most 65536 elements ND is 1: the kernel already wrote the answer, and torch's
`logsumexp` over one element returns it after six launches of its own (max, a mask of infinities,
difference, exp, sum, log), 41 % of the forward's kernel time on two of the corpus' cases
(docs/HARDWARE.md, the H100 run of `e66233a`).

The rewrite keeps the reduction and adds the one-element case beside it:

    z = (z.squeeze(-1) if z.shape[-1] == 1 else z.logsumexp(-1)).view(*shape[:-1])

Correct by construction, for the finishes `srcmodel.finishes` reads (a reduction that returns its
input on one element, over an axis given as an integer literal, `keepdim` absent or False, no
`dtype=`): over an axis of one element, `sum`, `mean`, `amax`, `amin`, `prod` and `logsumexp` of
a floating tensor return exactly its elements (logsumexp: `log(exp(x - x)) + x`, infinities
masked as torch masks them), with the axis dropped, which `squeeze` does; the test reads the
tensor's own shape at the call. The tensor is a fresh contiguous allocation, so the squeezed view
reshapes as the reduction's new tensor did, and nothing reads it after the finish but through the
finish's result. Applies only where the cases show the tensor floating on every case and the axis
of one element on a timed one: elsewhere there is nothing to gain.
"""

from __future__ import annotations

import libcst as cst

from diagnosis.engine.evidence import Family
from diagnosis.engine.proposers.rules import Rewrite, RuleInput, transform
from diagnosis.engine.proposers.rules import cst_util as cu
from diagnosis.engine.srcmodel import TensorValue, model_of_tree
from diagnosis.engine.srcmodel.finishes import Finish, torch_finishes

FLOATING = frozenset({"float16", "bfloat16", "float32", "float64"})


@transform(Family.FUSION)
def skip_one_element_finish(source: str, inp: RuleInput) -> Rewrite | None:
    tree = cu.parse(source)
    cases = inp.context.cases
    if tree is None or not cases:
        return None
    model = model_of_tree(tree)
    edits: list[tuple[cst.CSTNode, cst.BaseExpression]] = []
    done: list[tuple[Finish, int, int]] = []
    for finish in torch_finishes(model):
        if not inp.wants(finish.launch.kernel) or any(finish.call is e[0] for e in edits):
            continue
        ones = _one_element_cases(model, finish, cases)
        if not ones:
            continue
        edits.append((finish.call, _skipped(finish)))
        done.append((finish, len(ones), sum(1 for c in cases if c.timed)))
    if not edits:
        return None
    first, ones, timed = done[0]
    what = "; ".join(f"`{cu.code(f.call)}`" for f, _, _ in done)
    return Rewrite(
        source=cu.emit(cu.replace(tree, edits), tree),
        family=Family.FUSION,
        kernels=tuple(dict.fromkeys(f.launch.kernel for f, _, _ in done)),
        mechanism=(
            f"the wrapper's {what} over partials the kernel wrote returns them unchanged where the axis "
            f"holds one element ({ones} of {timed} timed cases for `{first.tensor}`): the squeezed partials "
            "are read directly there, and torch reduces only a longer axis."
        ),
        effect=(
            "each call whose rows fit one block drops torch's reduction kernels (six launches for a logsumexp, "
            "one or two for a sum) and their pass over the partials; the Triton kernel is unchanged. Worth "
            "the launches it saves: little where the kernel itself takes most of the time."
        ),
    )


def _one_element_cases(model, finish: Finish, cases) -> list[int]:  # noqa: ANN001
    """The timed cases on which the finished axis holds one element; none unless the tensor is a
    floating one of known shape on every case and every call path."""
    ones: set[int] = set()
    for envs in model.launch_envs_per_path(finish.launch, cases):
        for ev, case in zip(envs, cases, strict=True):
            value = ev(cst.Name(finish.tensor))
            if not isinstance(value, TensorValue) or value.dtype not in FLOATING:
                return []
            rank = len(value.shape)
            if not -rank <= finish.dim < rank:
                return []
            if value.shape[finish.dim] == 1 and case.timed:
                ones.add(case.index)
    return sorted(ones)


def _skipped(finish: Finish) -> cst.BaseExpression:
    """`(z.squeeze(d) if z.shape[d] == 1 else <the call>)`, without the parentheses where the
    call is a statement's whole value."""
    z, d = finish.tensor, finish.dim
    text = f"{z}.squeeze({d}) if {z}.shape[{d}] == 1 else {cu.code(finish.call)}"
    whole = getattr(finish.statement, "value", None) is finish.call
    return cu.expr(text if whole else f"({text})")
