"""Rows centred and scaled in one block, written against `lang`: the centred row is stored to
the output and loaded back (with a zero for masked lanes) to compute its scale; launched from a
helper with positional arguments. Used by the forwarding tests."""

import torch
import torch.nn as nn
import triton
import triton.language as lang
from triton.language import constexpr


@triton.jit
def center_scale_kernel(src, dst, width, BLOCK: constexpr):
    r = lang.program_id(0)
    c = lang.arange(0, BLOCK)
    m = c < width
    v = lang.load(src + r * width + c, mask=m, other=0.0)
    lang.store(dst + r * width + c, v - lang.sum(v, axis=0) / width, mask=m)
    centered = lang.load(dst + r * width + c, mask=m, other=0.0)
    scale = lang.sqrt(lang.sum(centered * centered, axis=0) / width + 1e-5)
    lang.store(dst + r * width + c, centered / scale, mask=m)


def center_scale(x):
    rows, width = x.shape
    out = torch.empty_like(x)
    center_scale_kernel[(rows,)](x, out, width, triton.next_power_of_2(width))
    return out


class Model(nn.Module):
    def forward(self, x):
        centered = x - x.mean(dim=1, keepdim=True)
        return centered / torch.sqrt(centered.pow(2).mean(dim=1, keepdim=True) + 1e-5)


class ModelNew(nn.Module):
    def forward(self, x):
        return center_scale(x.contiguous())


_CASES = [(4096, 4096), (16384, 1024), (2048, 8192), (32768, 1000), (5000, 5001)]


def get_init_inputs():
    return []


def get_inputs():
    return [torch.randn(*_CASES[0])]


def get_input_cases():
    return [[torch.randn(*shape)] for shape in _CASES]


def get_verify_inputs():
    return [[torch.randn(37, 129) * 3 + 1], [torch.randn(3, 700)], [torch.randn(50, 2)]]
