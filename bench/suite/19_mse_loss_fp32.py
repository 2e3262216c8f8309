"""Mean squared error loss in fp32: mean((pred - target)^2) over all elements (0-dim result).

category: single
First conversion: two launches; a 1-D grid of cdiv(numel, 1024) programs writes one partial sum
of squared differences per BLOCK_SIZE = 1024 slice, then a single program loops over the
partials in chunks of 1024, adds them up and divides by numel (deterministic, no atomics).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, pred, target):
        return F.mse_loss(pred, target, reduction="mean")


@triton.jit
def sq_diff_partial_kernel(pred_ptr, target_ptr, partial_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    p = tl.load(pred_ptr + offsets, mask=mask, other=0.0)
    t = tl.load(target_ptr + offsets, mask=mask, other=0.0)
    d = p - t
    tl.store(partial_ptr + pid, tl.sum(d * d, axis=0))


@triton.jit
def finish_mean_kernel(partial_ptr, out_ptr, n_partials, n_elements, BLOCK_SIZE: tl.constexpr):
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, n_partials, BLOCK_SIZE):
        offs = start + tl.arange(0, BLOCK_SIZE)
        acc += tl.load(partial_ptr + offs, mask=offs < n_partials, other=0.0)
    tl.store(out_ptr, tl.sum(acc, axis=0) / n_elements)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, pred, target):
        n = pred.numel()
        BLOCK_SIZE = 1024
        n_blocks = triton.cdiv(n, BLOCK_SIZE)
        partials = torch.empty((n_blocks,), device=pred.device, dtype=torch.float32)
        out = torch.empty((), device=pred.device, dtype=torch.float32)
        sq_diff_partial_kernel[(n_blocks,)](pred, target, partials, n, BLOCK_SIZE=BLOCK_SIZE)
        finish_mean_kernel[(1,)](partials, out, n_blocks, n, BLOCK_SIZE=BLOCK_SIZE)
        return out


_CASES = [(4096, 4096), (8192, 4096), (2**24 + 5,), (3000, 3001), (64, 512, 512)]


def _make(shape):
    return [torch.randn(*shape), torch.randn(*shape)]


def get_init_inputs():
    return []


def get_inputs():
    return _make(_CASES[0])


def get_input_cases():
    return [_make(shape) for shape in _CASES]


def get_verify_inputs():
    return [_make((37, 129)), _make((2500,)), _make((3, 4, 5))]
