"""Mean of a whole fp32 tensor (a 0-dim result).

category: single
First conversion: a 1-D grid of cdiv(numel, 1024) programs, each summing a masked BLOCK_SIZE = 1024
slice, scaling it by 1/numel and adding it into a zero-initialised fp32 scalar with
tl.atomic_add; default num_warps, no autotune.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.mean(x)


@triton.jit
def mean_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offsets, mask=offsets < n_elements, other=0.0)
    partial = tl.sum(x, axis=0) / n_elements
    tl.atomic_add(out_ptr, partial)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        n = x.numel()
        out = torch.zeros((), device=x.device, dtype=torch.float32)
        BLOCK_SIZE = 1024
        mean_kernel[(triton.cdiv(n, BLOCK_SIZE),)](x, out, n, BLOCK_SIZE=BLOCK_SIZE)
        return out


_CASES = [(4096, 8192), (2**24 + 17,), (16, 1024, 2048), (3000, 7001), (8192, 4095)]


def get_init_inputs():
    return []


def get_inputs():
    return [torch.rand(*_CASES[0])]


def get_input_cases():
    return [[torch.rand(*shape)] for shape in _CASES]


def get_verify_inputs():
    return [[torch.rand(37, 129)], [torch.rand(1000) + 2.0], [torch.randn(3, 5, 7)]]
