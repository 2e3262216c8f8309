"""A copy whose timed case is 2**28 float32 elements (1 GiB) and whose verify case needs its
values before it launches (fixture for the compile job's capture on the meta device)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


class Model(nn.Module):
    def forward(self, x):
        return x.clone()


class ModelNew(nn.Module):
    def forward(self, x):
        if x.numel() < 1000 and bool((x != x).any()):  # a value read before launching
            raise ValueError("NaN in a small input")
        out = torch.empty_like(x)
        copy_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out


def get_inputs():
    return [torch.randn(2**28)]


def get_input_cases():
    return [get_inputs()]


def get_verify_inputs():
    return [[torch.randn(100)]]


def get_init_inputs():
    return []
