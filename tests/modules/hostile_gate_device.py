"""Hostile (gate): the output comes back on another device than the reference's.

On a GPU the kernel's result is handed back on the CPU (a comparison that moves the reference
to the output's device does not notice); on the CPU it is handed back as a meta tensor, which
holds no values at all.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def axpy_kernel(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * alpha + y, mask=mask)


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
        return out.cpu() if out.is_cuda else out.to("meta")


def get_inputs():
    return [torch.randn(1000), torch.randn(1000)]


def get_verify_inputs():
    return [[torch.randn(17), torch.randn(17)]]


def get_init_inputs():
    return [0.5]
