"""Element-wise chain in fp32: out = relu(a + b) * c.

category: fused
First conversion: one kernel per PyTorch op; three 1-D element-wise kernels (add, ReLU, multiply),
each with BLOCK_SIZE = 1024 and grid cdiv(numel, 1024), with the two intermediates written to and
read back from memory.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b, c):
        return torch.relu(a + b) * c


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


@triton.jit
def relu_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.where(x > 0, x, 0.0), mask=mask)


@triton.jit
def mul_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x * y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b, c):
        n = a.numel()
        BLOCK_SIZE = 1024
        grid = (triton.cdiv(n, BLOCK_SIZE),)
        s = torch.empty_like(a)
        add_kernel[grid](a, b, s, n, BLOCK_SIZE=BLOCK_SIZE)
        r = torch.empty_like(a)
        relu_kernel[grid](s, r, n, BLOCK_SIZE=BLOCK_SIZE)
        out = torch.empty_like(a)
        mul_kernel[grid](r, c, out, n, BLOCK_SIZE=BLOCK_SIZE)
        return out


_CASES = [(4096, 4096), (2048, 4096), (2**24 + 1,), (3000, 3001), (16, 1024, 1024)]


def _make(shape):
    return [torch.randn(*shape), torch.randn(*shape), torch.randn(*shape)]


def get_init_inputs():
    return []


def get_inputs():
    return _make(_CASES[0])


def get_input_cases():
    return [_make(shape) for shape in _CASES]


def get_verify_inputs():
    return [_make((37, 129)), _make((1500,)), _make((2, 3, 5))]
