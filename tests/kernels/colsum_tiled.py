"""Clean counterpart of colsum_strided: each program owns a strip of columns and reads whole
row segments, so the loads are contiguous and 128-bit."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def colsum_kernel(x_ptr, out_ptr, M, N, stride_xm, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, M, BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M)
        mask = (rows[:, None] < M) & (cols[None, :] < N)
        x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :], mask=mask, other=0.0)
        acc += tl.sum(x, axis=0)
    tl.store(out_ptr + cols, acc, mask=cols < N)


class Model(nn.Module):
    def forward(self, x):
        return x.sum(dim=0)


class ModelNew(nn.Module):
    def forward(self, x):
        M, N = x.shape
        out = torch.empty(N, dtype=torch.float32)
        colsum_kernel[(triton.cdiv(N, 128),)](x, out, M, N, x.stride(0), BLOCK_M=32, BLOCK_N=128)
        return out


def get_inputs():
    return [torch.randn(1024, 1024)]


def get_init_inputs():
    return []
