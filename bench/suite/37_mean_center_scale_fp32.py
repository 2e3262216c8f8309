"""Mean-centre each row and scale per feature (hidden 4096), fp32: (x - x.mean(-1, keepdim=True)) * scale.

category: fused
First conversion: one kernel per PyTorch op; a row-mean kernel (one program per row, chunks of
BLOCK_SIZE = 1024), a 1-D element-wise subtract kernel broadcasting the row mean, and a 1-D
element-wise multiply kernel broadcasting the per-feature scale, both with BLOCK_SIZE = 1024; the
intermediate tensor goes through memory.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


class Model(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.scale = nn.Parameter(1.0 + 0.5 * torch.randn(hidden))

    def forward(self, x):
        return (x - x.mean(dim=-1, keepdim=True)) * self.scale


@triton.jit
def row_mean_kernel(x_ptr, mean_ptr, n_cols, stride, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        acc += tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
    tl.store(mean_ptr + row, tl.sum(acc, axis=0) / n_cols)


@triton.jit
def sub_row_kernel(x_ptr, mean_ptr, out_ptr, n_elements, n_cols, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    m = tl.load(mean_ptr + offsets // n_cols, mask=mask)
    tl.store(out_ptr + offsets, x - m, mask=mask)


@triton.jit
def mul_col_kernel(x_ptr, scale_ptr, out_ptr, n_elements, n_cols, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    s = tl.load(scale_ptr + offsets % n_cols, mask=mask)
    tl.store(out_ptr + offsets, x * s, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(hidden))

    def forward(self, x):
        x = x.contiguous()
        n_cols = x.shape[-1]
        n_rows = x.numel() // n_cols
        n = x.numel()
        mean = torch.empty((n_rows,), device=x.device, dtype=x.dtype)
        row_mean_kernel[(n_rows,)](x, mean, n_cols, n_cols, BLOCK_SIZE=1024)
        centered = torch.empty_like(x)
        grid = (triton.cdiv(n, 1024),)
        sub_row_kernel[grid](x, mean, centered, n, n_cols, BLOCK_SIZE=1024)
        out = torch.empty_like(x)
        mul_col_kernel[grid](centered, self.scale, out, n, n_cols, BLOCK_SIZE=1024)
        return out


HIDDEN = 4096
_ROWS = [8192, 4096, 16384, 3001, 6000]


def get_init_inputs():
    return [HIDDEN]


def get_inputs():
    return [torch.randn(_ROWS[0], HIDDEN)]


def get_input_cases():
    return [[torch.randn(rows, HIDDEN)] for rows in _ROWS]


def get_verify_inputs():
    return [[torch.randn(37, HIDDEN) + 3.0], [torch.randn(2, 3, HIDDEN)]]
