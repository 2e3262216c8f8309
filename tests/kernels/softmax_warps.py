"""Clean counterpart of softmax_spills: sixteen warps share the 8192-wide row, 16 values
per thread, no spills."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

NUM_WARPS = 16


@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_row + cols, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    out = num / tl.sum(num, axis=0)
    tl.store(out_ptr + row * stride_row + cols, out, mask=mask)


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


class ModelNew(nn.Module):
    def forward(self, x):
        rows, cols = x.shape
        out = torch.empty_like(x)
        softmax_kernel[(rows,)](x, out, cols, x.stride(0), BLOCK=8192, num_warps=NUM_WARPS)
        return out


def get_inputs():
    return [torch.randn(64, 8192)]


def get_init_inputs():
    return []
