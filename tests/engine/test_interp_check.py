"""tests/engine/rules_cases/interp_check.py: every autotune config is checked, configs the
interpreter cannot tell apart once, and nothing that could tell them apart is merged.

One interp_check call checks all the modules (two children), so the file costs two torch
imports and a few tiny launches.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.engine.rules_cases import harness as h

# An element-wise copy autotuned over CONFIGS; {kernel_extra} and {host_extra} break it on
# purpose for one config, {decorators} may stack something between autotune and jit.
TEMPLATE = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


class Model(nn.Module):
    def forward(self, x):
        return x * 1


def zero_out(args):
    args["out_ptr"].zero_()


@triton.autotune(configs=[{configs}], key=["n"])
{decorators}@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    y = tl.load(x_ptr + offs, mask=mask)
{kernel_extra}    tl.store(out_ptr + offs, y, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        copy_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
{host_extra}        return out


def get_init_inputs():
    return []


def get_inputs():
    return [torch.randn(300)]


def get_input_cases():
    return [[torch.randn(300)], [torch.randn(1000)], [torch.randn(7)], [torch.randn(64)], [torch.randn(65)]]


def get_verify_inputs():
    return [[torch.randn(300)], [torch.randn(5)]]
"""

W4_W8_AND_128 = (
    'triton.Config({"BLOCK": 64}, num_warps=4), triton.Config({"BLOCK": 64}, num_warps=8), '
    'triton.Config({"BLOCK": 128}, num_warps=4)'
)
WITH_PRE_HOOK = (
    'triton.Config({"BLOCK": 64}, num_warps=4, pre_hook=zero_out), '
    'triton.Config({"BLOCK": 64}, num_warps=8, pre_hook=zero_out), '
    'triton.Config({"BLOCK": 128}, num_warps=4, pre_hook=zero_out)'
)


def module(
    configs: str = W4_W8_AND_128, kernel_extra: str = "", host_extra: str = "", decorators: str = ""
) -> str:
    return TEMPLATE.format(
        configs=configs, kernel_extra=kernel_extra, host_extra=host_extra, decorators=decorators
    )


WRONG_AT_128 = "    if BLOCK == 128:\n        y = y + 1\n"
WRONG_AT_8_WARPS = "        if copy_kernel.best_config.num_warps == 8:\n            out = out + 1\n"
READS_BEST_CONFIG = "        assert copy_kernel.best_config is not None\n"
HEURISTICS = '@triton.heuristics({"UNUSED": lambda args: args["num_warps"]})\n'
FOUR_TIMED_CASES = module().replace("[torch.randn(64)], [torch.randn(65)]]", "[torch.randn(64)]]")

# source; then the result: ok, configs, runs, merged, a text of the failure
CASES = [
    # the two BLOCK=64 configs differ only in num_warps, which no interpreted launch sees
    pytest.param(module(), True, 3, 2, True, None, id="warps-only-configs-merged"),
    # wrong only at BLOCK=128, the second distinct config: still caught
    pytest.param(module(kernel_extra=WRONG_AT_128), False, 2, 2, True, "BLOCK: 128", id="wrong-block-caught"),
    # host code that reads best_config could tell num_warps apart: every config is checked
    pytest.param(
        module(host_extra=WRONG_AT_8_WARPS), False, 2, 2, False, "num_warps: 8", id="best-config-read"
    ),
    pytest.param(
        module(host_extra=READS_BEST_CONFIG), True, 3, 3, False, None, id="harmless-best-config-read"
    ),
    # a pre_hook is handed every value of its config, num_warps included
    pytest.param(module(configs=WITH_PRE_HOOK), True, 3, 3, True, None, id="pre-hook-configs-kept"),
    # @triton.heuristics between autotune and jit is handed the launch options too
    pytest.param(module(decorators=HEURISTICS), True, 3, 3, True, None, id="heuristics-configs-kept"),
    # the timed cases are built on the first run only; a bad list of them still fails there
    pytest.param(FOUR_TIMED_CASES, False, 1, 1, True, "get_input_cases() must return", id="bad-timed-cases"),
]


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    tmp = tmp_path_factory.mktemp("interp_check")
    paths = []
    for case in CASES:
        path = tmp / f"{case.id.replace('-', '_')}.py"
        path.write_text(case.values[0])
        paths.append(path)
    return {Path(f).stem: r for f, r in h.interp_check(paths, jobs=2).items()}


@pytest.mark.parametrize(("source", "ok", "configs", "runs", "merged", "failing"), CASES)
def test_each_config_is_checked_and_only_indistinguishable_ones_are_merged(
    source: str, ok: bool, configs: int, runs: int, merged: bool, failing: str | None, results, request
) -> None:
    r = results[request.node.callspec.id.replace("-", "_")]
    assert (r["ok"], r["configs"], r["runs"], r["merged"]) == (ok, configs, runs, merged), r["message"]
    if failing is not None:
        assert failing in r["message"]


def test_a_module_without_autotune_runs_once(tmp_path: Path) -> None:
    path = tmp_path / "vec_add.py"
    path.write_text(h.source("vec_add.py"))
    r = h.interp_check([path])[str(path)]
    assert (r["ok"], r["configs"], r["runs"]) == (True, 1, 1), r["message"]
