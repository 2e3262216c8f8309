"""Row-reduction probe: which launch shapes bring a per-row fp32 reduction near HBM peak on a GPU.

The suite's row reductions (16 argmax, 31 L2 norm, 33 cosine, 15 max, 19 MSE) stop at 55-65 % of
speed-of-light while the element-wise operators reach 80 %. This probe times one reduction
(sum of squares per row, the body of 31) in several launch shapes on the suite's shapes:

- one_row:    one program per row, the whole row in one block (BLOCK = next_pow2(n_cols))
- rows2d:     R rows per program as an (R, BLOCK) tile
- chunked:    one program per row looping over the row in chunks, num_stages 1..4
- persistent: a grid of a few programs per SM, each looping over rows with a stride

plus PyTorch's own sum and a copy as calibration. Method: triton.testing.do_bench (L2 flushed
before each call), median of its samples; GB/s counts the bytes read once and written once.

    python3 bench/probe_rowreduce.py        (on a GPU machine)

Found on the H200 of 2026-11-30: every shape at 61-68 % on every suite shape, the best of
each within 2 % of one another, while a copy reached 82 %. The ceiling was the measurement:
do_bench's zeroing flush leaves the L2 dirty (bench/probe_flush.py); after a reading flush
the one-row-per-program kernel reached 81 % on 8192 x 4096.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

PEAK_GBS = 4800.0


@triton.jit
def one_row(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
    tl.store(out_ptr + row, tl.sum(x * x, axis=0))


@triton.jit
def rows2d(x_ptr, out_ptr, n_rows, n_cols, stride, R: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * R + tl.arange(0, R)
    cols = tl.arange(0, BLOCK)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=mask, other=0.0)
    tl.store(out_ptr + rows, tl.sum(x * x, axis=1), mask=rows < n_rows)


@triton.jit
def chunked(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr, STAGES: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in tl.range(0, n_cols, BLOCK, num_stages=STAGES):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
        acc += x * x
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


@triton.jit
def persistent(x_ptr, out_ptr, n_rows, n_cols, stride, BLOCK: tl.constexpr, STAGES: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0), num_stages=STAGES):
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
        tl.store(out_ptr + row, tl.sum(x * x, axis=0))


def bench(fn) -> float:
    return float(do_bench(fn, warmup=25, rep=100, return_mode="median"))


def gbs(nbytes: int, ms: float) -> str:
    g = nbytes / ms / 1e6
    return f"{ms * 1e3:9.1f} us {g:7.0f} GB/s {100 * g / PEAK_GBS:5.1f} %"


def probe_shape(n_rows: int, n_cols: int, sms: int) -> None:
    x = torch.randn(n_rows, n_cols, device="cuda")
    out = torch.empty(n_rows, device="cuda")
    ref = (x * x).sum(dim=1)
    nbytes = x.numel() * 4 + n_rows * 4
    print(f"--- {n_rows} x {n_cols}  ({nbytes / 1e6:.1f} MB)")
    y = torch.empty_like(x)
    print(f"  {'torch copy':34s}", gbs(2 * x.numel() * 4, bench(lambda: y.copy_(x))))
    print(f"  {'torch (x*x).sum(1)':34s}", gbs(nbytes, bench(lambda: torch.sum(x * x, dim=1))))
    print(f"  {'torch x.sum(1)':34s}", gbs(nbytes, bench(lambda: torch.sum(x, dim=1))))
    full = triton.next_power_of_2(n_cols)
    results = []

    def run(label, fn):
        try:
            fn()
            torch.cuda.synchronize()
            ok = torch.allclose(out, ref, rtol=1e-4, atol=1e-2)
            ms = bench(fn)
        except Exception as exc:  # noqa: BLE001 - a probe reports and goes on
            print(f"  {label:34s} failed: {type(exc).__name__}: {str(exc)[:80]}")
            return
        results.append((ms, label))
        print(f"  {label:34s}", gbs(nbytes, ms), "" if ok else "WRONG")

    if full <= 32768:
        for w in (4, 8, 16):
            run(f"one_row w{w}", lambda w=w: one_row[(n_rows,)](x, out, n_cols, x.stride(0), BLOCK=full, num_warps=w))
    for r in (2, 4, 8):
        if r * full > 32768:
            continue
        for w in (4, 8):
            run(f"rows2d R{r} w{w}", lambda r=r, w=w: rows2d[(triton.cdiv(n_rows, r),)](
                x, out, n_rows, n_cols, x.stride(0), R=r, BLOCK=full, num_warps=w))
    for blk in (1024, 2048, 4096):
        if blk >= full:
            continue
        for st in (1, 3):
            for w in (4, 8):
                run(f"chunked B{blk} s{st} w{w}", lambda blk=blk, st=st, w=w: chunked[(n_rows,)](
                    x, out, n_cols, x.stride(0), BLOCK=blk, STAGES=st, num_warps=w))
    if full <= 16384:
        for k in (4, 8):
            for st in (1, 2, 3):
                for w in (4, 8):
                    g = min(n_rows, sms * k)
                    run(f"persistent {k}/SM s{st} w{w}", lambda g=g, st=st, w=w: persistent[(g,)](
                        x, out, n_rows, n_cols, x.stride(0), BLOCK=full, STAGES=st, num_warps=w))
    results.sort()
    print("  best:", ", ".join(f"{lab} {gbs(nbytes, ms).split('GB/s')[1].strip()}" for ms, lab in results[:4]))


def main() -> None:
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for n_rows, n_cols in [(8192, 4096), (4096, 8192), (65536, 512), (1024, 32768), (7777, 3333), (16384, 2048)]:
        probe_shape(n_rows, n_cols, sms)


if __name__ == "__main__":
    main()
