"""LAUNCH_CONFIG's split loop: a kernel whose few programs each walk a long loop is split along
it over a new grid axis and finished by a combine launch (before/after and refusal tables, in
the code styles of other projects, interpreter correctness)."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnosis.engine.evidence import Family, Finding, Severity
from diagnosis.engine.proposers.base import ProposalContext, RoundHistory
from diagnosis.engine.proposers.rules import (
    Rewrite,
    RuleInput,
    RulesProposer,
    apply_family,
    excluded_families,
)
from diagnosis.engine.proposers.rules.split_loop import split_long_loop
from diagnosis.engine.tier1 import FEW_PROGRAMS
from diagnosis.engine.verdict import Verdict
from tests.engine.rules_cases import harness as h
from tests.engine.rules_cases import review
from tests.engine.rules_cases import styles as st

COLSUM = h.source("few_colsum.py")
# the timed cases of few_colsum.py (8, 4, 16, 12 and 2 programs of 256 columns)
CASES = h.fp32_cases((16384, 2048), (65536, 1024), (4096, 4096), (8192, 3000), (32768, 512))


def few_programs(kernel: str, severity: Severity = Severity.HIGH) -> Finding:
    args = {"case": 0, "kernel": kernel, "programs": 8, "sm_count": 132, "waves": 0.06, "slots": 16,
            "num_warps": 4, "idle": ""}  # fmt: skip
    return Finding(FEW_PROGRAMS.code, severity, args, kernel=kernel)


def split(source: str, findings: tuple[Finding, ...] = ()) -> str | None:
    rw = split_long_loop(source, RuleInput(findings, ProposalContext(cases=CASES)))
    return rw.source if rw is not None else None


# a batched column mean: a 2-D tile walked in row blocks, a rank-2 grid, the finish through locals
BATCHED_MEAN = h.variant(
    COLSUM,
    ("return x.sum(dim=0)", "return x.mean(dim=1)"),
    (
        "def colsum_kernel(x_ptr, out_ptr, n_rows, n_cols, BLOCK_K: tl.constexpr):\n"
        "    cols = tl.program_id(0) * BLOCK_K + tl.arange(0, BLOCK_K)\n"
        "    mask = cols < n_cols\n"
        "    acc = tl.zeros([BLOCK_K], dtype=tl.float32)\n"
        "    for row in range(n_rows):\n"
        "        acc += tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)\n"
        "    tl.store(out_ptr + cols, acc, mask=mask)\n",
        "def colsum_kernel(x_ptr, out_ptr, n_rows, n_cols, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):\n"
        "    batch = tl.program_id(0)\n"
        "    cols = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)\n"
        "    base = x_ptr + batch * n_rows * n_cols\n"
        "    acc = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)\n"
        "    for start in range(0, n_rows, BLOCK_N):\n"
        "        rows = start + tl.arange(0, BLOCK_N)\n"
        "        mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)\n"
        "        acc = acc + tl.load(base + rows[:, None] * n_cols + cols[None, :], mask=mask, other=0.0)\n"
        "    total = tl.sum(acc, axis=0)\n"
        "    mean = total / n_rows\n"
        "    tl.store(out_ptr + batch * n_cols + cols, mean, mask=cols < n_cols)\n",
    ),
    (
        "        x = x.contiguous()\n        n_rows, n_cols = x.shape\n"
        "        out = torch.empty(n_cols, device=x.device, dtype=torch.float32)\n"
        "        colsum_kernel[(triton.cdiv(n_cols, 256),)](x, out, n_rows, n_cols, BLOCK_K=256)\n",
        "        x = x.contiguous().view(1, *x.shape)\n        batches, n_rows, n_cols = x.shape\n"
        "        out = torch.empty((batches, n_cols), device=x.device, dtype=torch.float32)\n"
        "        grid = (batches, triton.cdiv(n_cols, 256))\n"
        "        colsum_kernel[grid](x, out, n_rows, n_cols, BLOCK_N=8, BLOCK_K=256)\n",
    ),
    ("        return out\n", "        return out.view(-1)\n"),
    ("return x.mean(dim=1)", "return x.mean(dim=0)"),
)

# flag_gems' style: `import triton.language as lang`, the launch in a module-level helper,
# constexprs by position, a grid lambda over `meta`, and the block chosen in two branches (so
# LAUNCH_CONFIG's autotune cannot read it and leaves the kernel to the split)
HELPER_STYLE = h.variant(
    COLSUM,
    ("import triton.language as tl\n", "import triton.language as lang\n"),
    ("BLOCK_K: tl.constexpr", "BLOCK_K: lang.constexpr"),
    (
        "tl.program_id(0) * BLOCK_K + tl.arange(0, BLOCK_K)",
        "lang.program_id(0) * BLOCK_K + lang.arange(0, BLOCK_K)",
    ),
    ("acc = tl.zeros([BLOCK_K], dtype=tl.float32)", "acc = lang.zeros([BLOCK_K], dtype=lang.float32)"),
    ("acc += tl.load(", "acc += lang.load("),
    ("tl.store(out_ptr + cols, acc, mask=mask)", "lang.store(out_ptr + cols, acc, mask=mask)"),
    (
        "class ModelNew(nn.Module):\n    def forward(self, x):\n        x = x.contiguous()\n"
        "        n_rows, n_cols = x.shape\n"
        "        out = torch.empty(n_cols, device=x.device, dtype=torch.float32)\n"
        "        colsum_kernel[(triton.cdiv(n_cols, 256),)](x, out, n_rows, n_cols, BLOCK_K=256)\n"
        "        return out\n",
        "def column_sum(x):\n    n_rows, n_cols = x.shape\n"
        "    out = torch.empty(n_cols, device=x.device, dtype=torch.float32)\n"
        "    if x.dtype == torch.float32:\n        block = 256\n    else:\n        block = 512\n"
        '    colsum_kernel[lambda meta: (triton.cdiv(n_cols, meta["BLOCK_K"]),)](x, out, n_rows, n_cols, block)\n'
        "    return out\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"
        "        return column_sum(x.contiguous())\n",
    ),
)

# the first is split on the shapes' evidence alone; the second, whose wrapper's shapes the
# source model cannot follow (a view), on tier 1's finding
FIX = [
    pytest.param(
        COLSUM,
        [
            "def colsum_kernel_partials(x_ptr, out_ptr, n_rows, n_cols, partials_ptr, n_split, BLOCK_K: tl.constexpr):\n",
            "    for row in tl.range(tl.program_id(1), n_rows, n_split, loop_unroll_factor=4):\n",
            "    tl.store(partials_ptr + (tl.program_id(1) * programs + tile) * BLOCK_K + lanes, acc.to(tl.float64))\n",
            "def colsum_kernel_combine(x_ptr, out_ptr, n_rows, n_cols, partials_ptr, n_split, BLOCK_K: tl.constexpr):\n",
            "    for split in range(n_split):\n"
            "        acc += tl.load(partials_ptr + (split * programs + tile) * BLOCK_K + lanes).to(acc.dtype)\n"
            "    tl.store(out_ptr + cols, acc, mask=mask)\n",
            # the grid written out at the launch is bound once
            "        grid = (triton.cdiv(n_cols, 256),)\n",
            "        n_split = max(1, min(n_rows, 528 // grid[0]))\n"
            "        if n_split > 1:\n"
            "            partials = out.new_empty((n_split, grid[0], 256), dtype=torch.float64)\n"
            "            colsum_kernel_partials[(*grid, n_split)](x, out, n_rows, n_cols, "
            "BLOCK_K=256, partials_ptr=partials, n_split=n_split)\n"
            "            colsum_kernel_combine[grid](x, out, n_rows, n_cols, BLOCK_K=256, "
            "partials_ptr=partials, n_split=n_split)\n"
            "        else:\n"
            "            colsum_kernel[grid](x, out, n_rows, n_cols, BLOCK_K=256)\n",
            "def colsum_kernel(x_ptr, out_ptr, n_rows, n_cols, BLOCK_K: tl.constexpr):\n",
        ],
        RuleInput((), ProposalContext(cases=CASES)),
        id="column-sum-keyword-launch",
    ),
    pytest.param(
        BATCHED_MEAN,
        [
            "    for start in tl.range(tl.program_id(2) * BLOCK_N, n_rows, n_split * BLOCK_N, loop_unroll_factor=4):\n",
            "    tile = tl.program_id(0) * tl.num_programs(1) + tl.program_id(1)\n",
            "    lanes = tl.arange(0, BLOCK_N)[:, None] * BLOCK_K + tl.arange(0, BLOCK_K)[None, :]\n",
            "* (BLOCK_N * BLOCK_K) + lanes, acc.to(tl.float64))\n",
            "    total = tl.sum(acc, axis=0)\n    mean = total / n_rows\n",
            "        n_split = max(1, min(triton.cdiv(n_rows, 8), 528 // (grid[0] * grid[1])))\n"
            "        if n_split > 1:\n"
            "            partials = out.new_empty((n_split, grid[0] * grid[1], 8 * 256), dtype=torch.float64)\n"
            "            colsum_kernel_partials[(*grid, n_split)](",
            "            colsum_kernel_combine[grid](",
            "        else:\n            colsum_kernel[grid](x, out, n_rows, n_cols, BLOCK_N=8, BLOCK_K=256)\n",
        ],
        RuleInput((few_programs("colsum_kernel"),), ProposalContext(cases=CASES)),
        id="batched-mean-2d-tile-rank-2-named-grid-finish-through-locals",
    ),
    # a loop already written as `tl.range`
    pytest.param(
        h.variant(COLSUM, ("for row in range(n_rows)", "for row in tl.range(n_rows)")),
        [
            "    for row in tl.range(tl.program_id(1), n_rows, n_split, loop_unroll_factor=4):\n",
            "    for split in range(n_split):\n",
        ],
        RuleInput((), ProposalContext(cases=CASES)),
        id="loop-over-tl-range",
    ),
]

# refused with tier 1's finding given (the structure is what stops them), except the first,
# whose shapes show enough programs and which no finding names
NOOP = [
    pytest.param(
        h.variant(COLSUM, ("BLOCK_K=256", "BLOCK_K=4"), ("cdiv(n_cols, 256)", "cdiv(n_cols, 4)")),
        False,
        id="many-programs",
    ),
    # the author fixed the geometry so the sums add in one order at every shape
    pytest.param(
        COLSUM.replace(
            "        colsum_kernel[", "        # one grid at every batch size: the sums stay batch-invariant\n        colsum_kernel["
        ),
        True,
        id="geometry-fixed-for-reproducible-sums",
    ),
    pytest.param(
        h.variant(
            COLSUM,
            ("    for row in range(n_rows):\n", "    ptrs = x_ptr + cols\n    for row in range(n_rows):\n"),
            (
                "        acc += tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)\n",
                "        acc += tl.load(ptrs, mask=mask, other=0.0)\n        ptrs += n_cols\n",
            ),
        ),
        True,
        id="pointer-carried-between-iterations",
    ),
    pytest.param(
        h.variant(
            COLSUM, ("acc += tl.load(", "acc = tl.maximum(acc, tl.load("), ("other=0.0)\n", "other=0.0))\n")
        ),
        True,
        id="update-not-a-sum",
    ),
    pytest.param(
        h.variant(
            COLSUM,
            ("tl.store(out_ptr + cols, acc, mask=mask)", "tl.store(out_ptr + cols, acc / row, mask=mask)"),
        ),
        True,
        id="loop-index-read-after-the-loop",
    ),
    pytest.param(
        h.variant(
            COLSUM,
            (
                "        acc += tl.load(",
                "        tl.store(out_ptr + cols, acc, mask=mask)\n        acc += tl.load(",
            ),
        ),
        True,
        id="loop-stores",
    ),
    pytest.param(
        h.variant(COLSUM, ("dtype=tl.float32)\n    for", "dtype=tl.int64)\n    for")),
        True,
        id="int64-accumulator",
    ),
    pytest.param(
        h.variant(
            COLSUM,
            ("tl.store(out_ptr + cols, acc, mask=mask)", "tl.atomic_add(out_ptr + cols, acc, mask=mask)"),
        ),
        True,
        id="atomic-finish",
    ),
    pytest.param(
        h.variant(COLSUM, ("[(triton.cdiv(n_cols, 256),)]", "[(1,)]")),
        True,
        id="one-program-is-two-stages-case",
    ),
    pytest.param((h.SUITE / "19_mse_loss_fp32.py").read_text(), True, id="someone-elses-second-stage"),
    pytest.param(
        h.variant(
            COLSUM,
            (
                "@triton.jit\ndef colsum_kernel(",
                "@triton.jit\ndef mark(flag_ptr):\n    tl.store(flag_ptr, 1)\n\n\n"
                "@triton.jit\ndef colsum_kernel(",
            ),
            ("    mask = cols < n_cols\n", "    mask = cols < n_cols\n    mark(out_ptr)\n"),
        ),
        True,
        id="calls-a-helper-that-stores",
    ),
]


@pytest.mark.parametrize(("before", "present", "inp"), FIX)
def test_it_splits_the_loop_of_a_few_programs(before: str, present: list[str], inp: RuleInput) -> None:
    rw = split_long_loop(before, inp)
    after = rw.source if rw is not None else None
    assert after is not None and h.parses(after)
    for text in present:
        assert text in after, text


@pytest.mark.parametrize(("before", "told"), NOOP)
def test_it_refuses_what_it_cannot_prove(before: str, told: bool) -> None:
    findings = (few_programs("colsum_kernel"), few_programs("finish_mean_kernel")) if told else ()
    assert split(before, findings) is None


def test_tier_1s_finding_is_evidence_where_the_shapes_say_nothing() -> None:
    """The wrapper's shapes are unknown without cases; tier 1 measured the programs."""
    bare = RuleInput((), ProposalContext())
    assert split_long_loop(COLSUM, bare) is None
    low = RuleInput((few_programs("colsum_kernel", Severity.LOW),), ProposalContext())
    assert split_long_loop(COLSUM, low) is None  # every SM works: the low finding is about latency
    told = RuleInput((few_programs("colsum_kernel"),), ProposalContext())
    assert split_long_loop(COLSUM, told) is not None


def helper_style_rewrite() -> Rewrite:
    inp = RuleInput((few_programs("colsum_kernel"),), ProposalContext(cases=CASES))
    rw = apply_family(Family.LAUNCH_CONFIG, HELPER_STYLE, inp)
    assert rw is not None
    return rw


def test_launch_config_splits_what_its_autotune_cannot_read() -> None:
    """The family tries the autotune first; a block chosen in two branches is refused there, and
    the split takes the kernel (in another project's style: alias, helper, positional, lambda)."""
    rw = helper_style_rewrite()
    assert rw.kernels == ("colsum_kernel",)
    assert "lang.store(partials_ptr + (lang.program_id(1) * programs + tile) * BLOCK_K + lanes" in rw.source
    assert "for row in lang.range(lang.program_id(1), n_rows, n_split, loop_unroll_factor=4):" in rw.source
    assert "colsum_kernel_partials[(triton.cdiv(n_cols, block), n_split)](" in rw.source
    assert 'colsum_kernel_combine[lambda meta: (triton.cdiv(n_cols, meta["BLOCK_K"]),)](' in rw.source
    assert "@triton.autotune" not in rw.source


def test_split_modules_are_correct_under_the_interpreter(tmp_path: Path) -> None:
    """Verify inputs with fewer rows than splits, more, odd column counts and one row (one split:
    the kernel as it was); a mutation that drops the last split must fail the same check."""
    sources = {p.id: split_long_loop(p.values[0], p.values[2]).source for p in FIX}
    sources["helper-style"] = st.for_interpreter(helper_style_rewrite().source)
    dropped = sources["column-sum-keyword-launch"]
    assert dropped is not None and "for split in range(n_split):" in dropped
    sources["mutant-drops-a-split"] = dropped.replace(
        "for split in range(n_split):", "for split in range(n_split - 1):"
    )
    assert all(source is not None for source in sources.values()), sources
    h.assert_interp_ok(sources, tmp_path)


def test_every_split_is_reviewable(tmp_path: Path) -> None:
    """No ruff finding, repeated statement, copied name or constant that never varies added."""
    pairs = [(p.id, p.values[0], split_long_loop(p.values[0], p.values[2]).source) for p in FIX]
    pairs.append(("helper-style", HELPER_STYLE, helper_style_rewrite().source))
    assert review.added(pairs, tmp_path) == {}


def test_tier_1s_few_programs_lead_the_proposer_to_the_split() -> None:
    from diagnosis.engine.proposers.rules import RulesProposer

    cands = RulesProposer().propose(
        HELPER_STYLE, [few_programs("colsum_kernel")], ProposalContext(cases=CASES)
    )
    assert [c.family for c in cands] == [Family.LAUNCH_CONFIG]
    assert "def colsum_kernel_partials(" in cands[0].source and "T1-FEW-PROGRAMS" in cands[0].rationale


# --- exploration inside the family: an autotune that did not help leaves the split ----------


def _lc_round(transform: str, verdict: Verdict = Verdict.NO_GAIN) -> RoundHistory:
    return RoundHistory(index=1, family=Family.LAUNCH_CONFIG, verdict=verdict, proposer="rules", transform=transform)


def test_the_first_launch_config_rewrite_of_few_colsum_is_the_autotune() -> None:
    context = ProposalContext(cases=CASES, max_candidates=1)
    [cand] = RulesProposer(max_candidates=1).propose(COLSUM, [few_programs("colsum_kernel")], context)
    assert cand.family is Family.LAUNCH_CONFIG and cand.transform == "autotune_launch_config"
    assert "colsum_kernel_partials" not in cand.source


def test_after_the_autotune_brought_no_gain_the_family_proposes_its_split() -> None:
    """The history of the version names the transform that failed: the family stays open and
    its next transform is the candidate."""
    history = (_lc_round("autotune_launch_config"),)
    assert Family.LAUNCH_CONFIG not in excluded_families(history)
    context = ProposalContext(cases=CASES, history=history, round_index=1, max_candidates=1)
    [cand] = RulesProposer(max_candidates=1).propose(COLSUM, [few_programs("colsum_kernel")], context)
    assert cand.transform == "split_long_loop"
    assert "def colsum_kernel_partials(" in cand.source


@pytest.mark.parametrize(
    "history",
    [
        pytest.param((_lc_round("autotune_launch_config"), _lc_round("split_long_loop", Verdict.FAILED),
                      _lc_round("split_carried_scan")), id="every-transform-failed"),
        pytest.param((_lc_round(""),), id="a-proposal-that-named-no-transform"),
        pytest.param((_lc_round("grouped_program_order+autotune_launch_config"), _lc_round("split_long_loop"),
                      _lc_round("split_carried_scan")), id="a-composition-counts-for-both"),
    ],
)  # fmt: skip
def test_a_family_is_ruled_out_once_nothing_of_it_is_left(history: tuple[RoundHistory, ...]) -> None:
    assert Family.LAUNCH_CONFIG in excluded_families(history)
    context = ProposalContext(cases=CASES, history=history, round_index=2, max_candidates=1)
    assert RulesProposer(max_candidates=1).propose(COLSUM, [few_programs("colsum_kernel")], context) == []


def test_a_win_does_not_rule_its_family_out() -> None:
    assert excluded_families((_lc_round("autotune_launch_config", Verdict.IMPROVED),)) == set()
