"""Ascend NPU backend: torch_npu + triton-ascend, device 'npu'.

triton-ascend replaces the `triton` package, so this runs under its own interpreter
(`KERNELOPT_PYTHON_NPU`, see runner.sandbox). Timing uses NPU events around each call with a
256 MB buffer zeroed before it (the 910B's L2 is 192 MB), after a warm-up, and returns the
median, mirroring `triton.testing.do_bench` on CUDA. The CUDA backend reads its flush buffer
instead, because a zeroing flush left dirty lines in the H200's L2 that the timed kernel paid to
write back (runner/backends/cuda.py); whether the 910B's L2 behaves alike is not known, so the
zeroing flush stays here until it is measured on one.

UNVERIFIED: nothing below the import check has run on an NPU in this project. Verified here
(tests/runner/test_npu.py, test_child.py): a missing torch_npu gives `DeviceUnavailable` (job
kind `device_error`) with the import error in the message, and so does torch-npu 2.13.0 installed
without CANN (its import, inside `import torch`, fails on CANN's libhccl.so, which the message
names). The launch recording of triton-ascend's JIT (triton 3.2's API) and the npu compile run
on CPU (tests/runner/test_ascend.py). Not verified: `torch.npu.Event(enable_timing=True)`
timings, `torch.npu.synchronize`, the device name string for `diagnosis.engine.sol.lookup`
(expected 'Ascend910B3' or similar), the property names read in `device_info`, and msprof's
output layout parsed in `parse_msprof_op_summary`.
"""

from __future__ import annotations

import csv
import io
import shutil
from collections.abc import Callable
from typing import Any

from runner.backends import median_ms
from runner.errors import DeviceUnavailable

FLUSH_BYTES = 256 * 1024 * 1024


# what an ImportError of torch_npu's extension means on a node
CANN_HINT = (
    " (torch_npu needs CANN's shared libraries: source <CANN>/set_env.sh, or put its lib64 on "
    "LD_LIBRARY_PATH, in the worker's environment)"
)


def root_cause(exc: BaseException) -> str:
    """`Type: message` of the innermost exception in the chain: torch's autoload error says only
    'Failed to load the backend extension'; its cause names the library (libhccl.so)."""
    seen: set[int] = set()
    while id(exc) not in seen and (exc.__cause__ or exc.__context__) is not None:
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return f"{type(exc).__name__}: {exc}"


def import_torch() -> Any:
    """`import torch` for an npu job, with the reason when it fails.

    torch >= 2.5 imports the installed device extensions (torch_npu's entry point) inside
    `import torch`; without CANN that raises a RuntimeError whose cause is the ImportError of a
    CANN library (checked with torch 2.13 and torch-npu 2.13.0 without CANN: libhccl.so).
    """
    try:
        import torch
    except Exception as exc:  # an extension failing to load: no NPU in this interpreter
        cause = root_cause(exc)
        hint = CANN_HINT if "lib" in cause and ".so" in cause else ""
        raise DeviceUnavailable(f"device=npu: import torch failed loading torch_npu: {cause}{hint}") from exc
    return torch


def import_torch_npu() -> Any:
    """Import torch_npu or raise DeviceUnavailable naming the reason (CANN libraries, versions)."""
    import_torch()
    try:
        import torch_npu  # noqa: F401  (registers the 'npu' device with torch)
    except Exception as exc:  # any import failure means: no NPU in this interpreter
        cause = root_cause(exc)
        hint = CANN_HINT if "lib" in cause and ".so" in cause else ""
        raise DeviceUnavailable(f"device=npu but torch_npu cannot be imported: {cause}{hint}") from exc
    import torch

    if not hasattr(torch, "npu") or not torch.npu.is_available():
        raise DeviceUnavailable("device=npu: torch_npu imported but torch.npu.is_available() is false")
    return torch


class NpuBackend:
    kind = "npu"
    can_time = True

    def __init__(self, index: int = 0) -> None:
        self.torch = import_torch_npu()
        self.index = index
        self.device = f"npu:{index}"
        self.torch.npu.set_device(index)
        self._flush: Any = None

    def synchronize(self) -> None:
        self.torch.npu.synchronize()

    def time(self, fn: Callable[[], Any], *, warmup_ms: float = 25.0, rep_ms: float = 100.0) -> float:
        torch = self.torch
        if self._flush is None:
            self._flush = torch.empty(FLUSH_BYTES, dtype=torch.int8, device=self.device)
        fn()
        self.synchronize()
        start, end = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)
        start.record()
        for _ in range(5):
            self._flush.zero_()
            fn()
        end.record()
        self.synchronize()
        estimate = max(start.elapsed_time(end) / 5, 1e-3)
        n_warmup = max(1, int(warmup_ms / estimate))
        n_repeat = max(1, int(rep_ms / estimate))
        for _ in range(n_warmup):
            fn()
        starts = [torch.npu.Event(enable_timing=True) for _ in range(n_repeat)]
        ends = [torch.npu.Event(enable_timing=True) for _ in range(n_repeat)]
        for s, e in zip(starts, ends, strict=True):
            self._flush.zero_()
            s.record()
            fn()
            e.record()
        self.synchronize()
        return median_ms([s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)])

    def device_name(self) -> str:
        return str(self.torch.npu.get_device_name(self.index))

    def device_info(self) -> dict[str, Any]:
        props = self.torch.npu.get_device_properties(self.index)
        return {
            "name": self.device_name(),
            "kind": "npu",
            "sm_count": int(getattr(props, "cube_core_num", 0) or getattr(props, "multi_processor_count", 0)),
            "peak_bw_gbs": 0.0,
            "peak_tflops": {},
            "l2_mb": round(getattr(props, "L2_cache_size", 0) / 2**20, 1),
            "max_threads_per_sm": 1,
        }

    def target(self) -> Any:
        from triton.backends.compiler import GPUTarget

        return GPUTarget("npu", self.device_name().replace(" ", ""), 0)

    def poison(self, nbytes: int) -> None:
        torch = self.torch
        block = torch.full((max(1, nbytes // 4),), float("nan"), dtype=torch.float32, device=self.device)
        del block

    def empty_cache(self) -> None:
        self.torch.npu.empty_cache()


def msprof_command(app_argv: list[str], output_dir: str) -> list[str] | None:
    """`msprof op` around one application run (UNVERIFIED), or None when msprof is absent."""
    exe = shutil.which("msprof")
    if exe is None:
        return None
    return [exe, "op", f"--output={output_dir}", *app_argv]


def parse_msprof_op_summary(text: str) -> list[tuple[str, float]]:
    """(op name, task duration in µs) rows of an msprof op_summary CSV (UNVERIFIED layout)."""
    rows = []
    for row in csv.DictReader(io.StringIO(text)):
        name = row.get("Op Name") or row.get("OP Type") or ""
        duration = row.get("Task Duration(us)")
        if not name or duration in (None, ""):
            continue
        try:
            rows.append((name, float(duration)))
        except ValueError:
            continue
    return rows
