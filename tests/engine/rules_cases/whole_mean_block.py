"""Mean of a whole tensor in one program whose block holds all of it, finished with an atomic
into a zeroed scalar; launched from a helper with positional arguments and a grid lambda.
Used by the two-stage tests."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def mean_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.atomic_add(out_ptr, tl.sum(x, axis=0) / n)


def mean(x):
    n = x.numel()
    out = torch.zeros((), device=x.device, dtype=torch.float32)
    grid = lambda meta: (1,)  # noqa: E731
    mean_kernel[grid](x, out, n, triton.next_power_of_2(n))
    return out


class Model(nn.Module):
    def forward(self, x):
        return x.mean()


class ModelNew(nn.Module):
    def forward(self, x):
        return mean(x.contiguous())


# Triton caps a block at 2^20 elements (TRITON_MAX_TENSOR_NUMEL): the original kernel runs up to there
_CASES = [(1024, 1024), (2**20,), (1000, 1000), (512, 2048), (999, 1049)]


def get_init_inputs():
    return []


def get_inputs():
    return [torch.randn(*_CASES[0])]


def get_input_cases():
    return [[torch.randn(*shape)] for shape in _CASES]


def get_verify_inputs():
    return [[torch.randn(37, 129)], [torch.randn(5000)], [torch.randn(3, 4, 5)]]
