"""Rows of x.T scaled by w, written with `import triton as tr` and `triton.language as lang`: the
helper `scale_rows` makes a contiguous copy of x.transpose(0, 1) and a 2-D tiled kernel reads it as
a contiguous [n_rows, n_cols] array. Used by the permuted-copy tests."""

import torch
import torch.nn as nn
import triton as tr
import triton.language as lang


@tr.jit
def scale_kernel(x_ptr, w_ptr, out_ptr, n_rows, n_cols, BLOCK_R: lang.constexpr, BLOCK_C: lang.constexpr):
    r = lang.program_id(0) * BLOCK_R + lang.arange(0, BLOCK_R)
    c = lang.program_id(1) * BLOCK_C + lang.arange(0, BLOCK_C)
    mask = (r[:, None] < n_rows) & (c[None, :] < n_cols)
    x = lang.load(x_ptr + r[:, None] * n_cols + c[None, :], mask=mask, other=0.0)
    w = lang.load(w_ptr + c, mask=c < n_cols, other=0.0)
    lang.store(out_ptr + r[:, None] * n_cols + c[None, :], x * w[None, :], mask=mask)


def scale_rows(x, w):
    xt = x.transpose(0, 1).contiguous()
    n_rows, n_cols = xt.shape
    out = torch.empty((n_rows, n_cols), device=x.device, dtype=x.dtype)
    scale_kernel[(tr.cdiv(n_rows, 32), tr.cdiv(n_cols, 64))](xt, w, out, n_rows, n_cols, 32, 64)
    return out


class Model(nn.Module):
    def forward(self, x, w):
        return x.t() * w


class ModelNew(nn.Module):
    def forward(self, x, w):
        return scale_rows(x, w)


_CASES = [(4096, 2048), (2048, 8192), (8192, 1024), (3000, 7001), (1024, 16384)]


def _inputs(rows, cols):
    return [torch.randn(rows, cols), torch.randn(rows)]


def get_init_inputs():
    return []


def get_inputs():
    return _inputs(*_CASES[0])


def get_input_cases():
    return [_inputs(*shape) for shape in _CASES]


def get_verify_inputs():
    return [_inputs(37, 29), _inputs(3, 50)]
