"""GPU fixture: rows sorted by torch in the wrapper, then scaled by a Triton kernel; the sort
is most of the forward's kernel time (tier 1's T1-OTHER-KERNELS)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)


class Model(nn.Module):
    def forward(self, x):
        return torch.sort(x, dim=-1).values * 2.0


class ModelNew(nn.Module):
    def forward(self, x):
        ordered = torch.sort(x, dim=-1).values
        out = torch.empty_like(ordered)
        n = out.numel()
        scale_kernel[(triton.cdiv(n, 1024),)](ordered, out, n, BLOCK=1024)
        return out


def get_inputs():
    return [torch.randn(4096, 4096)]


def get_verify_inputs():
    return [[torch.randn(7, 33)]]


def get_init_inputs():
    return []
