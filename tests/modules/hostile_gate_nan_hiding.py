"""Hostile (gate): an output of NaN everywhere, with torch's NaN and finiteness tests patched.

At import `torch.isnan` answers "no NaN" and `torch.isfinite` "all finite" for every tensor,
so a comparison in the candidate's process finds no NaN where the reference has none and
measures an error of NaN, which no `>` bound ever exceeds.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

torch.isnan = lambda t: torch.zeros(t.shape, dtype=torch.bool, device=t.device)
torch.isfinite = lambda t: torch.ones(t.shape, dtype=torch.bool, device=t.device)


@triton.jit
def fill_kernel(out_ptr, n, value, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.zeros((BLOCK,), dtype=tl.float32) + value, mask=offs < n)


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
        fill_kernel[(triton.cdiv(n, 1024),)](out, n, float("nan"), BLOCK=1024)
        return out


def get_inputs():
    return [torch.randn(1000), torch.randn(1000)]


def get_verify_inputs():
    return [[torch.randn(17), torch.randn(17)]]


def get_init_inputs():
    return [0.5]
