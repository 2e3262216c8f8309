"""Speed-of-light (SOL) model: the least time a kernel could take on a device, from the bytes
it must move and the FLOPs it must do, and how close a measured time comes to it.

The bytes come from the child (runner/childlib/timing.py `work_of_case`): every input, parameter
and output once, except a tensor the reference's forward only indexes (`embedding`,
`index_select`, `x[idx]`, `gather`), which counts the bytes those ops gathered from it: an
embedding that reads 8192 rows of a 1 GB table moves 8192 rows (counting the whole table put
flag_gems' embedding at 375 %SOL).

Pure standard library: the worker (runner.execute) fills SOL into the child's raw profile and
verify numbers with it; the child itself never imports this module.

Two sets of peaks are kept per device:

* **datasheet** peaks (vendor figures, dense math, no sparsity): a hard bound no correct
  kernel can beat. `sol_ms` and `pct_sol` use these, so %SOL is at most 100 for any honest
  measurement, and a time *below* the datasheet SOL is physically impossible -> `suspect`.
* **measured** peaks (what a plain copy or a large library GEMM reached on such a machine):
  the practical ceiling. On an H200 a device-to-device copy reaches about 4.3 TB/s (read +
  write) of the 4.8 TB/s datasheet figure, i.e. a perfect memory-bound kernel shows about
  90 %SOL; bf16 dense GEMM reaches about 790 of 989 TFLOP/s (80 %SOL). Use
  `attainable_fraction` when a stop rule wants "as good as it gets".

FP32 math is bounded with the TF32 tensor-core rate where the device has one: Triton's
`tl.dot` on fp32 inputs uses TF32 by default and the verification tolerances allow it, so the
fp32 CUDA-core rate would call legitimate TF32 kernels "faster than light".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from diagnosis.engine.profile import DeviceSpec, ProfileCase, ProfileResult


@dataclass(frozen=True)
class AscendCores:
    """An Ascend NPU's cores and the on-chip buffer its vector cores compute in (UB).

    triton-ascend binds each program of the grid to one physical core (vector cores for a kernel
    without tl.dot, cube cores where the linalg says mix_mode "aic"/"mix"), and every tile a
    kernel loads, computes or stores lives in the core's Unified Buffer, addressed in 32-byte
    blocks (CANN's Ascend C memory rules: UB operands are 32-byte aligned on Atlas A2).
    """

    vector_cores: int
    cube_cores: int
    ub_bytes: int  # Unified Buffer per vector core
    ub_align_bytes: int  # UB block: tile rows are moved and padded in units of this
    max_grid: int = 65535  # triton-ascend 3.2's launcher refuses more programs (JITFunction.run)


@dataclass(frozen=True)
class PeakEntry:
    """One device of the peaks table: its datasheet spec, its measured ceilings, how to find it."""

    key: str  # short stable key: h200-sxm, h100-sxm, ...
    spec: DeviceSpec  # datasheet peaks (the SOL bound)
    patterns: tuple[str, ...]  # regexes over the lower-cased torch device name
    measured_bw_gbs: float | None = None  # achievable copy bandwidth, read + write counted
    measured_tflops: dict[str, float] = field(default_factory=dict, hash=False)
    source: str = ""  # where the figures come from
    ascend: AscendCores | None = None  # NPUs: cores and UB (tiers 2 and 3 on an npu target)

    def matches(self, device_name: str) -> bool:
        name = device_name.lower()
        return any(re.search(p, name) for p in self.patterns)


def _hopper(name: str, bw: float) -> DeviceSpec:
    # H100/H200 SXM datasheet, dense (the sparse figures are twice these).
    return DeviceSpec(
        name=name,
        kind="cuda",
        sm_count=132,
        peak_bw_gbs=bw,
        peak_tflops={
            "fp64": 67.0,
            "fp32": 67.0,
            "tf32": 494.7,
            "fp16": 989.4,
            "bf16": 989.4,
            "fp8": 1978.9,
            "int8": 1978.9,
        },
        l2_mb=50.0 if bw < 4000 else 60.0,
        max_threads_per_sm=2048,
    )


PEAKS: tuple[PeakEntry, ...] = (
    PeakEntry(
        key="h200-sxm",
        spec=_hopper("NVIDIA H200 SXM", 4800.0),
        patterns=(r"h200",),
        measured_bw_gbs=4300.0,
        measured_tflops={"bf16": 790.0},
        source="datasheet: NVIDIA H200 (141 GB HBM3e, 4.8 TB/s); measured on this project's "
        "H200 machines: 8.6 GB D2D copy in 2.0 ms, 8192^3 bf16 matmul 769-798 TFLOP/s",
    ),
    PeakEntry(
        key="h100-pcie",
        spec=DeviceSpec(
            name="NVIDIA H100 PCIe",
            kind="cuda",
            sm_count=114,
            peak_bw_gbs=2000.0,
            peak_tflops={
                "fp64": 51.0,
                "fp32": 51.0,
                "tf32": 378.0,
                "fp16": 756.0,
                "bf16": 756.0,
                "fp8": 1513.0,
                "int8": 1513.0,
            },
            l2_mb=50.0,
            max_threads_per_sm=2048,
        ),
        patterns=(r"h100.*pcie",),
        source="datasheet: NVIDIA H100 PCIe",
    ),
    PeakEntry(
        key="h100-sxm",
        spec=_hopper("NVIDIA H100 SXM", 3350.0),
        patterns=(r"h100",),
        source="datasheet: NVIDIA H100 SXM5 80 GB (3.35 TB/s)",
    ),
    PeakEntry(
        key="a100-80gb",
        spec=DeviceSpec(
            name="NVIDIA A100 80GB SXM",
            kind="cuda",
            sm_count=108,
            peak_bw_gbs=2039.0,
            peak_tflops={
                "fp64": 19.5,
                "fp32": 19.5,
                "tf32": 156.0,
                "fp16": 312.0,
                "bf16": 312.0,
                "int8": 624.0,
            },
            l2_mb=40.0,
            max_threads_per_sm=2048,
        ),
        patterns=(r"a100",),
        source="datasheet: NVIDIA A100 80GB SXM4 (2039 GB/s); a 40 GB part has 1555 GB/s",
    ),
    PeakEntry(
        key="mi300x",
        spec=DeviceSpec(
            name="AMD Instinct MI300X",
            kind="cuda",
            sm_count=304,
            peak_bw_gbs=5300.0,
            peak_tflops={
                "fp64": 163.4,
                "fp32": 163.4,
                "tf32": 653.7,
                "fp16": 1307.4,
                "bf16": 1307.4,
                "fp8": 2614.9,
                "int8": 2614.9,
            },
            l2_mb=32.0,
            max_threads_per_sm=2048,
        ),
        patterns=(r"mi300x",),
        source="datasheet: AMD Instinct MI300X (5.3 TB/s, dense matrix rates)",
    ),
    PeakEntry(
        key="ascend-910b",
        spec=DeviceSpec(
            name="Ascend 910B",
            kind="npu",
            sm_count=20,
            peak_bw_gbs=1600.0,
            peak_tflops={"fp32": 94.0, "fp16": 313.0, "bf16": 313.0, "int8": 626.0},
            l2_mb=192.0,
            max_threads_per_sm=1,
        ),
        patterns=(r"910b",),
        source="approximate public figures for Ascend 910B3 (HBM2e ~1.6 TB/s, 20 AI cube cores, 40 "
        "vector cores, 192 KB UB per vector core, 32-byte UB alignment: CANN Ascend C docs); "
        "not measured by this project",
        ascend=AscendCores(vector_cores=40, cube_cores=20, ub_bytes=192 * 1024, ub_align_bytes=32),
    ),
)

_DTYPE_CLASS = {
    "float64": "fp64",
    "double": "fp64",
    "float32": "fp32",
    "float": "fp32",
    "float16": "fp16",
    "half": "fp16",
    "bfloat16": "bf16",
    "int8": "int8",
    "uint8": "int8",
}


def lookup(device_name: str | None) -> PeakEntry | None:
    """The peaks-table entry for a torch device name ('NVIDIA H200', 'NVIDIA H100 80GB HBM3')."""
    if not device_name:
        return None
    for entry in PEAKS:
        if entry.matches(device_name):
            return entry
    return None


def math_class(dtype: str) -> str:
    """The peak-FLOP column a dtype's math runs at ('float32' -> 'fp32', 'float8_e4m3fn' -> 'fp8')."""
    name = dtype.removeprefix("torch.")
    if name.startswith("float8"):
        return "fp8"
    return _DTYPE_CLASS.get(name, "fp32")


def peak_tflops(spec: DeviceSpec, dtype: str) -> float | None:
    """The rate that bounds `dtype` math: fp32 uses TF32 where present (see the module docstring)."""
    cls = math_class(dtype)
    if cls == "fp32" and "tf32" in spec.peak_tflops:
        return spec.peak_tflops["tf32"]
    if cls == "fp8" and "fp8" not in spec.peak_tflops:
        cls = "fp16"
    return spec.peak_tflops.get(cls) or spec.peak_tflops.get("fp32")


def sol_ms(nbytes: int, flops: int, dtype: str, spec: DeviceSpec) -> float | None:
    """max(bytes / peak bandwidth, FLOPs / peak rate) in milliseconds; None without usable peaks."""
    times = []
    if spec.peak_bw_gbs > 0 and nbytes > 0:
        times.append(nbytes / (spec.peak_bw_gbs * 1e9))
    rate = peak_tflops(spec, dtype)
    if rate and flops > 0:
        times.append(flops / (rate * 1e12))
    if not times:
        return None
    return max(times) * 1e3


def pct_sol(time_ms: float | None, sol: float | None) -> float | None:
    """100 * SOL / measured time: 100 means the kernel runs at the datasheet bound."""
    if time_ms is None or sol is None or time_ms <= 0:
        return None
    return 100.0 * sol / time_ms


def attainable_fraction(entry: PeakEntry, bound: str) -> float | None:
    """Measured / datasheet for 'bandwidth' or a dtype class ('bf16'): the realistic %SOL ceiling."""
    if bound == "bandwidth":
        if entry.measured_bw_gbs is None or entry.spec.peak_bw_gbs <= 0:
            return None
        return entry.measured_bw_gbs / entry.spec.peak_bw_gbs
    measured = entry.measured_tflops.get(bound)
    peak = entry.spec.peak_tflops.get(bound)
    if measured is None or not peak:
        return None
    return measured / peak


def device_spec(device_name: str, *, sm_count: int = 0, l2_mb: float = 0.0, kind: str = "cuda") -> DeviceSpec:
    """The datasheet spec for a device, keeping what the device itself reported (SMs, L2).

    An unknown device gets a spec with zero peaks: SOL is then None rather than made up.
    """
    entry = lookup(device_name)
    if entry is None:
        return DeviceSpec(name=device_name, kind=kind, sm_count=sm_count, peak_bw_gbs=0.0, l2_mb=l2_mb)
    return replace(
        entry.spec,
        name=device_name,
        sm_count=sm_count or entry.spec.sm_count,
        l2_mb=l2_mb or entry.spec.l2_mb,
    )


def fill_case(case: ProfileCase, spec: DeviceSpec) -> ProfileCase:
    """A profile case with sol_ms, pct_sol and achieved bandwidth / FLOP rate filled in."""
    sol = sol_ms(case.bytes, case.flops, case.dtype, spec)
    achieved_gbs = achieved_tflops = None
    if case.time_ms and case.time_ms > 0:
        achieved_gbs = case.bytes / (case.time_ms * 1e-3) / 1e9
        achieved_tflops = case.flops / (case.time_ms * 1e-3) / 1e12 if case.flops else None
    return replace(
        case,
        sol_ms=sol,
        pct_sol=pct_sol(case.time_ms, sol),
        achieved_gbs=achieved_gbs,
        achieved_tflops=achieved_tflops,
    )


def fill_profile(result: ProfileResult) -> ProfileResult:
    """Replace the child's bare device description by the table's peaks and fill every case."""
    if result.device is None:
        return result
    dev = result.device
    spec = device_spec(dev.name, sm_count=dev.sm_count, l2_mb=dev.l2_mb, kind=dev.kind)
    spec = replace(spec, max_threads_per_sm=dev.max_threads_per_sm or spec.max_threads_per_sm)
    notes = result.notes
    if spec.peak_bw_gbs <= 0:
        notes = (*notes, f"no peaks known for device {dev.name!r}: %SOL not computed")
    else:
        notes = (
            *notes,
            "%SOL uses datasheet peaks (a memory-bound kernel at the measured copy "
            "bandwidth shows about 90 %SOL on an H200)",
        )
    return replace(result, device=spec, cases=tuple(fill_case(c, spec) for c in result.cases), notes=notes)
