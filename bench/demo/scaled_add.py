"""Demo kernel for `manage.py loaddemo`: out = alpha * x + y over a 1-D fp32 tensor.

A correct but naive first Triton conversion: a small fixed BLOCK_SIZE of 256, default
num_warps, no autotuning and no divisibility hints, so the diagnosis has something to find.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


class Model(nn.Module):
    def __init__(self, alpha: float):
        super().__init__()
        self.alpha = alpha

    def forward(self, x, y):
        return self.alpha * x + y


@triton.jit
def scaled_add_kernel(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, alpha * x + y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, alpha: float):
        super().__init__()
        self.alpha = alpha

    def forward(self, x, y):
        x = x.contiguous()
        y = y.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        grid = (triton.cdiv(n, 256),)
        scaled_add_kernel[grid](x, y, out, n, self.alpha, BLOCK_SIZE=256)
        return out


_SIZES = [1 << 20, 1 << 18, 1_000_003]


def get_init_inputs():
    return [0.5]


def get_inputs():
    n = _SIZES[0]
    return [torch.randn(n), torch.randn(n)]


def get_input_cases():
    return [[torch.randn(n), torch.randn(n)] for n in _SIZES]


def get_verify_inputs():
    return [[torch.randn(n), torch.randn(n)] for n in (1, 255, 257, 4099)]
