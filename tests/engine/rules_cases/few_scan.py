"""Cumulative sums of a few long rows: each program scans one row in blocks, carrying the sum of
the blocks before, so a batch of a few rows runs a few programs, each walking its row alone.
Used by the split-scan tests."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


class Model(nn.Module):
    def forward(self, x):
        return x.cumsum(dim=1)


@triton.jit
def row_cumsum_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    carry = tl.zeros([], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
        tl.store(out_ptr + row * n_cols + cols, tl.cumsum(x, axis=0) + carry, mask=mask)
        carry += tl.sum(x, axis=0)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        n_rows, n_cols = x.shape
        out = torch.empty_like(x)
        row_cumsum_kernel[(n_rows,)](x, out, n_cols, BLOCK=1024)
        return out


_CASES = [(4, 1 << 20), (8, 1 << 19), (16, 1 << 18), (2, 1 << 21), (32, 1 << 17)]


def get_init_inputs():
    return []


def get_inputs():
    return [torch.randn(*_CASES[0])]


def get_input_cases():
    return [[torch.randn(*shape)] for shape in _CASES]


def get_verify_inputs():
    return [[torch.randn(3, 5000)], [torch.randn(1, 3000)], [torch.randn(2, 1000)], [torch.randn(5, 1)]]
