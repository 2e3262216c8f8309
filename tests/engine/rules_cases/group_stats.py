"""Group normalization without affine: one program per (sample, group) walks the group's
elements twice, in blocks the wrapper sizes as the group's next power of two, clamped. Groups of
tens of thousands of elements then run one huge block per iteration. Used by the launch-config
tests (a loop step the wrapper computes)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

MAX_BLOCK = 65536


class Model(nn.Module):
    def forward(self, x, groups):
        return torch.nn.functional.group_norm(x, groups, eps=1e-5)


@triton.jit
def group_norm_kernel(x_ptr, y_ptr, group_size, eps, BLOCK: tl.constexpr):
    base = tl.program_id(0) * group_size
    offs = tl.arange(0, BLOCK)
    total = 0.0
    squares = 0.0
    for start in range(0, group_size, BLOCK):
        mask = start + offs < group_size
        x = tl.load(x_ptr + base + start + offs, mask=mask, other=0.0)
        total += tl.sum(x)
        squares += tl.sum(x * x)
    mean = total / group_size
    rstd = 1.0 / tl.sqrt(squares / group_size - mean * mean + eps)
    for start in range(0, group_size, BLOCK):
        mask = start + offs < group_size
        x = tl.load(x_ptr + base + start + offs, mask=mask, other=0.0)
        tl.store(y_ptr + base + start + offs, (x - mean) * rstd, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x, groups):
        x = x.contiguous()
        group_size = x.numel() // (x.shape[0] * groups)
        block = min(MAX_BLOCK, triton.next_power_of_2(group_size))
        y = torch.empty_like(x)
        group_norm_kernel[(x.shape[0] * groups,)](x, y, group_size, 1e-5, BLOCK=block)
        return y


_CASES = [(8, 512, 64, 64), (16, 256, 64, 64), (4, 1280, 32, 32), (32, 128, 32, 32), (8, 640, 64, 64)]


def get_init_inputs():
    return []


def get_inputs():
    return [torch.randn(*_CASES[0]), 32]


def get_input_cases():
    return [[torch.randn(*shape), 32] for shape in _CASES]


def get_verify_inputs():
    return [[torch.randn(2, 6, 5, 7), 3], [torch.randn(3, 8, 300), 2], [torch.randn(1, 4, 3, 1), 2]]
