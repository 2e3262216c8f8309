"""Hostile: forward spins forever after starting a grandchild (the whole group must die)."""

import subprocess
import sys

import torch
import torch.nn as nn
import triton
import triton.language as tl

# The grandchild reports its pid as the worker's /proc sees it (the child may be in a PID namespace).
SLEEPER = "import os, time\nprint(os.readlink('/proc/self'), flush=True)\ntime.sleep(300)\n"


@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


class Model(nn.Module):
    def forward(self, x):
        return x.clone()


class ModelNew(nn.Module):
    def forward(self, x):
        child = subprocess.Popen([sys.executable, "-S", "-c", SLEEPER], stdout=subprocess.PIPE, text=True)
        print(f"GRANDCHILD_PID={child.stdout.readline().strip()}", file=sys.stderr, flush=True)
        while True:
            pass


def get_inputs():
    return [torch.randn(16)]


def get_init_inputs():
    return []
