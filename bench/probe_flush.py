"""Flush probe: what the L2 flush before each timed call costs the call that follows it.

bench/probe_rowreduce.py found every launch shape of a row reduction stuck at 66-68 % of
HBM peak while a copy reached 82 %. Suspect: the flush. Zeroing a 256 MB buffer (do_bench's
flush, and the harness's) leaves the L2 full of dirty lines, and the timed kernel pays for
writing them back to HBM as its reads evict them. This probe times the same calls after
four flushes:

- zero:      buf.zero_()                  (dirty L2: the harness's flush until now)
- read:      torch.sum(buf) into a scalar (clean L2, none of the kernel's data in it)
- zero+read: both, in that order          (the dirty lines written back before the timing)
- none:      no flush                     (the kernel's own data may still be in L2)

Method: per call, flush, a 250 us GPU sleep, start event, the call, end event; median of
200 calls after 20 warm-up calls.

    python3 bench/probe_flush.py      (on a GPU machine)
"""

from __future__ import annotations

import statistics

import torch
import triton
from probe_rowreduce import PEAK_GBS
from probe_rowreduce import one_row as row_sumsq  # one program per row, the whole row in a block

FLUSH_BYTES = 256 * 2**20


def timed(fn, flush, n: int = 200) -> float:
    start = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    end = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    for _ in range(20):
        flush()
        fn()
    torch.cuda.synchronize()
    for i in range(n):
        flush()
        torch.cuda._sleep(400_000)
        start[i].record()
        fn()
        end[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(start, end, strict=True))


def main() -> None:
    buf = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    scalar = torch.empty((), dtype=torch.int64, device="cuda")
    flushes = {
        "zero": lambda: buf.zero_(),
        "read": lambda: torch.sum(buf, dim=0, out=scalar),
        "zero+read": lambda: (buf.zero_(), torch.sum(buf, dim=0, out=scalar)),
        "none": lambda: None,
    }
    print("L2 bytes:", torch.cuda.get_device_properties(0).L2_cache_size)
    for n_rows, n_cols in [(8192, 4096), (65536, 512), (2048, 4096), (512, 4096)]:
        probe_shape(n_rows, n_cols, flushes)


def probe_shape(n_rows: int, n_cols: int, flushes: dict) -> None:
    x = torch.randn(n_rows, n_cols, device="cuda")
    y = torch.empty_like(x)
    out = torch.empty(n_rows, device="cuda")
    nx = x.numel() * 4
    block = triton.next_power_of_2(n_cols)
    calls = {
        "row_sumsq (read)": (lambda: row_sumsq[(n_rows,)](x, out, n_cols, x.stride(0), BLOCK=block), nx + n_rows * 4),
        "torch.sum dim1 (read)": (lambda: torch.sum(x, dim=1, out=out), nx + n_rows * 4),
        "copy (read+write)": (lambda: y.copy_(x), 2 * nx),
        "relu (read+write)": (lambda: torch.clamp_min(x, 0.0, out=y), 2 * nx),
        "fill (write)": (lambda: y.fill_(1.0), nx),
    }
    print(f"--- {n_rows} x {n_cols} fp32 ({nx / 1e6:.1f} MB)")
    for label, (fn, nbytes) in calls.items():
        cells = []
        for fname, flush in flushes.items():
            ms = timed(fn, flush)
            cells.append(f"{fname} {ms * 1e3:7.1f} us {100 * nbytes / ms / 1e6 / PEAK_GBS:5.1f} %")
        print(f"  {label:24s} | " + " | ".join(cells))

if __name__ == "__main__":
    main()
