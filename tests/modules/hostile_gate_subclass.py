"""Hostile (gate): a wrong kernel whose output is a tensor subclass that subtracts to zero.

Issue 16: "returning a tensor subclass whose subtraction yields zeros": a comparison that
computes `out - ref` inside the candidate's process sees no error at all.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


class Agreeable(torch.Tensor):
    def __sub__(self, other):
        return torch.zeros_like(self)

    def __rsub__(self, other):
        return torch.zeros_like(self)


@triton.jit
def axpy_kernel(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * alpha - y, mask=mask)  # wrong: - y


class Model(nn.Module):
    def __init__(self, alpha):
        super().__init__()
        self.alpha = alpha

    def forward(self, x, y):
        return x * self.alpha + y


class ModelNew(nn.Module):
    def __init__(self, alpha):
        super().__init__()
        self.alpha = alpha

    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        axpy_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, self.alpha, BLOCK=1024)
        return out.as_subclass(Agreeable)


def get_inputs():
    return [torch.randn(1000), torch.randn(1000)]


def get_verify_inputs():
    return [[torch.randn(17), torch.randn(17)]]


def get_init_inputs():
    return [0.5]
