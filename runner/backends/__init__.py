"""Device backends for the sandbox child: one small class per device kind (cuda, cpu, npu).

The child asks `get_backend(request.device)` for the device and talks to it only through the
`Backend` protocol, so the verification gate, timing and profiling code is the same on every
device. Which class serves a kind is the registry's (`diagnosis.engine.devices`); the module is
imported only when asked for, so `runner.sandbox` and the worker import this package's names
without touching an accelerator.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from diagnosis.engine import devices


@runtime_checkable
class Backend(Protocol):
    """What the child needs from a device."""

    kind: str  # 'cuda', 'cpu', 'npu': the queue / DeviceSpec kind
    device: str  # the torch device string tensors go to: 'cuda:0', 'cpu', 'npu:0'
    can_time: bool  # False where timings would be meaningless (the Triton interpreter)

    def synchronize(self) -> None:
        """Wait for all queued device work (no-op on cpu)."""

    def time(self, fn: Callable[[], Any], *, warmup_ms: float = 25.0, rep_ms: float = 100.0) -> float:
        """Median milliseconds of `fn()`, caches flushed between calls, after a warm-up."""

    def device_name(self) -> str:
        """The name the device reports ('NVIDIA H200'); the key for `diagnosis.engine.sol.lookup`."""

    def device_info(self) -> dict[str, Any]:
        """A `DeviceSpec`-shaped dict of what the device itself reports (no peaks: the parent
        fills those from its table)."""

    def target(self) -> Any:
        """The triton GPUTarget that launches on this device compile for (None on cpu)."""

    def poison(self, nbytes: int) -> None:
        """Fill about `nbytes` of the allocator's free memory with NaN, so that an output the
        kernel never writes holds garbage rather than a lucky earlier result."""

    def empty_cache(self) -> None:
        """Return cached device memory (between cases of big shapes)."""


def get_backend(device: str) -> Backend:
    """The backend for a request's device; raises DeviceUnavailable when it cannot be used here
    and UnknownDevice (a ValueError) for a kind the registry does not know."""
    module, _, name = devices.get(device).backend.partition(":")
    backend: Backend = getattr(importlib.import_module(module), name)()
    return backend


def median_ms(samples: list[float]) -> float:
    """Median of a non-empty list of milliseconds (shared by the event-timed backends)."""
    data = sorted(samples)
    mid = len(data) // 2
    return data[mid] if len(data) % 2 else (data[mid - 1] + data[mid]) / 2
