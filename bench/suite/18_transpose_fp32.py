"""2-D transpose of an fp32 matrix into a new contiguous tensor: x.t().contiguous().

category: single
First conversion: a 2-D grid (cdiv(M, 32), cdiv(N, 32)) of programs that each load a masked 32x32
tile of x and store it at the transposed position of the (N, M) output; default num_warps.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x.t().contiguous()


@triton.jit
def transpose_kernel(
    x_ptr, out_ptr, M, N,
    stride_xm, stride_xn, stride_om, stride_on,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tile = tl.load(x_ptr + rm[:, None] * stride_xm + rn[None, :] * stride_xn, mask=mask)
    # out[n, m] = x[m, n]
    tl.store(out_ptr + rn[None, :] * stride_om + rm[:, None] * stride_on, tile, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        M, N = x.shape
        out = torch.empty((N, M), device=x.device, dtype=x.dtype)
        grid = (triton.cdiv(M, 32), triton.cdiv(N, 32))
        transpose_kernel[grid](
            x, out, M, N, x.stride(0), x.stride(1), out.stride(0), out.stride(1), BLOCK_M=32, BLOCK_N=32
        )
        return out


_CASES = [(8192, 4096), (4096, 8192), (16384, 1024), (3000, 7001), (8191, 4097)]


def get_init_inputs():
    return []


def get_inputs():
    return [torch.randn(*_CASES[0])]


def get_input_cases():
    return [[torch.randn(*shape)] for shape in _CASES]


def get_verify_inputs():
    return [[torch.randn(37, 129)], [torch.randn(1, 100)], [torch.randn(70, 33)]]
