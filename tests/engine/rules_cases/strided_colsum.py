"""Column sums of a row-major matrix, one program per column walking its rows: every lane of a
load reads one element `stride_xm` apart from the next. Used by the tiling tests."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


class Model(nn.Module):
    def forward(self, x):
        return x.sum(dim=0)


@triton.jit
def colsum_kernel(x_ptr, out_ptr, M, N, stride_xm, BLOCK_M: tl.constexpr):
    col = tl.program_id(0)
    acc = tl.zeros([BLOCK_M], dtype=tl.float32)
    for start in range(0, M, BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M)
        x = tl.load(x_ptr + rows * stride_xm + col, mask=rows < M, other=0.0)
        acc += x
    tl.store(out_ptr + col, tl.sum(acc, axis=0))


class ModelNew(nn.Module):
    def forward(self, x):
        M, N = x.shape
        out = torch.empty(N, device=x.device, dtype=torch.float32)
        colsum_kernel[(N,)](x, out, M, N, x.stride(0), BLOCK_M=256)
        return out


_CASES = [(8192, 4096), (4096, 8192), (16384, 1024), (3000, 7001), (512, 16384)]


def get_init_inputs():
    return []


def get_inputs():
    return [torch.randn(*_CASES[0])]


def get_input_cases():
    return [[torch.randn(*shape)] for shape in _CASES]


def get_verify_inputs():
    return [[torch.randn(300, 37)], [torch.randn(1, 70)], [torch.randn(513, 9)]]
