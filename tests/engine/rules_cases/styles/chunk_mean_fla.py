"""Mean over fixed chunks of the time axis of a [B, T, H, D] tensor, written the way fla-core
writes its chunked kernels: sizes passed as constexprs by keyword, the grid a function defined
beside the launch whose first axis is a product (`cdiv(D, meta["BD"]) * NT`), the number of
chunks a local; used by the rules' code-style tests."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

CHUNK = 16


class Model(nn.Module):
    def forward(self, x):
        B, T, H, D = x.shape
        n = triton.cdiv(T, CHUNK)
        pad = torch.zeros(B, n * CHUNK - T, H, D, dtype=x.dtype)
        counts = torch.full((n,), CHUNK, dtype=torch.float32)
        counts[-1] = T - (n - 1) * CHUNK
        sums = torch.cat([x, pad], 1).float().view(B, n, CHUNK, H, D).sum(2)
        return (sums / counts[None, :, None, None]).to(x.dtype)


@triton.jit
def chunk_mean_kernel(x, o, T, H: tl.constexpr, D: tl.constexpr, BT: tl.constexpr, BD: tl.constexpr):
    NT = tl.cdiv(T, BT)
    i_d, i_t = tl.program_id(0) % tl.cdiv(D, BD), tl.program_id(0) // tl.cdiv(D, BD)
    i_bh = tl.program_id(1)
    i_b, i_h = i_bh // H, i_bh % H
    o_t = i_t * BT + tl.arange(0, BT)
    o_d = i_d * BD + tl.arange(0, BD)
    m_x = (o_t[:, None] < T) & (o_d[None, :] < D)
    p_x = x + (i_b * T * H + i_h) * D + o_t[:, None] * (H * D) + o_d[None, :]
    b_x = tl.load(p_x, mask=m_x, other=0.0).to(tl.float32)
    b_o = tl.sum(b_x, axis=0) / tl.minimum(BT, T - i_t * BT)
    p_o = o + ((i_b * NT + i_t) * H + i_h) * D + o_d
    tl.store(p_o, b_o.to(p_o.dtype.element_ty), mask=o_d < D)


def chunk_mean(x):
    B, T, H, D = x.shape
    NT = triton.cdiv(T, CHUNK)
    o = x.new_empty(B, NT, H, D)

    def grid(meta):
        return (triton.cdiv(D, meta["BD"]) * NT, B * H)

    chunk_mean_kernel[grid](
        x,
        o,
        T,
        H=H,
        D=D,
        BT=CHUNK,
        BD=32,
    )
    return o


class ModelNew(nn.Module):
    def forward(self, x):
        return chunk_mean(x.contiguous())


def get_init_inputs():
    return []


def get_inputs():
    return [torch.randn(4, 4096, 16, 128)]


def get_input_cases():
    return [[torch.randn(4, 4096, 16, 128)], [torch.randn(8, 2048, 32, 64)], [torch.randn(1, 16384, 16, 128)],
            [torch.randn(2, 8192, 8, 256)], [torch.randn(16, 1024, 16, 128)]]


def get_verify_inputs():
    return [[torch.randn(1, 37, 3, 20)], [torch.randn(2, 70, 2, 64)]]
