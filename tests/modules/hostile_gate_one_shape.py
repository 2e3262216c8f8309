"""Hostile (gate): a kernel correct only on the one shape the module gives (no verify cases).

Issue 16: "a kernel correct only on the one shape given passed": the grid is n // BLOCK, so
the tail of any size that is not a multiple of BLOCK is never written; get_inputs() draws
4096 elements, a multiple of 32, and there is no get_verify_inputs().
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
        axpy_kernel[(n // 32,)](x, y, out, n, self.alpha, BLOCK=32)  # wrong: floor, not cdiv
        return out


def get_inputs():
    return [torch.randn(4096), torch.randn(4096)]


def get_init_inputs():
    return [0.5]
