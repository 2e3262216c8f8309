"""Full mean finished with one atomic add per program, as a first conversion writes it: the
block by position, the grid a lambda over meta, the launch in a helper; used by the rules'
code-style tests."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


class Model(nn.Module):
    def forward(self, x):
        return x.mean()


@triton.jit
def mean_kernel(inp, out, N, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offset = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    x = tl.load(inp + offset, mask=offset < N, other=0.0).to(tl.float32)
    tl.atomic_add(out, tl.sum(x, axis=0) / N)


def mean(x):
    x = x.contiguous()
    N = x.numel()
    out = torch.zeros([], dtype=torch.float32, device=x.device)
    grid = lambda meta: (triton.cdiv(N, meta["BLOCK_SIZE"]),)  # noqa: E731
    mean_kernel[grid](x, out, N, 1024)
    return out


class ModelNew(nn.Module):
    def forward(self, x):
        return mean(x)


def get_init_inputs():
    return []


def get_inputs():
    return [torch.randn(4096, 8192)]


def get_input_cases():
    return [[torch.randn(4096, 8192)], [torch.randn(1 << 24)], [torch.randn(16, 1024, 2048)],
            [torch.randn(3000, 7001)], [torch.randn(8192, 4095)]]


def get_verify_inputs():
    return [[torch.randn(3000)], [torch.randn(37, 129)], [torch.randn(5)]]
