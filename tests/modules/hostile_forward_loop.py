"""Hostile: forward spins forever after starting a grandchild (the whole group must die)."""

import subprocess
import sys

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
        child = subprocess.Popen(["sleep", "300"])
        print(f"GRANDCHILD_PID={child.pid}", file=sys.stderr, flush=True)
        while True:
            pass


def get_inputs():
    return [torch.randn(16)]


def get_init_inputs():
    return []
