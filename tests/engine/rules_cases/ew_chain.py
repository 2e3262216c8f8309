"""relu(x + y) * y as three element-wise launches joined by temporaries; used by the rules tests."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


class Model(nn.Module):
    def forward(self, x, y):
        return torch.relu(x + y) * y


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
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    tl.store(out_ptr + offsets, tl.maximum(x, 0.0), mask=mask)


@triton.jit
def mul_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x * y, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x, y):
        n = x.numel()
        BLOCK_SIZE = 256
        grid = (triton.cdiv(n, BLOCK_SIZE),)
        s = torch.empty_like(x)
        add_kernel[grid](x, y, s, n, BLOCK_SIZE=BLOCK_SIZE)
        r = torch.empty_like(x)
        relu_kernel[grid](s, r, n, BLOCK_SIZE=BLOCK_SIZE)
        out = torch.empty_like(x)
        mul_kernel[grid](r, y, out, n, BLOCK_SIZE=BLOCK_SIZE)
        return out


def _make(*shape):
    return [torch.randn(*shape), torch.randn(*shape)]


def get_init_inputs():
    return []


def get_inputs():
    return _make(3000)


def get_input_cases():
    return [_make(3000), _make(5000), _make(17), _make(2, 9), _make(1025)]


def get_verify_inputs():
    return [_make(3000), _make(37, 129), _make(5)]
