"""Softmax written as two row kernels: the first stores each row's maximum and sum of
exponentials, the second reads them back with the row and normalises. Used by the fusion of
row statistics tests."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


@triton.jit
def row_stats_kernel(x_ptr, max_ptr, sum_ptr, n_cols, stride, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=float("-inf"))
    row_max = tl.max(x, axis=0)
    tl.store(max_ptr + row, row_max)
    tl.store(sum_ptr + row, tl.sum(tl.exp(x - row_max), axis=0))


@triton.jit
def normalize_kernel(x_ptr, max_ptr, sum_ptr, y_ptr, n_cols, stride, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=float("-inf"))
    m = tl.load(max_ptr + row)
    s = tl.load(sum_ptr + row)
    tl.store(y_ptr + row * stride + cols, tl.exp(x - m) / s, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        n_rows, n_cols = x.shape
        BLOCK_SIZE = triton.next_power_of_2(n_cols)
        row_max = torch.empty(n_rows, device=x.device, dtype=torch.float32)
        row_sum = torch.empty(n_rows, device=x.device, dtype=torch.float32)
        y = torch.empty_like(x)
        row_stats_kernel[(n_rows,)](x, row_max, row_sum, n_cols, x.stride(0), BLOCK_SIZE=BLOCK_SIZE)
        normalize_kernel[(n_rows,)](x, row_max, row_sum, y, n_cols, x.stride(0), BLOCK_SIZE=BLOCK_SIZE)
        return y


_CASES = [(4096, 4096), (16384, 2048), (2048, 8192), (32768, 1000), (5000, 5001)]


def get_init_inputs():
    return []


def get_inputs():
    return [torch.randn(*_CASES[0])]


def get_input_cases():
    return [[torch.randn(*shape)] for shape in _CASES]


def get_verify_inputs():
    return [[torch.randn(37, 129) * 5], [torch.randn(3, 2500)], [torch.randn(50, 1)]]
