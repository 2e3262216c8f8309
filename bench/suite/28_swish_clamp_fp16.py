"""Swish followed by a clamp on fp16 activations: clamp(x * sigmoid(x), min_val, max_val).

category: fused
First conversion: one fused 1-D element-wise kernel (BLOCK_SIZE = 1024, grid cdiv(numel, 1024))
that upcasts to fp32, applies x * sigmoid(x), clamps with tl.minimum/tl.maximum and stores fp16;
default num_warps, no autotune.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


class Model(nn.Module):
    def __init__(self, min_val, max_val):
        super().__init__()
        self.min_val = min_val
        self.max_val = max_val

    def forward(self, x):
        return torch.clamp(x * torch.sigmoid(x), min=self.min_val, max=self.max_val)


@triton.jit
def swish_clamp_kernel(x_ptr, out_ptr, n_elements, min_val, max_val, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    y = x * tl.sigmoid(x)
    y = tl.minimum(tl.maximum(y, min_val), max_val)
    tl.store(out_ptr + offsets, y.to(tl.float16), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, min_val, max_val):
        super().__init__()
        self.min_val = min_val
        self.max_val = max_val

    def forward(self, x):
        out = torch.empty(x.shape, device=x.device, dtype=torch.float16)
        n = x.numel()
        grid = (triton.cdiv(n, 1024),)
        swish_clamp_kernel[grid](x, out, n, self.min_val, self.max_val, BLOCK_SIZE=1024)
        return out


_CASES = [(8192, 8192), (4096, 11008), (2**26 + 7,), (64, 1024, 1024), (6001, 7000)]


def get_init_inputs():
    return [-0.2, 2.5]


def get_inputs():
    return [torch.randn(*_CASES[0], dtype=torch.float16)]


def get_input_cases():
    return [[torch.randn(*shape, dtype=torch.float16)] for shape in _CASES]


def get_verify_inputs():
    return [
        [torch.randn(37, 129, dtype=torch.float16) * 3],
        [torch.randn(2000, dtype=torch.float16)],
        [torch.randn(3, 7, 11, dtype=torch.float16) * 5],
    ]
