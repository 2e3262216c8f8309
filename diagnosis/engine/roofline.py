"""A roofline of measured cases: arithmetic intensity against achieved FLOP rate, on log axes,
under the device's bandwidth and compute roofs, laid out as SVG coordinates for a template.

Intensity is the speed-of-light model's: FLOPs over the minimum bytes (inputs read once,
outputs written once; diagnosis.engine.profile), so a rewrite of the same computation keeps
its intensity and moves only up (faster) or down. The roofs are the datasheet peaks the %SOL
uses (diagnosis.engine.sol), one compute roof per math class the cases run at; where the peaks
table has measured ceilings (copy bandwidth, library GEMM) they are drawn too. A case with no
counted FLOPs (a copy, most element-wise kernels under torch's flop counter) or no time has no
place on the chart and is listed with the reason instead. Plain Python.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from diagnosis.engine.profile import DeviceSpec
from diagnosis.engine.sol import lookup, math_class, peak_tflops

WIDTH, HEIGHT = 720, 420
LEFT, RIGHT, TOP, BOTTOM = 70, 20, 20, 50


@dataclass(frozen=True)
class RooflineCase:
    index: int
    series: str  # parent, candidate
    flops: int
    bytes: int
    time_ms: float | None
    dtype: str = "float32"

    @property
    def intensity(self) -> float | None:
        return self.flops / self.bytes if self.bytes > 0 and self.flops > 0 else None

    @property
    def tflops(self) -> float | None:
        if not self.time_ms or self.time_ms <= 0 or self.flops <= 0:
            return None
        return self.flops / (self.time_ms * 1e-3) / 1e12


@dataclass(frozen=True)
class Point:
    index: int
    series: str
    intensity: float
    tflops: float
    x: float
    y: float
    label: str

    # the marker's and the label's places (the template does no arithmetic)
    @property
    def box_x(self) -> float:
        return round(self.x - 5, 1)

    @property
    def box_y(self) -> float:
        return round(self.y - 5, 1)

    @property
    def label_x(self) -> float:
        return round(self.x + 8, 1)

    @property
    def label_y(self) -> float:
        return round(self.y + 4, 1)


@dataclass(frozen=True)
class Roof:
    kind: str  # bandwidth, compute, measured
    label: str
    points: str  # SVG polyline points: "x1,y1 x2,y2 ..."
    label_x: float
    label_y: float
    anchor: str = "end"  # the label's text-anchor: compute roofs end at the right edge


@dataclass(frozen=True)
class Tick:
    value: float
    label: str
    pos: float


@dataclass(frozen=True)
class Roofline:
    width: int
    height: int
    left: float
    top: float
    right: float
    bottom: float
    roofs: tuple[Roof, ...]
    points: tuple[Point, ...]
    xticks: tuple[Tick, ...]
    yticks: tuple[Tick, ...]
    omitted: tuple[tuple[int, str, str], ...] = field(default=())  # (case, series, why)
    device: str = ""

    @property
    def plot_width(self) -> float:
        return self.right - self.left

    @property
    def plot_height(self) -> float:
        return self.bottom - self.top

    @property
    def xtick_y(self) -> float:
        return self.bottom + 16

    @property
    def ytick_x(self) -> float:
        return self.left - 6

    @property
    def xaxis_y(self) -> float:
        return self.height - 8

    @property
    def yaxis_y(self) -> float:
        return self.top + 4


def _decade_floor(v: float) -> float:
    return 10.0 ** math.floor(math.log10(v))


def _decade_ceil(v: float) -> float:
    return 10.0 ** math.ceil(math.log10(v))


def _fmt(v: float) -> str:
    if v >= 1000:
        return f"{v / 1000:g}k"
    return f"{v:g}"


def roofline(device: DeviceSpec | None, cases: Sequence[RooflineCase]) -> Roofline | None:
    """The chart, or None when the device has no known peaks (nothing to draw the roofs from)."""
    if device is None or device.peak_bw_gbs <= 0:
        return None
    bw_tflops_per_intensity = device.peak_bw_gbs / 1000.0  # TFLOP/s per FLOP/byte on the slope
    placed, omitted = [], []
    for c in cases:
        why = "no FLOPs counted" if c.flops <= 0 else "not timed" if c.tflops is None else ""
        if c.intensity is None and not why:
            why = "no bytes counted"
        if why:
            omitted.append((c.index, c.series, why))
        else:
            placed.append(c)
    # a compute roof per math class the plotted cases run at (all cases' when none is plotted)
    peaks: dict[str, float] = {}
    for c in placed or cases:
        rate = peak_tflops(device, c.dtype)
        if rate:
            cls = math_class(c.dtype)
            # fp32 math is bounded by the TF32 rate where there is one (diagnosis.engine.sol)
            peaks.setdefault("tf32" if cls == "fp32" and "tf32" in device.peak_tflops else cls, rate)
    if not peaks and device.peak_tflops:
        peaks[max(device.peak_tflops, key=lambda k: device.peak_tflops[k])] = max(device.peak_tflops.values())
    if not peaks:
        return None
    entry = lookup(device.name)
    measured_bw = entry.measured_bw_gbs if entry else None
    measured = {k: v for k, v in (entry.measured_tflops.items() if entry else ()) if k in peaks}

    ridges = [p / bw_tflops_per_intensity for p in peaks.values()]
    xs = [c.intensity for c in placed if c.intensity] + ridges
    ys = [c.tflops for c in placed if c.tflops] + list(peaks.values())
    x_lo, x_hi = _decade_floor(min(xs) / 2), _decade_ceil(max(xs) * 2)
    y_hi = _decade_ceil(max(ys) * 1.5)
    y_lo = min(_decade_floor(min(ys) / 2), _decade_floor(bw_tflops_per_intensity * x_lo))
    y_lo = max(y_lo, y_hi / 1e6)  # six decades at most: a slope far below every point is noise
    left, top, right, bottom = LEFT, TOP, WIDTH - RIGHT, HEIGHT - BOTTOM

    def px(x: float) -> float:
        return round(
            left
            + (math.log10(x) - math.log10(x_lo)) / (math.log10(x_hi) - math.log10(x_lo)) * (right - left),
            1,
        )

    def py(y: float) -> float:
        y = min(max(y, y_lo), y_hi)
        return round(
            bottom
            - (math.log10(y) - math.log10(y_lo)) / (math.log10(y_hi) - math.log10(y_lo)) * (bottom - top),
            1,
        )

    def line(bw: float, peak: float) -> list[tuple[float, float]]:
        slope = bw / 1000.0
        x0 = max(x_lo, y_lo / slope)
        ridge = peak / slope
        pts = [(x0, slope * x0)]
        if ridge < x_hi:
            pts += [(ridge, peak), (x_hi, peak)]
        else:
            pts.append((x_hi, slope * x_hi))
        return pts

    def poly(pts: list[tuple[float, float]]) -> str:
        return " ".join(f"{px(x)},{py(y)}" for x, y in pts)

    roofs: list[Roof] = []
    for cls, peak in sorted(peaks.items(), key=lambda kv: -kv[1]):
        pts = line(device.peak_bw_gbs, peak)
        roofs.append(Roof("compute", f"{cls} {peak:g} TFLOP/s", poly(pts), px(x_hi) - 4, py(peak) - 5))
    slope_pts = line(device.peak_bw_gbs, max(peaks.values()))
    sx, sy = slope_pts[0]
    roofs.insert(
        0,
        Roof(
            "bandwidth", f"{device.peak_bw_gbs:g} GB/s", poly(slope_pts[:2]), px(sx) + 6, py(sy) - 8, "start"
        ),
    )
    if measured_bw:
        top_measured = max(measured.values()) if measured else max(peaks.values())
        pts = line(measured_bw, top_measured)
        roofs.append(
            Roof(
                "measured",
                f"measured {measured_bw:g} GB/s",
                poly(pts),
                px(pts[0][0]) + 6,
                py(pts[0][1]) + 14,
                "start",
            )
        )
    for cls, rate in measured.items():
        pts = line(measured_bw or device.peak_bw_gbs, rate)
        roofs.append(
            Roof("measured", f"measured {cls} {rate:g} TFLOP/s", poly(pts), px(x_hi) - 4, py(rate) + 14)
        )

    points = tuple(
        Point(c.index, c.series, c.intensity, c.tflops, px(c.intensity), py(c.tflops), f"case {c.index}")
        for c in placed
        if c.intensity is not None and c.tflops is not None
    )
    xticks = tuple(
        Tick(v, _fmt(v), px(v))
        for v in (10.0**e for e in range(round(math.log10(x_lo)), round(math.log10(x_hi)) + 1))
    )
    yticks = tuple(
        Tick(v, _fmt(v), py(v))
        for v in (10.0**e for e in range(round(math.log10(y_lo)), round(math.log10(y_hi)) + 1))
    )
    return Roofline(
        WIDTH,
        HEIGHT,
        left,
        top,
        right,
        bottom,
        tuple(roofs),
        points,
        xticks,
        yticks,
        tuple(omitted),
        device.name,
    )
