"""Problem: a row-wise scale over [M, N, K] that walks N with stride K and adds the program id of
axis 1 to the offset. Launched on the last dimension (K = 1, one program on axis 1), the walk is
contiguous, but the unscaled `pid_k` leaves the address with no known alignment and the loads
stay 32-bit."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, out_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_k = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    offset = rows[:, None] * N * K + cols[None, :] * K + pid_k
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    x = tl.load(x_ptr + offset, mask=mask)
    tl.store(out_ptr + offset, x * 2.0, mask=mask)


class Model(nn.Module):
    def forward(self, x):
        return x * 2.0


class ModelNew(nn.Module):
    def forward(self, x):
        M, N = x.shape
        out = torch.empty_like(x)
        scale_kernel[(triton.cdiv(M, 8), 1)](x, out, M, N, 1, BLOCK_M=8, BLOCK_N=256)
        return out


def get_inputs():
    return [torch.randn(1024, 256)]


def get_init_inputs():
    return []


def get_verify_inputs():
    return [[torch.randn(37, 256)]]
