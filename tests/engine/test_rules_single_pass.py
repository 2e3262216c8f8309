"""SINGLE_PASS: multi-pass row loops get a one-block copy of the kernel, guarded by the row size."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from diagnosis.engine.evidence import Family
from diagnosis.engine.proposers.base import CaseShape
from diagnosis.engine.proposers.rules import apply_family
from tests.engine.rules_cases import harness as h

SOFTMAX = h.source("softmax_loops.py")

LAYERNORM = '''import torch
import triton
import triton.language as tl


@triton.jit
def ln_kernel(x_ptr, w_ptr, out_ptr, stride, N, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    x_ptr += row * stride
    out_ptr += row * stride
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        acc += tl.load(x_ptr + cols, mask=cols < N, other=0.0)
    mean = tl.sum(acc, axis=0) / N
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        mask = cols < N
        w = tl.load(w_ptr + cols, mask=mask)
        x = tl.load(x_ptr + cols, mask=mask, other=0.0)
        tl.store(out_ptr + cols, (x - mean) * w, mask=mask)


class ModelNew:
    def forward(self, x):
        out = torch.empty_like(x)
        ln_kernel[(x.shape[0],)](
            x, self.weight, out, x.stride(0), self.hidden, self.eps,
            BLOCK_SIZE=1024,
        )
        return out
'''

CUMSUM = '''import torch
import triton
import triton.language as tl


@triton.jit
def cumsum_kernel(x_ptr, out_ptr, n_cols, stride, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    carry = 0.0
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
        tl.store(out_ptr + row * stride + cols, tl.cumsum(x, axis=0) + carry, mask=cols < n_cols)
        carry += tl.sum(x, axis=0)


class ModelNew:
    def forward(self, x):
        n_rows, n_cols = x.shape
        out = torch.empty_like(x)
        cumsum_kernel[(n_rows,)](x, out, n_cols, x.stride(0), BLOCK_SIZE=1024)
        return out
'''

L2NORM = '''import torch
import triton
import triton.language as tl


@triton.jit
def l2n_kernel(x_ptr, out_ptr, n_cols, stride, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for i in range(tl.cdiv(n_cols, BLOCK_SIZE)):
        cols = i * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
        acc += x * x
    norm = tl.sqrt(tl.sum(acc, axis=0))
    for i in range(tl.cdiv(n_cols, BLOCK_SIZE)):
        cols = i * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
        tl.store(out_ptr + row * stride + cols, x / norm, mask=cols < n_cols)


class ModelNew:
    def forward(self, x):
        n_rows, n_cols = x.shape
        out = torch.empty_like(x)
        BLOCK = 512
        l2n_kernel[(n_rows,)](x, out, n_cols, x.stride(0), BLOCK_SIZE=BLOCK, num_warps=4)
        return out
'''

STORE_BETWEEN = SOFTMAX.replace(
    "        denom += tl.sum(tl.exp(x - row_max), axis=0)\n",
    "        denom += tl.sum(tl.exp(x - row_max), axis=0)\n        tl.store(out_row + cols, x, mask=cols < n_cols)\n",
)


def single_pass_fn(source: str) -> str:
    m = re.search(r"def \w+_single_pass\(.*?(?=\n\n\n)", source, re.S)
    assert m is not None
    return m.group(0)


FIX = [
    pytest.param(
        SOFTMAX,
        1,
        [
            # the loop variable is 0, each statement and the load the passes repeat is kept once
            '    row_max = float("-inf")\n    cols = tl.arange(0, BLOCK_SIZE)\n'
            '    x = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf"))\n'
            "    row_max = tl.maximum(row_max, tl.max(x, axis=0))\n",
            "        single_pass_n = n_cols\n        if 0 < single_pass_n <= 16384:\n"
            "            single_pass_block = triton.next_power_of_2(single_pass_n)\n"
            "            single_pass_warps = 4 if single_pass_block <= 2048 else 8 if single_pass_block <= 8192 else 16\n"
            "            softmax_kernel_single_pass[(n_rows,)](x, out, n_cols, x.stride(0), out.stride(0), "
            "BLOCK_SIZE=single_pass_block, num_warps=single_pass_warps)\n"
            "        else:\n"
            "            softmax_kernel[(n_rows,)](x, out, n_cols, x.stride(0), out.stride(0), BLOCK_SIZE=256)\n",
            "    # pass 2: sum of exponentials\n    denom = 0.0\n    denom += tl.sum(tl.exp(x - row_max), axis=0)\n\n"
            "    # pass 3: normalise and write\n    mask = cols < n_cols\n    tl.store(",
        ],
        id="three-passes-read-the-row-once",
    ),
    pytest.param(
        LAYERNORM,
        2,  # x once (the inline load of pass 1 and `mask=mask` of pass 2 are the same), w once
        ["    x = tl.load(x_ptr + cols, mask=cols < N, other=0.0)\n    acc += x\n",
         "        single_pass_n = self.hidden\n",
         "BLOCK_SIZE=single_pass_block, num_warps=single_pass_warps,\n            )"],
        id="inline-load-and-mask-variable-merged",
    ),
    pytest.param(
        L2NORM,
        1,
        ["    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)\n    cols = tl.arange(0, BLOCK_SIZE)\n",
         "BLOCK_SIZE=single_pass_block, num_warps=single_pass_warps)\n", "BLOCK_SIZE=BLOCK, num_warps=4)\n"],
        id="two-cdiv-loops",
    ),
    pytest.param(
        STORE_BETWEEN,
        2,
        ["    denom += tl.sum(tl.exp(x - row_max), axis=0)\n    tl.store(out_row + cols, x, mask=cols < n_cols)\n",
         # read again after the store: it may see what the store wrote
         '    mask = cols < n_cols\n    x = tl.load(x_row + cols, mask=mask, other=float("-inf"))\n'],
        id="no-merge-across-a-store",
    ),
]


NOOP = [
    pytest.param(h.source("matmul.py"), (), id="dot-kernel"),
    pytest.param(
        SOFTMAX.replace(
            "softmax_kernel[(n_rows,)](x, out, n_cols, x.stride(0), out.stride(0), BLOCK_SIZE=256)",
            "softmax_kernel[(n_rows, triton.cdiv(n_cols, 256))](x, out, n_cols, x.stride(0), out.stride(0), BLOCK_SIZE=256)",
        ),
        (),
        id="grid-depends-on-the-block",
    ),
    pytest.param(
        SOFTMAX.replace("    row_max = float", "    n_cols = n_cols - 1\n    row_max = float"), (), id="bound-rebound-in-kernel"
    ),
    pytest.param(
        SOFTMAX.replace(
            "        softmax_kernel[(n_rows,)](", "        _ = softmax_kernel[(n_rows,)]("
        ),
        (),
        id="launch-is-not-a-statement",
    ),
    pytest.param(
        SOFTMAX,
        (CaseShape(0, ((64, 65536),), ("float32",)), CaseShape(1, ((8, 40000),), ("float32",))),
        id="every-case-too-wide-for-one-block",
    ),
    pytest.param(
        L2NORM.replace("tl.arange(0, BLOCK_SIZE)\n", "tl.arange(0, BLOCK_SIZE) + tl.arange(0, 16)[:, None] * 0\n", 1),
        (),
        id="second-tiled-dimension",
    ),
    pytest.param(CUMSUM, (), id="one-loop-reads-the-row-once-already"),
]


@pytest.mark.parametrize(("before", "loads", "present"), FIX)
def test_it_adds_a_guarded_single_pass_kernel(before: str, loads: int, present: list[str]) -> None:
    rw = apply_family(Family.SINGLE_PASS, before, h.rule_input())
    assert rw is not None
    assert h.parses(rw.source)
    fn = single_pass_fn(rw.source)
    assert fn.count("tl.load(") == loads
    assert "for " not in fn
    for text in present:
        assert text in rw.source
    # the original kernel stays, untouched, as the fallback
    kernel = rw.kernels[0]
    assert before[before.index(f"def {kernel}("):].split("\n\n\n")[0] in rw.source


@pytest.mark.parametrize(("before", "cases"), NOOP)
def test_it_leaves_other_kernels_alone(before: str, cases: tuple[CaseShape, ...]) -> None:
    assert apply_family(Family.SINGLE_PASS, before, h.rule_input(cases)) is None


def test_it_holds_twice_the_elements_for_16_bit_rows() -> None:
    cases = (CaseShape(0, ((64, 20000),), ("float16",)),)
    rw = apply_family(Family.SINGLE_PASS, SOFTMAX, h.rule_input(cases))
    assert rw is not None
    assert "if 0 < single_pass_n <= 32768:" in rw.source


def test_single_pass_modules_are_correct(tmp_path: Path) -> None:
    single = apply_family(Family.SINGLE_PASS, SOFTMAX, h.rule_input())
    assert single is not None
    tuned = apply_family(Family.LAUNCH_CONFIG, single.source, h.rule_input())
    assert tuned is not None
    paths = []
    for name, text in (("single.py", single.source), ("single_tuned.py", tuned.source)):
        path = tmp_path / name
        path.write_text(text)
        paths.append(path)
    results = h.interp_check(paths)
    for path in paths:
        assert results[str(path)]["ok"], results[str(path)]["message"]
    assert results[str(tmp_path / "single_tuned.py")]["configs"] >= 4
