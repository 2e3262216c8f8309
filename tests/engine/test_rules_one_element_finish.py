"""FUSION's skip_one_element_finish: the wrapper's torch reduction over a kernel's partials is
skipped where the reduced axis holds one element; and tier 0's T0-TORCH-FINISH, which points to
it."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnosis.engine.evidence import Family
from diagnosis.engine.proposers.rules import RuleInput, apply_family
from tests.engine import tier0
from tests.engine.rules_cases import harness as h

CASE = h.HERE / "partial_lse.py"
BEFORE = CASE.read_text()
FINISH = "    return partials.logsumexp(-1)\n"
CASES = h.cases_of(CASE)  # rows of 1024, 2048 and 512 fit one block; of 8192 and 5000, not
CASES_IN = h.rule_input(CASES)


def _variant(*pairs: tuple[str, str]) -> str:
    return h.variant(BEFORE, *pairs)


# (module, the line the rewrite writes, the rule's input)
FIX = [
    pytest.param(BEFORE, "    return partials.squeeze(-1) if partials.shape[-1] == 1 else partials.logsumexp(-1)\n",
                 CASES_IN, id="method-on-the-partials"),
    # fla's logsumexp_fwd: the finish rebinds the partials' name and is reshaped after
    pytest.param(
        _variant((FINISH, "    partials = partials.logsumexp(-1).view(n_rows)\n    return partials\n")),
        "    partials = (partials.squeeze(-1) if partials.shape[-1] == 1 else partials.logsumexp(-1)).view(n_rows)\n",
        CASES_IN,
        id="rebound-and-reshaped",
    ),
    pytest.param(
        _variant((FINISH, "    return torch.logsumexp(partials, dim=1)\n")),
        "    return partials.squeeze(1) if partials.shape[1] == 1 else torch.logsumexp(partials, dim=1)\n",
        CASES_IN,
        id="torch-function-dim-keyword",
    ),
    # a sum of per-block sums, the partials allocated by torch with their dtype
    pytest.param(
        _variant(
            ("torch.logsumexp(x, dim=-1)", "x.sum(dim=-1)"),
            ("    lse = tl.log(tl.sum(tl.exp(x - m), axis=0)) + m\n",
             "    lse = tl.sum(tl.where(cols < n_cols, x, 0.0), axis=0) + 0 * m\n"),
            ("    partials = x.new_empty(n_rows, n_blocks, dtype=torch.float32)\n",
             "    partials = torch.empty(n_rows, n_blocks, device=x.device, dtype=torch.float32)\n"),
            (FINISH, "    return partials.sum(1, keepdim=False)\n"),
        ),
        "    return partials.squeeze(1) if partials.shape[1] == 1 else partials.sum(1, keepdim=False)\n",
        CASES_IN,
        id="sum-over-torch-empty",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("before", "expected", "inp"), FIX)
def test_a_one_element_finish_reads_the_partials(before: str, expected: str, inp: RuleInput) -> None:
    rw = apply_family(Family.FUSION, before, inp)
    assert rw is not None and rw.transform == "skip_one_element_finish"
    assert expected in rw.source
    # nothing else changed: one line out, its replacement in
    assert len(set(before.splitlines()) - set(rw.source.splitlines())) == 1
    assert "(3 of 5 timed cases for `partials`)" in rw.mechanism


def test_the_rewrites_are_correct_on_every_case_under_the_interpreter(tmp_path: Path) -> None:
    paths = []
    for i, row in enumerate(FIX):
        before, _, inp = row.values
        rw = apply_family(Family.FUSION, before, inp)
        for tag, text in (("before", before), ("after", rw.source)):
            paths.append(tmp_path / f"finish_{i}_{tag}.py")
            paths[-1].write_text(text)
    results = h.interp_check(paths)
    failed = {p: r["message"] for p, r in results.items() if not r["ok"]}
    assert len(results) == 2 * len(FIX) and not failed, failed


REFUSALS = [
    pytest.param(BEFORE, (), id="no-case"),
    # every row longer than one block: nothing to skip
    pytest.param(BEFORE, tuple(c for c in CASES if c.shapes[0][1] > 2048), id="no-case-of-one-element"),
    pytest.param(_variant(("def row_logsumexp(x):", "def row_logsumexp(x, partials):"),
                          ("    partials = x.new_empty(n_rows, n_blocks, dtype=torch.float32)\n", "")),
                 CASES, id="partials-passed-in"),
    pytest.param(_variant(("x.new_empty(n_rows, n_blocks, dtype=torch.float32)", "torch.empty_like(x[:, :n_blocks])")),
                 CASES, id="partials-from-empty-like"),
    pytest.param(_variant((FINISH, "    return partials.logsumexp(-1), partials\n")), CASES,
                 id="partials-read-after-the-finish"),
    pytest.param(_variant((FINISH, "    return partials.sum(-1, dtype=torch.float64)\n")), CASES, id="a-dtype"),
    pytest.param(_variant((FINISH, "    return partials.logsumexp(-1, keepdim=True)\n")), CASES, id="keepdim"),
    pytest.param(_variant((FINISH, "    axis = -1\n    return partials.logsumexp(axis)\n")), CASES,
                 id="axis-not-a-literal"),
    pytest.param(_variant((FINISH, "    return partials.softmax(-1)\n")), CASES, id="not-a-reduction"),
    pytest.param(_variant(("dtype=torch.float32)", "dtype=torch.int32)"), (FINISH, "    return partials.sum(-1)\n")),
                 CASES, id="integer-partials"),
]  # fmt: skip


@pytest.mark.parametrize(("before", "cases"), REFUSALS)
def test_it_leaves_other_finishes_alone(before: str, cases: tuple) -> None:
    rw = apply_family(Family.FUSION, before, h.rule_input(cases))
    assert rw is None or rw.transform != "skip_one_element_finish"


def test_tier0_names_the_finish_and_its_kernel() -> None:
    (f,) = [f for f in tier0(BEFORE).findings if f.code == "T0-TORCH-FINISH"]
    lines = BEFORE.splitlines()
    assert f.family is Family.FUSION and f.kernel == "block_lse_kernel"
    assert lines[f.lines[0] - 1] == FINISH.rstrip("\n")
    assert "block_lse_kernel[(n_rows, n_blocks)]" in lines[f.lines[1] - 1]
    assert (f.args["function"], f.args["tensor"], f.args["op"], f.args["dim"]) == (
        "row_logsumexp", "partials", "logsumexp", -1
    )  # fmt: skip


@pytest.mark.parametrize("index", [2, 3, 4, 6])
def test_tier0_leaves_other_finishes_alone(index: int) -> None:
    before = REFUSALS[index].values[0]
    assert [f for f in tier0(before).findings if f.code == "T0-TORCH-FINISH"] == []
