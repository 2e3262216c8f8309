"""GELU-gated product on fp16 activations (the GeGLU gate): gelu(x) * y.

category: fused
First conversion: one kernel per PyTorch op; a 1-D element-wise erf-GELU kernel (fp32 math, fp16
store) writes gelu(x) to memory, then a 1-D element-wise multiply kernel reads it back with y;
both use BLOCK_SIZE = 1024 and grid cdiv(numel, 1024).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        return F.gelu(x) * y


@triton.jit
def gelu_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    g = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))
    tl.store(out_ptr + offsets, g.to(tl.float16), mask=mask)


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

    def forward(self, x, y):
        n = x.numel()
        grid = (triton.cdiv(n, 1024),)
        g = torch.empty(x.shape, device=x.device, dtype=torch.float16)
        gelu_kernel[grid](x, g, n, BLOCK_SIZE=1024)
        out = torch.empty(x.shape, device=x.device, dtype=torch.float16)
        mul_kernel[grid](g, y, out, n, BLOCK_SIZE=1024)
        return out


_CASES = [(8192, 8192), (4096, 11008), (16384, 4096), (2048, 14336), (5000, 3001)]


def _make(rows, cols):
    return [torch.randn(rows, cols, dtype=torch.float16), torch.randn(rows, cols, dtype=torch.float16)]


def get_init_inputs():
    return []


def get_inputs():
    return _make(*_CASES[0])


def get_input_cases():
    return [_make(*shape) for shape in _CASES]


def get_verify_inputs():
    return [_make(37, 129), _make(1, 3000), _make(11, 7)]
