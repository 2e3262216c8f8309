"""Maximum of a whole tensor in one program with a running scalar, written against `lang`, a
bare `constexpr` import and `lang.range`. Used by the two-stage tests."""

import torch
import torch.nn as nn
import triton
import triton.language as lang
from triton.language import constexpr


@triton.jit
def amax_kernel(src, dst, numel, BLOCK: constexpr):
    best = float("-inf")
    for base in lang.range(0, numel, BLOCK):
        idx = base + lang.arange(0, BLOCK)
        vals = lang.load(src + idx, mask=idx < numel, other=float("-inf"))
        best = lang.maximum(best, lang.max(vals, axis=0))
    lang.store(dst, best)


class Model(nn.Module):
    def forward(self, x):
        return torch.amax(x)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty((), device=x.device, dtype=x.dtype)
        grid = (1,)
        amax_kernel[grid](x.contiguous(), out, x.numel(), BLOCK=2048)
        return out


_CASES = [(4096, 8192), (2**24 + 17,), (16, 1024, 2048), (3000, 7001), (8192, 4095)]


def get_init_inputs():
    return []


def get_inputs():
    return [torch.randn(*_CASES[0])]


def get_input_cases():
    return [[torch.randn(*shape)] for shape in _CASES]


def get_verify_inputs():
    return [[torch.randn(37, 129)], [torch.randn(3000) - 5.0], [torch.randn(3, 5, 7)]]
