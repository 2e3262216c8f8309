"""LayerNorm over the last dimension (hidden 2880) of fp32 activations, with weight and bias.

category: single
First conversion: one program per row that walks the row in chunks of BLOCK_SIZE = 1024 in three
passes (mean, variance, normalise-scale-shift-write), as in the Triton tutorial; default
num_warps, no autotune.
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

    def forward(self, x):
        return F.layer_norm(x, (self.hidden,), self.weight, self.bias, self.eps)


@triton.jit
def layer_norm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, stride, N, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    x_ptr += row * stride
    out_ptr += row * stride

    # mean
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        acc += tl.load(x_ptr + cols, mask=cols < N, other=0.0)
    mean = tl.sum(acc, axis=0) / N

    # variance
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        x = tl.load(x_ptr + cols, mask=cols < N, other=0.0)
        diff = tl.where(cols < N, x - mean, 0.0)
        acc += diff * diff
    var = tl.sum(acc, axis=0) / N
    rstd = 1.0 / tl.sqrt(var + eps)

    # normalise, scale, shift
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        mask = cols < N
        w = tl.load(w_ptr + cols, mask=mask)
        b = tl.load(b_ptr + cols, mask=mask)
        x = tl.load(x_ptr + cols, mask=mask, other=0.0)
        y = (x - mean) * rstd * w + b
        tl.store(out_ptr + cols, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, hidden, eps=1e-5):
        super().__init__()
        self.hidden = hidden
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden))
        self.bias = nn.Parameter(torch.zeros(hidden))

    def forward(self, x):
        x2d = x.reshape(-1, self.hidden)
        out = torch.empty(x2d.shape, device=x.device, dtype=x.dtype)
        n_rows = x2d.shape[0]
        layer_norm_kernel[(n_rows,)](
            x2d, self.weight, self.bias, out, x2d.stride(0), self.hidden, self.eps, BLOCK_SIZE=1024
        )
        return out.reshape(x.shape)


HIDDEN = 2880
_ROWS = [8192, 16384, 4096, 12345, 6000]


def get_init_inputs():
    return [HIDDEN]


def get_inputs():
    return [torch.randn(_ROWS[0], HIDDEN)]


def get_input_cases():
    return [[torch.randn(rows, HIDDEN)] for rows in _ROWS]


def get_verify_inputs():
    return [[torch.randn(37, HIDDEN) * 2 + 0.5], [torch.randn(3, 5, HIDDEN)]]
