"""Hostile: forward spins forever after starting a grandchild (the whole group must die)."""

import os
import subprocess
import sys
import time

import torch
import torch.nn as nn
import triton
import triton.language as tl

# Found on the host by the token in its command line (the job may have a PID namespace).
SLEEPER = "import time\nprint('started', flush=True)\ntime.sleep(300)\n"


@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


class Model(nn.Module):
    def forward(self, x):
        return x.clone()


class ModelNew(nn.Module):
    def forward(self, x):
        token = f"kernelopt-grandchild-{os.getpid()}-{time.time_ns()}"
        child = subprocess.Popen(
            [sys.executable, "-S", "-c", SLEEPER, token], stdout=subprocess.PIPE, text=True
        )
        child.stdout.readline()
        print(f"GRANDCHILD_TOKEN={token}", file=sys.stderr, flush=True)
        while True:
            pass


def get_inputs():
    return [torch.randn(16)]


def get_init_inputs():
    return []
