import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gather_kernel(x_ptr, idx_ptr, out_ptr, n, n_cols, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    idx = tl.load(idx_ptr + offs, mask=mask, other=0)
    x = tl.load(x_ptr + idx, mask=mask)
    y = tl.load(x_ptr + offs % n_cols, mask=mask)
    even = (offs % 2) == 0
    z = tl.load(x_ptr + offs, mask=even & mask, other=0.0)
    tl.store(out_ptr + offs, x + y + z, mask=mask)


class Model(nn.Module):
    def forward(self, x, idx):
        return x[idx] + x[torch.arange(idx.numel()) % 1000] + torch.where(torch.arange(idx.numel()) % 2 == 0, x[: idx.numel()], 0.0)


class ModelNew(nn.Module):
    def forward(self, x, idx):
        out = torch.empty(idx.numel())
        n = idx.numel()
        gather_kernel[(triton.cdiv(n, 256),)](x, idx, out, n, 1000, BLOCK=256)
        return out


def get_inputs():
    return [torch.randn(4096), torch.randint(0, 4096, (4096,))]


def get_init_inputs():
    return []
