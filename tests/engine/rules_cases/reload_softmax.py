"""Softmax over rows in three passes where the second pass stores exp(x - max) to the output and
the third loads it back to divide by the sum: an intermediate kept in global memory between
passes. Used by the forwarding tests."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, stride, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    x_row = x_ptr + row * stride
    y_row = y_ptr + row * stride
    row_max = float("-inf")
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf"))
        row_max = tl.maximum(row_max, tl.max(x, axis=0))
    denom = 0.0
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=float("-inf"))
        num = tl.exp(x - row_max)
        tl.store(y_row + cols, num, mask=mask)
        denom += tl.sum(num, axis=0)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        mask = cols < n_cols
        num = tl.load(y_row + cols, mask=mask)
        tl.store(y_row + cols, num / denom, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        n_rows, n_cols = x.shape
        y = torch.empty_like(x)
        softmax_kernel[(n_rows,)](x, y, n_cols, x.stride(0), BLOCK_SIZE=1024)
        return y


_CASES = [(4096, 8192), (16384, 2048), (2048, 16384), (32768, 1000), (5000, 5001)]


def get_init_inputs():
    return []


def get_inputs():
    return [torch.randn(*_CASES[0])]


def get_input_cases():
    return [[torch.randn(*shape)] for shape in _CASES]


def get_verify_inputs():
    return [[torch.randn(37, 129) * 5], [torch.randn(3, 2500)], [torch.randn(50, 1)]]
