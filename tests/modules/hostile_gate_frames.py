"""Hostile (gate): a wrong kernel that walks up the stack and overwrites the reference outputs.

Issue 16: "walking the frames to overwrite the reference outputs": wherever the caller keeps
the reference's answer for this call, the candidate copies its own answer into it.
"""

import sys

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def axpy_kernel(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * alpha, mask=mask)  # wrong: no + y


def _overwrite_the_reference(out: torch.Tensor) -> None:
    frame = sys._getframe(2)
    while frame is not None:
        seen = frame.f_locals
        # the sensitivity run holds its reference in one name, the main run in another
        for name, pending in (("ref_b", "out_b"), ("ref_out", "out")):
            ref = seen.get(name)
            if isinstance(ref, torch.Tensor) and pending not in seen and ref.shape == out.shape:
                ref.copy_(out)
                return
        for name, value in seen.items():  # any other name for a reference
            if "ref" in name and isinstance(value, torch.Tensor) and value.shape == out.shape:
                value.copy_(out)
                return
        frame = frame.f_back


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
        _overwrite_the_reference(out)
        return out


def get_inputs():
    return [torch.randn(1000), torch.randn(1000)]


def get_verify_inputs():
    return [[torch.randn(17), torch.randn(17)]]


def get_init_inputs():
    return [0.5]
