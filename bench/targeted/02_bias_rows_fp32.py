"""Bias added to every row of a 2-D fp32 tensor: out = x + bias, bias of shape (n_cols,).

category: targeted (HOIST)
Written with the problem the HOIST rule targets: each program owns a block of 1024 columns and
ROWS_PER_PROGRAM = 16 consecutive rows, and loads its bias block inside the row loop. The loop
also stores, so Triton's loop-invariant code motion must leave the load there (a store might
change what it reads). Otherwise straightforward: a 2-D grid (row groups, column blocks),
masked loads and stores, default num_warps. Not part of the 37-operator suite.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, bias):
        return x + bias


@triton.jit
def bias_rows_kernel(x_ptr, b_ptr, out_ptr, n_rows, n_cols, stride,
                     ROWS: tl.constexpr, BLOCK: tl.constexpr):
    row0 = tl.program_id(0) * ROWS
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    col_mask = cols < n_cols
    for r in range(0, ROWS):
        row = row0 + r
        mask = col_mask & (row < n_rows)
        b = tl.load(b_ptr + cols, mask=col_mask, other=0.0)
        x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)
        tl.store(out_ptr + row * stride + cols, x + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, bias):
        n_rows, n_cols = x.shape
        out = torch.empty_like(x)
        ROWS_PER_PROGRAM, BLOCK = 16, 1024
        grid = (triton.cdiv(n_rows, ROWS_PER_PROGRAM), triton.cdiv(n_cols, BLOCK))
        bias_rows_kernel[grid](x, bias, out, n_rows, n_cols, x.stride(0), ROWS=ROWS_PER_PROGRAM, BLOCK=BLOCK)
        return out


# (rows, cols)
_CASES = [(16384, 4096), (8192, 8192), (65536, 1024), (4096, 12288), (30000, 3001)]


def _make(rows, cols):
    return [torch.randn(rows, cols), torch.randn(cols)]


def get_init_inputs():
    return []


def get_inputs():
    return _make(*_CASES[0])


def get_input_cases():
    return [_make(*shape) for shape in _CASES]


def get_verify_inputs():
    return [_make(37, 129), _make(5, 2000), _make(1, 1)]
