"""Problem (Ascend): tiles against the vector core's Unified Buffer. `scale_kernel` moves two
65536-element fp32 blocks (512 KB) into a 192 KB UB; `narrow_kernel` loads 64 x 6 fp32 tiles,
24-byte rows in a UB addressed in 32-byte blocks, over a grid of more programs than triton-ascend
launches (65535): the grid is sized for an upper bound of 70000 row blocks, the mask keeps the
programs past the real rows idle."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * y, mask=mask)


@triton.jit
def narrow_kernel(x_ptr, out_ptr, rows, stride_row, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    c = tl.arange(0, BLOCK_C)
    mask = r[:, None] < rows
    tile = tl.load(x_ptr + r[:, None] * stride_row + c[None, :], mask=mask)
    tl.store(out_ptr + r[:, None] * stride_row + c[None, :], tile + 1.0, mask=mask)


class Model(nn.Module):
    def forward(self, x, y, z):
        return x * y, z + 1.0


class ModelNew(nn.Module):
    def forward(self, x, y, z):
        out = torch.empty_like(x)
        n = x.numel()
        scale_kernel[(triton.cdiv(n, 65536),)](x, y, out, n, BLOCK=65536)
        out2 = torch.empty_like(z)
        narrow_kernel[(MAX_ROW_BLOCKS,)](z, out2, z.shape[0], z.stride(0), BLOCK_R=64, BLOCK_C=6)
        return out, out2


MAX_ROW_BLOCKS = 70000


def get_inputs():
    return [torch.randn(1 << 17), torch.randn(1 << 17), torch.randn(640, 6)]


def get_init_inputs():
    return []
