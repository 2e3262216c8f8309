"""A dot whose float32 reference is itself off: terms of +-100 cancel to a sum near 50, so
torch.dot's float32 rounding (about 5e-5 relative) is over the gate's float32 bound. The kernel
sums in float64 and is nearer the exact answer than the reference (fixture for the gate's
float64 run, runner/compare.py `within_reference_error`). The inputs do not depend on the seed."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def dot64_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    acc = tl.zeros([BLOCK], dtype=tl.float64)
    for start in range(0, n, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float64)
        y = tl.load(y_ptr + offs, mask=mask, other=0.0).to(tl.float64)
        acc += x * y
    tl.store(out_ptr, tl.sum(acc, axis=0).to(tl.float32))


class Model(nn.Module):
    def forward(self, x, y):
        return torch.dot(x, y)


class ModelNew(nn.Module):
    def forward(self, x, y):
        out = torch.empty(1, dtype=torch.float32, device=x.device)
        dot64_kernel[(1,)](x, y, out, x.numel(), BLOCK=256)
        return out.reshape(())


def cancelling(n: int) -> list[torch.Tensor]:
    i = torch.arange(n, dtype=torch.float64)
    big = ((i * 0.618034) % 1.0 + 0.5) * 100.0
    small = (i * 0.414214) % 1.0 - 0.45
    return [torch.cat([big, -big, small]).float(), torch.ones(3 * n)]


def get_inputs():
    return cancelling(1000)


def get_input_cases():
    return [get_inputs()]


def get_verify_inputs():
    return [cancelling(1000)]


def get_init_inputs():
    return []
