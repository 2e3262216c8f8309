"""GEMM in bf16 on non-square shapes: C = A @ B with A (M, K), B (K, N), fp32 accumulation.

category: single
First conversion: the standard tiled matmul with fixed BLOCK_M = BLOCK_N = 64, BLOCK_K = 32 on a
2-D grid (cdiv(M, 64), cdiv(N, 64)) in row-major program order, masked K loop, tl.dot into an
fp32 accumulator cast to bf16 at the store, default num_warps and num_stages.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return a @ b


@triton.jit
def bf16_matmul_kernel(
    a_ptr, b_ptr, c_ptr,
    M, N, K,
    stride_am, stride_ak,
    stride_bk, stride_bn,
    stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        a = tl.load(
            a_ptr + rm[:, None] * stride_am + kk[None, :] * stride_ak,
            mask=(rm[:, None] < M) & (kk[None, :] < K),
            other=0.0,
        )
        b = tl.load(
            b_ptr + kk[:, None] * stride_bk + rn[None, :] * stride_bn,
            mask=(kk[:, None] < K) & (rn[None, :] < N),
            other=0.0,
        )
        acc += tl.dot(a, b)

    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc.to(tl.bfloat16), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        M, K = a.shape
        N = b.shape[1]
        c = torch.empty((M, N), device=a.device, dtype=torch.bfloat16)
        grid = (triton.cdiv(M, 64), triton.cdiv(N, 64))
        bf16_matmul_kernel[grid](
            a, b, c, M, N, K,
            a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
            BLOCK_M=64, BLOCK_N=64, BLOCK_K=32,
        )
        return c


# (M, N, K)
_CASES = [(4096, 2048, 8192), (8192, 4096, 1024), (1024, 8192, 4096), (2048, 6144, 3072), (5000, 3000, 1500)]


def _make(M, N, K):
    return [torch.randn(M, K, dtype=torch.bfloat16), torch.randn(K, N, dtype=torch.bfloat16)]


def get_init_inputs():
    return []


def get_inputs():
    return _make(*_CASES[0])


def get_input_cases():
    return [_make(*shape) for shape in _CASES]


def get_verify_inputs():
    return [_make(37, 129, 77), _make(130, 40, 100), _make(5, 200, 48)]
