from __future__ import annotations

import json
from dataclasses import replace

import pytest

from diagnosis.engine.evidence import Family, Severity, Tier
from diagnosis.engine.profile import DeviceSpec, LaunchInfo, NcuKernel, ProfileCase, ProfileResult
from diagnosis.engine.tier1 import resident_programs, run_tier1
from tests.engine.rules_cases import harness as h

H100 = DeviceSpec(
    name="H100",
    kind="cuda",
    sm_count=132,
    peak_bw_gbs=3350.0,
    peak_tflops={"fp32": 67.0, "tf32": 495.0, "fp16": 990.0, "bf16": 990.0, "fp8": 1979.0},
    l2_mb=50.0,
    max_threads_per_sm=2048,
)

GEMM_FLOPS = 2 * 4096**3
GEMM_BYTES = 3 * 4096 * 4096 * 2


def launch(kernel: str = "k", programs: int = 100_000, num_warps: int = 4) -> LaunchInfo:
    return LaunchInfo(kernel, (programs, 1, 1), num_warps, 3)


def case(
    *,
    index: int = 0,
    bytes_: int = 256_000_000,
    flops: int = 0,
    time_ms: float | None = None,
    gbs: float | None = None,
    tflops: float | None = None,
    launches: tuple[LaunchInfo, ...] = (launch(),),
    dtype: str = "float32",
    ref_ms: float | None = None,
) -> ProfileCase:
    """A case with consistent figures: give the time, or the achieved GB/s or TFLOP/s to derive it."""
    if time_ms is None:
        time_ms = bytes_ / (gbs * 1e9) * 1e3 if gbs else flops / ((tflops or 1.0) * 1e12) * 1e3
    key = {"float32": "tf32", "float16": "fp16", "bfloat16": "bf16"}[dtype]
    sol_ms = max(bytes_ / (H100.peak_bw_gbs * 1e9), flops / (H100.peak_tflops[key] * 1e12)) * 1e3
    return ProfileCase(
        index=index,
        time_ms=time_ms,
        ref_time_ms=ref_ms if ref_ms is not None else time_ms,
        bytes=bytes_,
        flops=flops,
        launches=launches,
        sol_ms=sol_ms,
        pct_sol=100 * sol_ms / time_ms,
        dtype=dtype,
    )


def profile(
    *cases: ProfileCase, ncu: tuple[NcuKernel, ...] = (), device: DeviceSpec | None = H100
) -> ProfileResult:
    return ProfileResult(device=device, cases=cases, ncu=ncu)


SOURCE_WITH_DOT = """
import triton
import triton.language as tl


@triton.jit
def k(a_ptr, b_ptr, c_ptr, BM: tl.constexpr):
    acc = tl.dot(tl.load(a_ptr), tl.load(b_ptr))
    tl.store(c_ptr, acc)
"""

SYMPTOMS = [
    pytest.param(
        profile(case(gbs=1500)), None, [("T1-MEMORY-BOUND", Severity.MEDIUM, Family.NONE)], id="memory-45pct"
    ),
    pytest.param(
        profile(case(gbs=800)), None, [("T1-MEMORY-BOUND", Severity.HIGH, Family.NONE)], id="memory-24pct"
    ),
    pytest.param(profile(case(gbs=2500)), None, [], id="memory-75pct-is-fine"),
    pytest.param(profile(case(gbs=3000)), None, [("T1-NEAR-SOL", Severity.INFO, Family.NONE)], id="near-sol"),
    pytest.param(
        profile(case(bytes_=1_000_000, time_ms=0.015, launches=(launch("a"), launch("b"), launch("c")))),
        None,
        [("T1-LAUNCH-BOUND", Severity.HIGH, Family.FUSION)],
        id="three-tiny-launches",
    ),
    pytest.param(
        profile(case(bytes_=1_000_000, time_ms=0.025, launches=(launch("a"), launch("b"), launch("c")))),
        None,
        [("T1-LAUNCH-BOUND", Severity.MEDIUM, Family.FUSION)],
        id="three-small-launches",
    ),
    pytest.param(
        profile(case(bytes_=100_000, time_ms=0.005)),
        None,
        [("T1-TINY-WORKLOAD", Severity.INFO, Family.NONE)],
        id="one-tiny-launch",
    ),
    pytest.param(
        profile(case(bytes_=GEMM_BYTES, flops=GEMM_FLOPS, tflops=40.0, dtype="float16")),
        None,
        [("T1-COMPUTE-NO-TENSOR-CORES", Severity.HIGH, Family.USE_DOT)],
        id="fp16-gemm-at-fma-speed",
    ),
    pytest.param(
        profile(case(bytes_=GEMM_BYTES, flops=GEMM_FLOPS, tflops=40.0, dtype="float32")),
        SOURCE_WITH_DOT,
        [("T1-COMPUTE-NO-TENSOR-CORES", Severity.HIGH, Family.DOT_PRECISION)],
        id="fp32-dot-at-fma-speed",
    ),
    pytest.param(
        profile(case(bytes_=GEMM_BYTES, flops=GEMM_FLOPS, tflops=40.0, dtype="float16")),
        SOURCE_WITH_DOT,
        [("T1-COMPUTE-NO-TENSOR-CORES", Severity.HIGH, Family.NONE)],
        id="fp16-dot-at-fma-speed-needs-the-ir",
    ),
    pytest.param(
        profile(case(bytes_=GEMM_BYTES, flops=GEMM_FLOPS, tflops=300.0, dtype="float16")),
        None,
        [("T1-COMPUTE-BELOW-PEAK", Severity.MEDIUM, Family.NONE)],
        id="gemm-at-30pct-of-tensor-peak",
    ),
    pytest.param(
        profile(case(bytes_=GEMM_BYTES, flops=GEMM_FLOPS, tflops=700.0, dtype="float16")),
        None,
        [],
        id="gemm-at-70pct-of-tensor-peak",
    ),
    pytest.param(
        profile(case(gbs=2500, launches=(launch(programs=64),))),
        None,
        [("T1-FEW-PROGRAMS", Severity.HIGH, Family.LAUNCH_CONFIG)],
        id="64-programs-on-132-sms",
    ),
    pytest.param(
        profile(case(gbs=2500, launches=(launch(programs=1000),))),
        None,
        [("T1-FEW-PROGRAMS", Severity.LOW, Family.LAUNCH_CONFIG)],
        id="under-one-wave-every-sm-busy",
    ),
    pytest.param(
        profile(case(gbs=2500, launches=(launch(programs=2534),))),
        None,
        [("T1-WAVE-TAIL", Severity.MEDIUM, Family.LAUNCH_CONFIG)],
        id="1.2-waves",
    ),
    pytest.param(
        profile(case(gbs=2500, launches=(launch(programs=4224),))), None, [], id="exactly-two-waves"
    ),
    pytest.param(
        profile(case(gbs=2500, ref_ms=0.07)),
        None,
        [("T1-SLOWER-THAN-REFERENCE", Severity.MEDIUM, Family.NONE)],
        id="slower-than-pytorch",
    ),
    pytest.param(
        profile(case(gbs=2500, ref_ms=0.02)),
        None,
        [("T1-SLOWER-THAN-REFERENCE", Severity.HIGH, Family.NONE)],
        id="much-slower-than-pytorch",
    ),
]


@pytest.mark.parametrize(("prof", "source", "expected"), SYMPTOMS)
def test_it_reads_symptoms_from_the_profile(
    prof: ProfileResult, source: str | None, expected: list[tuple[str, Severity, Family]]
) -> None:
    result = run_tier1(prof, source=source)
    assert result.tier is Tier.PROFILE
    assert [(f.code, f.severity, f.family) for f in result.findings] == expected
    assert all(f.args.get("case", 0) == 0 for f in result.findings)


def test_memory_bound_gain_aims_at_80pct_of_peak() -> None:
    (finding,) = run_tier1(profile(case(gbs=1675))).findings
    assert finding.args["bw_pct"] == 50.0
    # 80% / 50% = 1.6x bound, halved.
    assert finding.gain == 1.3


def test_resident_programs_follow_num_warps() -> None:
    assert [resident_programs(H100, w) for w in (1, 2, 4, 8, 16)] == [32, 32, 16, 8, 4]


def test_without_a_device_it_reports_only_the_sol_inputs() -> None:
    prof = profile(
        case(index=0, bytes_=1000, flops=0, time_ms=None, gbs=1.0),
        case(index=1, bytes_=GEMM_BYTES, flops=GEMM_FLOPS, tflops=1.0),
        device=None,
    )
    result = run_tier1(prof)
    (finding,) = result.findings
    assert finding.code == "T1-NO-DEVICE" and finding.severity is Severity.INFO
    assert finding.args["case"] == 1 and finding.args["bound_by"] == "compute"
    assert (result.localizes, result.narrows, result.explains) == (False, False, False)
    assert [c["index"] for c in result.data["cases"]] == [0, 1]


NCU = [
    pytest.param(
        NcuKernel("k", 100.0, achieved_occupancy=12.5, registers=255, shared_bytes=0),
        None,
        [("T1-LOW-OCCUPANCY", Family.LAUNCH_CONFIG)],
        id="low-occupancy-percent",
    ),
    pytest.param(NcuKernel("k", 100.0, achieved_occupancy=0.6), None, [], id="occupancy-as-a-fraction"),
    pytest.param(
        NcuKernel(
            "k", 100.0, stalls=(("smsp__pcsamp_warps_issue_stalled_long_scoreboard", 60.0), ("wait", 40.0))
        ),
        None,
        [("T1-TOP-STALL", Family.LAUNCH_CONFIG)],
        id="long-scoreboard",
    ),
    pytest.param(
        NcuKernel("k", 100.0, stalls=(("Stall Long Scoreboard", 60.0), ("Stall Wait", 40.0))),
        SOURCE_WITH_DOT,
        [("T1-TOP-STALL", Family.PIPELINING)],
        id="long-scoreboard-in-a-dot-kernel",
    ),
    pytest.param(
        NcuKernel("k", 100.0, stalls=(("lg_throttle", 50.0), ("long_scoreboard", 30.0), ("wait", 20.0))),
        None,
        [("T1-TOP-STALL", Family.HINTS)],
        id="lg-throttle",
    ),
    pytest.param(
        NcuKernel("k", 100.0, stalls=(("a", 25.0), ("b", 25.0), ("c", 25.0), ("d", 25.0))),
        None,
        [],
        id="no-dominant-stall",
    ),
    pytest.param(
        NcuKernel("k", 100.0, l2_hit_pct=30.0), SOURCE_WITH_DOT, [("T1-L2-LOW-HIT", Family.SWIZZLE)], id="l2"
    ),
    pytest.param(NcuKernel("k", 100.0, l2_hit_pct=30.0), None, [], id="l2-miss-on-a-stream-is-expected"),
]


@pytest.mark.parametrize(("kernel", "source", "expected"), NCU)
def test_it_reads_ncu_counters_of_the_hotspot(kernel: NcuKernel, source: str | None, expected: list) -> None:
    result = run_tier1(profile(case(gbs=2500), ncu=(kernel,)), source=source)
    assert [(f.code, f.family) for f in result.findings] == expected
    if source:
        assert all(f.lines == (7,) for f in result.findings)


def test_the_hotspot_is_the_kernel_with_the_most_ncu_time() -> None:
    prof = profile(
        case(gbs=1500, launches=(launch("small"), launch("big"))),
        ncu=(NcuKernel("small", 10.0), NcuKernel("big", 60.0), NcuKernel("big", 30.0)),
    )
    result = run_tier1(prof)
    assert result.data["hotspot"] == "big"
    assert result.data["shares"] == {"small": 10.0, "big": 90.0}
    assert {f.kernel for f in result.findings} == {"big"}


TESTS = [
    pytest.param(profile(case(gbs=1500)), (True, False, True), id="memory-bound-localizes-and-explains"),
    pytest.param(
        profile(case(gbs=2500, launches=(launch(programs=2534),))),
        (True, True, True),
        id="tail-narrows-to-launch-config",
    ),
    pytest.param(
        profile(case(bytes_=1_000_000, time_ms=0.015, launches=(launch("a"), launch("b"), launch("c")))),
        (True, True, True),
        id="launch-bound-narrows-to-fusion",
    ),
    pytest.param(profile(case(gbs=3000)), (True, False, False), id="near-sol-has-nothing-to-explain"),
    pytest.param(profile(case(gbs=1500, launches=())), (False, False, True), id="no-launch-no-hotspot"),
    pytest.param(
        profile(
            ProfileCase(0, None, None, 1000, 0, (launch(),)),
        ),
        (False, False, False),
        id="nothing-timed",
    ),
]


@pytest.mark.parametrize(("prof", "expected"), TESTS)
def test_the_three_tests(prof: ProfileResult, expected: tuple[bool, bool, bool]) -> None:
    result = run_tier1(prof)
    assert (result.localizes, result.narrows, result.explains) == expected


SORT = "void cub::DeviceRadixSortOnesweepKernel<cub::DeviceRadixSortPolicy<float, long, unsigned int>::Policy900>(int*)"
FILL = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >(int)"


@pytest.mark.parametrize(
    ("kernel_us", "expected"),
    [
        # liger's sparsemax: the wrapper's row sort is most of the forward
        pytest.param(
            (("k", 40.0), (SORT, 100.0), (FILL, 20.0)),
            {
                "case": 0,
                "share_pct": 75.0,
                "other_us": 120.0,
                "total_us": 160.0,
                "top": "DeviceRadixSortOnesweepKernel 100.0 us, vectorized_elementwise_kernel (FillFunctor) 20.0 us",
            },
            id="a-sort-in-the-wrapper",
        ),
        pytest.param((("k", 90.0), (FILL, 10.0)), None, id="a-small-fill-is-no-finding"),
        pytest.param((("k", 90.0),), None, id="only-the-triton-kernel"),
        pytest.param((), None, id="not-measured"),
    ],
)
def test_time_in_kernels_the_triton_code_does_not_launch(
    kernel_us: tuple[tuple[str, float], ...], expected: dict | None
) -> None:
    """The forward's kernel time outside its Triton launches is reported, as information: it
    explains a gap no rewrite of the Triton kernels closes, and points at none."""
    prof = profile(replace(case(gbs=1500), kernel_us=tuple(sorted(kernel_us, key=lambda kv: -kv[1]))))
    prof = ProfileResult.from_json(json.loads(json.dumps(prof.to_json())))  # as a job's JSON arrives
    found = [f for f in run_tier1(prof).findings if f.code == "T1-OTHER-KERNELS"]
    if expected is None:
        assert found == []
        return
    (f,) = found
    assert f.args == expected
    assert f.severity is Severity.INFO and f.family is Family.NONE


COPY = "void at::native::elementwise_kernel<128, 4, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)>(int)"


def test_time_in_other_kernels_names_the_wrappers_permuted_copies() -> None:
    """flag_gems' index_select along dim 0: the wrapper transposes its input through a helper
    and its output back; the finding says where, the helper's own line left to its call."""
    prof = profile(replace(case(gbs=1500), kernel_us=((COPY, 60.0), ("k", 40.0))))
    source = h.source("permuted_gather.py")
    (f,) = [f for f in run_tier1(prof, source=source).findings if f.code == "T1-OTHER-KERNELS"]
    lines = source.splitlines()
    call = next(i for i, text in enumerate(lines, 1) if "inp = dim_compress(inp, dim)" in text)
    back = next(i for i, text in enumerate(lines, 1) if "out = out.permute(order).contiguous()" in text)
    assert f.args["top"] == (
        "elementwise_kernel (direct_copy_kernel_cuda) 60.0 us; permuted copies in the wrapper (a copy kernel "
        "each, unless already in order): "
        f"line {call} `dim_compress(inp, dim)`, line {back} `out.permute(order).contiguous()`"
    )
    assert f.message.endswith(f.args["top"])
    assert f.severity is Severity.INFO and f.family is Family.NONE


@pytest.mark.parametrize(
    ("kernel_us", "source", "gain"),
    [
        # fla's logsumexp: torch's finish over the partials, 12 % of the kernel time; a row that
        # fits one block skips it, so the time backs FUSION: 1/0.88 halved
        pytest.param((("k", 88.0), (FILL, 12.0)), "partial_lse.py", 1.07, id="a-finish-a-rule-can-skip"),
        pytest.param((("k", 97.0), (FILL, 3.0)), "partial_lse.py", None, id="too-small-a-share"),
        # no finish in the source: the time stays information (and under 20 %, no finding)
        pytest.param((("k", 88.0), (FILL, 12.0)), "split_rowsum.py", None, id="no-finish-in-the-source"),
    ],
)
def test_time_in_a_torch_finish_backs_fusion(
    kernel_us: tuple[tuple[str, float], ...], source: str, gain: float | None
) -> None:
    prof = profile(replace(case(gbs=1500), kernel_us=kernel_us))
    found = [f for f in run_tier1(prof, source=h.source(source)).findings if f.code == "T1-TORCH-FINISH"]
    if gain is None:
        assert found == []
        return
    (f,) = found
    assert f.family is Family.FUSION and f.severity is Severity.LOW and f.gain == gain
    assert (f.args["function"], f.args["tensor"], f.args["op"], f.args["share_pct"]) == (
        "row_logsumexp", "partials", "logsumexp", 12.0
    )  # fmt: skip
