"""Linear layer (1024 -> 2048, fp16 weights) followed by ReLU: relu(x @ W.T + b).

category: fused
First conversion: one fused kernel; the tiled matmul (BLOCK_M = BLOCK_N = 64, BLOCK_K = 32, 2-D
grid (cdiv(M, 64), cdiv(N, 64)) in row-major program order, default num_warps and num_stages)
reads W through its strides as W.T and adds the bias and applies ReLU in the epilogue.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, dtype=torch.float16)

    def forward(self, x):
        return torch.relu(self.linear(x))


@triton.jit
def linear_bias_relu_kernel(
    x_ptr, w_ptr, b_ptr, out_ptr,
    M, N, K,
    stride_xm, stride_xk,
    stride_wn, stride_wk,
    stride_om, stride_on,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :] * stride_xk
    w_ptrs = w_ptr + offs_n[None, :] * stride_wn + offs_k[:, None] * stride_wk

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_remaining = K - k * BLOCK_K
        x = tl.load(x_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_remaining), other=0.0)
        w = tl.load(w_ptrs, mask=(offs_k[:, None] < k_remaining) & (offs_n[None, :] < N), other=0.0)
        acc += tl.dot(x, w)
        x_ptrs += BLOCK_K * stride_xk
        w_ptrs += BLOCK_K * stride_wk

    bias = tl.load(b_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)
    acc = acc + bias[None, :]
    acc = tl.maximum(acc, 0.0)
    out_ptrs = out_ptr + offs_m[:, None] * stride_om + offs_n[None, :] * stride_on
    tl.store(out_ptrs, acc.to(tl.float16), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, dtype=torch.float16)

    def forward(self, x):
        M, K = x.shape
        weight, bias = self.linear.weight, self.linear.bias
        N = weight.shape[0]
        out = torch.empty((M, N), device=x.device, dtype=torch.float16)
        grid = (triton.cdiv(M, 64), triton.cdiv(N, 64))
        linear_bias_relu_kernel[grid](
            x, weight, bias, out, M, N, K,
            x.stride(0), x.stride(1),
            weight.stride(0), weight.stride(1),
            out.stride(0), out.stride(1),
            BLOCK_M=64, BLOCK_N=64, BLOCK_K=32,
        )
        return out


IN_FEATURES, OUT_FEATURES = 1024, 2048
_TOKENS = [8192, 4096, 16384, 2048, 5000]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]


def get_inputs():
    return [torch.randn(_TOKENS[0], IN_FEATURES, dtype=torch.float16)]


def get_input_cases():
    return [[torch.randn(m, IN_FEATURES, dtype=torch.float16)] for m in _TOKENS]


def get_verify_inputs():
    return [[torch.randn(37, IN_FEATURES, dtype=torch.float16)], [torch.randn(3, IN_FEATURES, dtype=torch.float16)]]
