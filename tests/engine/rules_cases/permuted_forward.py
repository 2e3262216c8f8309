"""Column maxima of x computed in ModelNew.forward itself: it makes a contiguous copy of
x.movedim(0, 1) and launches, with keyword arguments, a one-program-per-row max kernel that reads
the copy as a contiguous [n_rows, n_cols] array. Used by the permuted-copy tests."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def rowmax_kernel(x_ptr, out_ptr, n_rows, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.full([BLOCK], -float("inf"), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        ptrs = x_ptr + row * n_cols + cols
        x = tl.load(ptrs, mask=cols < n_cols, other=-float("inf"))
        acc = tl.maximum(acc, x)
    tl.store(out_ptr + row, tl.max(acc, axis=0))


class Model(nn.Module):
    def forward(self, x):
        return x.amax(dim=0)


class ModelNew(nn.Module):
    def forward(self, x):
        xs = x.movedim(0, 1).contiguous()
        n_rows, n_cols = xs.shape
        out = torch.empty(n_rows, device=x.device, dtype=x.dtype)
        rowmax_kernel[(n_rows,)](x_ptr=xs, out_ptr=out, n_rows=n_rows, n_cols=n_cols, BLOCK=512)
        return out


_CASES = [(4096, 4096), (16384, 512), (8192, 2048), (3000, 7001), (1024, 16384)]


def get_init_inputs():
    return []


def get_inputs():
    return [torch.randn(*_CASES[0])]


def get_input_cases():
    return [[torch.randn(*shape)] for shape in _CASES]


def get_verify_inputs():
    return [[torch.randn(37, 29)], [torch.randn(1, 5)], [torch.randn(200, 3)]]
