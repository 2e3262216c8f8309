"""Matrix-vector product in fp32: y = A @ x with A (M, K) and x (K,).

category: single
First conversion: one program per block of BLOCK_M = 32 rows (grid cdiv(M, 32)), a loop over K
in chunks of BLOCK_K = 128 accumulating tl.sum(a * x[None, :], axis=1) in fp32, default
num_warps, no autotune.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, x):
        return torch.matmul(a, x)


@triton.jit
def matvec_kernel(
    a_ptr, x_ptr, y_ptr,
    M, K,
    stride_am, stride_ak,
    BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr,
):
    pid = tl.program_id(0)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    row_mask = rows < M
    acc = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        cols = k0 + tl.arange(0, BLOCK_K)
        col_mask = cols < K
        a = tl.load(
            a_ptr + rows[:, None] * stride_am + cols[None, :] * stride_ak,
            mask=row_mask[:, None] & col_mask[None, :],
            other=0.0,
        )
        x = tl.load(x_ptr + cols, mask=col_mask, other=0.0)
        acc += tl.sum(a * x[None, :], axis=1)
    tl.store(y_ptr + rows, acc, mask=row_mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, x):
        M, K = a.shape
        y = torch.empty((M,), device=a.device, dtype=a.dtype)
        BLOCK_M = 32
        grid = (triton.cdiv(M, BLOCK_M),)
        matvec_kernel[grid](a, x, y, M, K, a.stride(0), a.stride(1), BLOCK_M=BLOCK_M, BLOCK_K=128)
        return y


# (M, K)
_CASES = [(8192, 4096), (4096, 8192), (16384, 2048), (2048, 16384), (7000, 5000)]


def _make(M, K):
    return [torch.randn(M, K), torch.randn(K)]


def get_init_inputs():
    return []


def get_inputs():
    return _make(*_CASES[0])


def get_input_cases():
    return [_make(*shape) for shape in _CASES]


def get_verify_inputs():
    return [_make(37, 129), _make(100, 300), _make(1, 1000)]
