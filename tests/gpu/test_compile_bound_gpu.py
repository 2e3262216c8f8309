"""The compile bound of a verify job on a real GPU: an autotune config whose compile runs past
`compile_timeout_s` is dropped and named; a plain launch past it fails the candidate.

Marked `gpu`; skipped where torch sees no CUDA device. The 2^20-element block is the H200 case of
TRITON_NOTES.md (about two minutes to compile); the bound is 20 s. Jobs go through the real
sandbox, as the worker runs them.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
import torch

from runner.execute import Executor

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
]

PARENT = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


class Model(nn.Module):
    def forward(self, x):
        return x.sum(dim=1)


@triton.jit
def row_sum(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * n_cols + offs, mask=offs < n_cols, other=0.0)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty(x.shape[0], device=x.device, dtype=x.dtype)
        row_sum[(x.shape[0],)](x, out, x.shape[1], BLOCK=1024)
        return out


def get_inputs():
    return [torch.randn(64, 8192)]


def get_init_inputs():
    return []
"""

AUTOTUNED = PARENT.replace(
    "@triton.jit\ndef row_sum",
    "@triton.autotune(configs=[triton.Config({'BLOCK': 1024}, num_warps=4), "
    "triton.Config({'BLOCK': 1 << 20}, num_warps=4)], key=['n_cols'])\n@triton.jit\ndef row_sum",
).replace(
    "row_sum[(x.shape[0],)](x, out, x.shape[1], BLOCK=1024)", "row_sum[(x.shape[0],)](x, out, x.shape[1])"
)
HUGE_LAUNCH = PARENT.replace("BLOCK=1024)", "BLOCK=1 << 20)")
# eight configs, compiled side by side in forks before the autotuner benchmarks them
# (runner/childlib/precompile.py)
EIGHT_CONFIGS = AUTOTUNED.replace(
    "configs=[triton.Config({'BLOCK': 1024}, num_warps=4), triton.Config({'BLOCK': 1 << 20}, num_warps=4)]",
    "configs=[triton.Config({'BLOCK': b}, num_warps=w) for b in (256, 512, 1024, 2048) for w in (2, 4)]",
)


@pytest.fixture
def executor(tmp_path: Path) -> Executor:
    return Executor("cuda", cache_dir=tmp_path / "triton-cache")


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_an_autotune_config_past_the_bound_is_dropped_and_named(executor: Executor, tmp_path: Path) -> None:
    parent = write(tmp_path, "parent.py", PARENT)
    executor.verify(parent, seeds=[0], time=False)  # the baseline fills the run's cache
    t0 = time.monotonic()
    out = executor.verify(parent, write(tmp_path, "cand.py", AUTOTUNED), seeds=[0], time=True,
                          options={"compile_timeout_s": 20.0})  # fmt: skip
    took = time.monotonic() - t0
    print(f"\n[compile bound] autotuned candidate verified in {took:.1f} s; dropped {out.compile_dropped}")
    assert out.ok and out.passed, out.error_text
    assert [d.config for d in out.compile_dropped] == ["BLOCK=1048576, num_warps=4, num_stages=3"]
    assert any("BLOCK=1024" in c for case in out.cases for c in case.autotune_choices)
    assert took < 90.0  # not the two minutes of the 2^20-element compile


def test_a_launch_past_the_bound_fails_the_candidate_as_compile_timeout(
    executor: Executor, tmp_path: Path
) -> None:
    parent = write(tmp_path, "parent.py", PARENT)
    out = executor.verify(parent, write(tmp_path, "cand.py", HUGE_LAUNCH), seeds=[0], time=False,
                          options={"compile_timeout_s": 20.0})  # fmt: skip
    assert not out.passed and out.kind == "compile_timeout", out.error_text
    assert "BLOCK=1048576" in out.error_text and [d.kernel for d in out.compile_dropped] == ["row_sum"]


def test_an_autotuners_configs_compiled_in_forks_give_a_verified_candidate(
    executor: Executor, tmp_path: Path
) -> None:
    parent = write(tmp_path, "parent.py", PARENT)
    cand = write(tmp_path, "cand.py", EIGHT_CONFIGS)
    assert "for b in (256, 512, 1024, 2048)" in EIGHT_CONFIGS
    out = executor.verify(parent, cand, seeds=[0], time=True)
    assert out.ok and out.passed and out.timing is not None, out.error_text
    assert out.compile_dropped == ()
    chosen = {c for case in out.cases for c in case.autotune_choices}
    assert chosen and all(re.search(r"BLOCK=(256|512|1024|2048)", c) for c in chosen), chosen
    kernels = {p.parent for p in (tmp_path / "triton-cache").rglob("row_sum.cubin")}
    assert len(kernels) >= 8 + 1  # every config (the parent's launch besides), each compiled once


def test_without_a_bound_nothing_forks_and_nothing_is_dropped(executor: Executor, tmp_path: Path) -> None:
    parent = write(tmp_path, "parent.py", PARENT)
    out = executor.verify(parent, write(tmp_path, "cand.py", PARENT.replace("BLOCK=1024", "BLOCK=2048")),
                          seeds=[0], time=False)  # fmt: skip
    assert out.passed and out.compile_dropped == ()
