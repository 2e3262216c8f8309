"""Complex rows times a complex vector, both stored as interleaved (real, imag) pairs; each
program takes one row, reading and writing each half of its pairs by a stride-2 access; used
by the rules tests."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


class Model(nn.Module):
    def forward(self, x, w):
        z = torch.view_as_complex(x.float()) * torch.view_as_complex(w.float())
        return torch.view_as_real(z).to(x.dtype)


@triton.jit
def cmul_rows_kernel(x_ptr, w_ptr, y_ptr, n, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    x_row = x_ptr + row * stride_row
    y_row = y_ptr + row * stride_row
    for start in range(0, n, BLOCK):
        k = start + tl.arange(0, BLOCK)
        mask = k < n
        w_re = tl.load(w_ptr + k * 2, mask=mask, other=0.0).to(tl.float32)
        w_im = tl.load(w_ptr + k * 2 + 1, mask=mask, other=0.0).to(tl.float32)
        x_re = tl.load(x_row + k * 2, mask=mask, other=0.0).to(tl.float32)
        x_im = tl.load(x_row + k * 2 + 1, mask=mask, other=0.0).to(tl.float32)
        y_re = x_re * w_re - x_im * w_im
        y_im = x_re * w_im + x_im * w_re
        tl.store(y_row + k * 2, y_re.to(y_ptr.dtype.element_ty), mask=mask)
        tl.store(y_row + k * 2 + 1, y_im.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x, w):
        rows, n, _ = x.shape
        y = torch.empty_like(x)
        cmul_rows_kernel[(rows,)](x, w, y, n, x.stride(0), BLOCK=256)
        return y


def _make(rows, n, dtype=torch.float16):
    return [torch.randn(rows, n, 2, dtype=dtype), torch.randn(n, 2, dtype=dtype)]


def get_init_inputs():
    return []


def get_inputs():
    return _make(8192, 2048)


def get_input_cases():
    return [_make(8192, 2048), _make(4096, 4096), _make(16384, 1024), _make(2048, 8192), _make(32768, 512)]


def get_verify_inputs():
    return [_make(3, 100), _make(5, 256), _make(1, 1000, torch.float32)]
