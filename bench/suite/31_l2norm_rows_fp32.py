"""L2 norm of each row of a 2-D fp32 tensor: sqrt(sum(x * x, dim=1)).

category: fused
First conversion: one fused kernel, one program per row looping over the row in chunks of
BLOCK_SIZE = 2048, accumulating x * x in an fp32 vector, then tl.sum and tl.sqrt; default
num_warps, no autotune.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.sqrt(torch.sum(x * x, dim=1))


@triton.jit
def l2norm_rows_kernel(x_ptr, out_ptr, n_cols, stride_row, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        x = tl.load(x_ptr + row * stride_row + cols, mask=cols < n_cols, other=0.0)
        acc += x * x
    tl.store(out_ptr + row, tl.sqrt(tl.sum(acc, axis=0)))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        n_rows, n_cols = x.shape
        out = torch.empty((n_rows,), device=x.device, dtype=x.dtype)
        l2norm_rows_kernel[(n_rows,)](x, out, n_cols, x.stride(0), BLOCK_SIZE=2048)
        return out


_CASES = [(8192, 4096), (4096, 8192), (65536, 512), (1024, 32768), (7777, 3333)]


def get_init_inputs():
    return []


def get_inputs():
    return [torch.randn(*_CASES[0])]


def get_input_cases():
    return [[torch.randn(*shape)] for shape in _CASES]


def get_verify_inputs():
    return [[torch.randn(37, 129)], [torch.randn(3, 5000)], [torch.randn(64, 1)]]
