"""CPU backend: correctness through the Triton interpreter, no timing.

`TRITON_INTERPRET=1` must be in the environment before `triton` is first imported (the sandbox
sets it for device=cpu, and the child sets it again before its first triton import); kernels
then run on CPU tensors through numpy at about 0.5 ms per program instance. Interpreter times
say nothing about a GPU, so `time` refuses instead of returning numbers.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Callable
from typing import Any

from runner.errors import RunnerError


class CpuBackend:
    kind = "cpu"
    device = "cpu"
    can_time = False

    def __init__(self) -> None:
        self.interpreting = os.environ.get("TRITON_INTERPRET", "") not in ("", "0")

    def synchronize(self) -> None:
        return None

    def time(self, fn: Callable[[], Any], *, warmup_ms: float = 25.0, rep_ms: float = 100.0) -> float:
        raise RunnerError(
            "no device: the cpu backend runs kernels through the Triton interpreter and does not time them",
            kind="unavailable",
        )

    def device_name(self) -> str:
        return platform.processor() or platform.machine() or "cpu"

    def device_info(self) -> dict[str, Any]:
        return {
            "name": self.device_name(),
            "kind": "cpu",
            "sm_count": os.cpu_count() or 1,
            "peak_bw_gbs": 0.0,
            "peak_tflops": {},
            "l2_mb": 0.0,
            "max_threads_per_sm": 1,
        }

    def target(self) -> Any:
        return None

    def poison(self, nbytes: int) -> None:
        # glibc hands freed small chunks straight back to the next malloc of a similar size, so
        # a NaN-filled block freed here is what an unwritten torch.empty() output is likely to
        # see. Large blocks are mmapped fresh (zeros); the comparison still catches those.
        import torch

        n = max(1, min(nbytes, 1 << 26) // 4)
        block = torch.full((n,), float("nan"), dtype=torch.float32)
        del block

    def empty_cache(self) -> None:
        return None
