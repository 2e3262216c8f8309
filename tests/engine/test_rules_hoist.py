"""HOIST: a loop-invariant load leaves a loop that also stores (before/after tables, the tier-0
finding that points at it, the compiled loop, and interpreter correctness)."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnosis.engine.evidence import Family, Severity
from diagnosis.engine.proposers.base import ProposalContext
from diagnosis.engine.proposers.rules import RulesProposer, apply_family
from diagnosis.engine.tier0 import run_tier0
from tests.engine.rules_cases import harness as h
from tests.engine.rules_cases import styles as st

BIAS_ROWS = h.source("bias_rows.py")
LOOP = "    for row in range(0, n_rows):\n"
B_LOAD = "        b = tl.load(b_ptr + cols, mask=mask, other=0.0)\n"


def variant(old: str, new: str, source: str = BIAS_ROWS) -> str:
    assert old in source, old
    return source.replace(old, new)


FIX = [
    pytest.param(
        BIAS_ROWS,
        ["    b = tl.load(b_ptr + cols, mask=mask & (0 < n_rows), other=0.0)\n" + LOOP],
        id="masked-load-gains-the-trip-condition",
    ),
    pytest.param(
        variant(B_LOAD, "        b = tl.load(b_ptr + cols)\n"),
        ["    b = tl.load(b_ptr + cols, mask=0 < n_rows)\n" + LOOP],
        id="unmasked-load-gets-the-trip-condition-as-mask",
    ),
    pytest.param(
        variant(LOOP, "    for row in range(4):\n"),
        ["    b = tl.load(b_ptr + cols, mask=mask, other=0.0)\n    for row in range(4):\n"],
        id="literal-bounds-that-run-need-no-guard",
    ),
    pytest.param(
        variant(LOOP, "    for row in range(n_rows):\n"),
        ["    b = tl.load(b_ptr + cols, mask=mask & (0 < n_rows), other=0.0)\n    for row in range(n_rows):\n"],
        id="single-argument-range",
    ),
    pytest.param(
        variant(LOOP, "    for row in tl.range(1, n_rows + 1, 2):\n"),
        ["mask=mask & (1 < (n_rows + 1))"],
        id="tl-range-with-a-positive-step",
    ),
    pytest.param(
        variant(B_LOAD, "        bp = b_ptr + cols\n        b = tl.load(bp, mask=mask, other=0.0)\n"),
        ["    bp = b_ptr + cols\n    b = tl.load(bp, mask=mask & (0 < n_rows), other=0.0)\n" + LOOP],
        id="the-invariant-address-it-reads-moves-along",
    ),
]

NOOP = [
    pytest.param(variant(LOOP + B_LOAD, LOOP), id="no-load-in-the-loop"),
    pytest.param(
        variant("tl.store(out_ptr + row * stride + cols, x + b, mask=mask)", "acc += x + b").replace(
            LOOP, "    acc = tl.zeros((BLOCK,), dtype=tl.float32)\n" + LOOP
        ),
        id="loop-without-stores-the-compiler-hoists",
    ),
    pytest.param(variant("b_ptr + cols, mask", "b_ptr + row + cols, mask"), id="address-depends-on-the-loop"),
    pytest.param(variant("tl.store(out_ptr + row", "tl.store(b_ptr + row"), id="loop-writes-the-loaded-tensor"),
    pytest.param(variant(LOOP, "    for row in range(n_rows, 0, -1):\n"), id="negative-step"),
    pytest.param(variant(LOOP, "    for row in range(0, n_rows, step):\n"), id="runtime-step"),
    pytest.param(
        variant(LOOP, "    b = 0.0\n" + LOOP), id="name-bound-twice-in-the-kernel"
    ),
    pytest.param(
        variant(B_LOAD, "        y = b\n" + B_LOAD).replace("x + b, mask", "x + y, mask"),
        id="name-read-before-it-is-bound-in-the-loop",
    ),
    pytest.param(
        variant("b = tl.load(b_ptr + cols, mask=mask, other=0.0)", "b = tl.load(b_ptr + cols + helper(n_cols))"),
        id="a-call-that-is-not-pure-tl",
    ),
]


@pytest.mark.parametrize(("before", "present"), FIX)
def test_it_moves_the_invariant_load_before_the_loop(before: str, present: list[str]) -> None:
    rw = apply_family(Family.HOIST, before, h.rule_input())
    assert rw is not None
    assert h.parses(rw.source)
    for text in present:
        assert text in rw.source, text
    loop_body = rw.source.split(LOOP if LOOP in rw.source else "    for row in ")[1].split("\n\n")[0]
    assert "b = tl.load" not in loop_body


@pytest.mark.parametrize("before", NOOP)
def test_it_leaves_other_loops_alone(before: str) -> None:
    assert apply_family(Family.HOIST, before, h.rule_input()) is None


def test_tier0_points_at_the_load_only_when_the_loop_stores() -> None:
    found = [f for f in run_tier0(BIAS_ROWS).findings if f.code == "T0-INVARIANT-LOAD-IN-STORING-LOOP"]
    assert len(found) == 1
    f = found[0]
    assert f.family is Family.HOIST and f.kernel == "bias_rows_kernel"
    assert f.severity is Severity.LOW  # measured: a DRAM-bound kernel does not notice L1-hit reloads
    load_line = BIAS_ROWS.splitlines().index(B_LOAD.rstrip("\n")) + 1
    assert f.lines == (load_line, load_line - 1)
    assert f.args["invariant"] == 1 and f.args["total"] == 2
    assert f.gain == 1.25  # 3 memory instructions per iteration -> 2, halved
    by_id = {p.id: p.values[0] for p in FIX}
    via_local = [
        f for f in run_tier0(by_id["the-invariant-address-it-reads-moves-along"]).findings if f.family is Family.HOIST
    ]
    assert len(via_local) == 1
    no_store = NOOP[1].values[0]
    assert not [f for f in run_tier0(no_store).findings if f.code == "T0-INVARIANT-LOAD-IN-STORING-LOOP"]


def test_the_proposer_takes_the_tier0_finding_to_the_rewrite() -> None:
    findings = run_tier0(BIAS_ROWS).findings
    hoist = [f for f in findings if f.family is Family.HOIST]
    cands = RulesProposer().propose(BIAS_ROWS, hoist, ProposalContext())
    assert [c.family for c in cands] == [Family.HOIST]
    assert "T0-INVARIANT-LOAD-IN-STORING-LOOP" in cands[0].rationale
    assert "+    b = tl.load(b_ptr + cols, mask=mask & (0 < n_rows), other=0.0)" in cands[0].diff


def test_hoisted_modules_are_correct_under_the_interpreter(tmp_path: Path) -> None:
    """Every case and verify input, including a tensor of zero rows (the loop never runs and
    the guarded load reads nothing) and a strided launch."""
    paths = []
    by_id = {p.id: p.values[0] for p in FIX}
    for name, before in (
        ("bias_rows.py", BIAS_ROWS),
        ("bias_rows_range1.py", by_id["single-argument-range"]),
        ("bias_rows_address.py", by_id["the-invariant-address-it-reads-moves-along"]),
    ):
        rw = apply_family(Family.HOIST, before, h.rule_input())
        assert rw is not None
        path = tmp_path / name
        path.write_text(rw.source)
        paths.append(path)
    results = h.interp_check(paths)
    for path in paths:
        assert results[str(path)]["ok"], results[str(path)]["message"]


# --- code styles: the rule reads the kernel alone, in any import style ---------------------------

FAMILY = Family.HOIST
STYLES = st.import_rows(
    "../bias_rows.py",
    ["        x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)\n",
     "    b = tl.load(b_ptr + cols, mask=mask & (0 < n_rows), other=0.0)\n    for row in range(0, n_rows):\n"],
)


@pytest.mark.parametrize("case", STYLES)
def test_it_hoists_in_every_import_style(case: st.StyleCase) -> None:
    st.rewrite(FAMILY, case)
