"""BLOCK_REDUCTION: same-address atomics become per-program partials plus a one-program sum."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnosis.engine.evidence import Family
from diagnosis.engine.proposers.rules import apply_family
from tests.engine.rules_cases import harness as h
from tests.engine.rules_cases import styles as st

MEAN = h.source("mean_atomic.py")

OUT_READ_BEFORE = MEAN.replace(
    "        BLOCK_SIZE = 256\n", "        out += 1.0\n        BLOCK_SIZE = 256\n"
).replace("return out\n", "return out - 1.0\n", 1)

FIX = [
    pytest.param(
        MEAN,
        [
            "def mean_kernel_partials(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):",
            "    tl.store(out_ptr + tl.program_id(0), partial)\n",
            "        out = torch.empty((), device=x.device, dtype=torch.float32)\n",
            "        n_partials = triton.cdiv(n, BLOCK_SIZE)\n"
            "        partials = torch.empty((n_partials,), device=out.device, dtype=torch.float32)\n"
            "        mean_kernel_partials[(n_partials,)](x, partials, n, BLOCK_SIZE=BLOCK_SIZE)\n"
            "        sum_partials_kernel[(1,)](partials, out, n_partials, BLOCK_SIZE=1024)\n",
            "    tl.store(out_ptr, total.to(out_ptr.dtype.element_ty))\n",
        ],
        ["tl.atomic_add(", "def mean_kernel("],
        id="fresh-zeros-output-stored-once",
    ),
    pytest.param(
        OUT_READ_BEFORE,
        [
            "        out = torch.zeros((), device=x.device, dtype=torch.float32)\n",
            "    tl.store(out_ptr, (tl.load(out_ptr).to(tl.float32) + total).to(out_ptr.dtype.element_ty))\n",
        ],
        ["tl.atomic_add("],
        id="output-with-prior-contents-accumulated",
    ),
]

NOOP = [
    pytest.param(h.source("vec_add.py"), id="no-atomics"),
    pytest.param(MEAN.replace("tl.atomic_add(out_ptr, partial)", "tl.atomic_add(out_ptr + pid % 2, partial)"),
                 id="address-not-a-scalar-parameter"),
    pytest.param(MEAN.replace("tl.atomic_add(out_ptr, partial)", "tl.atomic_max(out_ptr, partial)"), id="atomic-max"),
    pytest.param(
        MEAN.replace("    tl.atomic_add(out_ptr, partial)", "    if pid > 0:\n        tl.atomic_add(out_ptr, partial)"),
        id="atomic-under-a-branch",
    ),
    pytest.param(
        MEAN.replace("tl.atomic_add(out_ptr, partial)", "tl.atomic_add(out_ptr, partial, mask=partial > 0)"),
        id="masked-atomic",
    ),
    pytest.param(
        MEAN.replace("mean_kernel[(triton.cdiv(n, BLOCK_SIZE),)]", "mean_kernel[(triton.cdiv(n, BLOCK_SIZE), 2)]"),
        id="2d-grid",
    ),
]


@pytest.mark.parametrize(("before", "present", "absent"), FIX)
def test_it_turns_atomics_into_two_stages(before: str, present: list[str], absent: list[str]) -> None:
    rw = apply_family(Family.BLOCK_REDUCTION, before, h.rule_input())
    assert rw is not None
    assert h.parses(rw.source)
    for text in present:
        assert text in rw.source
    for text in absent:
        assert text not in rw.source


@pytest.mark.parametrize("before", NOOP)
def test_it_leaves_other_reductions_alone(before: str) -> None:
    assert apply_family(Family.BLOCK_REDUCTION, before, h.rule_input()) is None


def test_the_rationale_is_honest_about_the_gain() -> None:
    rw = apply_family(Family.BLOCK_REDUCTION, MEAN, h.rule_input())
    assert rw is not None
    assert "deterministic" in rw.effect and "small" in rw.effect and "Measured" in rw.effect


def test_two_stage_modules_are_correct(tmp_path: Path) -> None:
    paths = []
    for name, text in (("fresh.py", MEAN), ("accumulate.py", OUT_READ_BEFORE)):
        rw = apply_family(Family.BLOCK_REDUCTION, text, h.rule_input())
        assert rw is not None
        path = tmp_path / name
        path.write_text(rw.source)
        paths.append(path)
    results = h.interp_check(paths)
    for path in paths:
        assert results[str(path)]["ok"], results[str(path)]["message"]


# --- code styles ---------------------------------------------------------------------------------

FAMILY = Family.BLOCK_REDUCTION
MEAN = st.source("mean_atomic.py")

STYLES = [
    # the block by position, the grid a lambda read at it, the launch in a helper
    st.row(MEAN, "mean_atomic.py",
           ["    n_partials = triton.cdiv(N, 1024)\n",
            "    mean_kernel_partials[(n_partials,)](x, partials, N, 1024)\n",
            "    out = torch.empty([], dtype=torch.float32, device=x.device)\n"],
           ["grid = lambda"], id="positional-block-grid-lambda-helper"),
    *st.import_rows("mean_atomic.py", ["    sum_partials_kernel[(1,)](partials, out, n_partials, BLOCK_SIZE=1024)\n"]),
]

STYLE_REFUSALS = [
    st.row(MEAN.replace("@triton.jit\n", '@triton.autotune(configs=[triton.Config({"BLOCK_SIZE": 1024})], key=["N"])\n'
                        "@triton.jit\n").replace("mean_kernel[grid](x, out, N, 1024)", "mean_kernel[grid](x, out, N)"),
           "mean_atomic.py", id="program-count-chosen-by-an-autotuner"),
]


@pytest.mark.parametrize("case", STYLES)
def test_it_reduces_every_code_style(case: st.StyleCase) -> None:
    st.rewrite(FAMILY, case)


@pytest.mark.parametrize("case", STYLE_REFUSALS)
def test_it_refuses_a_program_count_it_cannot_know(case: st.StyleCase) -> None:
    assert st.refused(FAMILY, case)
