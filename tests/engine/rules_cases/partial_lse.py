"""Row logsumexp in blocks: each program reduces one block of a row to its logsumexp and stores
it, one partial per block; the wrapper finishes the row with torch's logsumexp over the partials.
Rows of at most BLOCK_MAX columns fit one block, and the finish then reduces one element. Used by
the one-element-finish tests."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_MAX = 2048


class Model(nn.Module):
    def forward(self, x):
        return torch.logsumexp(x, dim=-1)


@triton.jit
def block_lse_kernel(x_ptr, part_ptr, n_cols, n_blocks, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    block = tl.program_id(1)
    cols = block * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
    m = tl.max(x, axis=0)
    lse = tl.log(tl.sum(tl.exp(x - m), axis=0)) + m
    tl.store(part_ptr + row * n_blocks + block, lse)


def row_logsumexp(x):
    n_rows, n_cols = x.shape
    block = min(triton.next_power_of_2(n_cols), BLOCK_MAX)
    n_blocks = triton.cdiv(n_cols, block)
    partials = x.new_empty(n_rows, n_blocks, dtype=torch.float32)
    block_lse_kernel[(n_rows, n_blocks)](x, partials, n_cols, n_blocks, BLOCK=block)
    return partials.logsumexp(-1)


class ModelNew(nn.Module):
    def forward(self, x):
        return row_logsumexp(x)


_CASES = [(8192, 1024), (4096, 2048), (2048, 8192), (16384, 512), (1024, 5000)]


def get_init_inputs():
    return []


def get_inputs():
    return [torch.randn(*_CASES[0])]


def get_input_cases():
    return [[torch.randn(*shape)] for shape in _CASES]


def get_verify_inputs():
    return [[torch.randn(37, 300)], [torch.randn(3, 4100)], [torch.randn(2, 7) * 30]]
