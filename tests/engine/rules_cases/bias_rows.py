"""Bias added to every row, one program per block of columns walking all rows; the bias block is
loaded inside the row loop, which also stores. Used by the HOIST tests."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


class Model(nn.Module):
    def forward(self, x, bias):
        return x + bias


@triton.jit
def bias_rows_kernel(x_ptr, b_ptr, out_ptr, n_rows, n_cols, stride, BLOCK: tl.constexpr):
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    for row in range(0, n_rows):
        b = tl.load(b_ptr + cols, mask=mask, other=0.0)
        x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)
        tl.store(out_ptr + row * stride + cols, x + b, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x, bias):
        n_rows, n_cols = x.shape
        out = torch.empty_like(x)
        BLOCK = 256
        bias_rows_kernel[(triton.cdiv(n_cols, BLOCK),)](x, bias, out, n_rows, n_cols, x.stride(0), BLOCK=BLOCK)
        return out


def _make(rows, cols):
    return [torch.randn(rows, cols), torch.randn(cols)]


def get_init_inputs():
    return []


def get_inputs():
    return _make(64, 1000)


def get_input_cases():
    return [_make(64, 1000), _make(3, 300), _make(1, 1), _make(17, 513), _make(8, 256)]


def get_verify_inputs():
    return [_make(37, 129), _make(0, 70), _make(5, 1)]
