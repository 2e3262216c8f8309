"""A correct module whose forward takes a few seconds: not a quick phase, so it must pass."""

import time

import torch
import torch.nn as nn
import triton
import triton.language as tl

SECONDS = 1.5


@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


class Model(nn.Module):
    def forward(self, x):
        return x.clone()


class ModelNew(nn.Module):
    def forward(self, x):
        time.sleep(SECONDS)
        out = torch.empty_like(x)
        copy_kernel[(1,)](x, out, x.numel(), BLOCK=16)
        return out


def get_inputs():
    return [torch.randn(16)]


def get_init_inputs():
    return []
