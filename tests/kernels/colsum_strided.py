"""Problem: column sums where each program walks one column, so consecutive elements of a
tile are `stride_xm` apart and every load is a 32-bit scalar."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def colsum_kernel(x_ptr, out_ptr, M, N, stride_xm, BLOCK_M: tl.constexpr):
    col = tl.program_id(0)
    acc = tl.zeros([BLOCK_M], dtype=tl.float32)
    for start in range(0, M, BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M)
        x = tl.load(x_ptr + rows * stride_xm + col, mask=rows < M, other=0.0)
        acc += x
    tl.store(out_ptr + col, tl.sum(acc, axis=0))


class Model(nn.Module):
    def forward(self, x):
        return x.sum(dim=0)


class ModelNew(nn.Module):
    def forward(self, x):
        M, N = x.shape
        out = torch.empty(N, dtype=torch.float32)
        colsum_kernel[(N,)](x, out, M, N, x.stride(0), BLOCK_M=512)
        return out


def get_inputs():
    return [torch.randn(1024, 1024)]


def get_init_inputs():
    return []
