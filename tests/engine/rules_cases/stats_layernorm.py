"""Layer norm written as two row kernels: the first stores each row's mean and reciprocal
standard deviation, the second reads them back with the row, weight and bias; launched from a
helper with positional arguments (the block too) and a named grid. Used by the fusion of row
statistics tests."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def ln_stats_kernel(X, Mean, Rstd, N, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    x = tl.load(X + row * N + cols, mask=cols < N, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / N
    diff = tl.where(cols < N, x - mean, 0.0)
    var = tl.sum(diff * diff, axis=0) / N
    tl.store(Mean + row, mean)
    tl.store(Rstd + row, 1.0 / tl.sqrt(var + eps))


@triton.jit
def ln_apply_kernel(X, Y, W, B, Mean, Rstd, N, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(X + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(W + cols, mask=mask)
    b = tl.load(B + cols, mask=mask)
    mean = tl.load(Mean + row)
    rstd = tl.load(Rstd + row)
    tl.store(Y + row * N + cols, (x - mean) * rstd * w + b, mask=mask)


def layer_norm(x, weight, bias, eps):
    M, N = x.shape
    y = torch.empty_like(x)
    mean = torch.empty((M,), dtype=torch.float32, device=x.device)
    rstd = torch.empty((M,), dtype=torch.float32, device=x.device)
    BLOCK_N = triton.next_power_of_2(N)
    grid = (M,)
    ln_stats_kernel[grid](x, mean, rstd, N, eps, BLOCK_N)
    ln_apply_kernel[grid](x, y, weight, bias, mean, rstd, N, BLOCK_N)
    return y


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.norm = nn.LayerNorm(n)

    def forward(self, x):
        return self.norm(x)


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.norm = nn.LayerNorm(n)

    def forward(self, x):
        return layer_norm(x.contiguous(), self.norm.weight, self.norm.bias, self.norm.eps)


_N = 129


def get_init_inputs():
    return [_N]


def get_inputs():
    return [torch.randn(8192, _N)]


def get_input_cases():
    return [[torch.randn(m, _N)] for m in (8192, 16384, 4096, 1000, 30000)]


def get_verify_inputs():
    return [[torch.randn(37, _N)], [torch.randn(1, _N) * 3], [torch.randn(5, _N) + 2.0]]
