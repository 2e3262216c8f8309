"""Full mean with one tl.atomic_add per block into a zeroed scalar; used by the rules tests."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


class Model(nn.Module):
    def forward(self, x):
        return x.mean()


@triton.jit
def mean_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offsets, mask=offsets < n_elements, other=0.0)
    partial = tl.sum(x, axis=0) / n_elements
    tl.atomic_add(out_ptr, partial)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        n = x.numel()
        out = torch.zeros((), device=x.device, dtype=torch.float32)
        BLOCK_SIZE = 256
        mean_kernel[(triton.cdiv(n, BLOCK_SIZE),)](x, out, n, BLOCK_SIZE=BLOCK_SIZE)
        return out


def get_init_inputs():
    return []


def get_inputs():
    return [torch.randn(3000)]


def get_input_cases():
    return [[torch.randn(3000)], [torch.randn(40, 50)], [torch.randn(7)], [torch.randn(256)], [torch.randn(3, 300)]]


def get_verify_inputs():
    return [[torch.randn(3000)], [torch.randn(37, 129)], [torch.randn(5)]]
