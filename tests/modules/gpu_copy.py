"""GPU fixture: a 1 GiB fp32 copy (2^28 elements), for the %SOL check."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

N = 1 << 28


@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


class Model(nn.Module):
    def forward(self, x):
        return x.clone()


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        copy_kernel[(triton.cdiv(n, 4096),)](x, out, n, BLOCK=4096, num_warps=8)
        return out


def get_inputs():
    return [torch.empty(N).uniform_()]


def get_init_inputs():
    return []
