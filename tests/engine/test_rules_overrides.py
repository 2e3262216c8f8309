"""A confirmed counterfactual written into the source (proposers/rules/overrides.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnosis.engine.evidence import Family, Finding, Severity
from diagnosis.engine.proposers.base import ProposalContext
from diagnosis.engine.proposers.rules.overrides import apply_override, counterfactual_candidates
from tests.engine.rules_cases import harness as h

KERNELS = Path(__file__).resolve().parents[1] / "kernels"
SOFTMAX = (KERNELS / "softmax_spills.py").read_text()
VADD = (KERNELS / "vadd_unaligned.py").read_text()
VADD_LAUNCH = "add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)"


def vadd_with(launch: str) -> str:
    return VADD.replace(VADD_LAUNCH, launch)


FIX = [
    pytest.param(
        SOFTMAX, "softmax_kernel", {"num_warps": 4},
        ["BLOCK=8192, num_warps=4)"], ["num_warps=NUM_WARPS"], id="module-constant-replaced-at-the-launch",
    ),
    pytest.param(
        vadd_with(VADD_LAUNCH.replace("BLOCK=1024)", "BLOCK=1024, num_warps=1)")),
        "add_kernel", {"num_warps": 8}, ["BLOCK=1024, num_warps=8)"], ["num_warps=1"], id="literal-replaced",
    ),
    pytest.param(
        VADD, "add_kernel", {"num_warps": 8, "num_stages": 1},
        ["BLOCK=1024, num_warps=8, num_stages=1)"], [], id="absent-options-appended",
    ),
    pytest.param(
        vadd_with(f"{VADD_LAUNCH}\n        {VADD_LAUNCH.replace('(x, y, out', '(y, x, out')}"),
        "add_kernel", {"num_warps": 2}, ["(x, y, out, n, BLOCK=1024, num_warps=2)", "(y, x, out, n, BLOCK=1024, num_warps=2)"],
        [], id="every-launch-of-the-kernel",
    ),
]  # fmt: skip

NOOP = [
    pytest.param(VADD, "add_kernel", {"divisibility": ["n"]}, id="divisibility-is-the-hints-familys"),
    pytest.param(VADD, "other_kernel", {"num_warps": 8}, id="another-kernel"),
    pytest.param(VADD, "add_kernel", {"num_warps": "8"}, id="not-an-int"),
    pytest.param(
        vadd_with("args = (x, y, out, n)\n        add_kernel[(triton.cdiv(n, 1024),)](*args, BLOCK=1024)"),
        "add_kernel", {"num_warps": 8}, id="star-args-launch",
    ),
    pytest.param(
        VADD.replace("@triton.jit", "@triton.autotune(configs=[triton.Config({}, num_warps=4)], key=['n'])\n@triton.jit"),
        "add_kernel", {"num_warps": 8}, id="autotuned-kernel",
    ),
    pytest.param(vadd_with(VADD_LAUNCH.replace("BLOCK=1024)", "BLOCK=1024, num_warps=8)")), "add_kernel",
                 {"num_warps": 8}, id="already-so"),
]  # fmt: skip


@pytest.mark.parametrize(("before", "kernel", "overrides", "present", "absent"), FIX)
def test_it_writes_launch_options_into_every_launch(
    before: str, kernel: str, overrides: dict, present: list[str], absent: list[str]
) -> None:
    rw = apply_override(before, kernel, overrides)
    assert rw is not None and h.parses(rw.source)
    assert rw.family is Family.LAUNCH_CONFIG and rw.kernels == (kernel,)
    for text in present:
        assert text in rw.source
    for text in absent:
        assert text not in rw.source


@pytest.mark.parametrize(("before", "kernel", "overrides"), NOOP)
def test_it_leaves_what_it_cannot_set_alone(before: str, kernel: str, overrides: dict) -> None:
    assert apply_override(before, kernel, overrides) is None


def confirmed(overrides: dict, family: Family, kernel: str, tests: str, effect: str) -> Finding:
    """A CG_COUNTERFACTUAL finding as tier 3's run_counterfactual makes it."""
    return Finding(
        "CG_COUNTERFACTUAL",
        Severity.MEDIUM,
        {
            "hypothesis": ", ".join(f"{k}={v}" for k, v in overrides.items()),
            "overrides": overrides,
            "expect": "no_spills",
            "tests": tests,
            "effect": effect,
        },
        kernel=kernel,
        family_override=family,
    )


SPILLS_GONE = confirmed(
    {"num_warps": 4}, Family.LAUNCH_CONFIG, "softmax_kernel", "CG_SPILL_CAUSE",
    "spills drop from 1044 to 0 bytes (registers 255 -> 94)",
)  # fmt: skip


def test_a_confirmed_counterfactual_becomes_a_candidate_that_cites_its_effect() -> None:
    (cand,) = counterfactual_candidates(SOFTMAX, [SPILLS_GONE], ProposalContext(), Family.LAUNCH_CONFIG)
    assert "num_warps=4)" in cand.source and cand.diff.startswith("---")
    assert cand.family is Family.LAUNCH_CONFIG and cand.proposer == "rules"
    assert cand.findings_addressed == ("CG_COUNTERFACTUAL", "CG_SPILL_CAUSE")
    assert "spills drop from 1044 to 0 bytes" in cand.rationale and "spills drop from 1044" in cand.expected
    assert "num_warps=4 at the launch of softmax_kernel (was: num_warps=NUM_WARPS)" in cand.mechanism


@pytest.mark.parametrize(
    "findings",
    [
        pytest.param([SPILLS_GONE], id="another-family-asked-for"),
        pytest.param(
            [
                Finding(
                    "CG_COUNTERFACTUAL_NO_EFFECT",
                    Severity.INFO,
                    dict(SPILLS_GONE.args),
                    kernel="softmax_kernel",
                    family_override=Family.HINTS,
                )
            ],
            id="not-confirmed",
        ),  # fmt: skip
    ],
)
def test_only_confirmed_counterfactuals_of_the_family_count(findings: list[Finding]) -> None:
    assert counterfactual_candidates(SOFTMAX, findings, ProposalContext(), Family.HINTS) == []


def test_a_divisibility_counterfactual_is_written_by_the_family_of_the_finding_it_tested() -> None:
    blocked = Finding(
        "CG_VECTORIZATION_BLOCKED",
        Severity.HIGH,
        {
            "line": 14,
            "what": "load",
            "width": 32,
            "reason": "mask bound",
            "op": "tt.load",
            "blockers": [{"arg": "n", "role": "mask", "value": 1000003, "why": "not divisible by 16"}],
        },
        lines=(14,),
        kernel="add_kernel",
        family_override=Family.MASKING,
    )
    cf = confirmed({"divisibility": ["n"]}, Family.MASKING, "add_kernel", "CG_VECTORIZATION_BLOCKED",
                   "the loads on line 14 become 128-bit")  # fmt: skip
    (cand,) = counterfactual_candidates(VADD, [blocked, cf], ProposalContext(), Family.MASKING)
    # MASKING's first transform that applies: full blocks access without the mask
    assert "    if pid * BLOCK <= n - BLOCK:\n" in cand.source, cand.source
    assert "the loads on line 14 become 128-bit" in cand.rationale
