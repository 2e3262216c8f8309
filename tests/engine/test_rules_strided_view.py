"""COALESCE (a permuted copy read in place): a kernel that loads a transposed copy its wrapper
made reads the wrapper's view through its strides, and the copy is made only for tensors of more
than two dimensions (before/after and refusal tables in other projects' styles, interpreter
correctness with a mutant; the compiled accesses are in tests/runner/test_compile_families.py)."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest

import diagnosis.engine.tier3  # noqa: F401 - registers CG_STRIDED_ACCESS
from diagnosis.engine.evidence import Family, Finding, Severity
from diagnosis.engine.proposers.base import ProposalContext
from diagnosis.engine.proposers.rules import RuleInput, RulesProposer, apply_family
from diagnosis.engine.proposers.rules import cst_util as cu
from diagnosis.engine.proposers.rules.strided_view import read_permuted_view
from diagnosis.engine.srcmodel import model_of
from tests.engine.rules_cases import harness as h
from tests.engine.rules_cases import review
from tests.engine.rules_cases import styles as st

GATHER = h.source("permuted_gather.py")
ROWSUM = h.source("permuted_rowsum.py")
LANG = h.source("permuted_lang.py")
FORWARD = h.source("permuted_forward.py")


def strided(
    source: str, code: str = "CG_STRIDED_ACCESS", family: Family | None = None
) -> tuple[Finding, ...]:
    """Tier 3's finding on every load of every kernel of `source`, as a device run gives it for
    an access whose tile walks the copy's rows."""
    model = model_of(source)
    out = []
    for kernel in model.kernels.values():
        for n in cu.walk(kernel.node.body):
            if isinstance(n, cst.Call) and (cu.call_name(n) or "").endswith(".load"):
                line = (model.position(n)[0],)
                out.append(Finding(code, Severity.HIGH, {}, line, kernel.name, family_override=family))
    return tuple(out)


def rewrite(source: str) -> str | None:
    rw = read_permuted_view(source, RuleInput(strided(source), ProposalContext()))
    return rw.source if rw is not None else None


# a 3-D and a 1-D input keep their copy: the gather reads it as rows of N as before
GATHER_RANKS = h.variant(
    GATHER,
    (
        "    return [_inputs(37, 100, 11), _inputs(5, 301, 3), _inputs(64, 1, 7)]",
        "    return [_inputs(37, 100, 11), _inputs(64, 1, 7), [torch.randn(9, 4, 5), torch.randint(0, 9, (6,))],\n"
        "            [torch.randn(37), torch.randint(0, 37, (5,))]]",
    ),
)

ROWSUM_KEYWORDS = h.variant(
    ROWSUM,
    (
        "rowsum_kernel[(triton.cdiv(n_rows, BLOCK_M),)](xt, out, n_rows, n_cols, BLOCK_M, BLOCK_N)",
        "rowsum_kernel[(triton.cdiv(n_rows, BLOCK_M),)](\n"
        "        x_ptr=xt, out_ptr=out, n_rows=n_rows, n_cols=n_cols, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N\n"
        "    )",
    ),
)

FIX = [
    pytest.param(
        GATHER_RANKS,
        [
            "def dim_compress(inp, dims, contiguous=True):\n",
            "    view = inp.permute(order)\n    return view.contiguous() if contiguous else view\n",
            "    inp_off = rows * inp_stride_row + indices[None, :] * inp_stride_col\n",
            "    inp = dim_compress(inp, dim, contiguous=inp.ndim != 2)\n",
            "    inp_stride_row, inp_stride_col = inp.stride() if inp.ndim == 2 else (N, 1)\n"
            "    gather_kernel[grid](inp, out, M, N, index, index_len, inp_stride_row, inp_stride_col, "
            "BLOCK_M=32, BLOCK_N=32)",
        ],
        id="flag-gems-helper-copy",
    ),
    pytest.param(
        ROWSUM,
        [
            "def rowsum_kernel(x_ptr, out_ptr, n_rows, n_cols, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, "
            "x_stride_row, x_stride_col):",
            "        offsets = rows[:, None] * x_stride_row + cols[None, :] * x_stride_col\n",
            "    xt = x.t()\n    if xt.ndim != 2:  # a 2-D view is read in place, through its strides\n"
            "        xt = xt.contiguous()\n",
            "    xt_stride_row, xt_stride_col = xt.stride() if xt.ndim == 2 else (n_cols, 1)\n",
            "(xt, out, n_rows, n_cols, BLOCK_M, BLOCK_N, xt_stride_row, xt_stride_col)",
        ],
        id="t-copy-constexprs-by-position",
    ),
    pytest.param(
        ROWSUM_KEYWORDS,
        [
            "def rowsum_kernel(x_ptr, out_ptr, n_rows, n_cols, x_stride_row, x_stride_col, BLOCK_M: tl.constexpr",
            "BLOCK_N=BLOCK_N, x_stride_row=xt_stride_row, x_stride_col=xt_stride_col",
        ],
        id="t-copy-keyword-launch",
    ),
    pytest.param(
        h.variant(ROWSUM, ("    xt = x.t().contiguous()\n", "    xt = x.T.contiguous()\n")),
        ["    xt = x.T\n    if xt.ndim != 2:", "xt_stride_row, xt_stride_col)"],
        id="T-attribute-copy",
    ),
    pytest.param(
        h.variant(
            ROWSUM,
            ("import torch\n", "import torch\nimport torch as th\n"),
            ("    xt = x.t().contiguous()\n", "    xt = th.transpose(x, 0, 1).contiguous()\n"),
        ),
        ["    xt = th.transpose(x, 0, 1)\n    if xt.ndim != 2:", "xt_stride_row, xt_stride_col)"],
        id="torch-transpose-function-under-an-alias",
    ),
    pytest.param(
        LANG,
        [
            "    x = lang.load(x_ptr + r[:, None] * x_stride_row + c[None, :] * x_stride_col, mask=mask, other=0.0)\n",
            "    xt = x.transpose(0, 1)\n    if xt.ndim != 2:",
            "(xt, w, out, n_rows, n_cols, 32, 64, xt_stride_row, xt_stride_col)",
        ],
        id="transpose-copy-in-a-helper-tr-and-lang-aliases",
    ),
]

NOOP = [
    # one program per row: its lanes walk the copy's contiguous row; through the view they would
    # walk a column
    pytest.param(FORWARD, id="row-index-the-same-for-every-lane"),
    pytest.param(
        h.variant(ROWSUM, ("    return out\n", "    return out + xt[:, 0].sum()\n")),
        id="the-wrapper-reads-the-copy-after-the-launch",
    ),
    pytest.param(
        h.variant(
            ROWSUM,
            (
                "    tl.store(out_ptr + rows, tl.sum(acc, axis=1), mask=rows < n_rows)",
                "    tl.store(out_ptr + rows, tl.sum(acc, axis=1), mask=rows < n_rows)\n"
                "    tl.store(x_ptr + rows * n_cols, tl.sum(acc, axis=1), mask=rows < n_rows)",
            ),
        ),
        id="the-kernel-writes-the-copy",
    ),
    # torch.empty_like(xt) would take the view's strides, and the kernel writes it as contiguous
    pytest.param(
        h.variant(
            ROWSUM,
            (
                "    out = torch.empty(n_rows, device=x.device, dtype=torch.float32)\n",
                "    out = torch.empty_like(xt)[:, 0]\n",
            ),
        ),
        id="the-output-allocated-like-the-copy",
    ),
    pytest.param(
        h.variant(ROWSUM, ("    xt = x.t().contiguous()\n", "    xt = x.contiguous()\n")),
        id="a-copy-of-the-input-as-it-is",
    ),
    pytest.param(
        h.variant(
            ROWSUM,
            (
                "    xt = x.t().contiguous()\n",
                "    xt = x\n    if x.shape[0] > 1:\n        xt = x.t().contiguous()\n",
            ),
        ),
        id="the-copy-made-in-a-branch",
    ),
    pytest.param(
        h.variant(
            GATHER,
            ("    return inp.permute(order).contiguous()\n", "    if dim == 1:\n        return inp\n"
             "    return inp.permute(order).contiguous()\n"),
        ),
        id="a-helper-that-returns-twice",
    ),
    pytest.param(
        h.variant(
            ROWSUM,
            (
                "        offsets = rows[:, None] * n_cols + cols[None, :]\n",
                "        offsets = rows[:, None] * n_cols + cols[None, :]\n        tl.store(out_ptr + offsets, 0.0)\n",
            ),
        ),
        id="the-offsets-address-another-tensor-too",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("before", "present"), FIX)
def test_it_reads_the_view_through_its_strides(before: str, present: list[str]) -> None:
    after = rewrite(before)
    assert after is not None and h.parses(after)
    for text in present:
        assert text in after, text


@pytest.mark.parametrize("before", NOOP)
def test_it_refuses_what_it_cannot_prove(before: str) -> None:
    assert rewrite(before) is None


def test_it_needs_tiers_2_and_3_to_have_found_the_access_strided() -> None:
    """Without the compiled evidence the copy may be of a tensor already in order (flag_gems'
    dim_compress over the last dimension copies nothing): tier 0's word is not enough."""
    assert read_permuted_view(ROWSUM, RuleInput((), ProposalContext())) is None
    lines_elsewhere = tuple(
        Finding("CG_STRIDED_ACCESS", Severity.HIGH, {}, (1,), f.kernel) for f in strided(ROWSUM)
    )
    assert read_permuted_view(ROWSUM, RuleInput(lines_elsewhere, ProposalContext())) is None
    # tier 2's scalar access is evidence where it calls the access strided (COALESCE), not where
    # it is contiguous and only unvectorized (HINTS)
    scalar = strided(ROWSUM, "IR_SCALAR_GLOBAL", Family.COALESCE)
    assert read_permuted_view(ROWSUM, RuleInput(scalar, ProposalContext())) is not None
    unvectorized = strided(ROWSUM, "IR_SCALAR_GLOBAL", Family.HINTS)
    assert read_permuted_view(ROWSUM, RuleInput(unvectorized, ProposalContext())) is None


def test_the_family_and_the_proposer_reach_it() -> None:
    """COALESCE tries the tiled walk first (it refuses a 2-D grid); the proposer, given tier 3's
    finding, offers this rewrite for the gather."""
    rw = apply_family(Family.COALESCE, GATHER, RuleInput(strided(GATHER), ProposalContext()))
    assert rw is not None and rw.transform == "read_permuted_view"
    assert rw.kernels == ("gather_kernel",)
    cands = RulesProposer().propose(GATHER, list(strided(GATHER)), ProposalContext())
    assert any("inp_stride_row" in c.source for c in cands)


def test_rewrites_are_correct_under_the_interpreter(tmp_path: Path) -> None:
    """Every row's module runs its verify cases (odd sizes, one column, a 3-D and a 1-D input
    that keep their copy) against torch; a mutant that passes the strides swapped must fail."""
    sources = {p.id: rewrite(p.values[0]) for p in FIX}
    swapped = sources["t-copy-constexprs-by-position"]
    assert swapped is not None
    sources["mutant-swaps-the-strides"] = swapped.replace(
        "BLOCK_N, xt_stride_row, xt_stride_col)", "BLOCK_N, xt_stride_col, xt_stride_row)"
    )
    assert all(source is not None for source in sources.values()), sources
    h.assert_interp_ok({name: st.for_interpreter(source) for name, source in sources.items()}, tmp_path)


def test_every_rewrite_is_reviewable(tmp_path: Path) -> None:
    """No ruff finding, repeated statement, copied name or constant that never varies added."""
    pairs = [(p.id, p.values[0], rewrite(p.values[0])) for p in FIX]
    assert review.added(pairs, tmp_path) == {}
