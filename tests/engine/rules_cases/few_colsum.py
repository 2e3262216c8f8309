"""Column sums of a tall matrix: each program sums BLOCK_K columns over every row, so a matrix
of a few thousand columns runs a few programs, each walking all the rows alone. Used by the
split-loop tests."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


class Model(nn.Module):
    def forward(self, x):
        return x.sum(dim=0)


@triton.jit
def colsum_kernel(x_ptr, out_ptr, n_rows, n_cols, BLOCK_K: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_K + tl.arange(0, BLOCK_K)
    mask = cols < n_cols
    acc = tl.zeros([BLOCK_K], dtype=tl.float32)
    for row in range(n_rows):
        acc += tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    tl.store(out_ptr + cols, acc, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        n_rows, n_cols = x.shape
        out = torch.empty(n_cols, device=x.device, dtype=torch.float32)
        colsum_kernel[(triton.cdiv(n_cols, 256),)](x, out, n_rows, n_cols, BLOCK_K=256)
        return out


_CASES = [(16384, 2048), (65536, 1024), (4096, 4096), (8192, 3000), (32768, 512)]


def get_init_inputs():
    return []


def get_inputs():
    return [torch.randn(*_CASES[0])]


def get_input_cases():
    return [[torch.randn(*shape)] for shape in _CASES]


def get_verify_inputs():
    return [[torch.randn(37, 1000)], [torch.randn(1000, 37)], [torch.randn(5, 300)], [torch.randn(1, 300)]]
