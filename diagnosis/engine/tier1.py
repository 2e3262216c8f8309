"""Tier 1: read the profile (times, bytes, FLOPs, grid, ncu counters) as symptoms.

The child times every case and fills a ProfileResult; this module turns it into findings:
memory-bound below peak bandwidth, launch-bound, compute-bound without tensor cores, too few
programs or a big last wave, slower than PyTorch, and, where ncu ran, occupancy, the top stall
reason and the L2 hit rate. Each finding names its case and carries the figures it was read
from. Without a device only the speed-of-light inputs (bytes, FLOPs) are reported.

Thresholds are stated where they are defined; gains use the same halved bound as tier 0
(escalation.modest_gain).
"""

from __future__ import annotations

import ast
import json
import math
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from diagnosis.engine.escalation import modest_gain, top_severity_families
from diagnosis.engine.evidence import (
    Artefact,
    ArtefactRef,
    Family,
    Finding,
    Severity,
    Tier,
    TierResult,
    register_code,
)
from diagnosis.engine.profile import DeviceSpec, LaunchInfo, NcuKernel, ProfileCase, ProfileResult
from diagnosis.engine.srcmodel import SourceModelError, model_of
from diagnosis.engine.srcmodel.copies import permuted_copies
from diagnosis.engine.srcmodel.finishes import torch_finishes

PROFILE_ARTEFACT = "profile"  # the name of the profile's artefact (the ProfileResult as JSON)
LOW_BANDWIDTH = 0.60  # achieved / peak below this on a memory-bound case is a finding
VERY_LOW_BANDWIDTH = 0.30
REACHABLE_FRACTION = 0.80  # what a good kernel reaches of a peak: the bound the gains aim at
LAUNCH_OVERHEAD_US = 4.0  # per-launch cost of a small Triton kernel on a CUDA device
LAUNCH_BOUND_US = 10.0  # average time per launch at or below this: launch-bound
TENSOR_CORE_USE = 0.25  # below this share of the tensor peak, and at FMA speed: no tensor cores
COMPUTE_LOW = 0.50  # compute-bound below this share of the tensor peak: a finding
MAX_PROGRAMS_PER_SM = 32
TAIL_EFFICIENCY = 0.75  # waves / ceil(waves) below this, with few waves: a visible tail
FEW_WAVES = 4.0
SLOWER_MARGIN = 1.05  # beyond measurement noise
NEAR_SOL_PCT = 80.0
LOW_OCCUPANCY_PCT = 25.0
LOW_L2_HIT_PCT = 50.0
STALL_SHARE_PCT = 30.0  # a stall reason below this share is not "the" reason
OTHER_KERNELS_SHARE = 0.2  # from this share of a forward's kernel time in other kernels: a finding
FINISH_SHARE = 0.05  # beside a torch finish FUSION can skip, from this share: worth a round

NO_DEVICE = register_code(
    "T1-NO-DEVICE",
    Tier.PROFILE,
    Family.NONE,
    "no device here: nothing was timed; the speed-of-light model gives {bytes} bytes and {flops} FLOPs "
    "for case {case} ({intensity} FLOP/byte, {bound_by}-bound on current GPUs)",
    "No device",
)
MEMORY_BOUND = register_code(
    "T1-MEMORY-BOUND",
    Tier.PROFILE,
    Family.NONE,  # the symptom; which rewrite fixes it is for tier 0 or the IR tiers to say
    "case {case}: memory-bound ({bytes} bytes) at {achieved_gbs} GB/s, {bw_pct}% of the {peak_gbs} GB/s "
    "peak; {pct_sol}% of speed-of-light (gain toward 80% of peak, halved)",
    "Memory-bound below peak bandwidth",
)
LAUNCH_BOUND = register_code(
    "T1-LAUNCH-BOUND",
    Tier.PROFILE,
    Family.FUSION,
    "case {case}: {launches} launches in {time_us} us, {per_launch_us} us each: launch overhead "
    "(~4 us per launch) dominates; fewer, fused launches (gain from the overhead saved, halved)",
    "Launch-bound",
)
TINY_WORKLOAD = register_code(
    "T1-TINY-WORKLOAD",
    Tier.PROFILE,
    Family.NONE,
    "case {case}: one launch of {time_us} us: launch latency dominates and the SOL comparison says little",
    "Tiny workload",
)
NO_TENSOR_CORES = register_code(
    "T1-COMPUTE-NO-TENSOR-CORES",
    Tier.PROFILE,
    Family.USE_DOT,
    "case {case}: compute-bound ({flops} FLOPs, {dtype}) at {achieved_tflops} TFLOP/s, at or below the "
    "{fma_tflops} TFLOP/s FMA peak and {tc_pct}% of the {tc_tflops} TFLOP/s tensor-core peak: the math "
    "does not run on tensor cores{why}",
    "Compute-bound without tensor cores",
)
COMPUTE_BELOW_PEAK = register_code(
    "T1-COMPUTE-BELOW-PEAK",
    Tier.PROFILE,
    Family.NONE,
    "case {case}: compute-bound at {achieved_tflops} TFLOP/s, {tc_pct}% of the {tc_tflops} TFLOP/s "
    "tensor-core peak (tile shape, pipelining or layout: the IR tiers can tell)",
    "Compute-bound below the tensor-core peak",
)
FEW_PROGRAMS = register_code(
    "T1-FEW-PROGRAMS",
    Tier.PROFILE,
    Family.LAUNCH_CONFIG,
    "case {case}: {kernel} runs {programs} programs on {sm_count} SMs ({waves} waves of {slots} "
    "resident programs at {num_warps} warps){idle}",
    "Too few programs",
)
WAVE_TAIL = register_code(
    "T1-WAVE-TAIL",
    Tier.PROFILE,
    Family.LAUNCH_CONFIG,
    "case {case}: {kernel} runs {waves} waves of {slots} programs: the last wave is {tail_pct}% full, "
    "so {lost_pct}% of the device time is a tail (gain from filling it, halved)",
    "Partial last wave",
)
SLOWER_THAN_REF = register_code(
    "T1-SLOWER-THAN-REFERENCE",
    Tier.PROFILE,
    Family.NONE,
    "case {case}: {time_ms} ms against PyTorch's {ref_time_ms} ms ({ratio}x slower)",
    "Slower than the PyTorch reference",
)
NEAR_SOL = register_code(
    "T1-NEAR-SOL",
    Tier.PROFILE,
    Family.NONE,
    "case {case}: {pct_sol}% of speed-of-light: little is left to gain",
    "Near speed-of-light",
)
LOW_OCCUPANCY = register_code(
    "T1-LOW-OCCUPANCY",
    Tier.PROFILE,
    Family.LAUNCH_CONFIG,
    "{kernel}: achieved occupancy {occupancy_pct}% ({registers} registers/thread, {shared_bytes} bytes of "
    "shared memory per program): few warps to hide latency",
    "Low achieved occupancy",
)
STALL = register_code(
    "T1-TOP-STALL",
    Tier.PROFILE,
    Family.NONE,  # the family follows the reason (family_override)
    "{kernel}: warps stall mostly on {reason} ({share_pct}% of samples): {meaning}",
    "Top stall reason",
)
L2_LOW_HIT = register_code(
    "T1-L2-LOW-HIT",
    Tier.PROFILE,
    Family.SWIZZLE,
    "{kernel}: L2 hit rate {l2_hit_pct}% on a tiled product: operand tiles are fetched from memory again "
    "instead of reused from L2; a grouped program order keeps them resident",
    "Low L2 hit rate on a tiled product",
)

OTHER_KERNELS = register_code(
    "T1-OTHER-KERNELS",
    Tier.PROFILE,
    Family.NONE,  # the wrapper's own torch work: no rewrite of the Triton kernels removes it
    "case {case}: {share_pct}% of the forward's kernel time ({other_us} of {total_us} us a call) is in "
    "kernels other than the module's Triton kernels: {top}",
    "Time in kernels the Triton code does not launch",
)
TORCH_FINISH = register_code(
    "T1-TORCH-FINISH",
    Tier.PROFILE,
    Family.FUSION,
    "case {case}: {share_pct}% of the forward's kernel time ({other_us} of {total_us} us a call) is in kernels "
    "other than the module's Triton kernels, and {function} finishes {tensor} with torch's {op}: where its axis "
    "holds one element, skipping that finish removes its launches (gain toward their removal, halved)",
    "Time in a torch finish a rewrite can skip",
)

# ncu stall reasons (normalized) -> (meaning, family when the source has no tl.dot, with tl.dot)
_STALLS: dict[str, tuple[str, Family, Family]] = {
    "long_scoreboard": (
        "waiting for global memory: too few bytes in flight to cover latency",
        Family.LAUNCH_CONFIG,
        Family.PIPELINING,
    ),
    "lg_throttle": (
        "the load/store queue is full of global memory instructions, typical of scalar (unvectorized) accesses",
        Family.HINTS,
        Family.HINTS,
    ),
    "barrier": (
        "waiting at barriers: too many warps per program for the work between them",
        Family.LAUNCH_CONFIG,
        Family.LAUNCH_CONFIG,
    ),
    "mio_throttle": ("the shared-memory / special-function queue is full", Family.NONE, Family.NONE),
    "short_scoreboard": ("waiting on shared memory or special functions", Family.NONE, Family.NONE),
    "math_pipe_throttle": ("a math pipe is saturated", Family.NONE, Family.NONE),
    "wait": ("fixed-latency dependencies between instructions", Family.NONE, Family.NONE),
    "not_selected": (
        "warps are ready but not picked: issue-bound, little to gain from latency hiding",
        Family.NONE,
        Family.NONE,
    ),
    "selected": ("issuing instructions", Family.NONE, Family.NONE),
    "no_instruction": ("instruction cache misses", Family.NONE, Family.NONE),
    "tex_throttle": ("the texture/L1 queue is full", Family.NONE, Family.NONE),
    "membar": ("memory barriers", Family.NONE, Family.NONE),
    "drain": ("draining memory stores at exit", Family.NONE, Family.NONE),
    "branch_resolving": ("resolving branches", Family.NONE, Family.NONE),
    "dispatch_stall": ("dispatch stalls", Family.NONE, Family.NONE),
    "imc_miss": ("constant cache misses", Family.NONE, Family.NONE),
    "sleeping": ("sleeping warps", Family.NONE, Family.NONE),
}

_TENSOR_KEY = {"float32": "tf32", "float16": "fp16", "bfloat16": "bf16", "float8": "fp8"}


@dataclass(frozen=True)
class _Source:
    """What tier 1 reads from the source: kernel definition lines and whether tl.dot appears."""

    kernel_lines: dict[str, int]
    dot_kernels: frozenset[str]
    # the wrapper's torch reductions over what a kernel wrote (srcmodel.finishes), as the
    # finding's arguments: function, tensor, op
    finishes: tuple[dict[str, str], ...] = ()
    # the wrapper's permuted copies (srcmodel.copies), as a reader finds them: "line 134 `...`"
    copies: tuple[str, ...] = ()

    @classmethod
    def read(cls, source: str | None) -> _Source:
        if not source:
            return cls({}, frozenset())
        try:
            model = model_of(source)
            statements = model.ast_module_statements()
        except (SyntaxError, SourceModelError):
            return cls({}, frozenset())
        finishes = tuple(
            {"function": f.launch.qualname, "tensor": f.tensor, "op": f.op} for f in torch_finishes(model)
        )
        copies = tuple(f"line {c.line} `{c.code}`" for c in permuted_copies(model))
        lines: dict[str, int] = {}
        dots: set[str] = set()
        for node in statements:
            if isinstance(node, ast.FunctionDef):
                lines[node.name] = node.lineno
                if any(isinstance(n, ast.Attribute) and n.attr == "dot" for n in ast.walk(node)):
                    dots.add(node.name)
        return cls(lines, frozenset(dots), finishes, copies)

    def lines_of(self, kernel: str) -> tuple[int, ...]:
        line = self.kernel_lines.get(kernel)
        return (line,) if line else ()


def _dtype(case: ProfileCase) -> str:
    name = case.dtype.removeprefix("torch.").lower()
    if name.startswith("float8"):
        return "float8"
    return {
        "half": "float16",
        "float": "float32",
        "fp16": "float16",
        "bf16": "bfloat16",
        "fp32": "float32",
    }.get(name, name)


def _r(x: float, digits: int = 1) -> float:
    return round(x, digits)


def _time_ms(case: ProfileCase) -> float | None:
    return case.time_ms if case.time_ms is not None and case.time_ms > 0 else None


def _achieved_gbs(case: ProfileCase) -> float | None:
    if case.achieved_gbs is not None:
        return case.achieved_gbs
    t = _time_ms(case)
    return case.bytes / (t * 1e-3) / 1e9 if t else None


def _achieved_tflops(case: ProfileCase) -> float | None:
    if case.achieved_tflops is not None:
        return case.achieved_tflops
    t = _time_ms(case)
    return case.flops / (t * 1e-3) / 1e12 if t else None


def _memory_dominated(device: DeviceSpec, case: ProfileCase) -> bool | None:
    """True when moving the bytes takes longer than the math at the tensor peak; None if unknown."""
    t_mem = case.bytes / (device.peak_bw_gbs * 1e9) if device.peak_bw_gbs > 0 else 0.0
    peak = device.peak_tflops.get(_TENSOR_KEY.get(_dtype(case), ""), 0.0)
    t_cmp = case.flops / (peak * 1e12) if peak > 0 else 0.0
    if t_mem == 0.0 and t_cmp == 0.0:
        return None
    return t_mem >= t_cmp


def _hotspot(profile: ProfileResult) -> tuple[str | None, dict[str, float]]:
    """The kernel with the largest share of time: ncu durations when present, else the first launch."""
    if profile.ncu:
        totals: dict[str, float] = {}
        for k in profile.ncu:
            totals[k.kernel] = totals.get(k.kernel, 0.0) + k.duration_us
        whole = sum(totals.values()) or 1.0
        shares = {name: _r(100 * t / whole) for name, t in totals.items()}
        return max(totals, key=lambda n: totals[n]), shares
    for case in profile.cases:
        if case.launches:
            kernels = list(dict.fromkeys(li.kernel for li in case.launches))
            return kernels[0], ({kernels[0]: 100.0} if len(kernels) == 1 else {})
    return None, {}


def run_tier1(profile: ProfileResult, *, source: str | None = None) -> TierResult:
    """Interpret a profile. ``source`` (optional) gives kernel lines and whether a kernel uses tl.dot."""
    started = time.perf_counter()
    result = TierResult(tier=Tier.PROFILE)
    # The profile itself is evidence (per case time, bytes, FLOPs, the device's peaks): the
    # profile page and its roofline read it back with ProfileResult.from_json.
    result.artefacts.append(Artefact("profile", PROFILE_ARTEFACT, json.dumps(profile.to_json(), indent=1)))
    src = _Source.read(source)
    device = profile.device
    if device is None:
        result.findings = list(_no_device(profile))
        result.notes = list(profile.notes)
        result.data = {"device": None, "cases": [_sol_inputs(c) for c in profile.cases]}
        result.wall_s = time.perf_counter() - started
        return result

    hotspot, shares = _hotspot(profile)
    findings: list[Finding] = []
    for case in profile.cases:
        findings += _case_findings(device, case, hotspot, src)
        findings += _other_kernels(case, hotspot, src)
    findings += _ncu_findings(profile, hotspot, src)
    result.findings = findings

    hot_case = _hot_case(profile.cases)
    gap_known = hot_case is not None and hot_case.pct_sol is not None and hot_case.sol_ms is not None
    symptoms = [f for f in findings if f.severity.rank >= Severity.LOW.rank]
    # A kernel is only the hotspot when something was measured: ncu durations or a timed case.
    result.localizes = hotspot is not None and (bool(profile.ncu) or hot_case is not None)
    result.narrows = len(top_severity_families(findings)) == 1
    result.explains = gap_known and bool(symptoms)
    result.notes = list(profile.notes)
    result.data = {
        "device": device.name,
        "hotspot": hotspot,
        "shares": shares,
        "cases": [_case_summary(device, c) for c in profile.cases],
    }
    result.wall_s = time.perf_counter() - started
    return result


def _hot_case(cases: Sequence[ProfileCase]) -> ProfileCase | None:
    """The case with the largest time: the one a rewrite most needs to help."""
    timed = [c for c in cases if _time_ms(c)]
    return max(timed, key=lambda c: c.time_ms or 0.0) if timed else None


def _sol_inputs(case: ProfileCase) -> dict[str, object]:
    intensity = case.flops / case.bytes if case.bytes else None
    return {"index": case.index, "bytes": case.bytes, "flops": case.flops, "intensity": intensity}


def _no_device(profile: ProfileResult) -> Iterator[Finding]:
    # The largest case speaks for the run; the others are in TierResult.data.
    case = max(profile.cases, key=lambda c: c.bytes, default=None)
    if case is None:
        yield Finding(
            NO_DEVICE.code,
            Severity.INFO,
            {"bytes": "?", "flops": "?", "case": "-", "intensity": "?", "bound_by": "unknown"},
        )
        return
    intensity = case.flops / case.bytes if case.bytes else 0.0
    # H100-class ridge point: ~1000 TFLOP/s fp16 over ~3.3 TB/s is ~300 FLOP/byte; fp32 FMA ~20.
    bound_by = "memory" if intensity < 20 else "compute" if intensity > 300 else "memory- or compute"
    yield Finding(
        NO_DEVICE.code,
        Severity.INFO,
        {
            "bytes": case.bytes,
            "flops": case.flops,
            "case": case.index,
            "intensity": _r(intensity, 2),
            "bound_by": bound_by,
        },
    )


def _case_summary(device: DeviceSpec, case: ProfileCase) -> dict[str, object]:
    dominated = _memory_dominated(device, case)
    return {
        "index": case.index,
        "time_ms": case.time_ms,
        "sol_ms": case.sol_ms,
        "pct_sol": case.pct_sol,
        "bound": None if dominated is None else ("memory" if dominated else "compute"),
        "achieved_gbs": _achieved_gbs(case),
        "achieved_tflops": _achieved_tflops(case),
        "launches": len(case.launches),
    }


def _evidence(case: ProfileCase, kernel: str = "") -> tuple[ArtefactRef, ...]:
    return (ArtefactRef(kind="profile", kernel=kernel, name=f"case {case.index}"),)


def _case_findings(
    device: DeviceSpec, case: ProfileCase, hotspot: str | None, src: _Source
) -> Iterator[Finding]:
    t = _time_ms(case)
    kernel = hotspot or ""
    lines = src.lines_of(kernel)
    if t is None:
        return
    time_us = t * 1000
    n = len(case.launches)

    if case.ref_time_ms and t > case.ref_time_ms * SLOWER_MARGIN:
        ratio = t / case.ref_time_ms
        yield Finding(
            SLOWER_THAN_REF.code,
            Severity.HIGH if ratio > 2 else Severity.MEDIUM,
            {
                "case": case.index,
                "time_ms": _r(t, 4),
                "ref_time_ms": _r(case.ref_time_ms, 4),
                "ratio": _r(ratio, 2),
            },
            lines=lines,
            kernel=kernel,
            evidence=_evidence(case, kernel),
        )
    if case.pct_sol is not None and case.pct_sol >= NEAR_SOL_PCT:
        yield Finding(
            NEAR_SOL.code,
            Severity.INFO,
            {"case": case.index, "pct_sol": _r(case.pct_sol)},
            kernel=kernel,
            evidence=_evidence(case, kernel),
        )
        return  # nothing else is worth chasing on this case

    if n >= 2 and time_us <= n * LAUNCH_BOUND_US:
        saved = min((n - 1) * LAUNCH_OVERHEAD_US, time_us * (1 - 1 / n))
        bound = time_us / max(time_us - saved, 1e-9)
        yield Finding(
            LAUNCH_BOUND.code,
            Severity.HIGH if time_us <= n * LAUNCH_OVERHEAD_US * 1.5 else Severity.MEDIUM,
            {"case": case.index, "launches": n, "time_us": _r(time_us), "per_launch_us": _r(time_us / n)},
            lines=lines,
            kernel=kernel,
            gain=modest_gain(bound),
            evidence=_evidence(case, kernel),
        )
        return  # launch overhead hides every other symptom
    if n <= 1 and time_us < LAUNCH_BOUND_US:
        yield Finding(
            TINY_WORKLOAD.code,
            Severity.INFO,
            {"case": case.index, "time_us": _r(time_us)},
            kernel=kernel,
            evidence=_evidence(case, kernel),
        )
        return

    dominated = _memory_dominated(device, case)
    if dominated:
        achieved = _achieved_gbs(case)
        if achieved is not None and device.peak_bw_gbs > 0 and achieved < LOW_BANDWIDTH * device.peak_bw_gbs:
            frac = achieved / device.peak_bw_gbs
            yield Finding(
                MEMORY_BOUND.code,
                Severity.HIGH if frac < VERY_LOW_BANDWIDTH else Severity.MEDIUM,
                {
                    "case": case.index,
                    "bytes": case.bytes,
                    "achieved_gbs": _r(achieved),
                    "peak_gbs": _r(device.peak_bw_gbs),
                    "bw_pct": _r(100 * frac),
                    "pct_sol": _r(case.pct_sol) if case.pct_sol is not None else "?",
                },
                lines=lines,
                kernel=kernel,
                gain=modest_gain(REACHABLE_FRACTION / frac),
                evidence=_evidence(case, kernel),
            )
    elif dominated is False:
        yield from _compute_findings(device, case, kernel, lines, src)

    yield from _wave_findings(device, case, hotspot, lines)


def _other_kernels(case: ProfileCase, hotspot: str | None, src: _Source) -> Iterator[Finding]:
    """The share of a case's kernel time spent in kernels its Triton launches are not (the
    wrapper's `torch.sort`, `permute(...).contiguous()`, `zeros_like` or a torch reduction
    after the launch): time that sits in the gap to speed-of-light whatever a rewrite of the
    Triton kernels does; the message names the wrapper's permuted copies where the source has
    any (`srcmodel.copies`: a transposing copy is such a kernel, and where a kernel reads it,
    COALESCE may read the view in place instead). Informational: it explains a gap, it points at
    no rewrite; except
    where the wrapper finishes a kernel's output with a torch reduction that FUSION can skip
    (`srcmodel.finishes`): then that time backs FUSION, with the gain of removing it, halved
    (the finish's own share of it is not told apart: the profiler names torch's kernels, not
    the statement that launched them)."""
    total = sum(us for _, us in case.kernel_us)
    triton = {li.kernel for li in case.launches}
    other = [(name, us) for name, us in case.kernel_us if name not in triton]
    spent = sum(us for _, us in other)
    if not total or not spent:
        return
    args = {
        "case": case.index,
        "share_pct": _r(100 * spent / total),
        "other_us": _r(spent),
        "total_us": _r(total),
    }
    if spent >= OTHER_KERNELS_SHARE * total:
        top = ", ".join(f"{short_kernel_name(name)} {_r(us)} us" for name, us in other[:3])
        if src.copies:  # in `top`, which records of earlier runs hold too
            copies = ", ".join(src.copies)
            top += f"; permuted copies in the wrapper (a copy kernel each, unless already in order): {copies}"
        yield Finding(
            OTHER_KERNELS.code,
            Severity.INFO,
            {**args, "top": top},
            kernel=hotspot or "",
            evidence=_evidence(case, hotspot or ""),
        )
    if src.finishes and spent >= FINISH_SHARE * total:
        yield Finding(
            TORCH_FINISH.code,
            Severity.LOW,
            {**args, **src.finishes[0]},
            kernel=hotspot or "",
            gain=modest_gain(total / (total - spent)),
            evidence=_evidence(case, hotspot or ""),
        )


def short_kernel_name(name: str) -> str:
    """A profiler's kernel name as a reader knows it: `void at::native::vectorized_elementwise_
    kernel<4, at::native::FillFunctor<float>, ...>(...)` -> `vectorized_elementwise_kernel
    (FillFunctor)`; a Triton kernel's name is already short."""
    plain = name.removeprefix("void ").replace("(anonymous namespace)::", "")
    base = re.split(r"[<(]", plain, maxsplit=1)[0].strip().rsplit("::", 1)[-1]
    what = _KERNEL_WHAT.search(plain[len(base) :])
    return f"{base} ({what.group(0)})" if what else base or name[:40]


_KERNEL_WHAT = re.compile(r"\w+_kernel_cuda|\w+Functor|\w+Ops|\w+Epilogue")


def _compute_findings(
    device: DeviceSpec, case: ProfileCase, kernel: str, lines: tuple[int, ...], src: _Source
) -> Iterator[Finding]:
    dtype = _dtype(case)
    tc_peak = device.peak_tflops.get(_TENSOR_KEY.get(dtype, ""), 0.0)
    fma_peak = device.peak_tflops.get("fp32", 0.0)
    achieved = _achieved_tflops(case)
    if achieved is None or tc_peak <= 0 or achieved >= COMPUTE_LOW * tc_peak:
        return
    args = {
        "case": case.index,
        "flops": case.flops,
        "dtype": dtype,
        "achieved_tflops": _r(achieved, 2),
        "tc_tflops": _r(tc_peak),
        "tc_pct": _r(100 * achieved / tc_peak),
        "fma_tflops": _r(fma_peak),
    }
    bound = min(REACHABLE_FRACTION * tc_peak / max(achieved, 1e-9), 8.0)
    if fma_peak > 0 and achieved <= 1.1 * fma_peak and achieved < TENSOR_CORE_USE * tc_peak:
        family: Family | None = None
        why = ""
        if kernel in src.dot_kernels:
            if dtype == "float32":
                family, why = (
                    Family.DOT_PRECISION,
                    " although it calls tl.dot: fp32 operands at ieee precision run on FMA",
                )
            else:
                family, why = Family.NONE, " although it calls tl.dot: see the IR tiers (MMA lowering)"
        yield Finding(
            NO_TENSOR_CORES.code,
            Severity.HIGH,
            {**args, "why": why},
            lines=lines,
            kernel=kernel,
            gain=modest_gain(bound),
            family_override=family,
            evidence=_evidence(case, kernel),
        )
    else:
        yield Finding(
            COMPUTE_BELOW_PEAK.code,
            Severity.MEDIUM,
            args,
            lines=lines,
            kernel=kernel,
            gain=modest_gain(bound),
            evidence=_evidence(case, kernel),
        )


def resident_programs(device: DeviceSpec, num_warps: int) -> int:
    """Programs an SM holds at once, by threads alone (registers and shared memory may allow fewer)."""
    return max(1, min(MAX_PROGRAMS_PER_SM, device.max_threads_per_sm // (32 * max(1, num_warps))))


def _wave_findings(
    device: DeviceSpec, case: ProfileCase, hotspot: str | None, lines: tuple[int, ...]
) -> Iterator[Finding]:
    launch: LaunchInfo | None = next((li for li in case.launches if li.kernel == hotspot), None)
    if launch is None or device.sm_count <= 0:
        return
    programs = launch.programs
    slots = resident_programs(device, launch.num_warps) * device.sm_count
    waves = programs / slots
    base = {
        "case": case.index,
        "kernel": launch.kernel,
        "programs": programs,
        "sm_count": device.sm_count,
        "waves": _r(waves, 2),
        "slots": slots,
        "num_warps": launch.num_warps,
    }
    if programs < device.sm_count:
        yield Finding(
            FEW_PROGRAMS.code,
            Severity.HIGH if programs <= device.sm_count // 2 else Severity.MEDIUM,
            {**base, "idle": f": {device.sm_count - programs} SMs idle (gain from using them, halved)"},
            lines=lines,
            kernel=launch.kernel,
            gain=modest_gain(min(device.sm_count / max(programs, 1), 16.0)),
            evidence=_evidence(case, launch.kernel),
        )
    elif waves < 1:
        yield Finding(
            FEW_PROGRAMS.code,
            Severity.LOW,
            {**base, "idle": ": every SM works, with fewer programs than it can hold to hide latency"},
            lines=lines,
            kernel=launch.kernel,
            evidence=_evidence(case, launch.kernel),
        )
    elif waves < FEW_WAVES:
        efficiency = waves / math.ceil(waves)
        if efficiency < TAIL_EFFICIENCY:
            tail = waves - math.floor(waves)
            yield Finding(
                WAVE_TAIL.code,
                Severity.MEDIUM,
                {**base, "tail_pct": _r(100 * tail), "lost_pct": _r(100 * (1 - efficiency))},
                lines=lines,
                kernel=launch.kernel,
                gain=modest_gain(1 / efficiency),
                evidence=_evidence(case, launch.kernel),
            )


def _stall_name(raw: str) -> str:
    """'smsp__pcsamp_warps_issue_stalled_long_scoreboard' / 'Stall Long Scoreboard' -> 'long_scoreboard'."""
    name = raw.strip().lower().replace(" ", "_").replace("-", "_")
    for prefix in (
        "smsp__pcsamp_warps_issue_stalled_",
        "smsp__average_warp_latency_issue_stalled_",
        "stalled_",
        "stall_",
    ):
        name = name.removeprefix(prefix)
    return name.removesuffix("_not_issued")


def _percent(value: float) -> float:
    """ncu reports occupancy in percent; a value at or below 1 is read as a fraction."""
    return value * 100 if value <= 1.0 else value


def _ncu_findings(profile: ProfileResult, hotspot: str | None, src: _Source) -> Iterator[Finding]:
    kernels: list[NcuKernel] = [k for k in profile.ncu if k.kernel == hotspot] if hotspot else []
    if not kernels:
        return
    k = max(kernels, key=lambda x: x.duration_us)
    lines = src.lines_of(k.kernel)
    ev = (ArtefactRef(kind="ncu", kernel=k.kernel),)
    if k.achieved_occupancy is not None and _percent(k.achieved_occupancy) < LOW_OCCUPANCY_PCT:
        yield Finding(
            LOW_OCCUPANCY.code,
            Severity.MEDIUM,
            {
                "kernel": k.kernel,
                "occupancy_pct": _r(_percent(k.achieved_occupancy)),
                "registers": k.registers if k.registers is not None else "?",
                "shared_bytes": k.shared_bytes if k.shared_bytes is not None else "?",
            },
            lines=lines,
            kernel=k.kernel,
            evidence=ev,
        )
    if k.stalls:
        total = sum(v for _, v in k.stalls) or 1.0
        raw, value = max(k.stalls, key=lambda s: s[1])
        share = 100 * value / total
        reason = _stall_name(raw)
        if share >= STALL_SHARE_PCT:
            meaning, plain, with_dot = _STALLS.get(reason, ("", Family.NONE, Family.NONE))
            family = with_dot if k.kernel in src.dot_kernels else plain
            yield Finding(
                STALL.code,
                Severity.MEDIUM if share >= 40 and family is not Family.NONE else Severity.LOW,
                {
                    "kernel": k.kernel,
                    "reason": reason,
                    "share_pct": _r(share),
                    "meaning": meaning or "see the ncu report",
                },
                lines=lines,
                kernel=k.kernel,
                family_override=family,
                evidence=ev,
            )
    tiled = k.kernel in src.dot_kernels or any(
        _memory_dominated(profile.device, c) is False for c in profile.cases if profile.device is not None
    )
    if tiled and k.l2_hit_pct is not None and k.l2_hit_pct < LOW_L2_HIT_PCT:
        yield Finding(
            L2_LOW_HIT.code,
            Severity.MEDIUM,
            {"kernel": k.kernel, "l2_hit_pct": _r(k.l2_hit_pct)},
            lines=lines,
            kernel=k.kernel,
            evidence=ev,
        )
