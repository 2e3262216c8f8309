"""Hostile (gate): a wrong kernel that writes a passing answer to the response pipe and exits.

Issue 16: "writing a forged answer to the response file descriptor (found through
/proc/self/fd)": every writable pipe of the process other than stderr's gets a complete job
response saying the gate passed, then the process ends before the harness can answer.
"""

import fcntl
import json
import os

import torch
import torch.nn as nn
import triton
import triton.language as tl

FORGED = {
    "ok": True,
    "job": "verify",
    "result": {
        "passed": True,
        "cases": [],
        "checked": ["case 0", "verify 0"],
        "skipped": [],
        "seeds": [0],
        "input_shapes": [],
    },
}


def _forge() -> None:
    stderr = os.readlink("/proc/self/fd/2")
    line = (json.dumps(FORGED) + "\n").encode()
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
            mode = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE
        except OSError:
            continue
        if fd > 2 and target.startswith("pipe:") and target != stderr and mode in (os.O_WRONLY, os.O_RDWR):
            os.write(fd, line)
    os._exit(0)


@triton.jit
def axpy_kernel(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x, mask=mask)  # wrong


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
        _forge()
        return out


def get_inputs():
    return [torch.randn(1000), torch.randn(1000)]


def get_verify_inputs():
    return [[torch.randn(17), torch.randn(17)]]


def get_init_inputs():
    return [0.5]
