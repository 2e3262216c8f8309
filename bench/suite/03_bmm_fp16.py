"""Batched GEMM in fp16: C[b] = A[b] @ B[b] with A (BATCH, M, K), B (BATCH, K, N).

category: single
First conversion: the 2-D tiled matmul extended with a batch axis, grid (cdiv(M, 64),
cdiv(N, 64), BATCH) in row-major program order, BLOCK_M = BLOCK_N = 64, BLOCK_K = 32, tl.dot
into an fp32 accumulator, default num_warps and num_stages.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.bmm(a, b)


@triton.jit
def bmm_kernel(
    a_ptr, b_ptr, c_ptr,
    M, N, K,
    stride_ab, stride_am, stride_ak,
    stride_bb, stride_bk, stride_bn,
    stride_cb, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    batch = tl.program_id(2)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + batch * stride_ab + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + batch * stride_bb + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    c_ptrs = c_ptr + batch * stride_cb + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(tl.float16), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        batch, M, K = a.shape
        N = b.shape[2]
        c = torch.empty((batch, M, N), device=a.device, dtype=torch.float16)
        grid = (triton.cdiv(M, 64), triton.cdiv(N, 64), batch)
        bmm_kernel[grid](
            a, b, c, M, N, K,
            a.stride(0), a.stride(1), a.stride(2),
            b.stride(0), b.stride(1), b.stride(2),
            c.stride(0), c.stride(1), c.stride(2),
            BLOCK_M=64, BLOCK_N=64, BLOCK_K=32,
        )
        return c


# (BATCH, M, N, K)
_CASES = [(16, 1024, 1024, 1024), (8, 2048, 2048, 1024), (32, 512, 1024, 2048), (4, 4096, 4096, 1024), (12, 1000, 1500, 700)]


def _make(batch, M, N, K):
    return [torch.randn(batch, M, K, dtype=torch.float16), torch.randn(batch, K, N, dtype=torch.float16)]


def get_init_inputs():
    return []


def get_inputs():
    return _make(*_CASES[0])


def get_input_cases():
    return [_make(*shape) for shape in _CASES]


def get_verify_inputs():
    return [_make(3, 37, 70, 45), _make(2, 65, 33, 100), _make(5, 1, 64, 17)]
