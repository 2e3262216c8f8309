"""FUSION (partials through memory): row statistics a second row kernel reads back, and an
intermediate a kernel stores and reloads, stay in registers (before/after and refusal tables,
tier 0 to the rewrite, interpreter correctness; the compiled traffic is in
tests/runner/test_compile_families.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnosis.engine.evidence import Family
from diagnosis.engine.proposers.base import ProposalContext
from diagnosis.engine.proposers.rules import RulesProposer, apply_family
from diagnosis.engine.proposers.rules.fuse_partials import forward_stored_intermediates, fuse_row_statistics
from diagnosis.engine.tier0 import run_tier0
from tests.engine.rules_cases import harness as h

SOFTMAX = h.source("stats_softmax.py")
LAYERNORM = h.source("stats_layernorm.py")
ROWSCALE = h.source("stats_rowscale.py")
RELOAD_SOFTMAX = h.source("reload_softmax.py")
RELOAD_CENTER = h.source("reload_center.py")


def single_pass(source: str) -> str:
    rw = apply_family(Family.SINGLE_PASS, source, h.rule_input())
    assert rw is not None
    return rw.source


STATS = [
    pytest.param(
        SOFTMAX,
        [
            "def row_stats_normalize_kernel(x_ptr, max_ptr, sum_ptr, n_cols, stride, y_ptr, BLOCK_SIZE: tl.constexpr):\n"
            "    row = tl.program_id(0)\n    cols = tl.arange(0, BLOCK_SIZE)\n"
            '    x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=float("-inf"))\n'
            "    row_max = tl.max(x, axis=0)\n    max_val = row_max.to(max_ptr.dtype.element_ty)\n"
            "    sum_val = tl.sum(tl.exp(x - row_max), axis=0).to(sum_ptr.dtype.element_ty)\n"
            "    mask = cols < n_cols\n"
            "    tl.store(y_ptr + row * stride + cols, tl.exp(x - max_val) / sum_val, mask=mask)\n"
            "    tl.store(max_ptr + row, max_val)\n    tl.store(sum_ptr + row, sum_val)\n",
            "        row_stats_normalize_kernel[(n_rows,)](x, row_max, row_sum, n_cols, x.stride(0), y, "
            "BLOCK_SIZE=BLOCK_SIZE)\n        return y\n",
        ],
        id="softmax-keyword-launch",
    ),
    pytest.param(
        LAYERNORM,
        [
            "def ln_stats_ln_apply_kernel(X, Mean, Rstd, N, eps, BLOCK_N: tl.constexpr, Y, W, B):\n",
            "    tl.store(Y + row * N + cols, (x - Mean_val) * Rstd_val * w + b, mask=mask)\n",
            "    ln_stats_ln_apply_kernel[grid](x, mean, rstd, N, eps, BLOCK_N, y, weight, bias)\n",
        ],
        id="layernorm-positional-block-in-a-helper-named-grid",
    ),
    pytest.param(
        ROWSCALE,
        [
            "    norms_val = lang.sqrt(lang.sum(v * v, axis=0)).to(norms.dtype.element_ty)\n"
            "    lang.store(dst + r * width + c, v / (norms_val + 1e-6), mask=c < width)\n"
            "    lang.store(norms + r, norms_val)\n",
            "        row_norm_row_scale_kernel[grid](x, norms, width, out, BLOCK=block)\n",
        ],
        id="row-norm-lang-alias-grid-lambda",
    ),
]

RELOADS = [
    pytest.param(
        single_pass(RELOAD_SOFTMAX),
        [
            "    num = tl.exp(x - row_max)\n    y_val = num.to(y_ptr.dtype.element_ty)\n"
            "    denom = tl.sum(num, axis=0)\n",
            "    tl.store(y_row + cols, y_val / denom, mask=mask)\n",
            "            softmax_kernel_single_pass[(n_rows,)](",
        ],
        id="three-pass-softmax-after-single-pass",
    ),
    pytest.param(
        RELOAD_CENTER,
        [
            "    dst_val = (v - lang.sum(v, axis=0) / width).to(dst.dtype.element_ty)\n"
            "    centered = lang.where(m, dst_val, 0.0)\n",
        ],
        id="one-block-lang-alias-positional-helper-launch",
    ),
]

NOOP = [
    pytest.param(h.source("softmax_loops.py"), id="multi-pass-without-intermediate"),
    pytest.param(RELOAD_SOFTMAX, id="reload-in-row-loops-goes-to-single-pass-first"),
    pytest.param(
        h.variant(SOFTMAX, ("normalize_kernel[(n_rows,)]", "normalize_kernel[(n_rows, 1)]")),
        id="different-grids",
    ),
    pytest.param(
        h.variant(
            SOFTMAX,
            ("        y = torch.empty_like(x)\n", ""),
            ("y, n_cols, x.stride(0), BLOCK_SIZE", "x, n_cols, x.stride(0), BLOCK_SIZE"),
        ),
        id="output-is-an-input",
    ),
    pytest.param(
        h.variant(
            SOFTMAX,
            (
                "        y = torch.empty_like(x)\n",
                "        y = torch.empty_like(x)\n        row_max += 1.0\n",
            ),
        ),
        id="statistics-read-between-the-launches",
    ),
    pytest.param(
        h.variant(
            RELOAD_CENTER, ("center_scale_kernel[(rows,)](x, out,", "center_scale_kernel[(rows,)](out, out,")
        ),
        id="aliased-pointers",
    ),
    pytest.param(
        h.variant(
            RELOAD_CENTER,
            (
                "    centered = lang.load(dst + r * width + c, mask=m, other=0.0)",
                "    centered = lang.load(dst + r * width + c + 1, mask=m, other=0.0)",
            ),
        ),
        id="reload-at-another-address",
    ),
]


@pytest.mark.parametrize(("before", "present"), STATS)
def test_row_statistics_stay_in_registers(before: str, present: list[str]) -> None:
    rw = fuse_row_statistics(before, h.rule_input())
    assert rw is not None and h.parses(rw.source)
    for text in present:
        assert text in rw.source, text
    assert rw.source.count("@triton.jit") == before.count("@triton.jit") - 1


@pytest.mark.parametrize(("before", "present"), RELOADS)
def test_a_reloaded_intermediate_stays_in_a_register(before: str, present: list[str]) -> None:
    rw = forward_stored_intermediates(before, h.rule_input())
    assert rw is not None and h.parses(rw.source)
    for text in present:
        assert text in rw.source, text


@pytest.mark.parametrize("before", NOOP)
def test_it_refuses_what_it_cannot_prove(before: str) -> None:
    assert fuse_row_statistics(before, h.rule_input()) is None
    assert forward_stored_intermediates(before, h.rule_input()) is None


def test_tier0_points_row_loops_to_single_pass_then_the_straight_line_reload_to_fusion() -> None:
    (loops,) = [f for f in run_tier0(RELOAD_SOFTMAX).findings if f.code == "T0-INTERMEDIATE-RELOADED"]
    assert loops.family is Family.SINGLE_PASS
    flat = single_pass(RELOAD_SOFTMAX)
    by_kernel = {f.kernel: f.family for f in run_tier0(flat).findings if f.code == "T0-INTERMEDIATE-RELOADED"}
    assert by_kernel == {"softmax_kernel": Family.SINGLE_PASS, "softmax_kernel_single_pass": Family.FUSION}
    forwarded = forward_stored_intermediates(
        flat, h.rule_input(kernels=frozenset({"softmax_kernel_single_pass"}))
    )
    assert forwarded is not None and forwarded.kernels == ("softmax_kernel_single_pass",)


def test_tier0_leads_the_proposer_to_the_rewrites() -> None:
    for source, code in ((SOFTMAX, "T0-STATS-THROUGH-MEMORY"), (RELOAD_CENTER, "T0-INTERMEDIATE-RELOADED")):
        findings = [f for f in run_tier0(source).findings if f.family is Family.FUSION]
        assert code in {f.code for f in findings}
        cands = RulesProposer().propose(source, findings, ProposalContext())
        assert [c.family for c in cands][:1] == [Family.FUSION]
        assert code in cands[0].findings_addressed
        assert code not in {f.code for f in run_tier0(cands[0].source).findings}
    assert apply_family(Family.FUSION, SOFTMAX, h.rule_input()) is not None


def test_fused_modules_are_correct_under_the_interpreter(tmp_path: Path) -> None:
    """Rows shorter than, equal to and longer than a power of two, a single row, one column;
    the three-pass softmax's single-pass branch is what its verify inputs take."""
    paths = []
    for table, fn in ((STATS, fuse_row_statistics), (RELOADS, forward_stored_intermediates)):
        for p in table:
            rw = fn(p.values[0], h.rule_input())
            assert rw is not None
            path = tmp_path / f"{p.id}.py"
            path.write_text(rw.source)
            paths.append(path)
    results = h.interp_check(paths)
    for path in paths:
        assert results[str(path)]["ok"], results[str(path)]["message"]
