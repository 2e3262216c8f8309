"""fp16 GEMM through host TMA descriptors, autotuned by a project's forwarding factory over a
config list cut to its first entry; used by the rules tests.

The descriptors are made with a placeholder block and each config's pre_hook sets the block it
loads and stores, as flag_gems' hopper `mm` does: a config without the hook would read 1x1 tiles.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor


class Model(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)


def set_block_shapes(nargs):
    nargs["a_desc"].block_shape = [nargs["BLOCK_M"], nargs["BLOCK_K"]]
    nargs["b_desc"].block_shape = [nargs["BLOCK_K"], nargs["BLOCK_N"]]
    nargs["c_desc"].block_shape = [nargs["BLOCK_M"], nargs["BLOCK_N"]]


def tma_configs(pre_hook=set_block_shapes):
    return [
        triton.Config(
            {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk}, num_stages=s, num_warps=w, pre_hook=pre_hook
        )
        for bm in (32, 64, 128)
        for bn in (32, 64, 128)
        for bk in (32, 64)
        for s in (3, 4)
        for w in (4, 8)
    ]


def tuner(configs, key, restore_value=None, warmup=25, rep=100):
    """The project's autotune entry point: Triton's autotuner (the timing options are ignored)."""
    return triton.autotune(configs, key, restore_value=restore_value)


@tuner(configs=[c for c in tma_configs() if c.kwargs["BLOCK_M"] == 32][:1], key=["M", "N", "K"])
@triton.jit
def matmul_tma_kernel(
    a_desc, b_desc, c_desc, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])
        b = b_desc.load([k * BLOCK_K, pid_n * BLOCK_N])
        acc = tl.dot(a, b, acc)
    c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(tl.float16))


def _descriptor(t):
    return TensorDescriptor(t, t.shape, t.stride(), [1, 1])


class ModelNew(nn.Module):
    def forward(self, a, b):
        M, K = a.shape
        _, N = b.shape
        c = torch.empty((M, N), device=a.device, dtype=torch.float16)

        def grid(meta):
            return (triton.cdiv(M, meta["BLOCK_M"]), triton.cdiv(N, meta["BLOCK_N"]))

        matmul_tma_kernel[grid](_descriptor(a), _descriptor(b), _descriptor(c), M, N, K)
        return c


def _make(M, N, K):
    return [torch.randn(M, K, dtype=torch.float16), torch.randn(K, N, dtype=torch.float16)]


def get_init_inputs():
    return []


def get_inputs():
    return _make(256, 192, 128)


def get_input_cases():
    return [
        _make(256, 192, 128),
        _make(64, 64, 64),
        _make(136, 200, 96),
        _make(512, 64, 256),
        _make(80, 96, 104),
    ]


def get_verify_inputs():
    return [_make(136, 200, 96), _make(40, 72, 48)]
