"""CUDA backend (NVIDIA, and AMD through ROCm's torch.cuda).

Timing (`CudaBackend.time`) measures the device time of one call of `fn`, from CUDA events
recorded on the stream before and after it, with the L2 cold and clean: a 256 MB buffer is
read (summed) before every call. `triton.testing.do_bench` zeroes such a buffer instead, which
leaves the L2 full of dirty lines that the timed kernel then writes back to HBM as its own
accesses evict them: on the H200 of 2026-11-30 (a probe script, `git show c22ef17:bench/probe_flush.py`) a read-only 134 MB row
reduction timed 42.1 us after a zeroing flush and 34.4 us after a reading one (66 % and 81 %
of HBM peak), a 134 MB copy 67.3 and 64.4 us; write-only fills were the same either way. The
write-back is the flush's traffic, not the kernel's. A forward that launches several
kernels is timed as a whole, which is what a user replaces. The median over the calls of a
measurement is returned; the number of calls follows from a first estimate, so that one
measurement takes about `rep_ms`.

What the events measure depends on whether the GPU or the host is behind. do_bench relies on
its flush kernel (about 85 us for 256 MB on an H200) to keep the GPU busy while the host
records the start event and enqueues `fn`: while the host needs less than that per call, the
events bracket device work only and the host's per-call Python is hidden. Past that, the GPU
waits for the host between the start event and the first kernel, and the host's time shows
in the measurement. That threshold is crossed by a contended host, not by the kernel: in the
H200 benchmark of 2026-11-30 (`git show af00bc9:bench/results/2026-11-30-af00bc9-notes.md`) a 26.7 us case of
13_sum_dim1 measured 55.8 us while another operator compiled on the host's CPUs, with the
same kernel and autotune choice, and a candidate whose per-call Python is longer (an
autotuned launch) lost to its parent on such cases. So each timed call here is preceded by
a GPU-side sleep of `SLACK_US` (`torch.cuda._sleep`, which spins on the SM clock), enough
for a host several times slower than an idle one to enqueue the call before the GPU reaches
it. The measurement is the device's time for every contender alike (the PyTorch reference
too); the per-call Python of a launch is not in it. That cost, which matters to a forward
of a few microseconds, is weighed by the rewrites themselves (LAUNCH_CONFIG keeps fixed
launches for launch-bound cases). Where `torch.cuda._sleep` is missing the calls run without
the slack, as do_bench's do.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from runner.errors import DeviceUnavailable

FLUSH_BYTES = 256 * 2**20  # larger than any current L2 (H200: 60 MB)
SLACK_US = 250.0  # GPU-side sleep before each timed call (module docstring)
SLEEP_CYCLES_PER_US = 2000
ESTIMATE_CALLS = 5
KERNEL_TIME_CALLS = 5


class CudaBackend:
    kind = "cuda"
    can_time = True

    def __init__(self, index: int = 0) -> None:
        import torch

        if not torch.cuda.is_available():
            raise DeviceUnavailable(
                f"device=cuda but torch.cuda.is_available() is false (torch {torch.__version__})"
            )
        self.index = index
        self.device = f"cuda:{index}"
        torch.cuda.set_device(index)
        self._flush: Callable[[], Any] | None = None
        # SM cycles for SLACK_US at 2 GHz (the H200's highest clock is 1.98 GHz; a slower clock
        # sleeps longer, which only adds slack); 0 where torch has no _sleep
        self._sleep_cycles = int(SLACK_US * SLEEP_CYCLES_PER_US) if hasattr(torch.cuda, "_sleep") else 0

    def synchronize(self) -> None:
        import torch

        torch.cuda.synchronize(self.index)

    def time(self, fn: Callable[[], Any], *, warmup_ms: float = 25.0, rep_ms: float = 100.0) -> float:
        import torch

        sync = self.synchronize
        flush = self._flush_fn()
        fn()
        sync()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(ESTIMATE_CALLS):
            flush()
            fn()
        end.record()
        sync()
        # one call and its flush, in ms, host-bound or not; the slack is added to it so that a
        # measurement takes about rep_ms whatever the slack
        per_call = max(start.elapsed_time(end) / ESTIMATE_CALLS, 1e-3) + self._slack_ms()
        for _ in range(max(1, int(warmup_ms / per_call))):
            fn()
        n = max(1, int(rep_ms / per_call))
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        for i in range(n):
            flush()
            self._sleep()
            starts[i].record()
            fn()
            ends[i].record()
        sync()
        return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends, strict=True))

    def kernel_times(self, fn: Callable[[], Any], calls: int = KERNEL_TIME_CALLS) -> dict[str, float]:
        """Device time of each GPU kernel `fn` launches, in us per call, by kernel name: the
        CUDA activity torch.profiler (CUPTI) records over `calls` calls, after one unrecorded
        call. Memset and memcpy activities count as kernels of their own names."""
        from torch.profiler import ProfilerActivity, profile

        fn()
        self.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                fn()
            self.synchronize()
        out: dict[str, float] = {}
        for event in prof.key_averages():
            us = getattr(event, "device_time_total", None)
            if us is None:  # torch before 2.4 names it after CUDA
                us = getattr(event, "cuda_time_total", 0.0)
            if us > 0:
                out[event.key] = out.get(event.key, 0.0) + us / calls
        return out

    def _flush_fn(self) -> Callable[[], Any]:
        """A call that leaves the L2 cold and clean: it reads FLUSH_BYTES (a sum into one
        preallocated scalar), so every line the timed call finds in L2 is a clean line of the
        flush buffer, evicted for free; dirty lines the previous call left are written back
        during the flush, before the start event."""
        import torch

        if self._flush is None:
            buf = torch.zeros(FLUSH_BYTES // 4, dtype=torch.int32, device=self.device)
            out = torch.zeros((), dtype=torch.int64, device=self.device)
            self._flush = lambda: torch.sum(buf, dim=0, out=out)
        return self._flush

    def _slack_ms(self) -> float:
        return SLACK_US / 1000.0 if self._sleep_cycles else 0.0

    def _sleep(self) -> None:
        if self._sleep_cycles:
            import torch

            torch.cuda._sleep(self._sleep_cycles)

    def device_name(self) -> str:
        import torch

        return torch.cuda.get_device_name(self.index)

    def device_info(self) -> dict[str, Any]:
        import torch

        props = torch.cuda.get_device_properties(self.index)
        return {
            "name": props.name,
            "kind": "cuda",
            "sm_count": int(props.multi_processor_count),
            "peak_bw_gbs": 0.0,
            "peak_tflops": {},
            "l2_mb": round(getattr(props, "L2_cache_size", 0) / 2**20, 1),
            "max_threads_per_sm": int(getattr(props, "max_threads_per_multi_processor", 2048)),
        }

    def target(self) -> Any:
        from triton.runtime import driver

        return driver.active.get_current_target()

    def poison(self, nbytes: int) -> None:
        # The caching allocator hands a freed block back to the next request of a similar
        # size on the same stream: an output that the kernel leaves unwritten then holds NaN.
        import torch

        n = max(1, nbytes // 4)
        block = torch.full((n,), float("nan"), dtype=torch.float32, device=self.device)
        del block

    def empty_cache(self) -> None:
        import torch

        torch.cuda.empty_cache()
