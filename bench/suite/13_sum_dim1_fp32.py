"""Sum over the middle dimension of a 3-D fp32 tensor: (B, N, D) -> (B, D).

category: single
First conversion: a 2-D grid (B, cdiv(D, 64)) where each program owns 64 output columns of one
batch and loops over N in chunks of BLOCK_N = 64, accumulating (64, 64) tiles in fp32 and
reducing them with tl.sum at the end; default num_warps, no autotune.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.sum(x, dim=1)


@triton.jit
def sum_dim1_kernel(
    x_ptr, out_ptr,
    N, D,
    stride_xb, stride_xn, stride_xd,
    stride_ob, stride_od,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    b = tl.program_id(0)
    pid_d = tl.program_id(1)
    offs_d = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    d_mask = offs_d < D
    acc = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
    for n0 in range(0, N, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        ptrs = x_ptr + b * stride_xb + offs_n[:, None] * stride_xn + offs_d[None, :] * stride_xd
        acc += tl.load(ptrs, mask=(offs_n[:, None] < N) & d_mask[None, :], other=0.0)
    total = tl.sum(acc, axis=0)
    tl.store(out_ptr + b * stride_ob + offs_d * stride_od, total, mask=d_mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        B, N, D = x.shape
        out = torch.empty((B, D), device=x.device, dtype=x.dtype)
        BLOCK_N, BLOCK_D = 64, 64
        grid = (B, triton.cdiv(D, BLOCK_D))
        sum_dim1_kernel[grid](
            x, out, N, D,
            x.stride(0), x.stride(1), x.stride(2),
            out.stride(0), out.stride(1),
            BLOCK_N=BLOCK_N, BLOCK_D=BLOCK_D,
        )
        return out


# (B, N, D)
_CASES = [(32, 2048, 512), (8, 4096, 1024), (128, 512, 256), (10, 3000, 1000), (256, 4096, 16)]


def get_init_inputs():
    return []


def get_inputs():
    return [torch.randn(*_CASES[0])]


def get_input_cases():
    return [[torch.randn(*shape)] for shape in _CASES]


def get_verify_inputs():
    return [[torch.randn(3, 37, 129)], [torch.randn(2, 200, 5)], [torch.randn(1, 1, 70)]]
