"""Gated RMSNorm on fp16 activations (hidden 2560): rmsnorm(x) * w * silu(g), computed in fp32.

category: fused
First conversion: one fused kernel, one program per row with the whole row of x and of the gate g
in a single block of triton.next_power_of_2(2560) = 4096: sum of squares, rsqrt, weight, SiLU gate
and an fp16 store in one pass; default num_warps, no autotune.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


class Model(nn.Module):
    def __init__(self, hidden, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))

    def forward(self, x, g):
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight
        return (y * F.silu(g.float())).to(x.dtype)


@triton.jit
def rmsnorm_silu_gate_kernel(x_ptr, g_ptr, w_ptr, out_ptr, stride, n_cols, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(g_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    y = x * rstd * w * (g * tl.sigmoid(g))
    tl.store(out_ptr + row * stride + cols, y.to(tl.float16), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, hidden, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden))

    def forward(self, x, g):
        n_rows, n_cols = x.shape
        out = torch.empty((n_rows, n_cols), device=x.device, dtype=torch.float16)
        BLOCK_SIZE = triton.next_power_of_2(n_cols)
        rmsnorm_silu_gate_kernel[(n_rows,)](x, g, self.weight, out, x.stride(0), n_cols, self.eps, BLOCK_SIZE=BLOCK_SIZE)
        return out


HIDDEN = 2560
_ROWS = [8192, 16384, 4096, 12000, 3001]


def _make(rows):
    return [torch.randn(rows, HIDDEN, dtype=torch.float16), torch.randn(rows, HIDDEN, dtype=torch.float16)]


def get_init_inputs():
    return [HIDDEN]


def get_inputs():
    return _make(_ROWS[0])


def get_input_cases():
    return [_make(rows) for rows in _ROWS]


def get_verify_inputs():
    return [_make(37), _make(5)]
