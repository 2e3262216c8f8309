"""Correct module that writes to stdout in every way it can while importing and running."""

import os
import sys

import torch
import torch.nn as nn
import triton
import triton.language as tl

print("NOISE_FROM_PRINT")
sys.stdout.write("NOISE_FROM_SYS_STDOUT\n")
os.write(1, b"NOISE_FROM_FD_1\n")
os.system("echo NOISE_FROM_SUBPROCESS")


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
        print("NOISE_FROM_FORWARD")
        out = torch.empty_like(x)
        double_kernel[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)
        return out


def get_inputs():
    return [torch.randn(300)]


def get_init_inputs():
    return []
