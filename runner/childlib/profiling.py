"""Launch capture and the tier-1 profile, inside the sandbox child.

`capture_job`: ModelNew.forward once per case under `record_launches` (executing on a device;
on cpu recording only, nothing runs). `profile_job`: per case the time of ModelNew and of the
reference, bytes and FLOPs, and the launches, as a `diagnosis.engine.profile.ProfileResult`
(SOL left empty: the parent fills it from `diagnosis.engine.sol`, which the child may not
import). On CUDA with `ncu` on PATH and `options.ncu` true, one case is run again as a child
of `ncu` and the hardware counters of its Triton kernels are parsed into `NcuKernel`s.
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import subprocess
import sys
import tempfile
import types
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from diagnosis.engine.profile import DeviceSpec, LaunchInfo, NcuKernel, ProfileCase, ProfileResult
from runner.backends import Backend
from runner.childlib.hostile import clone_inputs, draw_device, seeded_inputs, user_call
from runner.childlib.launches import Launch, parse_target, record_launches
from runner.childlib.module import build_models, to_device
from runner.childlib.phases import phase
from runner.childlib.timing import Reads, count_flops, no_grad_call, work_of_case
from runner.errors import JobFailed
from runner.protocol import JobRequest

# ncu metric -> NcuKernel field. All from the "details" page of `ncu --csv`.
NCU_METRICS: dict[str, str] = {
    "gpu__time_duration.sum": "duration",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_pct",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm_pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved_occupancy",
    "lts__t_sector_hit_rate.pct": "l2_hit_pct",
    "launch__registers_per_thread": "registers",
    "launch__shared_mem_per_block_static": "shared_static",
    "launch__shared_mem_per_block_dynamic": "shared_dynamic",
}
STALL_REASONS = (
    "long_scoreboard",
    "short_scoreboard",
    "mio_throttle",
    "lg_throttle",
    "math_pipe_throttle",
    "barrier",
    "wait",
    "not_selected",
    "no_instruction",
    "membar",
)
STALL_METRIC = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
# The first metrics alone, should an ncu build reject a stall metric name.
NCU_MINIMAL = tuple(list(NCU_METRICS)[:5])


def selected_indices(req: JobRequest, n: int) -> list[int]:
    indices = list(req.cases) if req.cases is not None else list(range(n))
    for i in indices:
        if not 0 <= i < n:
            raise JobFailed("bad_request", f"case {i} does not exist: the module has {n} input cases")
    return indices


def _target(req: JobRequest, backend: Backend) -> Any:
    return backend.target() or parse_target(req.target)


def capture_job(req: JobRequest, backend: Backend, module: types.ModuleType) -> dict[str, Any]:
    """Launches of ModelNew.forward per selected case (`Launch.to_json()` each).

    Options: `warmup` (forwards run before the recorded one, e.g. so autotuning is done),
    `profiler_range` (cuda: wrap the recorded forward in cudaProfilerStart/Stop, for ncu's
    `--profile-from-start off`).
    """
    import torch

    paths = [req.module]
    execute = backend.kind != "cpu"
    seed = req.seeds[0] if req.seeds else 0
    timed, _ = seeded_inputs(module, seed, paths, draw_device(backend))
    indices = selected_indices(req, len(timed))
    _, new = user_call(
        lambda: build_models(module, seed, backend.device), what="building Model / ModelNew", paths=paths
    )
    target = _target(req, backend)
    warmup = int(req.options.get("warmup", 0)) if execute else 0
    profiler_range = bool(req.options.get("profiler_range")) and backend.kind == "cuda"
    launches: list[dict[str, Any]] = []
    for i in indices:
        inputs = to_device(timed[i], backend.device)
        for _ in range(warmup):
            user_call(no_grad_call(new, inputs), what="ModelNew.forward (warm-up)", paths=paths)
        backend.synchronize()
        if profiler_range:
            torch.cuda.profiler.start()
        with record_launches(execute=execute, target=target) as recorder:
            recorder.case = i
            user_call(no_grad_call(new, clone_inputs(inputs)), what="ModelNew.forward", paths=paths)
            backend.synchronize()
        if profiler_range:
            torch.cuda.profiler.stop()
        launches.extend(launch.to_json() for launch in recorder.launches)
    return {"executed": execute, "target": _target_text(target), "cases": indices, "launches": launches}


KERNEL_NAME_CHARS = 160  # a kernel's name as the profile keeps it (C++ template names run long)
KERNEL_TIMES_KEPT = 12  # the longest kernels of a case the profile keeps


def _kernel_times(
    backend: Backend, forward: Any, case: int, notes: list[str]
) -> tuple[tuple[str, float], ...]:
    """The device us per call of the kernels one case's forward runs, longest first, on a
    backend that can say (`CudaBackend.kernel_times`). Where the profiler fails (no CUPTI),
    a note says so and nothing is kept: these times explain, they decide nothing."""
    measure = getattr(backend, "kernel_times", None)
    if measure is None:
        return ()
    try:
        with phase("kernel times"):
            times = measure(forward)
    except Exception as exc:  # the profiler's failure, or the forward's on a later call
        notes.append(f"kernel times of case {case}: {type(exc).__name__}: {str(exc)[:200]}")
        return ()
    ranked = sorted(times.items(), key=lambda kv: -kv[1])[:KERNEL_TIMES_KEPT]
    return tuple((name[:KERNEL_NAME_CHARS], round(us, 3)) for name, us in ranked)


def _target_text(target: Any) -> str:
    arch = target.arch
    if target.backend == "cuda":
        return f"sm_{arch}"
    if target.backend == "npu":
        return f"npu:{arch}"
    return str(arch)


def _launch_info(launch: Launch) -> LaunchInfo:
    info = launch.info()
    return LaunchInfo(**{**info, "grid": tuple(info["grid"])})


def profile_job(req: JobRequest, backend: Backend, module: types.ModuleType) -> dict[str, Any]:
    """`ProfileResult(...).to_json()` for the selected cases (raw: no SOL, no peaks)."""
    paths = [req.module]
    opts = req.options
    seed = req.seeds[0] if req.seeds else 0
    timed, _ = seeded_inputs(module, seed, paths, draw_device(backend))
    indices = selected_indices(req, len(timed))
    ref, new = user_call(
        lambda: build_models(module, seed, backend.device), what="building Model / ModelNew", paths=paths
    )
    execute = backend.kind != "cpu"
    target = _target(req, backend)
    warmup_ms = float(opts.get("warmup_ms", 25.0))
    rep_ms = float(opts.get("rep_ms", 100.0))
    notes: list[str] = []
    cases: list[ProfileCase] = []
    kernel_names: set[str] = set()
    for i in indices:
        inputs = to_device(timed[i], backend.device)
        with phase("reference"):
            reads = Reads()
            ref_out, flops = _reference_work(ref, inputs, backend, paths, reads)
        work = work_of_case(ref, inputs, ref_out, reads)
        del ref_out
        with phase("candidate"), record_launches(execute=execute, target=target) as recorder:
            recorder.case = i
            user_call(no_grad_call(new, clone_inputs(inputs)), what="ModelNew.forward", paths=paths)
            backend.synchronize()
        kernel_names.update(launch.kernel for launch in recorder.launches)
        time_ms = ref_ms = None
        if backend.can_time:
            with phase("timing"):
                time_ms = user_call(
                    lambda inputs=inputs: backend.time(
                        no_grad_call(new, inputs), warmup_ms=warmup_ms, rep_ms=rep_ms
                    ),
                    what="timing ModelNew.forward",
                    paths=paths,
                )
                ref_ms = user_call(
                    lambda inputs=inputs: backend.time(
                        no_grad_call(ref, inputs), warmup_ms=warmup_ms, rep_ms=rep_ms
                    ),
                    what="timing the reference",
                    paths=paths,
                )
        cases.append(
            ProfileCase(
                index=i,
                time_ms=time_ms,
                ref_time_ms=ref_ms,
                bytes=work["bytes"],
                flops=flops,
                launches=tuple(_launch_info(launch) for launch in recorder.launches),
                dtype=work["dtype"],
            )
        )
        del inputs
        backend.empty_cache()
    if backend.can_time:
        # after every case's timing: no case is timed in a process a profiler has run in
        for n, case in enumerate(cases):
            inputs = to_device(timed[case.index], backend.device)
            kernel_us = _kernel_times(backend, no_grad_call(new, inputs), case.index, notes)
            cases[n] = replace(case, kernel_us=kernel_us)
            del inputs
    device = None
    if backend.kind == "cpu":
        notes.append("no device: device=cpu records launches without running them and times nothing")
    else:
        device = DeviceSpec(**backend.device_info())
    ncu: tuple[NcuKernel, ...] = ()
    if opts.get("ncu"):
        if backend.kind != "cuda":
            notes.append(f"ncu: not available on device={backend.kind}")
        elif shutil.which("ncu") is None:
            notes.append("ncu: not on PATH, no hardware counters")
        else:
            with phase("ncu"):
                ncu, ncu_notes = run_ncu(req, indices[0] if indices else 0, sorted(kernel_names))
            notes.extend(ncu_notes)
    return ProfileResult(device=device, cases=tuple(cases), ncu=ncu, notes=tuple(notes)).to_json()


def _reference_work(
    ref: Any, inputs: list[Any], backend: Backend, paths: Sequence[str], reads: Reads
) -> tuple[Any, int]:
    """The reference's output and FLOPs, and into `reads` what a real run read. On cpu, try the
    meta device first: shapes and FLOPs without computing (timed cases are often too big for a
    CPU; nothing is recorded then); fall back to a real run."""
    if backend.kind == "cpu":
        import copy

        import torch

        try:
            meta_ref = copy.deepcopy(ref).to("meta")
            meta_inputs = [x.to("meta") if isinstance(x, torch.Tensor) else x for x in inputs]
            return count_flops(no_grad_call(meta_ref, meta_inputs))
        except Exception:  # noqa: BLE001 - any failure on meta means: run it for real
            pass
    return user_call(
        lambda: count_flops(no_grad_call(ref, inputs), reads), what="the reference Model.forward", paths=paths
    )


# ---------------------------------------------------------------- ncu


def ncu_command(
    metrics: Sequence[str], log_file: str, app: Sequence[str], *, plain: bool = False
) -> list[str]:
    """The ncu command line; `plain` leaves out the formatting flags an older ncu may reject."""
    formatting = [] if plain else ["--page", "details", "--print-units", "base"]
    return [
        "ncu",
        "--clock-control",
        "none",
        "--target-processes",
        "all",
        "--profile-from-start",
        "off",
        "--metrics",
        ",".join(metrics),
        "--csv",
        *formatting,
        "--log-file",
        log_file,
        *app,
    ]


def run_ncu(req: JobRequest, case: int, kernels: Sequence[str]) -> tuple[tuple[NcuKernel, ...], list[str]]:
    """Profile one case's ModelNew.forward under ncu; counters per launch of a Triton kernel."""
    if not kernels:
        return (), ["ncu: ModelNew launched no Triton kernel to profile"]
    timeout = float(req.options.get("ncu_timeout_s", 240))
    metrics = list(NCU_METRICS) + [STALL_METRIC.format(r) for r in STALL_REASONS]
    inner = JobRequest(
        job="capture",
        module=req.module,
        device="cuda",
        target=req.target,
        seeds=list(req.seeds[:1]) or [0],
        cases=[case],
        options={"warmup": 1, "profiler_range": True},
    )
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="ncu-") as tmp:
        request_path = os.path.join(tmp, "request.json")
        response_path = os.path.join(tmp, "response.json")
        with open(request_path, "w", encoding="utf-8") as fh:
            fh.write(inner.dumps())
        app = [sys.executable, "-m", "runner.child", "--request", request_path, "--response", response_path]
        for attempt, chosen in enumerate((metrics, list(NCU_MINIMAL))):
            log_file = os.path.join(tmp, f"ncu{attempt}.csv")
            try:
                proc = subprocess.run(
                    ncu_command(chosen, log_file, app, plain=attempt > 0),
                    capture_output=True,
                    text=True,
                    timeout=timeout,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                return (), [f"ncu: timed out after {timeout:.0f} s"]
            text = _read(log_file)
            rows = parse_ncu_csv(text)
            if proc.returncode == 0 and rows:
                notes.append(
                    f"ncu: {len(chosen)} metrics on case {case}"
                    + ("" if attempt == 0 else " (stall metrics rejected by this ncu)")
                )
                wanted = set(kernels)
                found = tuple(k for k in rows if k.kernel in wanted)
                if not found:
                    notes.append(f"ncu: no profiled kernel matched the Triton kernels {sorted(wanted)}")
                return found, notes
            inner_answer = _tail(_read(response_path), 300)
            notes.append(
                f"ncu attempt {attempt + 1} failed (exit {proc.returncode}): "
                + _tail((proc.stderr or "") + "\n" + text, 600)
                + (f"; profiled job answered: {inner_answer}" if inner_answer else "")
            )
    return (), notes


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return ""


def _tail(text: str, n: int) -> str:
    text = text.strip()
    return text if len(text) <= n else "..." + text[-n:]


def _number(text: str) -> float | None:
    text = (text or "").strip().replace(",", "")
    if not text or text.lower() in ("n/a", "nan"):
        return None
    try:
        return float(text)
    except ValueError:
        return None


def parse_ncu_csv(text: str) -> list[NcuKernel]:
    """Parse `ncu --csv --page details` output (one row per kernel launch and metric).

    Lines before the CSV header (`==PROF==` messages, the application's own output) are
    skipped. Example rows:
        "ID","Process ID","Process Name","Host Name","Kernel Name",...,"Metric Name","Metric Unit","Metric Value"
        "0","4242","python3","host","add_kernel",...,"gpu__time_duration.sum","ns","10432"
    Durations are converted to microseconds.
    """
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return []
    reader = csv.DictReader(io.StringIO("\n".join(lines[start:])))
    launches: dict[str, dict[str, Any]] = {}
    for row in reader:
        launch_id = row.get("ID")
        metric = row.get("Metric Name")
        if launch_id is None or metric is None:
            continue
        entry = launches.setdefault(
            launch_id, {"kernel": _kernel_name(row.get("Kernel Name", "")), "metrics": {}}
        )
        entry["metrics"][metric] = (
            _number(row.get("Metric Value", "")),
            (row.get("Metric Unit") or "").strip(),
        )
    kernels = []
    for launch_id in sorted(launches, key=lambda k: int(k) if k.isdigit() else 0):
        entry = launches[launch_id]
        metrics = entry["metrics"]

        def value(name: str, metrics: dict = metrics) -> float | None:
            return metrics.get(name, (None, ""))[0]

        duration, unit = metrics.get("gpu__time_duration.sum", (None, "ns"))
        scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}.get(
            unit, 1e-3
        )
        stalls = tuple(
            sorted(
                ((r, v) for r in STALL_REASONS if (v := value(STALL_METRIC.format(r))) is not None),
                key=lambda rv: -rv[1],
            )
        )
        static, dynamic = (
            value("launch__shared_mem_per_block_static"),
            value("launch__shared_mem_per_block_dynamic"),
        )
        registers = value("launch__registers_per_thread")
        kernels.append(
            NcuKernel(
                kernel=entry["kernel"],
                duration_us=(duration or 0.0) * scale,
                dram_pct=value("dram__throughput.avg.pct_of_peak_sustained_elapsed"),
                sm_pct=value("sm__throughput.avg.pct_of_peak_sustained_elapsed"),
                achieved_occupancy=value("sm__warps_active.avg.pct_of_peak_sustained_active"),
                l2_hit_pct=value("lts__t_sector_hit_rate.pct"),
                stalls=stalls,
                registers=int(registers) if registers is not None else None,
                shared_bytes=int((static or 0) + (dynamic or 0))
                if static is not None or dynamic is not None
                else None,
            )
        )
    return kernels


def _kernel_name(text: str) -> str:
    """'add_kernel(float *, ...)' or 'add_kernel' -> 'add_kernel' (Triton names are plain C names)."""
    return text.split("(", 1)[0].strip()
