"""Problem: sglang's learned-sink kernel scales a tile of (token, head) rows by one float a row,
read as `lse + (rows // H) * stride_t + (rows % H) * stride_h` with the mask bound `n_tokens`
a multiple of 16 the JIT was told not to specialize. The loads stay 32-bit; a recompile with
`n_tokens` divisible leaves them so: the bound is not the cause."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit(do_not_specialize=["n_tokens"])
def sink_scale_kernel(
    x_ptr,
    lse_ptr,
    out_ptr,
    n_tokens,
    stride_t,
    stride_h,
    H: tl.constexpr,
    D: tl.constexpr,
    BLOCK: tl.constexpr,
):
    rows = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    tokens = rows // H
    heads = rows % H
    dims = tl.arange(0, D)
    mask = tokens[:, None] < n_tokens
    x = tl.load(x_ptr + rows[:, None] * D + dims[None, :], mask=mask, other=0.0)
    lse = tl.load(lse_ptr + tokens * stride_t + heads * stride_h, mask=tokens < n_tokens, other=0.0)
    tl.store(out_ptr + rows[:, None] * D + dims[None, :], x * tl.exp(lse)[:, None], mask=mask)


class Model(nn.Module):
    def forward(self, x, lse):
        return x * torch.exp(lse)[..., None]


class ModelNew(nn.Module):
    def forward(self, x, lse):
        out = torch.empty_like(x)
        n_tokens, heads, dim = x.shape
        grid = (triton.cdiv(n_tokens * heads, 64),)
        sink_scale_kernel[grid](x, lse, out, n_tokens, lse.stride(0), lse.stride(1), H=heads, D=dim, BLOCK=64)
        return out


def get_inputs():
    return [torch.randn(4096, 32, 128), torch.randn(4096, 32)]


def get_init_inputs():
    return []


def get_verify_inputs():
    return [[torch.randn(5, 32, 128), torch.randn(5, 32)]]
