"""Linear layer (2048 -> 1024, fp16 weights) followed by exact (erf) GELU: gelu(x @ W.T + b).

category: fused
First conversion: one kernel per PyTorch op; a linear kernel (tiled matmul, BLOCK_M = BLOCK_N = 64,
BLOCK_K = 32, 2-D grid in row-major program order, bias added in its epilogue) writes the fp16
pre-activation to memory, then a 1-D element-wise GELU kernel with BLOCK_SIZE = 1024 reads it back.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, dtype=torch.float16)

    def forward(self, x):
        return F.gelu(self.linear(x))


@triton.jit
def linear_kernel(
    x_ptr, w_ptr, b_ptr, out_ptr,
    M, N, K,
    stride_xm, stride_xk,
    stride_wn, stride_wk,
    stride_om, stride_on,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        x = tl.load(x_ptr + rm[:, None] * stride_xm + kk[None, :] * stride_xk,
                    mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        w = tl.load(w_ptr + rn[None, :] * stride_wn + kk[:, None] * stride_wk,
                    mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(x, w)
    bias = tl.load(b_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)
    acc += bias[None, :]
    tl.store(out_ptr + rm[:, None] * stride_om + rn[None, :] * stride_on, acc.to(tl.float16),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def gelu_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    y = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))
    tl.store(out_ptr + offsets, y.to(tl.float16), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, dtype=torch.float16)

    def forward(self, x):
        M, K = x.shape
        w, b = self.linear.weight, self.linear.bias
        N = w.shape[0]
        h = torch.empty((M, N), device=x.device, dtype=torch.float16)
        linear_kernel[(triton.cdiv(M, 64), triton.cdiv(N, 64))](
            x, w, b, h, M, N, K,
            x.stride(0), x.stride(1), w.stride(0), w.stride(1), h.stride(0), h.stride(1),
            BLOCK_M=64, BLOCK_N=64, BLOCK_K=32,
        )
        out = torch.empty_like(h)
        n = h.numel()
        gelu_kernel[(triton.cdiv(n, 1024),)](h, out, n, BLOCK_SIZE=1024)
        return out


IN_FEATURES, OUT_FEATURES = 2048, 1024
_TOKENS = [8192, 4096, 16384, 1024, 6000]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]


def get_inputs():
    return [torch.randn(_TOKENS[0], IN_FEATURES, dtype=torch.float16)]


def get_input_cases():
    return [[torch.randn(m, IN_FEATURES, dtype=torch.float16)] for m in _TOKENS]


def get_verify_inputs():
    return [[torch.randn(37, IN_FEATURES, dtype=torch.float16)], [torch.randn(2, IN_FEATURES, dtype=torch.float16)]]
