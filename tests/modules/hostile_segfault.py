"""Hostile: forward dereferences NULL through ctypes (SIGSEGV)."""

import ctypes

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
        ctypes.string_at(0)
        return x * 2


def get_inputs():
    return [torch.randn(16)]


def get_init_inputs():
    return []
