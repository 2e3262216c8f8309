"""HINTS: guarded divisibility copies of kernels, and always-true contiguity hints."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnosis.engine.evidence import Family, Finding, Severity
from diagnosis.engine.proposers.base import CaseShape, ProposalContext
from diagnosis.engine.proposers.rules import RuleInput, apply_family
from diagnosis.engine.proposers.rules.hints import (
    aligned_copy,
    contiguity_hints,
    specialized_args,
    specialized_mask_bounds,
)
from tests.engine.rules_cases import harness as h
from tests.engine.rules_cases import styles as st

SOFTMAX = h.source("softmax_loops.py")
VEC_ADD = h.source("vec_add.py")


def blocked(kernel: str, *blockers: tuple[str, str]) -> Finding:
    """A tier-3 style finding: the access stays scalar because these arguments lack divisibility."""
    return Finding(
        code=h.code_for(Family.HINTS),
        severity=Severity.HIGH,
        args={"line": 1, "blockers": [{"arg": a, "role": r} for a, r in blockers]},
        kernel=kernel,
    )


def with_findings(*findings: Finding, cases: tuple[CaseShape, ...] = ()) -> RuleInput:
    return RuleInput(findings, ProposalContext(cases=cases))


FP16_ROWS = (CaseShape(0, ((64, 1000),), ("float16",)),)

FIX = [
    pytest.param(
        SOFTMAX,
        with_findings(blocked("softmax_kernel", ("stride_x", "offset"), ("n_cols", "mask"))),
        [
            "def softmax_kernel_aligned(x_ptr, out_ptr, n_cols, stride_x, stride_out, BLOCK_SIZE: tl.constexpr):\n"
            "    # launched only when these are multiples of 4\n"
            "    stride_x = stride_x // 4 * 4\n    n_cols = n_cols // 4 * 4\n    row = tl.program_id(0)\n",
            "        if x.stride(0) % 4 == 0 and n_cols % 4 == 0:\n"
            "            softmax_kernel_aligned[(n_rows,)](x, out, n_cols, x.stride(0), out.stride(0), BLOCK_SIZE=256)\n"
            "        else:\n"
            "            softmax_kernel[(n_rows,)](x, out, n_cols, x.stride(0), out.stride(0), BLOCK_SIZE=256)\n",
        ],
        id="finding-blockers-fp32",
    ),
    pytest.param(
        SOFTMAX,
        with_findings(blocked("softmax_kernel", ("n_cols", "mask")), cases=FP16_ROWS),
        ["    n_cols = n_cols // 8 * 8\n", "        if n_cols % 8 == 0:\n"],
        id="16-bit-elements-need-multiples-of-8",
    ),
    pytest.param(
        VEC_ADD,
        with_findings(cases=(CaseShape(0, ((3000, 7001), (3000, 7001)), ("float32", "float32")),)),
        ["    n_elements = n_elements // 4 * 4\n", "        if n_elements % 4 == 0:\n"],
        id="blockers-from-the-shape-cases",
    ),
    pytest.param(
        VEC_ADD,
        with_findings(),
        ["    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)\n"
         "    offsets = tl.max_contiguous(tl.multiple_of(offsets, BLOCK_SIZE), BLOCK_SIZE)\n"],
        id="contiguity-hint-without-blockers",
    ),
]

NOOP = [
    pytest.param(
        SOFTMAX, with_findings(blocked("softmax_kernel", ("x_ptr", "pointer"))), id="pointer-alignment-is-not-ours"
    ),
    pytest.param(
        VEC_ADD,
        with_findings(cases=(CaseShape(0, ((4096,), (4096,)), ("float32", "float32")),)),
        id="sizes-already-divisible-by-16",
    ),
]


@pytest.mark.parametrize(("before", "inp", "present"), FIX)
def test_it_adds_hints(before: str, inp: RuleInput, present: list[str]) -> None:
    rw = apply_family(Family.HINTS, before, inp)
    assert rw is not None
    assert h.parses(rw.source)
    for text in present:
        assert text in rw.source


@pytest.mark.parametrize(("before", "inp"), NOOP)
def test_it_copies_nothing_unproven(before: str, inp: RuleInput) -> None:
    assert aligned_copy(before, inp) is None


def test_it_does_not_hint_offsets_twice() -> None:
    hinted = contiguity_hints(VEC_ADD, with_findings())
    assert hinted is not None
    assert contiguity_hints(hinted.source, with_findings()) is None


def test_the_contiguity_hint_says_it_is_likely_no_gain() -> None:
    rw = contiguity_hints(VEC_ADD, with_findings())
    assert rw is not None and "no measurable gain" in rw.effect


def test_aligned_copies_are_correct_on_both_sides_of_the_guard(tmp_path: Path) -> None:
    # the verify inputs have rows of 700 (a multiple of 4), 37 and 256 columns
    rw = apply_family(Family.HINTS, SOFTMAX, with_findings(blocked("softmax_kernel", ("stride_x", "offset"), ("n_cols", "mask"))))
    assert rw is not None
    path = tmp_path / "aligned.py"
    path.write_text(rw.source)
    result = h.interp_check([path])[str(path)]
    assert result["ok"], result["message"]


def test_mask_bound_blockers_filed_under_masking_get_the_same_copy() -> None:
    f = blocked("softmax_kernel", ("n_cols", "mask"))
    masking = Finding(code=h.code_for(Family.MASKING), severity=Severity.HIGH, args=f.args, kernel=f.kernel)
    rw = apply_family(Family.MASKING, SOFTMAX, with_findings(masking))
    assert rw is not None and rw.family is Family.MASKING
    assert "    n_cols = n_cols // 4 * 4\n" in rw.source
    plain = Finding(code=h.code_for(Family.MASKING), severity=Severity.HIGH, args={"kernel": "softmax_kernel"})
    assert apply_family(Family.MASKING, SOFTMAX, with_findings(plain)) is None


def test_blockers_a_counterfactual_refuted_get_no_aligned_copy() -> None:
    """Tier 3 recompiled with the mask bound divisible and the access stayed as narrow: the bound
    is not the cause, so no copy guarded on it is proposed, whether the finding names it or the
    cases would."""
    f = blocked("softmax_kernel", ("n_cols", "mask"))
    refuted = Finding(code=f.code, severity=f.severity, args={**f.args, "refuted": ["n_cols"]}, kernel=f.kernel)
    assert apply_family(Family.MASKING, SOFTMAX, with_findings(refuted)) is None
    assert "softmax_kernel_aligned" not in (apply_family(Family.HINTS, SOFTMAX, with_findings(refuted)) or SOFTMAX)
    cases = (CaseShape(0, ((3000, 7001), (3000, 7001)), ("float32", "float32")),)
    add = Finding(code=f.code, severity=f.severity, args={"line": 1, "refuted": ["n_elements"]}, kernel="add_kernel")
    rw = apply_family(Family.HINTS, VEC_ADD, with_findings(add, cases=cases))
    assert rw is None or "n_elements // 4 * 4" not in rw.source
    assert "n_elements // 4 * 4" in apply_family(Family.HINTS, VEC_ADD, with_findings(cases=cases)).source


def test_no_aligned_copy_where_no_timed_case_could_take_it() -> None:
    """01_gemm's blockers as tier 3 names them from its 3000 x 5000 x 2500 case: stride_am
    (2500), K (2500), M (3000). No multiple-of-8 guard admits that case, and the other four
    cases are divisible by 16 already, so a guarded copy would run where it changes nothing."""
    import dataclasses

    path = Path(__file__).resolve().parents[2] / "bench" / "suite" / "01_gemm_fp16.py"
    if not path.is_file():
        pytest.skip("bench/suite is absent")
    gemm = path.read_text()
    finding = blocked("matmul_kernel", ("stride_am", "offset"), ("K", "mask"), ("M", "mask"))

    def recorded(cases: tuple[CaseShape, ...]) -> tuple[CaseShape, ...]:
        # what the baseline's verify job records: the strides the shapes alone do not give
        return tuple(
            dataclasses.replace(c, launch_ints=(("matmul_kernel", (("stride_am", c.shapes[0][1]),)),)) for c in cases
        )

    cases = recorded(h.cases_of(path))
    assert aligned_copy(gemm, with_findings(finding, cases=cases)) is None
    # without any case nothing says so, and the copy is proposed as before
    assert aligned_copy(gemm, with_findings(finding)) is not None
    # a 3000 x 5000 x 2504 case: K and its stride multiples of 8, not of 16, would take it
    odd = tuple(dataclasses.replace(c, shapes=((3000, 2504), (2504, 5000))) if c.index == 4 else c for c in h.cases_of(path))
    assert aligned_copy(gemm, with_findings(finding, cases=recorded(odd))) is not None


def test_no_contiguity_hint_where_the_findings_name_what_blocks() -> None:
    """A finding that names arguments lacking divisibility is not answered with a hint that is
    always true (it changes nothing: 01-04's GEMMs measured 0.995-1.000x on the H200)."""
    finding = blocked("add_kernel", ("n_elements", "mask"))
    assert contiguity_hints(VEC_ADD, with_findings(finding)) is None
    assert contiguity_hints(VEC_ADD, with_findings(blocked("add_kernel"))) is not None


# --- code styles: the rewrite of modules written the way other projects write them ------------

FAMILY = Family.HINTS
ADD = st.source("add_tutorial.py")
ADD_AUTOTUNED = ADD.replace(
    "@triton.jit\n",
    '@triton.autotune(configs=[triton.Config({"BLOCK_SIZE": 512}), triton.Config({"BLOCK_SIZE": 2048})],'
    ' key=["n_elements"])\n@triton.jit\n',
).replace(", BLOCK_SIZE=1024)", ")")

STYLES = [
    # the sizes some timed case makes multiples of 4 but not of 16 (rows of 1000), read through
    # forward -> Function.apply -> the helper -> calculate_settings
    st.row(st.source("softmax_liger.py"), "softmax_liger.py",
           ["    if n_cols % 4 == 0:\n        _softmax_single_block_forward_kernel_aligned[(n_rows,)](\n",
            "    # launched only when these are multiples of 4\n    n_cols = n_cols // 4 * 4\n"],
           id="liger-helper-through-function-apply"),
    st.row(st.source("softmax_online.py"), "softmax_online.py",
           ["        if N % 4 == 0:\n            softmax_kernel_inner_aligned[grid](out, x, M, N, TILE_N, num_warps=4)\n"],
           id="tile-by-position-in-a-with-block"),
    st.row(ADD_AUTOTUNED, "add_tutorial.py",
           ['key=["n_elements"])\n@triton.jit\ndef add_kernel_aligned('],  # the copy keeps its autotuner
           id="autotuned-kernel-copied-with-its-autotuner"),
    # without shape cases nothing names a size: the always-true contiguity hint, on the tutorial's
    # `block_start = pid * BLOCK_SIZE; offsets = block_start + tl.arange(...)`
    st.row(ADD, "", ["    offsets = tl.max_contiguous(tl.multiple_of(offsets, BLOCK_SIZE), BLOCK_SIZE)\n"],
           id="tutorial-offsets-through-block-start"),
    *[
        st.row(fn(ADD), "", [fn("    offsets = tl.max_contiguous(tl.multiple_of(offsets, BLOCK_SIZE), BLOCK_SIZE)\n")],
               ["import triton.language as tl\nimport triton.language"], id=f"contiguity-{style}")
        for style, fn in st.IMPORT_STYLES.items()
    ],
    *st.import_rows("softmax_online.py", ["def softmax_kernel_inner_aligned(", "        if N % 4 == 0:\n"]),
]


@pytest.mark.parametrize("case", STYLES)
def test_it_hints_every_code_style(case: st.StyleCase) -> None:
    st.rewrite(FAMILY, case)


# --- arguments the kernel keeps out of the JIT's specialization ---------------------------------

FLAT = h.source("flat_rows.py")
JIT_LINE = '@triton.jit(do_not_specialize=["n"])\n'


def specialize(before: str, *blockers: tuple[str, str], family: Family = Family.MASKING) -> str:
    finding = blocked("softplus_rows_kernel", *blockers)
    finding = Finding(code=h.code_for(family), severity=Severity.HIGH, args=finding.args, kernel=finding.kernel)
    rw = apply_family(family, before, with_findings(finding))
    assert rw is not None and rw.family is family and rw.transform.startswith("specialized_")
    assert "at most three compiled variants" in rw.effect
    return rw.source


SPECIALIZE = [
    pytest.param(FLAT, "@triton.jit\ndef softplus_rows_kernel(", id="names-the-blocking-bound"),
    pytest.param(FLAT.replace(JIT_LINE, "@triton.jit(do_not_specialize=[3])\n"), "@triton.jit\ndef softplus",
                 id="by-position"),
    pytest.param(FLAT.replace(JIT_LINE, '@triton.jit(do_not_specialize=("n", "stride_row"))\n'),
                 '@triton.jit(do_not_specialize=("stride_row",))\n', id="tuple-keeps-the-others-and-its-comma"),
    pytest.param(FLAT.replace(JIT_LINE, '@triton.jit(do_not_specialize=["stride_row", "n"], debug=False)\n'),
                 '@triton.jit(do_not_specialize=["stride_row"], debug=False)\n', id="list-keeps-the-others"),
    pytest.param(FLAT.replace(JIT_LINE, '@triton.jit(debug=False, do_not_specialize=["n"])\n'),
                 "@triton.jit(debug=False)\n", id="other-keywords-stay"),
    *[
        pytest.param(fn(FLAT), fn("@triton.jit\ndef softplus_rows_kernel("), id=f"import-{style}")
        for style, fn in st.IMPORT_STYLES.items()
    ],
]


@pytest.mark.parametrize(("before", "present"), SPECIALIZE)
def test_a_blocking_argument_leaves_do_not_specialize(before: str, present: str) -> None:
    after = specialize(before, ("n", "mask"))
    assert present in after
    # the one decorator line changes, nothing else
    assert [ln for ln in after.splitlines() if ln not in before.splitlines()] == [present.splitlines()[0]]


def test_hints_findings_take_the_same_route_before_the_guarded_copy() -> None:
    after = specialize(FLAT, ("n", "mask"), ("stride_row", "offset"), family=Family.HINTS)
    assert "@triton.jit\ndef softplus_rows_kernel(" in after and "_aligned" not in after


SPECIALIZE_NOOP = [
    pytest.param(FLAT.replace(JIT_LINE, "@triton.jit\n"), id="nothing-unspecialized"),
    pytest.param(FLAT.replace(JIT_LINE, '@triton.jit(do_not_specialize=["stride_row"])\n'),
                 id="the-blocker-is-specialized-already"),
    pytest.param(FLAT.replace(JIT_LINE, "@triton.jit(do_not_specialize=NO_SPEC)\n").replace(
        "class Model(", 'NO_SPEC = ["n"]\n\n\nclass Model('), id="a-list-the-module-computes"),
]


@pytest.mark.parametrize("before", SPECIALIZE_NOOP)
def test_no_specialization_that_the_findings_do_not_name(before: str) -> None:
    inp = with_findings(blocked("softplus_rows_kernel", ("n", "mask")))
    assert specialized_args(before, inp) is None and specialized_mask_bounds(before, inp) is None
    assert specialized_args(FLAT, with_findings(blocked("softplus_rows_kernel", ("x_ptr", "pointer")))) is None


def test_the_specialized_kernel_is_correct_under_the_interpreter(tmp_path: Path) -> None:
    # verify rows of 100 and 3001 elements: blocks cross rows, lengths not multiples of 16
    path = tmp_path / "flat_rows.py"
    path.write_text(specialize(FLAT, ("n", "mask")))
    result = h.interp_check([path])[str(path)]
    assert result["ok"], result["message"]
