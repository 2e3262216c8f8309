"""Hostile: forward asks for 10 GB of host memory."""

import torch
import torch.nn as nn
import triton


@triton.jit
def unused_kernel(x_ptr):
    pass


class Model(nn.Module):
    def forward(self, x):
        return x * 2


class ModelNew(nn.Module):
    def forward(self, x):
        big = torch.ones(10 * 1024**3, dtype=torch.uint8, device=x.device)
        return x * 2 + big[0]


def get_inputs():
    return [torch.randn(16)]


def get_init_inputs():
    return []
