"""Element-wise add with a fixed 1024 block (a 'first conversion'); used by the rules tests."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


class Model(nn.Module):
    def forward(self, x, y):
        return x + y


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x, y):
        out = torch.empty_like(x)
        n_elements = x.numel()
        BLOCK_SIZE = 1024
        grid = (triton.cdiv(n_elements, BLOCK_SIZE),)
        add_kernel[grid](x, y, out, n_elements, BLOCK_SIZE=BLOCK_SIZE, num_warps=4)
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
