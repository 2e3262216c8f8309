"""Correct doubling of a 12-element vector, no get_verify_inputs(): too small for the gate to
derive odd-shaped cases from (no size of 16 or more), which its outcome says."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def double_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)


class Model(nn.Module):
    def forward(self, x):
        return x * 2


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        double_kernel[(1,)](x, out, x.numel(), BLOCK=16)
        return out


def get_inputs():
    return [torch.randn(12)]


def get_init_inputs():
    return []
