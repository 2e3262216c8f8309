"""GPU fixture: a kernel that stores far outside its buffer (CUDA illegal address)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def wild_store_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    far = offs.to(tl.int64) + (1 << 40)
    tl.store(out_ptr + far, tl.zeros((BLOCK,), dtype=tl.float32), mask=offs < n)


class Model(nn.Module):
    def forward(self, x):
        return x * 0


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        wild_store_kernel[(triton.cdiv(x.numel(), 256),)](out, x.numel(), BLOCK=256)
        return out


def get_inputs():
    return [torch.randn(4096)]


def get_init_inputs():
    return []
