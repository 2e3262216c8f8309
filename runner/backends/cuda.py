"""CUDA backend (NVIDIA, and AMD through ROCm's torch.cuda).

Timing is `triton.testing.do_bench(fn, warmup, rep, return_mode="median")`: it zeroes a
256 MB buffer before every call (the L2 is cold, as for a kernel inside a real model), runs a
warm-up, picks the repetition count from an estimate and returns the median of CUDA-event
times. A forward that launches several kernels is timed as a whole, which is what a user
replaces; the per-call Python overhead is included, as it is for the PyTorch reference.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from runner.errors import DeviceUnavailable


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

    def synchronize(self) -> None:
        import torch

        torch.cuda.synchronize(self.index)

    def time(self, fn: Callable[[], Any], *, warmup_ms: float = 25.0, rep_ms: float = 100.0) -> float:
        from triton.testing import do_bench

        return float(do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))

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
