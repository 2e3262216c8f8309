"""Log-softmax over the last dimension of a 2-D fp32 tensor: x - max - log(sum(exp(x - max))).

category: single
First conversion: one program per row holding the whole row in a single block of
BLOCK_SIZE = triton.next_power_of_2(n_cols), max, sum of exponentials and write in one go;
default num_warps, no autotune.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.log_softmax(x, dim=1)


@triton.jit
def log_softmax_kernel(x_ptr, out_ptr, n_cols, stride_x, stride_out, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=float("-inf"))
    shifted = x - tl.max(x, axis=0)
    log_denom = tl.log(tl.sum(tl.exp(shifted), axis=0))
    tl.store(out_ptr + row * stride_out + cols, shifted - log_denom, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        n_rows, n_cols = x.shape
        out = torch.empty_like(x)
        BLOCK_SIZE = triton.next_power_of_2(n_cols)
        log_softmax_kernel[(n_rows,)](x, out, n_cols, x.stride(0), out.stride(0), BLOCK_SIZE=BLOCK_SIZE)
        return out


_CASES = [(8192, 4096), (16384, 2048), (4096, 8192), (32768, 1000), (6000, 3000)]


def get_init_inputs():
    return []


def get_inputs():
    return [torch.randn(*_CASES[0])]


def get_input_cases():
    return [[torch.randn(*shape)] for shape in _CASES]


def get_verify_inputs():
    return [[torch.randn(37, 129) * 5], [torch.randn(4, 1000)], [torch.randn(60, 3)]]
