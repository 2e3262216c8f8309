"""LayerNorm (hidden 3072, weight and bias) followed by exact (erf) GELU, fp32.

category: fused
First conversion: one kernel per PyTorch op; a LayerNorm kernel (one program per row, the whole
row in one block of triton.next_power_of_2(3072) = 4096) writes the normalised tensor to memory,
then a 1-D element-wise GELU kernel with BLOCK_SIZE = 1024 reads it back.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


class Model(nn.Module):
    def __init__(self, hidden, eps=1e-5):
        super().__init__()
        self.norm = nn.LayerNorm(hidden, eps=eps)
        with torch.no_grad():
            self.norm.weight.add_(0.1 * torch.randn(hidden))
            self.norm.bias.add_(0.1 * torch.randn(hidden))

    def forward(self, x):
        return F.gelu(self.norm(x))


@triton.jit
def layernorm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, n_cols, stride, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)
    mean = tl.sum(x, axis=0) / n_cols
    diff = tl.where(mask, x - mean, 0.0)
    var = tl.sum(diff * diff, axis=0) / n_cols
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0)
    tl.store(y_ptr + row * stride + cols, diff * rstd * w + b, mask=mask)


@triton.jit
def gelu_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))
    tl.store(y_ptr + offsets, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, hidden, eps=1e-5):
        super().__init__()
        self.norm = nn.LayerNorm(hidden, eps=eps)

    def forward(self, x):
        n_cols = x.shape[-1]
        x2d = x.reshape(-1, n_cols)
        normed = torch.empty_like(x2d)
        layernorm_kernel[(x2d.shape[0],)](
            x2d, self.norm.weight, self.norm.bias, normed, n_cols, x2d.stride(0), self.norm.eps,
            BLOCK_SIZE=triton.next_power_of_2(n_cols),
        )
        out = torch.empty_like(normed)
        n = normed.numel()
        gelu_kernel[(triton.cdiv(n, 1024),)](normed, out, n, BLOCK_SIZE=1024)
        return out.reshape(x.shape)


HIDDEN = 3072
_ROWS = [8192, 4096, 16384, 10000, 2500]


def get_init_inputs():
    return [HIDDEN]


def get_inputs():
    return [torch.randn(_ROWS[0], HIDDEN)]


def get_input_cases():
    return [[torch.randn(rows, HIDDEN)] for rows in _ROWS]


def get_verify_inputs():
    return [[torch.randn(37, HIDDEN) * 3 + 1], [torch.randn(2, 3, HIDDEN)]]
