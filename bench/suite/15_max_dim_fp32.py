"""Maximum over the last dimension of a 2-D fp32 tensor: torch.amax(x, dim=1).

category: single
First conversion: one program per row looping over the row in chunks of BLOCK_SIZE = 2048 and
keeping a running scalar maximum (tl.max of each chunk); default num_warps, no autotune.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.amax(x, dim=1)


@triton.jit
def row_max_kernel(x_ptr, out_ptr, n_cols, stride_row, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    row_ptr = x_ptr + row * stride_row
    result = float("-inf")
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        x = tl.load(row_ptr + cols, mask=cols < n_cols, other=float("-inf"))
        result = tl.maximum(result, tl.max(x, axis=0))
    tl.store(out_ptr + row, result)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        n_rows, n_cols = x.shape
        out = torch.empty((n_rows,), device=x.device, dtype=x.dtype)
        row_max_kernel[(n_rows,)](x, out, n_cols, x.stride(0), BLOCK_SIZE=2048)
        return out


_CASES = [(8192, 4096), (4096, 8192), (32768, 512), (512, 32768), (7000, 4999)]


def get_init_inputs():
    return []


def get_inputs():
    return [torch.randn(*_CASES[0])]


def get_input_cases():
    return [[torch.randn(*shape)] for shape in _CASES]


def get_verify_inputs():
    return [[torch.randn(37, 129)], [torch.randn(3, 5000) - 10.0], [torch.randn(100, 1)]]
