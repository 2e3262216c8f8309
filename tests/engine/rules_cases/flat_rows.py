"""Softplus over the rows of a strided 2-D view, flattened into blocks of BLOCK elements per
program, its length left out of the JIT's specialization (a kernel written not to recompile per
length); used by the rules tests."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


class Model(nn.Module):
    def forward(self, x):
        return torch.nn.functional.softplus(x)


@triton.jit(do_not_specialize=["n"])
def softplus_rows_kernel(x_ptr, y_ptr, stride_row, n, D: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    row = offs // D
    col = offs % D
    x = tl.load(x_ptr + row * stride_row + col, mask=mask, other=0.0).to(tl.float32)
    y = tl.maximum(x, 0.0) + tl.log(1.0 + tl.exp(-tl.abs(x)))
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        rows, D = x.shape
        y = torch.empty((rows, D), dtype=x.dtype, device=x.device)
        n = x.numel()
        BLOCK = 1024
        softplus_rows_kernel[(triton.cdiv(n, BLOCK),)](x, y, x.stride(0), n, D=D, BLOCK=BLOCK)
        return y


def _make(rows, cols):
    # the first `cols` columns of a wider tensor: rows `cols + 64` apart
    return [torch.randn(rows, cols + 64)[:, :cols]]


def get_init_inputs():
    return []


def get_inputs():
    return _make(4096, 1024)


def get_input_cases():
    return [_make(4096, 1024), _make(2048, 4096), _make(1000, 768), _make(8192, 512), _make(512, 8192)]


def get_verify_inputs():
    return [_make(37, 100), _make(5, 3001), _make(64, 256)]
