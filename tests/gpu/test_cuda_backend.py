"""The CUDA backend on a real GPU: timing, %SOL, ncu counters, a crash that must stay contained.

Marked `gpu`; skipped where torch sees no CUDA device. Each test prints its figures (run with
`-s` to see them), and the closing notes of the project quote them. The jobs go through the
real sandbox, as the worker runs them.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from diagnosis.engine.verdict import TimingVerdict
from runner.execute import Executor

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
]

MODULES = Path(__file__).resolve().parent.parent / "modules"


def test_a_read_only_kernel_is_not_charged_for_the_flush_write_back() -> None:
    """The flush before each timed call reads its buffer, so the L2 holds no dirty lines for
    the timed call to write back. A read-only 134 MB row sum after a zeroing flush (do_bench's)
    pays for writing back the dirty L2: a probe (`git show c22ef17:bench/probe_flush.py`) measured 45.8 us against 39.5 us
    after a reading flush on an H200. The backend's figure must sit with the reading flush."""
    import statistics

    from runner.backends.cuda import FLUSH_BYTES, CudaBackend

    backend = CudaBackend()
    x = torch.randn(8192, 4096, device="cuda")
    out = torch.empty(8192, device="cuda")
    fn = lambda: torch.sum(x, dim=1, out=out)  # noqa: E731
    ms = backend.time(fn, warmup_ms=10, rep_ms=60)
    buf = torch.zeros(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(100)]
    for start, end in events:
        buf.zero_()
        torch.cuda._sleep(500_000)
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    dirty_ms = statistics.median(s.elapsed_time(e) for s, e in events)
    print(f"\n[row sum 8192 x 4096 fp32] backend {ms * 1e3:.1f} us, after a zeroing flush {dirty_ms * 1e3:.1f} us")
    assert ms < 0.93 * dirty_ms


@pytest.fixture(scope="module")
def executor(tmp_path_factory: pytest.TempPathFactory) -> Executor:
    return Executor("cuda", cache_dir=tmp_path_factory.mktemp("triton-cache"))


def test_the_backend_times_a_triton_vector_add_and_eager_in_process() -> None:
    from runner.backends.cuda import CudaBackend
    from runner.childlib.hostile import load

    module = load(str(MODULES / "gpu_vadd.py"), "gpu_vadd_in_process")
    backend = CudaBackend()
    x, y = (torch.randn(1 << 26, device="cuda") for _ in range(2))
    new = module.ModelNew()
    assert torch.equal(new(x, y), x + y)
    triton_ms = backend.time(lambda: new(x, y))
    eager_ms = backend.time(lambda: x + y)
    gbs = 3 * x.numel() * 4 / (triton_ms * 1e-3) / 1e9
    print(
        f"\n[vadd 2^26 fp32, in process] triton {triton_ms:.4f} ms ({gbs:.0f} GB/s), eager {eager_ms:.4f} ms, "
        f"eager/triton {eager_ms / triton_ms:.3f}"
    )
    assert 0.5 < eager_ms / triton_ms < 2.0


def test_a_slow_host_does_not_show_in_the_device_time() -> None:
    """A short kernel whose caller spends 200 us on the host before each launch (what a host
    busy with another job's compiles does to an autotuned launch) times as the kernel alone:
    the GPU-side sleep before each call lets the host enqueue it in time. do_bench's figure for
    the same call is printed beside it; its flush alone hides about 85 us of host time."""
    import time

    from triton.testing import do_bench

    from runner.backends.cuda import CudaBackend
    from runner.childlib.hostile import load

    module = load(str(MODULES / "gpu_vadd.py"), "gpu_vadd_slow_host")
    backend = CudaBackend()
    x, y = (torch.randn(1 << 16, device="cuda") for _ in range(2))
    new = module.ModelNew()

    def slow_host() -> torch.Tensor:
        until = time.perf_counter() + 200e-6
        while time.perf_counter() < until:
            pass
        return new(x, y)

    alone_ms = backend.time(lambda: new(x, y), warmup_ms=10, rep_ms=40)
    slow_ms = backend.time(slow_host, warmup_ms=10, rep_ms=40)
    bench_ms = float(do_bench(slow_host, warmup=10, rep=40, return_mode="median"))
    print(f"\n[vadd 2^16, 200 us of host work per call] alone {alone_ms * 1e3:.1f} us, "
          f"with the host work {slow_ms * 1e3:.1f} us, do_bench of the latter {bench_ms * 1e3:.1f} us")  # fmt: skip
    assert slow_ms < 0.05  # not the 200 us of host work, nor the ~115 us past do_bench's flush
    assert slow_ms < alone_ms + 0.01


def test_time_job_vector_add_against_eager(executor: Executor) -> None:
    outcome = executor.time(str(MODULES / "gpu_vadd.py"))
    assert outcome.ok, outcome.error
    timing = outcome.timing
    assert timing is not None and timing.timed
    (case,) = timing.cases
    assert case.candidate_ms and case.reference_ms
    print(
        f"\n[time job, {timing.device.name if timing.device else '?'}, network {outcome.network}, processes {outcome.processes}] "
        f"triton {case.candidate_ms:.4f} ms (rounds {list(case.candidate_repeats)}), eager {case.reference_ms:.4f} ms, "
        f"speedup vs eager {case.speedup_vs_reference:.3f}, {case.pct_sol:.1f} %SOL, floor {case.noise_floor:.3f}, "
        f"device {outcome.device_s:.1f} s"
    )
    assert 0.5 < case.reference_ms / case.candidate_ms < 2.0


def test_verify_a_faster_candidate_against_its_parent(executor: Executor) -> None:
    outcome = executor.verify(str(MODULES / "gpu_vadd_slow.py"), str(MODULES / "gpu_vadd.py"), seeds=(0, 1))
    assert outcome.ok, outcome.error
    assert outcome.passed
    assert outcome.timing is not None and outcome.timing.timed and outcome.timing.baseline == "parent"
    case = outcome.timing.cases[0]
    print(
        f"\n[verify gpu_vadd vs gpu_vadd_slow] parent {case.parent_ms:.4f} ms {list(case.parent_repeats)}, "
        f"candidate {case.candidate_ms:.4f} ms, eager {case.reference_ms:.4f} ms, speedup {case.speedup:.3f}, "
        f"noise floor {case.noise_floor:.4f}, verdict {outcome.verdict}, {case.pct_sol:.1f} %SOL, "
        f"checked {outcome.checked}, wall {outcome.wall_s:.1f} s"
    )
    assert case.noise_floor >= 0.01
    assert outcome.verdict in (TimingVerdict.IMPROVED, TimingVerdict.NO_GAIN, TimingVerdict.SLOWER)
    assert not outcome.suspect
    # the gate's own runs are the candidate's tier-1 profile: its launches and its times
    profile = outcome.profile
    assert profile is not None and profile.device is not None and profile.device.name
    (pcase,) = profile.cases
    assert pcase.time_ms == pytest.approx(case.candidate_ms) and pcase.launches
    assert pcase.launches[0].grid[0] > 1 and pcase.pct_sol is not None


def test_pct_sol_of_a_1_gib_copy(executor: Executor) -> None:
    outcome = executor.profile(str(MODULES / "gpu_copy.py"))
    assert outcome.ok, outcome.error
    profile = outcome.profile
    assert profile is not None and profile.device is not None
    (case,) = profile.cases
    print(
        f"\n[copy 1 GiB fp32 on {profile.device.name}] {case.time_ms:.4f} ms, {case.achieved_gbs:.0f} GB/s, "
        f"SOL {case.sol_ms:.4f} ms at {profile.device.peak_bw_gbs:.0f} GB/s, {case.pct_sol:.1f} %SOL, "
        f"eager clone {case.ref_time_ms:.4f} ms"
    )
    assert case.bytes == 2 * 2**30
    assert 70.0 <= case.pct_sol <= 100.0  # type: ignore[operator]


def test_the_kernels_of_the_wrapper_are_timed_apart_from_the_triton_ones(executor: Executor) -> None:
    """A wrapper that sorts its rows before the Triton kernel spends most of the forward's
    kernel time in the sort: the profile times every kernel of the forward by name, in the
    sandbox, and tier 1 says how much of it lies outside the module's Triton kernels."""
    from diagnosis.engine.tier1 import run_tier1

    outcome = executor.profile(str(MODULES / "gpu_sorted_scale.py"))
    assert outcome.ok, outcome.error
    profile = outcome.profile
    assert profile is not None
    (case,) = profile.cases
    print(f"\n[sorted scale] notes {list(profile.notes)}")
    for name, us in case.kernel_us:
        print(f"[sorted scale] {us:9.2f} us  {name[:100]}")
    names = [name for name, _ in case.kernel_us]
    assert "scale_kernel" in names
    assert any("sort" in name.lower() for name in names)
    (finding,) = [f for f in run_tier1(profile).findings if f.code == "T1-OTHER-KERNELS"]
    print(f"[sorted scale] {finding.args}")
    assert finding.args["share_pct"] > 50

    vadd = executor.profile(str(MODULES / "gpu_vadd.py")).profile
    assert vadd is not None
    assert [name for name, _ in vadd.cases[0].kernel_us] == ["add_kernel"]
    assert not [f for f in run_tier1(vadd).findings if f.code == "T1-OTHER-KERNELS"]


@pytest.mark.skipif(shutil.which("ncu") is None, reason="ncu is not on PATH")
def test_ncu_reads_counters_for_the_triton_kernel(executor: Executor) -> None:
    outcome = executor.profile(str(MODULES / "gpu_vadd.py"), ncu=True)
    assert outcome.ok, outcome.error
    profile = outcome.profile
    assert profile is not None
    print(f"\n[ncu] notes {list(profile.notes)}")
    for kernel in profile.ncu:
        print(f"[ncu] {kernel}")
    assert profile.ncu, profile.notes
    kernel = profile.ncu[0]
    assert kernel.kernel == "add_kernel"
    assert kernel.duration_us > 0 and kernel.dram_pct is not None


def test_an_illegal_address_is_a_named_failure_and_we_survive(executor: Executor) -> None:
    outcome = executor.verify(str(MODULES / "gpu_illegal_address.py"), seeds=(0,), time=False)
    print(f"\n[illegal address] kind {outcome.kind}: {outcome.error.message[:200] if outcome.error else ''}")
    assert outcome.kind in ("device_error", "crashed")
    again = executor.validate(str(MODULES / "gpu_vadd.py"))  # the next job runs normally
    assert again.ok


def test_device_out_of_memory_is_oom(executor: Executor) -> None:
    outcome = executor.verify(str(MODULES / "gpu_oom.py"), seeds=(0,), time=False)
    print(f"\n[device oom] kind {outcome.kind}: {outcome.error.message[:160] if outcome.error else ''}")
    assert outcome.kind == "oom"
