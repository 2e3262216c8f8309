"""RMSNorm over the last dimension (hidden 5120) of fp32 activations: x / sqrt(mean(x^2) + eps) * w.

category: single
First conversion: one program per row holding the whole row in a single block of
BLOCK_SIZE = triton.next_power_of_2(hidden) = 8192, sum of squares, rsqrt and scaled write in one
pass; default num_warps, no autotune.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


class Model(nn.Module):
    def __init__(self, hidden, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))

    def forward(self, x):
        rms = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return x * rms * self.weight


@triton.jit
def rms_norm_kernel(x_ptr, w_ptr, out_ptr, row_stride, n_cols, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * row_stride + cols, mask=mask, other=0.0)
    mean_sq = tl.sum(x * x, axis=0) / n_cols
    rstd = tl.rsqrt(mean_sq + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    tl.store(out_ptr + row * row_stride + cols, x * rstd * w, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, hidden, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden))

    def forward(self, x):
        n_cols = x.shape[-1]
        x2d = x.reshape(-1, n_cols)
        out = torch.empty_like(x2d)
        BLOCK_SIZE = triton.next_power_of_2(n_cols)
        rms_norm_kernel[(x2d.shape[0],)](x2d, self.weight, out, x2d.stride(0), n_cols, self.eps, BLOCK_SIZE=BLOCK_SIZE)
        return out.reshape(x.shape)


HIDDEN = 5120
_ROWS = [4096, 8192, 2048, 3001, 6000]


def get_init_inputs():
    return [HIDDEN]


def get_inputs():
    return [torch.randn(_ROWS[0], HIDDEN)]


def get_input_cases():
    return [[torch.randn(rows, HIDDEN)] for rows in _ROWS]


def get_verify_inputs():
    return [[torch.randn(37, HIDDEN)], [torch.randn(2, 3, HIDDEN) * 3]]
