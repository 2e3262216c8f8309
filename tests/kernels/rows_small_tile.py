"""Rows of 64 elements, one program per row on Triton's default four warps: the 64-element
tile is laid over 128 threads, so every element is loaded by two of them (tier 2:
IR_REPLICATED_TILE at the load, line 16)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_scale_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    tl.store(out_ptr + row * n_cols + cols, x / tl.max(tl.abs(x), axis=0), mask=mask)


class Model(nn.Module):
    def forward(self, x):
        return x / x.abs().amax(dim=1, keepdim=True)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        row_scale_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK=64)
        return out


def get_init_inputs():
    return []


def get_inputs():
    return [torch.randn(65536, 64)]
