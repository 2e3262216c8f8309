"""SiLU (swish) on fp16 activations: out = x * sigmoid(x), computed in fp32, stored in fp16.

category: single
First conversion: a 1-D grid of cdiv(numel, 1024) programs with BLOCK_SIZE = 1024 that upcast
each loaded fp16 slice to fp32, apply x * tl.sigmoid(x) and store fp16; default num_warps.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.silu(x)


@triton.jit
def silu_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    y = x * tl.sigmoid(x)
    tl.store(out_ptr + offsets, y.to(tl.float16), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        out = torch.empty(x.shape, device=x.device, dtype=torch.float16)
        n = x.numel()
        BLOCK_SIZE = 1024
        silu_kernel[(triton.cdiv(n, BLOCK_SIZE),)](x, out, n, BLOCK_SIZE=BLOCK_SIZE)
        return out


_CASES = [(8192, 8192), (8192, 11008), (2**26 + 5,), (4096, 14336), (7001, 6000)]


def get_init_inputs():
    return []


def get_inputs():
    return [torch.randn(*_CASES[0], dtype=torch.float16)]


def get_input_cases():
    return [[torch.randn(*shape, dtype=torch.float16)] for shape in _CASES]


def get_verify_inputs():
    return [
        [torch.randn(37, 129, dtype=torch.float16) * 4],
        [torch.randn(3000, dtype=torch.float16)],
        [torch.randn(2, 7, 13, dtype=torch.float16)],
    ]
