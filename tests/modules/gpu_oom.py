"""GPU fixture: forward asks the device for 1 TiB (more than any GPU has)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def unused_kernel(x_ptr, BLOCK: tl.constexpr):
    pass


class Model(nn.Module):
    def forward(self, x):
        return x * 2


class ModelNew(nn.Module):
    def forward(self, x):
        big = torch.empty(1 << 40, dtype=torch.uint8, device=x.device)
        return x * 2 + big[:1].float()


def get_inputs():
    return [torch.randn(16)]


def get_init_inputs():
    return []
