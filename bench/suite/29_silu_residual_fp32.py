"""SiLU plus residual in fp32: out = x * sigmoid(x) + r.

category: fused
First conversion: one kernel per PyTorch op; three 1-D element-wise kernels (sigmoid, multiply,
add), each with BLOCK_SIZE = 1024 and grid cdiv(numel, 1024), with the two intermediates written
to and read back from memory.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, r):
        return x * torch.sigmoid(x) + r


@triton.jit
def sigmoid_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, 1.0 / (1.0 + tl.exp(-x)), mask=mask)


@triton.jit
def mul_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x * y, mask=mask)


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, r):
        n = x.numel()
        BLOCK_SIZE = 1024
        grid = (triton.cdiv(n, BLOCK_SIZE),)
        sig = torch.empty_like(x)
        sigmoid_kernel[grid](x, sig, n, BLOCK_SIZE=BLOCK_SIZE)
        prod = torch.empty_like(x)
        mul_kernel[grid](x, sig, prod, n, BLOCK_SIZE=BLOCK_SIZE)
        out = torch.empty_like(x)
        add_kernel[grid](prod, r, out, n, BLOCK_SIZE=BLOCK_SIZE)
        return out


_CASES = [(4096, 8192), (2**24 + 9,), (8192, 2048), (3000, 5001), (32, 512, 1024)]


def _make(shape):
    return [torch.randn(*shape), torch.randn(*shape)]


def get_init_inputs():
    return []


def get_inputs():
    return _make(_CASES[0])


def get_input_cases():
    return [_make(shape) for shape in _CASES]


def get_verify_inputs():
    return [_make((37, 129)), _make((3000,)), _make((2, 5, 9))]
