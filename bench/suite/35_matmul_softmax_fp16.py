"""Matmul followed by a softmax over each output row, fp16: softmax(A @ B, dim=-1).

category: fused
First conversion: one kernel per PyTorch op; the tiled matmul (BLOCK_M = BLOCK_N = 64,
BLOCK_K = 32, 2-D grid in row-major program order) writes the fp16 logits to memory, then a
softmax kernel (one program per row, single block of triton.next_power_of_2(N), fp32 math) reads
them back.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.softmax(torch.matmul(a, b), dim=-1)


@triton.jit
def matmul_kernel(
    a_ptr, b_ptr, c_ptr,
    M, N, K,
    stride_am, stride_ak,
    stride_bk, stride_bn,
    stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_remaining = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_remaining), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_remaining) & (offs_n[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(tl.float16), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, stride_x, stride_out, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=float("-inf")).to(tl.float32)
    num = tl.exp(x - tl.max(x, axis=0))
    out = num / tl.sum(num, axis=0)
    tl.store(out_ptr + row * stride_out + cols, out.to(tl.float16), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        M, K = a.shape
        N = b.shape[1]
        logits = torch.empty((M, N), device=a.device, dtype=torch.float16)
        matmul_kernel[(triton.cdiv(M, 64), triton.cdiv(N, 64))](
            a, b, logits, M, N, K,
            a.stride(0), a.stride(1), b.stride(0), b.stride(1), logits.stride(0), logits.stride(1),
            BLOCK_M=64, BLOCK_N=64, BLOCK_K=32,
        )
        out = torch.empty_like(logits)
        softmax_kernel[(M,)](logits, out, N, logits.stride(0), out.stride(0), BLOCK_SIZE=triton.next_power_of_2(N))
        return out


# (M, N, K)
_CASES = [(4096, 4096, 4096), (8192, 2048, 1024), (2048, 8192, 2048), (1024, 1024, 8192), (3000, 5000, 2000)]


def _make(M, N, K, logit_std=1.0):
    # A is scaled by logit_std / sqrt(K) so the logits have standard deviation logit_std
    return [torch.randn(M, K, dtype=torch.float16) * (logit_std * K**-0.5), torch.randn(K, N, dtype=torch.float16)]


def get_init_inputs():
    return []


def get_inputs():
    return _make(*_CASES[0])


def get_input_cases():
    return [_make(*shape) for shape in _CASES]


def get_verify_inputs():
    return [_make(37, 129, 77, 4.0), _make(70, 40, 100, 3.0), _make(3, 300, 33, 4.0)]
