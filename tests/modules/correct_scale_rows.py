"""Correct row scaling, out[i, j] = x[i, j] * weight[j], with no get_verify_inputs(): the gate
derives odd-shaped cases from get_inputs(), and the weight's size (64) stays fixed."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_rows_kernel(x_ptr, w_ptr, out_ptr, n_rows, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask)
    w = tl.load(w_ptr + cols, mask=mask)
    tl.store(out_ptr + row * n_cols + cols, x * w, mask=mask)


class Model(nn.Module):
    def __init__(self, n_cols):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n_cols))

    def forward(self, x):
        return x * self.weight


class ModelNew(nn.Module):
    def __init__(self, n_cols):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n_cols))

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        n_rows, n_cols = x.shape
        scale_rows_kernel[(n_rows,)](
            x, self.weight, out, n_rows, n_cols, BLOCK=triton.next_power_of_2(n_cols)
        )
        return out


def get_inputs():
    return [torch.randn(48, 64)]


def get_init_inputs():
    return [64]
