"""Speed-of-light model: the peaks table, its lookup and the SOL arithmetic."""

from __future__ import annotations

import pytest

from diagnosis.engine import sol
from diagnosis.engine.profile import DeviceSpec, ProfileCase, ProfileResult

GB = 10**9


@pytest.mark.parametrize(
    ("torch_name", "key"),
    [
        pytest.param("NVIDIA H200", "h200-sxm", id="h200"),
        pytest.param("NVIDIA H100 80GB HBM3", "h100-sxm", id="h100-sxm"),
        pytest.param("NVIDIA H100 PCIe", "h100-pcie", id="h100-pcie"),
        pytest.param("NVIDIA A100-SXM4-80GB", "a100-80gb", id="a100"),
        pytest.param("AMD Instinct MI300X", "mi300x", id="mi300x"),
        pytest.param("Ascend910B3", "ascend-910b", id="ascend-910b3"),
    ],
)
def test_it_finds_the_peaks_of_a_device_by_its_torch_name(torch_name: str, key: str) -> None:
    entry = sol.lookup(torch_name)
    assert entry is not None
    assert entry.key == key


@pytest.mark.parametrize(
    "name", [pytest.param("NVIDIA GeForce GTX 1080", id="unknown-gpu"), pytest.param("", id="empty")]
)
def test_it_knows_no_peaks_for_an_unknown_device(name: str) -> None:
    assert sol.lookup(name) is None
    spec = sol.device_spec(name or "x", sm_count=20)
    assert spec.peak_bw_gbs == 0.0
    assert sol.sol_ms(10**9, 0, "float32", spec) is None


def test_h200_keeps_datasheet_and_measured_figures() -> None:
    entry = sol.lookup("NVIDIA H200")
    assert entry is not None
    assert entry.spec.peak_bw_gbs == 4800.0
    assert entry.measured_bw_gbs == 4300.0
    assert entry.measured_tflops["bf16"] == 790.0
    assert sol.attainable_fraction(entry, "bandwidth") == pytest.approx(4300 / 4800)
    assert sol.attainable_fraction(entry, "bf16") == pytest.approx(790 / 989.4)


@pytest.mark.parametrize(
    ("nbytes", "flops", "dtype", "expected_ms"),
    [
        pytest.param(2 * 2**30, 0, "float32", 2 * 2**30 / (4800 * GB) * 1e3, id="copy-1GiB-bandwidth-bound"),
        pytest.param(0, 2 * 8192**3, "bfloat16", 2 * 8192**3 / 989.4e12 * 1e3, id="bf16-gemm-compute-bound"),
        pytest.param(0, 2 * 4096**3, "float32", 2 * 4096**3 / 494.7e12 * 1e3, id="fp32-dot-bounded-by-tf32"),
        pytest.param(
            3 * 8192 * 8192 * 2, 2 * 8192**3, "float16", 2 * 8192**3 / 989.4e12 * 1e3, id="max-of-both"
        ),
        pytest.param(0, 10**12, "float8_e4m3fn", 10**12 / 1978.9e12 * 1e3, id="fp8"),
    ],
)
def test_sol_is_the_larger_of_the_bandwidth_and_compute_bounds(
    nbytes: int, flops: int, dtype: str, expected_ms: float
) -> None:
    spec = sol.lookup("NVIDIA H200").spec  # type: ignore[union-attr]
    assert sol.sol_ms(nbytes, flops, dtype, spec) == pytest.approx(expected_ms)


@pytest.mark.parametrize(
    ("time_ms", "sol_ms", "expected"),
    [
        pytest.param(1.0, 0.9, 90.0, id="90-percent"),
        pytest.param(0.5, 0.5, 100.0, id="at-the-bound"),
        pytest.param(None, 0.5, None, id="untimed"),
        pytest.param(1.0, None, None, id="no-bound"),
        pytest.param(0.0, 1.0, None, id="zero-time"),
    ],
)
def test_pct_sol(time_ms: float | None, sol_ms: float | None, expected: float | None) -> None:
    got = sol.pct_sol(time_ms, sol_ms)
    assert got == (pytest.approx(expected) if expected is not None else None)


def test_fill_profile_replaces_the_childs_bare_device_and_fills_every_case() -> None:
    bare = DeviceSpec(name="NVIDIA H200", kind="cuda", sm_count=132, peak_bw_gbs=0.0, l2_mb=60.0)
    raw = ProfileResult(
        device=bare, cases=(ProfileCase(index=0, time_ms=0.5, ref_time_ms=0.6, bytes=2 * 2**30, flops=0),)
    )
    filled = sol.fill_profile(ProfileResult.from_json(raw.to_json()))
    assert filled.device is not None and filled.device.peak_bw_gbs == 4800.0
    assert filled.device.sm_count == 132
    case = filled.cases[0]
    assert case.sol_ms == pytest.approx(2 * 2**30 / 4800e9 * 1e3)
    assert case.pct_sol == pytest.approx(100 * case.sol_ms / 0.5)
    assert case.achieved_gbs == pytest.approx(2 * 2**30 / 0.5e-3 / 1e9)
    assert any("datasheet" in note for note in filled.notes)


def test_fill_profile_leaves_a_cpu_profile_alone() -> None:
    raw = ProfileResult(
        device=None, cases=(ProfileCase(index=0, time_ms=None, ref_time_ms=None, bytes=10, flops=0),)
    )
    assert sol.fill_profile(raw) == raw
