"""What tier 1 reads: per-case timings, bytes and FLOPs, the device's peaks, ncu counters.

The child produces these as JSON (runner.child `profile` job); `ProfileResult.from_json`
turns that into typed records so the tiers never pass raw dicts around.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class DeviceSpec:
    name: str
    kind: str  # cuda, npu, cpu
    sm_count: int
    peak_bw_gbs: float  # device memory bandwidth, GB/s (10^9 bytes)
    peak_tflops: dict[str, float] = field(default_factory=dict, hash=False)  # fp32, tf32, fp16, bf16, fp8
    l2_mb: float = 0.0
    max_threads_per_sm: int = 2048


@dataclass(frozen=True)
class LaunchInfo:
    kernel: str
    grid: tuple[int, int, int]
    num_warps: int = 4
    num_stages: int = 3

    @property
    def programs(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]


@dataclass(frozen=True)
class ProfileCase:
    index: int
    time_ms: float | None  # median kernel time of ModelNew.forward; None where nothing could be timed
    ref_time_ms: float | None  # median time of Model.forward (PyTorch eager)
    bytes: int  # minimum bytes moved: inputs read once + outputs written once
    flops: int  # from torch.utils.flop_counter on the reference
    launches: tuple[LaunchInfo, ...] = ()
    sol_ms: float | None = None  # max(bytes / peak_bw, flops / peak_flops)
    pct_sol: float | None = None  # 100 * sol_ms / time_ms
    achieved_gbs: float | None = None
    achieved_tflops: float | None = None
    dtype: str = "float32"  # dominant floating dtype of the inputs
    # device us per call of each GPU kernel the forward ran, by name, longest first (the CUDA
    # backend's `kernel_times`); empty where they were not measured
    kernel_us: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class NcuKernel:
    kernel: str
    duration_us: float
    dram_pct: float | None = None
    sm_pct: float | None = None
    achieved_occupancy: float | None = None
    l2_hit_pct: float | None = None
    stalls: tuple[tuple[str, float], ...] = ()
    registers: int | None = None
    shared_bytes: int | None = None


@dataclass(frozen=True)
class ProfileResult:
    device: DeviceSpec | None  # None: no device present (CPU)
    cases: tuple[ProfileCase, ...] = ()
    ncu: tuple[NcuKernel, ...] = ()
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProfileResult:
        dev = data.get("device")
        device = DeviceSpec(**dev) if dev else None
        cases = tuple(
            ProfileCase(
                **{
                    **c,
                    "launches": tuple(
                        LaunchInfo(**{**li, "grid": tuple(li["grid"])}) for li in c.get("launches", ())
                    ),
                    "kernel_us": tuple((str(name), float(us)) for name, us in c.get("kernel_us", ())),
                }
            )
            for c in data.get("cases", ())
        )
        ncu = tuple(
            NcuKernel(**{**k, "stalls": tuple(tuple(s) for s in k.get("stalls", ()))})
            for k in data.get("ncu", ())
        )
        return cls(device, cases, ncu, tuple(data.get("notes", ())))
