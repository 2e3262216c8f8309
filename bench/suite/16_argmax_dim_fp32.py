"""Argmax over the last dimension of a 2-D fp32 tensor, int64 indices.

category: single
First conversion: one program per row loading the whole row as a single block of
BLOCK_SIZE = triton.next_power_of_2(n_cols) (masked lanes read -inf), tl.argmax, and an int64
store; default num_warps, no autotune.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.argmax(x, dim=1)


@triton.jit
def argmax_kernel(x_ptr, out_ptr, n_cols, stride_row, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + row * stride_row + cols, mask=cols < n_cols, other=float("-inf"))
    idx = tl.argmax(x, axis=0)
    tl.store(out_ptr + row, idx.to(tl.int64))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        n_rows, n_cols = x.shape
        out = torch.empty((n_rows,), device=x.device, dtype=torch.int64)
        BLOCK_SIZE = triton.next_power_of_2(n_cols)
        argmax_kernel[(n_rows,)](x, out, n_cols, x.stride(0), BLOCK_SIZE=BLOCK_SIZE)
        return out


_CASES = [(8192, 4096), (16384, 2048), (4096, 8192), (32768, 1000), (5000, 3001)]


def get_init_inputs():
    return []


def get_inputs():
    return [torch.randn(*_CASES[0])]


def get_input_cases():
    return [[torch.randn(*shape)] for shape in _CASES]


def get_verify_inputs():
    return [[torch.randn(37, 129)], [torch.randn(5, 1000) - 100.0], [torch.randn(64, 3)]]
