"""Row softmax written as liger-kernel writes its kernels: output pointer first, strides by
position, the block and warps from a `calculate_settings` helper, the launch in a helper that an
autograd Function calls; used by the rules' code-style tests."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

MAX_FUSED_SIZE = 65536


def calculate_settings(n):
    BLOCK_SIZE = triton.next_power_of_2(n)
    if BLOCK_SIZE > MAX_FUSED_SIZE:
        raise RuntimeError(f"Cannot launch Triton kernel since n = {n} exceeds the maximum {MAX_FUSED_SIZE}.")
    num_warps = 4
    if BLOCK_SIZE >= 32768:
        num_warps = 32
    elif BLOCK_SIZE >= 8192:
        num_warps = 16
    elif BLOCK_SIZE >= 2048:
        num_warps = 8
    return BLOCK_SIZE, num_warps


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


@triton.jit
def _softmax_single_block_forward_kernel(Y_ptr, Y_row_stride, X_ptr, X_row_stride, n_cols, BLOCK_SIZE: tl.constexpr):
    row_id = tl.program_id(0)
    offs = tl.arange(0, BLOCK_SIZE)
    mask = offs < n_cols
    x = tl.load(X_ptr + row_id * X_row_stride + offs, mask=mask, other=-float("inf"), cache_modifier=".ca")
    m = tl.max(x, axis=0)
    e = tl.exp(x - m)
    d = tl.sum(e, axis=0)
    y = e / d
    tl.store(Y_ptr + row_id * Y_row_stride + offs, y, mask=mask, cache_modifier=".cs")


def _softmax_forward(x):
    *batch, n_cols = x.shape
    x2d = x.contiguous().view(-1, n_cols)
    n_rows = x2d.shape[0]
    BLOCK_SIZE, num_warps = calculate_settings(n_cols)
    y2d = torch.empty_like(x2d)
    _softmax_single_block_forward_kernel[(n_rows,)](
        y2d,
        y2d.stride(0),
        x2d,
        x2d.stride(0),
        n_cols,
        BLOCK_SIZE=BLOCK_SIZE,
        num_warps=num_warps,
    )
    return y2d.view(*batch, n_cols)


class LigerSoftmaxFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input_):
        return _softmax_forward(input_)


class ModelNew(nn.Module):
    def forward(self, x):
        return LigerSoftmaxFunction.apply(x)


def get_init_inputs():
    return []


def get_inputs():
    return [torch.randn(4096, 1000)]


def get_input_cases():
    return [[torch.randn(4096, 1000)], [torch.randn(8192, 3000)], [torch.randn(2048, 1000)],
            [torch.randn(16, 512, 1000)], [torch.randn(1024, 5000)]]


def get_verify_inputs():
    return [[torch.randn(8, 1000)], [torch.randn(5, 37) * 3], [torch.randn(2, 3, 256)]]
