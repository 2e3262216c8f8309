"""Rotary embedding the way flag_gems lays it out: one program per token walking its heads (here
unrolled), each head a 128-element bf16 row on Triton's default four warps. The coalescing pass
gives each of the 128 threads one element, so the loads at lines 26 and 27 and the store at line
29 move 2 bytes a thread although every argument is divisible by 16 (tier 2: IR_SCALAR_GLOBAL,
caused by the layout of IR_THIN_TILE; on one warp they move 8)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def rope_kernel(q_ptr, cos_ptr, sin_ptr, out_ptr, stride_s, stride_h, N_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr):
    s = tl.program_id(0)
    d = tl.arange(0, HEAD_DIM)
    rot = (d + HEAD_DIM // 2) % HEAD_DIM
    half = d % (HEAD_DIM // 2)
    cos = tl.load(cos_ptr + s * (HEAD_DIM // 2) + half).to(tl.float32)
    sin = tl.load(sin_ptr + s * (HEAD_DIM // 2) + half).to(tl.float32)
    sin = tl.where(rot < HEAD_DIM // 2, -sin, sin)
    q_ptr += s * stride_s
    out_ptr += s * stride_s
    mask = d < HEAD_DIM
    for h in tl.static_range(N_HEADS):
        q = tl.load(q_ptr + h * stride_h + d, mask=mask, other=0.0)
        rotated = tl.load(q_ptr + h * stride_h + rot, mask=mask, other=0.0)
        y = q * cos + rotated * sin
        tl.store(out_ptr + h * stride_h + d, y, mask=mask)


class Model(nn.Module):
    def forward(self, q, cos, sin):
        x1, x2 = q.float().chunk(2, dim=-1)
        c = torch.cat([cos, cos], -1).float()[:, None, :]
        s = torch.cat([sin, sin], -1).float()[:, None, :]
        return (q.float() * c + torch.cat([-x2, x1], -1) * s).to(q.dtype)


class ModelNew(nn.Module):
    def forward(self, q, cos, sin):
        out = torch.empty_like(q)
        rope_kernel[(q.shape[0],)](q, cos, sin, out, q.stride(0), q.stride(1), N_HEADS=q.shape[1], HEAD_DIM=q.shape[2])
        return out


def get_init_inputs():
    return []


def get_inputs():
    q = torch.randn(4096, 8, 128, dtype=torch.bfloat16)
    return [q, torch.randn(4096, 64, dtype=torch.bfloat16), torch.randn(4096, 64, dtype=torch.bfloat16)]
