"""One program per token walking its heads, each head a 128-element bf16 row on Triton's
default four warps: the coalescing pass gives each of the 128 threads one element, so the
contiguous load at line 18 moves 2 bytes a thread where one warp would load 16 (tier 2:
IR_THIN_TILE)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def silu_heads_kernel(x_ptr, out_ptr, n_heads, HEAD_DIM: tl.constexpr):
    token = tl.program_id(0)
    cols = tl.arange(0, HEAD_DIM)
    for h in range(0, n_heads):
        offs = (token * n_heads + h) * HEAD_DIM + cols
        x = tl.load(x_ptr + offs).to(tl.float32)
        tl.store(out_ptr + offs, (x * tl.sigmoid(x)).to(tl.bfloat16))


class Model(nn.Module):
    def forward(self, x):
        return torch.nn.functional.silu(x.float()).to(torch.bfloat16)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        silu_heads_kernel[(x.shape[0],)](x, out, x.shape[1], HEAD_DIM=x.shape[2])
        return out


def get_init_inputs():
    return []


def get_inputs():
    return [torch.randn(4096, 32, 128, dtype=torch.bfloat16)]
