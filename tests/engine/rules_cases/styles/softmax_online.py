"""Row softmax in two passes over fixed tiles (an online max and sum, then the write), written
the way flag-gems writes its inner kernels: the tile passed by position, the launch in a helper
inside a `with` block; used by the rules' code-style tests."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


@triton.jit
def softmax_kernel_inner(output_ptr, input_ptr, M, N, TILE_N: tl.constexpr):
    pid_m = tl.program_id(0)
    m = tl.full([TILE_N], value=float("-inf"), dtype=tl.float32)
    z = tl.full([TILE_N], value=0.0, dtype=tl.float32)
    for start_n in range(0, N, TILE_N):
        n_offsets = start_n + tl.arange(0, TILE_N)
        offset = pid_m * N + n_offsets
        mask = n_offsets < N
        inp = tl.load(input_ptr + offset, mask=mask, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m, inp)
        all_neg_inf = m_new == float("-inf")
        z = tl.where(all_neg_inf, z, z * tl.exp(m - m_new) + tl.exp(inp - m_new))
        m = m_new
    m_reduced = tl.max(m, 0)
    z = tl.sum(z * tl.exp(m - m_reduced), 0)
    m = m_reduced
    for start_n in range(0, N, TILE_N):
        n_offsets = start_n + tl.arange(0, TILE_N)
        offset = pid_m * N + n_offsets
        mask = n_offsets < N
        inp = tl.load(input_ptr + offset, mask=mask, other=-float("inf")).to(tl.float32)
        o = tl.exp(inp - m) / z
        tl.store(output_ptr + offset, o, mask=mask)


def softmax(x):
    x = x.contiguous()
    M, N = x.shape
    out = torch.empty_like(x)
    TILE_N = 256
    grid = (M, 1, 1)
    with torch.device(x.device):
        softmax_kernel_inner[grid](out, x, M, N, TILE_N, num_warps=4)
    return out


class ModelNew(nn.Module):
    def forward(self, x):
        return softmax(x)


def get_init_inputs():
    return []


def get_inputs():
    return [torch.randn(4096, 2048)]


def get_input_cases():
    return [[torch.randn(4096, 2048)], [torch.randn(8192, 1000)], [torch.randn(1024, 4096)],
            [torch.randn(16384, 512)], [torch.randn(3000, 3001)]]


def get_verify_inputs():
    return [[torch.randn(8, 700)], [torch.randn(5, 37) * 3], [torch.randn(2, 256)]]
