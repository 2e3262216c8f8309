"""Column maxima with a running scalar per program, written against `lang` and a bare
`constexpr` import: `acc` starts as a float and takes each chunk's maximum. Used by the tiling
tests."""

import torch
import torch.nn as nn
import triton
import triton.language as lang
from triton.language import constexpr


@triton.jit
def col_max_kernel(inp, out, rows, cols, row_stride, BLOCK: constexpr):
    c = lang.program_id(0)
    acc = float("-inf")
    for r0 in range(0, rows, BLOCK):
        r = r0 + lang.arange(0, BLOCK)
        vals = lang.load(inp + r * row_stride + c, mask=r < rows, other=float("-inf"))
        acc = lang.maximum(acc, lang.max(vals, axis=0))
    lang.store(out + c, acc)


class Model(nn.Module):
    def forward(self, x):
        return torch.amax(x, dim=0)


class ModelNew(nn.Module):
    def forward(self, x):
        rows, cols = x.shape
        out = torch.empty(cols, device=x.device, dtype=x.dtype)
        grid = (cols,)
        col_max_kernel[grid](x, out, rows, cols, x.stride(0), BLOCK=512)
        return out


_CASES = [(8192, 4096), (4096, 8192), (32768, 512), (512, 32768), (7000, 4999)]


def get_init_inputs():
    return []


def get_inputs():
    return [torch.randn(*_CASES[0])]


def get_input_cases():
    return [[torch.randn(*shape)] for shape in _CASES]


def get_verify_inputs():
    return [[torch.randn(37, 29)], [torch.randn(600, 5) - 10.0], [torch.randn(1, 40)]]
