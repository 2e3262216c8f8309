"""Column sums computed by transposing: `colsum` makes a contiguous copy of x.t() and a row-sum
kernel, launched with positional arguments only, reads it as a contiguous [n_rows, n_cols] array.
Used by the permuted-copy tests."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_M = 16
BLOCK_N = 256


@triton.jit
def rowsum_kernel(x_ptr, out_ptr, n_rows, n_cols, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        offsets = rows[:, None] * n_cols + cols[None, :]
        mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
        acc += tl.load(x_ptr + offsets, mask=mask, other=0.0)
    tl.store(out_ptr + rows, tl.sum(acc, axis=1), mask=rows < n_rows)


def colsum(x):
    xt = x.t().contiguous()
    n_rows, n_cols = xt.shape
    out = torch.empty(n_rows, device=x.device, dtype=torch.float32)
    rowsum_kernel[(triton.cdiv(n_rows, BLOCK_M),)](xt, out, n_rows, n_cols, BLOCK_M, BLOCK_N)
    return out


class Model(nn.Module):
    def forward(self, x):
        return x.sum(dim=0)


class ModelNew(nn.Module):
    def forward(self, x):
        return colsum(x)


_CASES = [(8192, 1024), (4096, 4096), (32768, 256), (3000, 7001), (1024, 16384)]


def get_init_inputs():
    return []


def get_inputs():
    return [torch.randn(*_CASES[0])]


def get_input_cases():
    return [[torch.randn(*shape)] for shape in _CASES]


def get_verify_inputs():
    return [[torch.randn(37, 29)], [torch.randn(1, 20)], [torch.randn(200, 3)]]
