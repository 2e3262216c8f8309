"""Hostile (gate): int32 results from a tensor subclass that says its dtype is int64.

The reference returns int64; the kernel writes int32, and the output's `dtype` attribute lies,
so a dtype check that reads the attribute in the candidate's process sees a match.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


class Int64Liar(torch.Tensor):
    @property
    def dtype(self):
        return torch.int64


@triton.jit
def positive_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, (x > 0).to(tl.int32), mask=mask)


class Model(nn.Module):
    def forward(self, x):
        return (x > 0).to(torch.int64)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty(x.shape, dtype=torch.int32, device=x.device)
        n = x.numel()
        positive_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out.as_subclass(Int64Liar)


def get_inputs():
    return [torch.randn(1000)]


def get_verify_inputs():
    return [[torch.randn(17)]]


def get_init_inputs():
    return []
