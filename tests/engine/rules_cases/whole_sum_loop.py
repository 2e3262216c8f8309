"""Sum of a whole tensor by one program that loops over it in blocks and stores the total.
Used by the two-stage tests."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


class Model(nn.Module):
    def forward(self, x):
        return x.sum()


@triton.jit
def sum_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, n_elements, BLOCK_SIZE):
        offsets = start + tl.arange(0, BLOCK_SIZE)
        acc += tl.load(x_ptr + offsets, mask=offsets < n_elements, other=0.0)
    tl.store(out_ptr, tl.sum(acc, axis=0))


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        out = torch.empty((), device=x.device, dtype=torch.float32)
        sum_kernel[(1,)](x, out, x.numel(), BLOCK_SIZE=1024)
        return out


_CASES = [(4096, 8192), (2**24 + 17,), (16, 1024, 2048), (3000, 7001), (8192, 4095)]


def get_init_inputs():
    return []


def get_inputs():
    return [torch.rand(*_CASES[0])]


def get_input_cases():
    return [[torch.rand(*shape)] for shape in _CASES]


def get_verify_inputs():
    return [[torch.rand(37, 129)], [torch.rand(1000) + 2.0], [torch.randn(3, 5, 7)]]
