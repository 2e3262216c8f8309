"""Log-sum-exp of each row of a 2-D fp32 tensor, written out as the stable formula:
m = max(x, dim=1); out = m + log(sum(exp(x - m), dim=1)).

category: fused
First conversion: one kernel per step of the formula; a row-max kernel (one program per row,
single block of triton.next_power_of_2(n_cols)), a 1-D element-wise exp(x - m[row]) kernel
(BLOCK_SIZE = 1024) that writes the full exponentiated tensor, a row-sum kernel like the row max,
and a 1-D log-and-add kernel over the rows.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        m = torch.amax(x, dim=1, keepdim=True)
        return m.squeeze(1) + torch.log(torch.sum(torch.exp(x - m), dim=1))


@triton.jit
def row_max_kernel(x_ptr, out_ptr, n_cols, stride, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=float("-inf"))
    tl.store(out_ptr + row, tl.max(x, axis=0))


@triton.jit
def sub_exp_kernel(x_ptr, m_ptr, out_ptr, n_elements, n_cols, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    m = tl.load(m_ptr + offsets // n_cols, mask=mask, other=0.0)
    tl.store(out_ptr + offsets, tl.exp(x - m), mask=mask)


@triton.jit
def row_sum_kernel(x_ptr, out_ptr, n_cols, stride, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
    tl.store(out_ptr + row, tl.sum(x, axis=0))


@triton.jit
def log_add_kernel(s_ptr, m_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n
    s = tl.load(s_ptr + offsets, mask=mask, other=1.0)
    m = tl.load(m_ptr + offsets, mask=mask, other=0.0)
    tl.store(out_ptr + offsets, m + tl.log(s), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        n_rows, n_cols = x.shape
        ROW_BLOCK = triton.next_power_of_2(n_cols)
        m = torch.empty((n_rows,), device=x.device, dtype=x.dtype)
        row_max_kernel[(n_rows,)](x, m, n_cols, x.stride(0), BLOCK_SIZE=ROW_BLOCK)
        e = torch.empty_like(x)
        n = x.numel()
        sub_exp_kernel[(triton.cdiv(n, 1024),)](x, m, e, n, n_cols, BLOCK_SIZE=1024)
        s = torch.empty((n_rows,), device=x.device, dtype=x.dtype)
        row_sum_kernel[(n_rows,)](e, s, n_cols, e.stride(0), BLOCK_SIZE=ROW_BLOCK)
        out = torch.empty((n_rows,), device=x.device, dtype=x.dtype)
        log_add_kernel[(triton.cdiv(n_rows, 1024),)](s, m, out, n_rows, BLOCK_SIZE=1024)
        return out


_CASES = [(8192, 4096), (16384, 2048), (4096, 8192), (32768, 1000), (5000, 3001)]


def get_init_inputs():
    return []


def get_inputs():
    return [torch.randn(*_CASES[0])]


def get_input_cases():
    return [[torch.randn(*shape)] for shape in _CASES]


def get_verify_inputs():
    return [[torch.randn(37, 129) * 10], [torch.randn(3, 2000) + 50.0], [torch.randn(150, 3)]]
