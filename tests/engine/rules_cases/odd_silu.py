"""SiLU on fp16 as a first conversion writes it: a 1-D grid of 1024-element blocks, each access
masked by `offsets < n_elements`; most cases' lengths are not multiples of 16 (used by the
rules tests of MASKING's full blocks)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


class Model(nn.Module):
    def forward(self, x):
        return torch.nn.functional.silu(x)


@triton.jit
def silu_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    y = x * tl.sigmoid(x)
    tl.store(out_ptr + offsets, y.to(tl.float16), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        silu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK_SIZE=1024)
        return out


_CASES = [(8192, 8192), (2**26 + 5,), (6001, 7000), (4096, 14336), (7001, 6000)]


def get_init_inputs():
    return []


def get_inputs():
    return [torch.randn(*_CASES[0], dtype=torch.float16)]


def get_input_cases():
    return [[torch.randn(*shape, dtype=torch.float16)] for shape in _CASES]


def get_verify_inputs():
    return [
        [torch.randn(3000, dtype=torch.float16) * 4],
        [torch.randn(37, 129, dtype=torch.float16)],
        [torch.randn(2048, dtype=torch.float16)],
        [torch.randn(5, dtype=torch.float16)],
    ]
