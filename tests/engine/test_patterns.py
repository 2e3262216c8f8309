from __future__ import annotations

import pytest

from diagnosis.engine.evidence import Family, Severity
from diagnosis.engine.patterns import PatternSpec, distill_pattern, kernel_features, match_patterns
from diagnosis.engine.tier0 import run_tier0
from diagnosis.engine.tier0.source import parse_module
from tests.engine import src, tier0

WRAPPER = """

class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        {kernel}[(x.shape[0],)](out, x, x.stride(0), x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
        return out
"""

HEAD = """
import torch
import torch.nn as nn
import triton
import triton.language as tl
"""

THREE_PASS = (
    HEAD
    + """

@triton.jit
def softmax3(out_ptr, in_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    row_ptr = in_ptr + row * stride
    m = -float("inf")
    for off in range(0, n_cols, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        m = tl.maximum(m, tl.max(tl.load(row_ptr + cols, mask=cols < n_cols, other=-float("inf")), axis=0))
    d = 0.0
    for off in range(0, n_cols, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        d += tl.sum(tl.exp(tl.load(row_ptr + cols, mask=cols < n_cols, other=-float("inf")) - m), axis=0)
    for off in range(0, n_cols, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        x = tl.load(row_ptr + cols, mask=cols < n_cols)
        tl.store(out_ptr + row * stride + cols, tl.exp(x - m) / d, mask=cols < n_cols)
"""
    + WRAPPER.format(kernel="softmax3")
)

ONE_PASS = (
    HEAD
    + """

@triton.jit
def softmax3(out_ptr, in_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(in_ptr + row * stride + cols, mask=cols < n_cols, other=-float("inf"))
    x = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * stride + cols, x / tl.sum(x, axis=0), mask=cols < n_cols)
"""
    + WRAPPER.format(kernel="softmax3")
)

LAYERNORM_3PASS = (
    HEAD
    + """

@triton.jit
def layernorm(y_ptr, x_ptr, stride, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    mean = 0.0
    for off in range(0, n, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        mean += tl.sum(tl.load(x_ptr + row * stride + cols, mask=cols < n, other=0.0), axis=0)
    mean = mean / n
    var = 0.0
    for off in range(0, n, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n, other=0.0) - mean
        var += tl.sum(x * x, axis=0)
    for off in range(0, n, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n, other=0.0)
        tl.store(y_ptr + row * stride + cols, (x - mean) / tl.sqrt(var / n + 1e-5), mask=cols < n)
"""
    + WRAPPER.format(kernel="layernorm")
)

TINY = (
    HEAD
    + """

@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + tl.load(y_ptr + offs, mask=offs < n), mask=offs < n)


def add(x, y):
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(x.numel(), {block}),)](x, y, out, x.numel(), BLOCK={block})
    return out
"""
)


@pytest.fixture(scope="module")
def single_pass() -> PatternSpec:
    before, after = src(THREE_PASS), src(ONE_PASS)
    return distill_pattern(before, after, tier0(before).findings, name="single-pass softmax", gain=2.0)


def test_distill_keeps_the_family_mechanism_and_changed_kernel(single_pass: PatternSpec) -> None:
    assert single_pass.family is Family.SINGLE_PASS
    assert single_pass.mechanism.startswith("a row held in registers")
    assert "softmax3 walks range(0, n_cols, BLOCK) in 3 sequential loops" in single_pass.mechanism
    assert (
        single_pass.before.startswith("@triton.jit\ndef softmax3(")
        and "class ModelNew" not in single_pass.before
    )
    assert single_pass.after.startswith("@triton.jit\ndef softmax3(") and "for off" not in single_pass.after
    assert single_pass.evidence_codes == ("T0-MULTI-PASS",)


def test_distill_signature_is_the_codes_plus_what_the_rewrite_removed(single_pass: PatternSpec) -> None:
    assert single_pass.signature == {"code:T0-MULTI-PASS", "for>=1", "for>=2", "sibling-loops"}


def test_distill_falls_back_to_the_changed_wrapper_when_no_kernel_changed() -> None:
    before, after = src(TINY.replace("{block}", "64")), src(TINY.replace("{block}", "1024"))
    spec = distill_pattern(before, after, tier0(before).findings)
    assert spec.family is Family.LAUNCH_CONFIG
    assert spec.before.startswith("def add(x, y):") and "BLOCK=64" in spec.before
    assert "BLOCK=1024" in spec.after
    # The 'after' still has a fixed block (T0-NO-AUTOTUNE): only what the rewrite fixed is kept.
    assert spec.signature == {"code:T0-TINY-BLOCK"}


MATCHES = [
    pytest.param(
        LAYERNORM_3PASS, [("T0-PATTERN-MATCH", "layernorm", Family.SINGLE_PASS)], id="three-pass-layernorm"
    ),
    pytest.param(THREE_PASS, [("T0-PATTERN-MATCH", "softmax3", Family.SINGLE_PASS)], id="its-own-before"),
    pytest.param(ONE_PASS, [], id="its-own-after"),
    pytest.param(TINY.replace("{block}", "64"), [], id="unrelated-kernel"),
]


@pytest.mark.parametrize(("source", "expected"), MATCHES)
def test_run_tier0_matches_stored_patterns(single_pass: PatternSpec, source: str, expected: list) -> None:
    result = run_tier0(src(source), patterns=[single_pass], strict=True)
    got = [(f.code, f.kernel, f.family) for f in result.findings if f.code == "T0-PATTERN-MATCH"]
    assert got == expected


def test_a_match_points_at_the_lines_of_the_matching_findings(single_pass: PatternSpec) -> None:
    source = src(LAYERNORM_3PASS)
    result = run_tier0(source, patterns=[single_pass], strict=True)
    (multi,) = [f for f in result.findings if f.code == "T0-MULTI-PASS"]
    (match,) = [f for f in result.findings if f.code == "T0-PATTERN-MATCH"]
    assert match.lines == multi.lines
    assert match.severity is Severity.MEDIUM
    assert match.gain == 1.5  # the pattern's measured 2x, halved
    assert match.args["pattern"] == "single-pass softmax"


def test_features_without_codes_must_all_be_present() -> None:
    module = parse_module(src(THREE_PASS))
    feats = kernel_features(module.kernels["softmax3"])
    assert {"for>=2", "sibling-loops", "call:tl.sum", "call:tl.max"} <= feats
    only_features = PatternSpec(Family.USE_DOT, "m", "", "", (), frozenset({"sum-of-product", "expand3d"}))
    some_features = PatternSpec(Family.SINGLE_PASS, "m", "", "", (), frozenset({"sibling-loops"}))
    found = match_patterns(src(THREE_PASS), [], [only_features, some_features])
    assert [(f.kernel, f.family) for f in found] == [("softmax3", Family.SINGLE_PASS)]


def test_an_empty_signature_never_matches() -> None:
    empty = PatternSpec(Family.SINGLE_PASS, "m", "", "", (), frozenset())
    assert match_patterns(src(THREE_PASS), tier0(src(THREE_PASS)).findings, [empty]) == []


def test_a_source_that_does_not_parse_matches_nothing(single_pass: PatternSpec) -> None:
    assert match_patterns("def (", [], [single_pass]) == []


def test_json_round_trip_uses_the_stored_signature_object(single_pass: PatternSpec) -> None:
    data = single_pass.to_json()
    assert data["signature"] == {
        "codes": ["T0-MULTI-PASS"],
        "features": ["for>=1", "for>=2", "sibling-loops"],
    }
    assert PatternSpec.from_json(data) == single_pass
    flat = {**data, "signature": sorted(single_pass.signature)}
    assert PatternSpec.from_json(flat).signature == single_pass.signature


def test_a_codes_only_pattern_matches_a_kernel_with_those_codes() -> None:
    before, after = src(TINY.replace("{block}", "64")), src(TINY.replace("{block}", "1024"))
    spec = distill_pattern(before, after, tier0(before).findings, name="bigger blocks")
    other = src(TINY.replace("{block}", "32").replace("add_kernel", "sum_kernel"))
    result = run_tier0(other, patterns=[spec], strict=True)
    got = [(f.kernel, f.family) for f in result.findings if f.code == "T0-PATTERN-MATCH"]
    assert got == [("sum_kernel", Family.LAUNCH_CONFIG)]
    assert run_tier0(after, patterns=[spec], strict=True).findings == tier0(after).findings
