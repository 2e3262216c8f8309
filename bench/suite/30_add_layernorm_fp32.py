"""Residual add followed by LayerNorm (hidden 4096, weight and bias), fp32: layer_norm(x + r).

category: fused
First conversion: one kernel per PyTorch op; a 1-D element-wise add kernel (BLOCK_SIZE = 1024)
writes x + r to memory, then a LayerNorm kernel (one program per row, chunks of BLOCK_SIZE = 1024)
makes one pass for the sum and sum of squares and a second pass to normalise and write.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


class Model(nn.Module):
    def __init__(self, hidden, eps=1e-5):
        super().__init__()
        self.hidden = hidden
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))
        self.bias = nn.Parameter(0.1 * torch.randn(hidden))

    def forward(self, x, r):
        return F.layer_norm(x + r, (self.hidden,), self.weight, self.bias, self.eps)


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


@triton.jit
def layernorm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, n_cols, row_stride, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    row_start = row * row_stride
    s = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    sq = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, n_cols, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        x = tl.load(x_ptr + row_start + cols, mask=cols < n_cols, other=0.0)
        s += x
        sq += x * x
    mean = tl.sum(s, axis=0) / n_cols
    var = tl.sum(sq, axis=0) / n_cols - mean * mean
    rstd = 1.0 / tl.sqrt(var + eps)
    for off in range(0, n_cols, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        mask = cols < n_cols
        x = tl.load(x_ptr + row_start + cols, mask=mask, other=0.0)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0)
        b = tl.load(b_ptr + cols, mask=mask, other=0.0)
        tl.store(out_ptr + row_start + cols, (x - mean) * rstd * w + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, hidden, eps=1e-5):
        super().__init__()
        self.hidden = hidden
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden))
        self.bias = nn.Parameter(torch.zeros(hidden))

    def forward(self, x, r):
        n = x.numel()
        h = torch.empty_like(x)
        add_kernel[(triton.cdiv(n, 1024),)](x, r, h, n, BLOCK_SIZE=1024)
        h2d = h.reshape(-1, self.hidden)
        out = torch.empty_like(h2d)
        layernorm_kernel[(h2d.shape[0],)](
            h2d, self.weight, self.bias, out, self.hidden, h2d.stride(0), self.eps, BLOCK_SIZE=1024
        )
        return out.reshape(x.shape)


HIDDEN = 4096
_ROWS = [8192, 4096, 2048, 6001, 3333]


def _make(rows):
    return [torch.randn(rows, HIDDEN), torch.randn(rows, HIDDEN)]


def get_init_inputs():
    return [HIDDEN]


def get_inputs():
    return _make(_ROWS[0])


def get_input_cases():
    return [_make(rows) for rows in _ROWS]


def get_verify_inputs():
    return [_make(37), [torch.randn(2, 3, HIDDEN), torch.randn(2, 3, HIDDEN)]]
