"""Vector add as Triton's first tutorial writes it: the launch in a module-level helper, the
grid a lambda over meta, the block a literal keyword; used by the rules' code-style tests."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


class Model(nn.Module):
    def forward(self, x, y):
        return x + y


@triton.jit
def add_kernel(x_ptr, y_ptr, output_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    block_start = pid * BLOCK_SIZE
    offsets = block_start + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    output = x + y
    tl.store(output_ptr + offsets, output, mask=mask)


def add(x: torch.Tensor, y: torch.Tensor):
    output = torch.empty_like(x)
    n_elements = output.numel()
    grid = lambda meta: (triton.cdiv(n_elements, meta["BLOCK_SIZE"]),)  # noqa: E731
    add_kernel[grid](x, y, output, n_elements, BLOCK_SIZE=1024)
    return output


class ModelNew(nn.Module):
    def forward(self, x, y):
        return add(x, y)


def _make(*shape):
    return [torch.randn(*shape), torch.randn(*shape)]


def get_init_inputs():
    return []


def get_inputs():
    return _make(98432)


def get_input_cases():
    return [_make(98432), _make(1 << 20), _make(4096, 1000), _make(17), _make(3, 5000)]


def get_verify_inputs():
    return [_make(3000), _make(37, 129), _make(5)]
