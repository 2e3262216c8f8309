"""The roofline's geometry (diagnosis.engine.roofline): where points and roofs fall."""

from __future__ import annotations

import pytest

from diagnosis.engine.profile import DeviceSpec
from diagnosis.engine.roofline import RooflineCase, roofline
from diagnosis.engine.sol import device_spec

H200 = device_spec("NVIDIA H200")
GEMM_4096 = dict(flops=2 * 4096**3, bytes=3 * 4096 * 4096 * 2, dtype="float16")


def test_a_faster_candidate_sits_above_its_parent_at_the_same_intensity() -> None:
    chart = roofline(
        H200,
        [
            RooflineCase(0, "parent", time_ms=0.430176, **GEMM_4096),
            RooflineCase(0, "candidate", time_ms=0.211752, **GEMM_4096),
        ],
    )
    parent, candidate = chart.points
    assert parent.intensity == candidate.intensity == pytest.approx(4096 / 3)
    assert parent.tflops == pytest.approx(319.49, abs=0.01) and candidate.tflops == pytest.approx(
        649.06, abs=0.01
    )
    assert parent.x == candidate.x and candidate.y < parent.y  # SVG y grows downwards
    assert chart.left <= parent.x <= chart.right and chart.top <= candidate.y <= chart.bottom


def test_roofs_are_the_datasheet_peaks_and_the_measured_ceilings() -> None:
    chart = roofline(H200, [RooflineCase(0, "parent", time_ms=0.43, **GEMM_4096)])
    labels = {r.kind: [] for r in chart.roofs}
    for r in chart.roofs:
        labels[r.kind].append(r.label)
    assert labels == {
        "bandwidth": ["4800 GB/s"],
        "compute": ["fp16 989.4 TFLOP/s"],
        "measured": ["measured 4300 GB/s"],  # the table measured bf16, not fp16, GEMMs
    }
    compute = next(r for r in chart.roofs if r.kind == "compute")
    ridge_y = float(compute.points.split()[1].split(",")[1])
    assert ridge_y == float(compute.points.split()[2].split(",")[1])  # flat after the ridge


@pytest.mark.parametrize(
    ("case", "why"),
    [
        pytest.param(RooflineCase(1, "parent", 0, 10**8, 0.05), "no FLOPs counted", id="a-copy"),
        pytest.param(RooflineCase(2, "candidate", 10**9, 10**8, None), "not timed", id="untimed"),
        pytest.param(RooflineCase(3, "parent", 10**9, 0, 0.05), "no bytes counted", id="no-bytes"),
    ],
)
def test_cases_with_no_place_on_the_chart_are_listed(case: RooflineCase, why: str) -> None:
    chart = roofline(H200, [RooflineCase(0, "parent", time_ms=0.43, **GEMM_4096), case])
    assert [p.index for p in chart.points] == [0]
    assert chart.omitted == ((case.index, case.series, why),)


def test_fp32_math_is_bounded_by_tf32() -> None:
    chart = roofline(H200, [RooflineCase(0, "parent", 10**12, 10**9, 10.0, "float32")])
    assert [r.label for r in chart.roofs if r.kind == "compute"] == ["tf32 494.7 TFLOP/s"]


def test_a_device_without_peaks_has_no_chart() -> None:
    unknown = DeviceSpec(name="Some GPU", kind="cuda", sm_count=10, peak_bw_gbs=0.0)
    assert roofline(unknown, [RooflineCase(0, "parent", time_ms=1.0, **GEMM_4096)]) is None
    assert roofline(None, []) is None
