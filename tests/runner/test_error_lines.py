"""An initial version that is wrong or does not compile: the run fails with the reason and the
line of the uploaded file, through the real sandboxed cpu executor (the Triton interpreter).

Issue 17: a kernel error was reported at the launch in ModelNew.forward (line 14) when the
offending kernel line was 17: the interpreter re-raises the kernel's error from the launch.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnosis.engine.loop import run_loop
from diagnosis.engine.records import LoopConfig, StopReason
from runner.execute import Executor

MODULE = """\
import torch
import torch.nn as nn
import triton
import triton.language as tl


class Model(nn.Module):
    def forward(self, x):
        return x * 2


@triton.jit
def k(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    {kernel_line}
    tl.store(out_ptr + offs, y, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        {forward_line}
        k[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out


def get_inputs():
    return [torch.randn(4096)]


def get_init_inputs():
    return []
"""

CASES = [
    pytest.param("y = x * tl.arange(0, n)", "pass", "tl.arange(0, n)", "exception", id="arange-of-a-runtime-bound"),
    pytest.param("y = x * scale_not_defined", "pass", "scale_not_defined", "exception", id="unknown-name-in-kernel"),
    pytest.param("y = x * 2", "_ = [0][x.numel()]", "[0][x.numel()]", "exception", id="error-in-forward"),
    pytest.param("y = x * 3", "pass", None, "incorrect", id="wrong-answer"),
]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(("kernel_line", "forward_line", "marker", "kind"), CASES)
def test_an_initial_version_that_fails_ends_the_run_naming_its_line(
    tmp_path: Path, kernel_line: str, forward_line: str, marker: str | None, kind: str
) -> None:
    source = MODULE.format(kernel_line=kernel_line, forward_line=forward_line)
    result = run_loop(
        source,
        executor=Executor("cpu", "sm_90", cache_dir=tmp_path / "triton"),
        config=LoopConfig(device="cpu", target="sm_90", round_budget=2, seeds=(0,)),
    )
    assert result.stop_reason is StopReason.INITIAL_FAILED and result.rounds == []
    assert result.error.startswith(kind), result.error
    if marker is not None:
        line = next(i for i, text in enumerate(source.splitlines(), start=1) if marker in text)
        assert result.error.endswith(f"(line {line})"), result.error
    assert result.stop_detail.startswith("the initial version failed")
