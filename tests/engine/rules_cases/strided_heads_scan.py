"""Running sums over time of [B, T, H] gates, one program per (batch, head) walking its
sequence in blocks and carrying the total: the program index is split into two digits, and
every lane of a load reads one element H apart from the next (the heads are the contiguous
axis). Used by the tiling tests."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def running_sum_kernel(x, y, T, H: tl.constexpr, BLOCK_T: tl.constexpr, REVERSE: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    b, h = pid // H, pid % H
    start = b * T * H + h
    carry = tl.zeros([], dtype=tl.float32)
    n_blocks = tl.cdiv(T, BLOCK_T)
    for i in range(n_blocks):
        blk = n_blocks - 1 - i if REVERSE else i
        t = blk * BLOCK_T + tl.arange(0, BLOCK_T)
        keep = t < T
        vals = tl.load(x + start + t * H, mask=keep, other=0.0).to(tl.float32)
        if REVERSE:
            out = tl.cumsum(vals, axis=0, reverse=True) + carry
        else:
            out = tl.cumsum(vals, axis=0) + carry
        carry += tl.sum(vals, 0)
        tl.store(y + start + t * H, out.to(y.dtype.element_ty), mask=keep)


class Model(nn.Module):
    def forward(self, x):
        return x.cumsum(1)


class ModelNew(nn.Module):
    def forward(self, x):
        B, T, H = x.shape
        y = torch.empty_like(x)
        running_sum_kernel[(B * H,)](x, y, T, H=H, BLOCK_T=128, REVERSE=False)
        return y


_CASES = [(8, 4096, 32), (4, 8192, 32), (16, 2048, 16), (1, 32768, 64), (32, 1024, 32)]


def get_init_inputs():
    return []


def get_inputs():
    return [torch.randn(*_CASES[0])]


def get_input_cases():
    return [[torch.randn(*shape)] for shape in _CASES]


def get_verify_inputs():
    return [[torch.randn(2, 300, 3)], [torch.randn(1, 129, 40)], [torch.randn(3, 5, 1)]]
