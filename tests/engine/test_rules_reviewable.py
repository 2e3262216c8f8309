"""Rewrites a reviewer would accept: over every rewrite-table row of the test_rules_* modules and
every suite rewrite, the output adds no ruff finding (F, E9, B), no repeated statement, no copy
of one name into another and no constant that never varies (rules_cases/review.py)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from diagnosis.engine import sol
from diagnosis.engine.evidence import Family
from diagnosis.engine.proposers.base import ProposalContext
from diagnosis.engine.proposers.rules import (
    COMPOSITIONS,
    Chain,
    RuleInput,
    apply_chain,
    apply_family,
    chain_name,
    registered_families,
)
from tests.engine.rules_cases import harness as h
from tests.engine.rules_cases import review
from tests.engine.rules_cases import styles as st

# (test module, its family, the tables whose rows start with a module source)
TABLES = (
    ("test_rules_launch_config", Family.LAUNCH_CONFIG, ("FIX", "STYLES")),
    ("test_rules_single_pass", Family.SINGLE_PASS, ("FIX", "STYLES")),
    ("test_rules_hints", Family.HINTS, ("FIX", "STYLES")),
    ("test_rules_pipelining", Family.PIPELINING, ("FIX", "STYLES")),
    ("test_rules_swizzle", Family.SWIZZLE, ("FIX", "STYLES")),
    ("test_rules_dot_precision", Family.DOT_PRECISION, ("FIX", "STYLES")),
    ("test_rules_block_reduction", Family.BLOCK_REDUCTION, ("FIX", "STYLES")),
    ("test_rules_hoist", Family.HOIST, ("FIX", "STYLES")),
    ("test_rules_fusion", Family.FUSION, ("FIX", "STYLES")),
    ("test_rules_fusion_epilogue", Family.FUSION, ("FIX",)),
    ("test_rules_fusion_prologue", Family.FUSION, ("FIX",)),
    ("test_rules_tile_strided", Family.COALESCE, ("FIX", "SPLIT_FIX", "STYLES")),
    ("test_rules_pairs", Family.COALESCE, ("FIX", "STYLES")),
    ("test_rules_full_blocks", Family.MASKING, ("FIX", "STYLES")),
    ("test_rules_one_element_finish", Family.FUSION, ("FIX",)),
)


def table_rows() -> list[tuple[str, str, Family, RuleInput]]:
    """(row id, module source, family, rule input) for every row of the tables."""
    out = []
    for name, family, tables in TABLES:
        module = importlib.import_module(f"tests.engine.{name}")
        for table in tables:
            for param in getattr(module, table):
                first = param.values[0]
                if isinstance(first, st.StyleCase):
                    source, inp = first.source, st.rule_input(first)
                else:
                    source = first
                    given = [v for v in param.values[1:] if isinstance(v, RuleInput)]
                    inp = given[0] if given else h.rule_input()
                if source:  # rows read from bench/suite are empty without it
                    out.append((f"{name}::{table}[{param.id}]", source, family, inp))
    rows = importlib.import_module("tests.engine.test_rules_fusion_rows")
    out.append(("test_rules_fusion_rows::ABSMAX_SCALE", rows.ABSMAX_SCALE, Family.FUSION, h.rule_input()))
    return out


WILD = h.ROOT / "bench" / "wild" / "build"


def suite_rows(*folders: Path) -> list[tuple[str, str, Chain, RuleInput]]:
    """Every family alone and every composition on every module of the folders (the suite by
    default), as the H200 benchmark proposes them (bench/rules_fingerprint.py's chains)."""
    chains: list[Chain] = [(f,) for f in registered_families()] + [*COMPOSITIONS, (Family.FUSION,) * 2]
    out = []
    paths = [p for d in folders or (h.SUITE,) if d.is_dir() for p in sorted(d.glob("*.py"))]
    for path in (p for p in paths if re.match(r"\d\d_\w+\.py$", p.name)):
        inp = RuleInput((), ProposalContext(cases=h.cases_of(path), device=sol.lookup("NVIDIA H200").spec))
        out += [(f"{path.stem}::{chain_name(c)}", path.read_text(), c, inp) for c in chains]
    return out


def test_every_table_rewrite_is_reviewable(tmp_path: Path) -> None:
    pairs = []
    for row_id, source, family, inp in table_rows():
        rw = apply_family(family, source, inp)
        if rw is not None:
            pairs.append((row_id, source, rw.source))
    assert len(pairs) > 80  # the tables' rows, not a vacuous pass
    assert review.added(pairs, tmp_path) == {}


def rewrites(rows: list[tuple[str, str, Chain, RuleInput]]) -> list[tuple[str, str, str]]:
    pairs = []
    for row_id, source, chain, inp in rows:
        text = apply_chain(chain, source, inp)
        if text is not None:
            pairs.append((row_id, source, text))
    return pairs


@pytest.mark.slow
@pytest.mark.skipif(not h.SUITE.is_dir(), reason="bench/suite is absent")
def test_every_suite_rewrite_is_reviewable(tmp_path: Path) -> None:
    pairs = rewrites(suite_rows())
    assert len(pairs) > 100
    assert review.added(pairs, tmp_path) == {}


@pytest.mark.slow
@pytest.mark.skipif(not (WILD / "released").is_dir(), reason="the wild corpus is not built (bench/wild/build.py)")
def test_every_wild_rewrite_is_reviewable(tmp_path: Path) -> None:
    """Other projects' kernels, as released and as first converted: their wrappers compute
    warps and blocks in ways nobody here wrote (liger's `get_num_warps`, flag_gems' branches)."""
    pairs = rewrites(suite_rows(WILD / "released", WILD / "first_conversion"))
    assert len(pairs) > 100
    assert review.added(pairs, tmp_path) == {}


# --- the checks themselves: each names what a rewrite added ---------------------------------

KERNEL = """import triton
import triton.language as tl


@triton.jit
def k(x_ptr, n, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + cols, mask=cols < n)
    tl.store(x_ptr + cols, x * 2, mask=cols < n)
"""
CHECKED = [
    pytest.param(KERNEL.replace("    x = tl.load", "    cols = tl.arange(0, BLOCK)\n    x = tl.load"),
                 ["k: repeated statement x1"], id="a-statement-repeated"),
    pytest.param(KERNEL.replace("    x = tl.load(x_ptr + cols, mask=cols < n)\n",
                                "    x_vals = tl.load(x_ptr + cols, mask=cols < n)\n    x = x_vals\n"),
                 ["k: copy x1"], id="a-copy"),
    pytest.param(KERNEL.replace("    cols = tl.arange(0, BLOCK)\n", "    start = 0\n    cols = start + tl.arange(0, BLOCK)\n"),
                 ["k: constant never varied x1"], id="a-constant-never-varied"),
    pytest.param(KERNEL.replace("    x = tl.load(", "    unused = n * 2\n    x = tl.load("), ["ruff F841 x1"],
                 id="an-unused-local"),
    pytest.param(KERNEL.replace("    tl.store(x_ptr + cols, x * 2, mask=cols < n)\n",
                                "    tl.store(x_ptr + cols, x * 2, mask=cols < n)\n    x = tl.load(x_ptr + cols, mask=cols < n)\n"
                                "    tl.store(x_ptr + cols, x * 2, mask=cols < n)\n"),
                 [], id="a-load-again-after-a-store-is-no-repeat"),
]  # fmt: skip


@pytest.mark.parametrize(("after", "expected"), CHECKED)
def test_the_review_names_what_a_rewrite_adds(after: str, expected: list[str], tmp_path: Path) -> None:
    assert review.added([("row", KERNEL, after)], tmp_path).get("row", []) == expected
