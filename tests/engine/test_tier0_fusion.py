from __future__ import annotations

import pytest

from diagnosis.engine.escalation import modest_gain
from diagnosis.engine.evidence import Family, Severity
from tests.engine import marks, primary, src, tier0

CODES = {"T0-UNFUSED-LAUNCHES", "T0-SAME-INPUT-RELOADED"}

KERNELS = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, y_ptr, n, s, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * s, mask=offs < n)


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=offs < n), 0.0), mask=offs < n)


@triton.jit
def add_kernel(a_ptr, b_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    a = tl.load(a_ptr + offs, mask=offs < n)
    tl.store(y_ptr + offs, a + tl.load(b_ptr + offs, mask=offs < n), mask=offs < n)


def scale(x, s):
    y = torch.empty_like(x)
    scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), s, BLOCK=1024)  # <- MARK-SCALE
    return y


def relu(x):
    y = torch.empty_like(x)
    relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)  # <- MARK-RELU
    return y


def add(a, b):
    y = torch.empty_like(a)
    add_kernel[(triton.cdiv(a.numel(), 1024),)](a, b, y, a.numel(), BLOCK=1024)  # <- MARK-ADD
    return y
"""


def model(forward: str, marks_: dict[str, str] | None = None) -> str:
    text = KERNELS
    for mark, code in (marks_ or {}).items():
        text = text.replace(f"# <- {mark}", f"# <- {code}")
    return text + (
        "\n\nclass ModelNew(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n\n"
        "    def forward(self, x, w):\n"
        f"{forward}\n"
    )


NOOP = [
    pytest.param(model("        return relu(x)"), id="one-launch"),
    pytest.param(model("        return relu(x), scale(w, 2.0)"), id="independent-launches"),
    pytest.param(
        src(
            """
            import torch
            import torch.nn as nn
            import triton
            import triton.language as tl


            @triton.jit
            def partial_sums(x_ptr, partial_ptr, n, BLOCK: tl.constexpr):
                offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
                tl.store(partial_ptr + tl.program_id(0), tl.sum(tl.load(x_ptr + offs, mask=offs < n, other=0.0)))


            @triton.jit
            def finish(partial_ptr, out_ptr, n_partials, n, BLOCK: tl.constexpr):
                offs = tl.arange(0, BLOCK)
                tl.store(out_ptr, tl.sum(tl.load(partial_ptr + offs, mask=offs < n_partials, other=0.0)) / n)


            class ModelNew(nn.Module):
                def forward(self, x):
                    n_blocks = triton.cdiv(x.numel(), 1024)
                    partials = torch.empty((n_blocks,), device=x.device)
                    out = torch.empty((), device=x.device)
                    partial_sums[(n_blocks,)](x, partials, x.numel(), BLOCK=1024)
                    finish[(1,)](partials, out, n_blocks, x.numel(), BLOCK=1024)
                    return out
            """
        ),
        id="two-stage-reduction-through-small-partials",
    ),
    pytest.param(
        model("        if x.shape[-1] > 4096:\n            return scale(x, 2.0)\n        else:\n            return relu(x)"),
        id="dispatch-by-shape-in-if-else",
    ),
    pytest.param(
        model(
            "        if x.shape[-1] > 4096:\n            h = scale(x, 2.0)\n        elif x.shape[-1] > 1024:\n"
            "            h = relu(x)\n        else:\n            h = add(x, w)\n        return h"
        ),
        id="dispatch-by-shape-in-elif-chain",
    ),
    pytest.param(
        model("        if x.shape[-1] > 4096:\n            return scale(x, 2.0)\n        return relu(x)"),
        id="a-branch-that-returns-then-the-other-path",
    ),
    pytest.param(
        src(
            """
            import torch.nn as nn


            class ModelNew(nn.Module):
                def forward(self, x):
                    return x.relu()
            """
        ),
        id="no-kernels",
    ),
]

FIX = [
    pytest.param(
        model("        h = scale(x, 2.0)\n        return relu(h)", {"MARK-RELU": "T0-UNFUSED-LAUNCHES"}),
        id="chain-through-helpers",
    ),
    pytest.param(
        model(
            "        h = scale(x, 2.0)\n        h = h.view(-1)\n        return relu(h.contiguous())",
            {"MARK-RELU": "T0-UNFUSED-LAUNCHES"},
        ),
        id="chain-through-views",
    ),
    pytest.param(
        model("        return add(relu(x), x)", {"MARK-ADD": "T0-UNFUSED-LAUNCHES, T0-SAME-INPUT-RELOADED"}),
        id="nested-call-and-reloaded-input",
    ),
    pytest.param(
        model("        return scale(x, 2.0), relu(x)", {"MARK-RELU": "T0-SAME-INPUT-RELOADED"}),
        id="same-input-read-twice",
    ),
    pytest.param(
        model(
            "        if x.shape[-1] > 4096:\n            return relu(x)\n"
            "        h = scale(x, 2.0)\n        return add(h, x)",
            {"MARK-ADD": "T0-UNFUSED-LAUNCHES, T0-SAME-INPUT-RELOADED"},
        ),
        id="chain-on-the-path-after-a-branch-that-returns",
    ),
    pytest.param(
        model(
            "        if x.shape[-1] > 4096:\n            h = scale(x, 2.0)\n            return relu(h)\n"
            "        return x.relu()",
            {"MARK-RELU": "T0-UNFUSED-LAUNCHES"},
        ),
        id="chain-inside-one-branch",
    ),
]


@pytest.mark.parametrize("source", NOOP)
def test_it_leaves_independent_launches_alone(source: str) -> None:
    assert primary(tier0(src(source)).findings, CODES) == []


@pytest.mark.parametrize("source", FIX)
def test_it_flags_intermediates_that_round_trip_through_memory(source: str) -> None:
    source = src(source)
    assert primary(tier0(source).findings, CODES) == marks(source, CODES)


def test_it_counts_the_bytes_fusion_saves() -> None:
    source = src(FIX[0].values[0])
    (finding,) = [f for f in tier0(source).findings if f.code == "T0-UNFUSED-LAUNCHES"]
    assert finding.severity is Severity.MEDIUM
    assert finding.family is Family.FUSION
    assert finding.kernel == "relu_kernel"
    # scale reads x, writes h; relu reads h, writes y: 4 tensors moved, 2 when fused.
    assert finding.args["bound"] == 2.0
    assert finding.gain == 1.5
    assert len(finding.lines) == 2


def test_a_reloaded_input_carries_the_bytes_one_read_saves() -> None:
    """scale(x) and relu(x): 4 tensors moved (x twice, two outputs), 3 with x read once; the
    finding is medium with that gain, so tier 0 can localize and explain it on its own (a
    row-statistic kernel and the element-wise kernel that uses it read the input twice with
    no full-size intermediate between them, the case FUSION's row broadcast removes)."""
    source = src(next(p for p in FIX if p.id == "same-input-read-twice").values[0])
    (finding,) = [f for f in tier0(source).findings if f.code == "T0-SAME-INPUT-RELOADED"]
    assert finding.severity is Severity.MEDIUM and finding.family is Family.FUSION
    assert finding.kernel == "relu_kernel"
    assert finding.gain == modest_gain(4 / 3)


def test_the_row_mean_and_its_element_wise_consumer_explain_a_fusion_at_tier_0() -> None:
    """37_mean_center_scale after its element-wise pair fused: no intermediate round-trips (the
    row means are a reduction result), only x is read twice. Tier 0 must localize, narrow and
    explain FUSION once LAUNCH_CONFIG's findings are set aside (a loop round whose
    LAUNCH_CONFIG candidate gained nothing)."""
    from pathlib import Path

    from diagnosis.engine.proposers.rules import apply_family
    from diagnosis.engine.tier0 import assess
    from tests.engine.rules_cases import harness as h

    path = Path(__file__).resolve().parents[2] / "bench" / "suite" / "37_mean_center_scale_fp32.py"
    if not path.is_file():
        pytest.skip("bench/suite is absent")
    fused = apply_family(Family.FUSION, path.read_text(), h.rule_input())
    assert fused is not None
    findings = tier0(fused.source).findings
    codes = {f.code for f in findings}
    assert "T0-SAME-INPUT-RELOADED" in codes and "T0-UNFUSED-LAUNCHES" not in codes
    kept = [f for f in findings if f.family is not Family.LAUNCH_CONFIG]
    assert assess(kept) == (True, True, True)


def test_two_calls_of_one_dispatching_helper_can_take_different_branches() -> None:
    """Which branch a helper takes is decided per call: the first call's launch may write what
    the second call's launch in the other branch reads."""
    source = src(
        KERNELS
        + "\n\ndef pick(x):\n"
        "    if x.shape[-1] > 4096:\n"
        "        return scale(x, 2.0)\n"
        "    return relu(x)\n"
        "\n\nclass ModelNew(nn.Module):\n"
        "    def forward(self, x, w):\n"
        "        return pick(pick(x))\n"
    )
    (finding,) = [f for f in tier0(source).findings if f.code == "T0-UNFUSED-LAUNCHES"]
    assert "scale_kernel" in finding.args["edges"] and "relu_kernel" in finding.args["edges"]
