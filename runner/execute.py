"""The parent side of execution: run child jobs in the sandbox and return typed outcomes.

`Executor` is the engine's executor (`diagnosis.engine.executor.Executor`) that the round
loop, the dramatiq worker, `manage.py optimize` and `bench/run.py` use. It imports no Django.
No method raises for anything user code does: a failure comes back as an outcome with
`ok=False` and the child's `JobError` (see `runner.errors.KINDS`). The child measures; this
side turns its JSON into the engine's outcome records and has the engine judge the timings
(`diagnosis.engine.executor.compare_timings`) and fill in SOL (`diagnosis.engine.sol`). Every
child job's wall time is recorded in `Executor.costs`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from diagnosis.engine import devices, sol
from diagnosis.engine.executor import (
    CaptureOutcome,
    CaseCheck,
    CaseMeasurement,
    CompileOutcome,
    DroppedCompile,
    InputCase,
    JobCost,
    JobOptions,
    ProfileOutcome,
    TimingComparison,
    TimingOutcome,
    ValidateOutcome,
    VerifyOutcome,
    compare_timings,
)
from diagnosis.engine.ir import CompileResult
from diagnosis.engine.profile import ProfileResult
from diagnosis.engine.verdict import TimingVerdict
from runner import gate
from runner.protocol import JobError, JobRequest
from runner.sandbox import Limits, SandboxResponse, child_python, run_job

# ---------------------------------------------------------------- policy on raw numbers


def _floats(values: Any) -> tuple[float, ...]:
    return tuple(float(v) for v in values or () if v is not None)


def _input_case(raw: Mapping[str, Any]) -> InputCase:
    return InputCase(
        kind=str(raw.get("kind", "")),
        index=int(raw.get("index", 0)),
        shapes=tuple(tuple(int(n) for n in s) for s in raw.get("shapes", ())),
        dtypes=tuple(str(d) for d in raw.get("dtypes", ())),
    )


def timing_comparison(raw: Mapping[str, Any] | None) -> TimingComparison | None:
    """A child's raw timing dict as measurements, judged by the engine's policy."""
    if raw is None:
        return None
    if not raw.get("timed"):
        return TimingComparison(timed=False, reason=str(raw.get("reason", "")))
    dev = raw.get("device") or {}
    spec = sol.device_spec(
        str(dev.get("name", "")),
        sm_count=int(dev.get("sm_count", 0) or 0),
        l2_mb=float(dev.get("l2_mb", 0.0) or 0.0),
        kind=str(dev.get("kind", "cuda")),
    )
    return compare_timings([_measurement(c) for c in raw.get("cases", ())], spec)


def _measurement(c: Mapping[str, Any]) -> CaseMeasurement:
    return CaseMeasurement(
        index=int(c["index"]),
        label=str(c.get("label", f"case {c['index']}")),
        candidate_ms=_floats(c.get("candidate_ms")),
        parent_ms=_floats(c.get("parent_ms")),
        reference_ms=_floats(c.get("reference_ms")),
        bytes=int(c.get("bytes", 0)),
        flops=int(c.get("flops", 0)),
        dtype=str(c.get("dtype", "float32")),
    )


def verify_profile(result: Mapping[str, Any], timing: TimingComparison | None) -> ProfileResult | None:
    """A verify job's result as the profile job's: per timed case the median time of the
    version under test, the reference's, bytes, FLOPs and the first seed's launches.

    The gate already ran and timed that version, so tier 1 needs no second job for it (a
    profile job costs an interpreter start, a compile-cache load, the autotuner and its own
    timing). None when something is missing: then the loop runs the profile job.
    """
    if timing is None or not timing.timed or not timing.cases:
        return None
    raw_device = (result.get("timing") or {}).get("device")
    launches = {
        c.get("index"): c.get("launch_info")
        for c in result.get("cases", ())
        if isinstance(c, Mapping) and c.get("kind") == "timed"
    }
    if not isinstance(raw_device, Mapping) or not all(launches.get(t.index) for t in timing.cases):
        return None
    note = "times from the verify job: medians of its interleaved rounds"
    try:
        cases = [
            {"index": t.index, "time_ms": t.candidate_ms, "ref_time_ms": t.reference_ms, "bytes": t.bytes,
             "flops": t.flops, "dtype": t.dtype, "launches": [_launch(li) for li in launches[t.index]]}  # fmt: skip
            for t in timing.cases
        ]
        device = {  # the peaks come from sol's table (fill_profile), not from the child
            "name": str(raw_device.get("name", "")),
            "kind": str(raw_device.get("kind", "cuda")),
            "sm_count": int(raw_device.get("sm_count", 0) or 0),
            "peak_bw_gbs": 0.0,
            "l2_mb": float(raw_device.get("l2_mb", 0.0) or 0.0),
            "max_threads_per_sm": int(raw_device.get("max_threads_per_sm", 2048) or 2048),
        }
        raw = ProfileResult.from_json({"device": device, "cases": cases, "notes": [note]})
    except (TypeError, ValueError, KeyError):  # the child's output is not to be trusted
        return None
    return sol.fill_profile(raw)


def _launch(raw: Any) -> dict[str, Any]:
    """One launch record of the child as LaunchInfo fields; ValueError when it is not one."""
    grid = [int(g) for g in raw["grid"]]
    if len(grid) != 3:
        raise ValueError(f"a launch grid has {len(grid)} dimensions")
    return {"kernel": str(raw["kernel"]), "grid": grid, "num_warps": int(raw["num_warps"]),
            "num_stages": int(raw["num_stages"])}  # fmt: skip


def _case_check(raw: Mapping[str, Any], timing: TimingComparison | None) -> CaseCheck:
    timed = None
    if timing is not None and raw.get("kind") == "timed":
        timed = next((t for t in timing.cases if t.index == raw.get("index")), None)
    return CaseCheck(
        label=str(raw["label"]),
        kind=str(raw["kind"]),
        index=int(raw["index"]),
        numel=int(raw.get("numel", 0)),
        seeds=tuple(raw.get("seeds", ())),
        correct=bool(raw.get("correct")),
        max_abs_err=float(raw.get("max_abs_err", 0.0)),
        max_rel_err=float(raw.get("max_rel_err", 0.0)),
        rel_l2_err=float(raw.get("rel_l2_err", 0.0)),
        tolerance=raw.get("tolerance"),
        launches=int(raw.get("launches", 0)),
        kernels=tuple(raw.get("kernels") or ()),
        sensitivity=str(raw.get("sensitivity", "")),
        launch_dependence=str(raw.get("launch_dependence", "")),
        bytes=int(raw.get("bytes", 0)),
        flops=int(raw.get("flops", 0)),
        dtype=str(raw.get("dtype", "")),
        timing=timed,
        autotune_choices=tuple(str(c) for c in raw.get("autotune_choices") or ()),
        launch_ints={
            str(k): {str(n): int(v) for n, v in (args or {}).items() if isinstance(v, int)}
            for k, args in (raw.get("launch_ints") or {}).items()
        },
    )


# ---------------------------------------------------------------- the executor


class Executor:
    """Runs sandboxed jobs for one device kind (the engine's `Executor` protocol, and more jobs).

    device: 'cuda', 'cpu' or 'npu' (the worker's queue). target: the compile target of tiers
    2/3 ('sm_90', 'gfx942', 'npu:Ascend910B3'); on cpu it also decides the specialisation the
    launch recorder reproduces. python: the child's interpreter (default: per device, see
    `runner.sandbox.child_python`). limits: one `Limits` for every job, or a mapping job ->
    Limits; jobs not in it get `Limits.for_job`. cache_dir: a Triton cache shared by this
    executor's jobs (one run), so a kernel compiled by `verify` is not compiled again by `time`.

    The verification gate's reference data (runner.gate.GateStore) lives as long as the
    executor: one reference job per reference module, cases and seeds, whatever the number of
    candidates. `decide_before_timing`: whether a timed verify job waits for the worker's
    verdict on its outputs before it times (None: on devices that time, so a candidate that
    fails costs no timing).
    """

    def __init__(
        self,
        device: str = "cpu",
        target: str | None = None,
        python: str | None = None,
        limits: Limits | Mapping[str, Limits] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        self.kind = devices.get(device)  # UnknownDevice, a ValueError, for an unregistered kind
        self.device = device
        self.target = target
        self.python = python
        self.limits = limits
        self.cache_dir = os.fspath(cache_dir) if cache_dir is not None else None
        self.costs: list[JobCost] = []
        self.gate = gate.GateStore()
        self.decide_before_timing: bool | None = None

    def close(self) -> None:
        """Drop the gate's reference data now (else when the executor is garbage collected)."""
        self.gate.close()

    # -- accounting

    @property
    def wall_seconds(self) -> float:
        return sum(c.wall_s for c in self.costs)

    @property
    def device_seconds(self) -> float:
        return sum(c.device_s for c in self.costs)

    # -- plumbing

    def limits_for(self, job: str) -> Limits:
        if isinstance(self.limits, Limits):
            return self.limits
        if self.limits is not None and job in self.limits:
            return self.limits[job]
        return Limits.for_job(job, self.device)

    def run(
        self, request: JobRequest, *, python: str | None = None, workdir: str | os.PathLike[str] | None = None
    ) -> SandboxResponse:
        """Run one raw request in the sandbox (under `python`, default the executor's); record its
        cost. workdir: the job's working directory, kept for the caller (default: a fresh one)."""
        started_at = time.time()
        response = run_job(
            request,
            limits=self.limits_for(request.job),
            python=python or self.python,
            workdir=workdir,
            triton_cache_dir=self.cache_dir,
        )
        phases = dict(response.phases)
        if response.elapsed_s and response.wall_s >= response.elapsed_s:
            phases["process"] = round(response.wall_s - response.elapsed_s, 3)
        self.costs.append(JobCost(request.job, request.device, response.wall_s, response.ok, phases, started_at))
        return response

    def _request(self, job: str, path: str, **kwargs: Any) -> JobRequest:
        kwargs.setdefault("target", self.target)
        if kwargs.get("candidate"):
            kwargs["candidate"] = os.path.abspath(kwargs["candidate"])
        kwargs = {k: v for k, v in kwargs.items() if v is not None}
        return JobRequest(job=job, module=os.path.abspath(path), device=self.device, **kwargs)

    def _base(self, response: SandboxResponse) -> dict[str, Any]:
        return {
            "ok": response.ok,
            "error": response.error,
            "wall_s": response.wall_s,
            "device_s": response.wall_s if self.kind.accelerator else 0.0,
            "network": response.network,
            "processes": response.processes,
        }

    # -- jobs

    def validate(self, path: str) -> ValidateOutcome:
        """Import the module, build both models, draw the inputs; run nothing."""
        response = self.run(self._request("validate", path))
        result = response.result or {}
        return ValidateOutcome(
            **self._base(response),
            names=list(result.get("names", ())),
            kernels=list(result.get("kernels", ())),
            input_cases=int(result.get("input_cases", 0)),
            verify_cases=int(result.get("verify_cases", 0)),
            case_numel=list(result.get("case_numel", ())),
            parameters=list(result.get("parameters", ())),
            num_parameters=int(result.get("num_parameters", 0)),
        )

    def capture(self, path: str, cases: Sequence[int] | None = None, *, warmup: int = 0) -> CaptureOutcome:
        """Every Triton launch of ModelNew.forward per case (recorded, not run, on cpu)."""
        options = {"warmup": warmup} if warmup else {}
        response = self.run(
            self._request("capture", path, cases=list(cases) if cases is not None else None, options=options)
        )
        result = response.result or {}
        return CaptureOutcome(
            **self._base(response),
            executed=bool(result.get("executed")),
            target=str(result.get("target", "")),
            launches=list(result.get("launches", ())),
        )

    def verify(
        self,
        parent_path: str,
        candidate_path: str | None = None,
        seeds: Sequence[int] = (0, 1, 2),
        *,
        cases: Sequence[int] | None = None,
        time: bool = True,
        options: JobOptions | None = None,
        reference: str | None = None,
    ) -> VerifyOutcome:
        """The verification gate of `candidate_path` (default: the parent's own ModelNew) against
        the Model of `reference` (default: the parent; the loop passes the run's initial upload),
        then (on a device, `time=True`) timing against the parent.

        Two child jobs: the reference job (once per reference module, cases and seeds: its
        outputs stay in this executor) and the verify job, which runs the candidate on the
        reference's inputs and hands its outputs back as data; the comparison happens here
        (runner.gate, runner/childlib/verify.py).

        options: cpu_max_elements (cpu case size limit, default 2**16), tolerance
        ({atol, rtol, l2} override), timed_case_seeds (check the timed cases on the first N
        seeds only; verify cases always get every seed), rounds / warmup_ms / rep_ms (timing),
        compile_timeout_s (each compile of the candidate's kernels; see
        runner.childlib.compile_bound).
        """
        opts: dict[str, Any] = {"time": time, **(options or {})}
        seeds = list(seeds) or [0]
        ref_path = os.path.abspath(reference or parent_path)
        ran: list[SandboxResponse] = []

        def run_reference(request: JobRequest, workdir: str) -> SandboxResponse:
            ran.append(self.run(request, workdir=workdir))
            return ran[-1]

        def reference_request(need: gate.Need) -> JobRequest:
            return self._request(
                "reference", ref_path, seeds=need.seeds, cases=list(cases) if cases is not None else None,
                options={**opts, "timed_seeds": need.timed_seeds, "alt_seeds": need.alt_seeds},
            )  # fmt: skip

        key = gate.GateStore.key(ref_path, self.device, cases, opts)
        refset, failed = self.gate.reference(run_reference, reference_request, key, seeds, opts)
        if refset is None:
            assert failed is not None
            return self._verify_outcome(failed, failed.result or {}, failed.error, ran, seeds)
        decide = self.decide_before_timing
        if decide is None:
            decide = self.kind.accelerator
        plan = gate.plan(refset, seeds, opts, decision=bool(decide and time))
        jobdir = Path(tempfile.mkdtemp(prefix="kernelopt-job-"))
        decider = None
        try:
            gate.stage_inputs(plan, jobdir)
            request = self._request(
                "verify", parent_path, candidate=candidate_path, seeds=seeds,
                cases=list(cases) if cases is not None else None, options={**opts, "gate": plan.to_json()},
            )  # fmt: skip
            if plan.decision:
                decider = gate.Decider(refset, plan, jobdir, override=opts.get("tolerance"))
                decider.start()
            try:
                response = self.run(request, workdir=jobdir)
            finally:
                if decider is not None:
                    decider.stop()
            ran.append(response)
            verdict = gate.judge(
                refset, plan, response, jobdir, override=opts.get("tolerance"),
                memo=decider.memo if decider is not None else None,
            )  # fmt: skip
        finally:
            shutil.rmtree(jobdir, ignore_errors=True)
        return self._verify_outcome(response, verdict.result, verdict.error, ran, seeds)

    def _verify_outcome(
        self,
        response: SandboxResponse,
        result: Mapping[str, Any],
        error: JobError | None,
        ran: Sequence[SandboxResponse],
        seeds: Sequence[int],
    ) -> VerifyOutcome:
        """The gate's outcome: `result` and `error` are the trusted side's (runner.gate.judge), or
        a failed reference job's; wall and device time are those of every job this call ran."""
        passed = error is None and bool(result.get("passed"))
        timing = None
        if passed:
            try:
                timing = timing_comparison(result.get("timing"))
            except (TypeError, ValueError, KeyError, AttributeError):  # the verify job's JSON is not trusted
                timing = TimingComparison(timed=False, reason="the verify job's timing record is malformed")
        outcome_verdict = (timing.verdict if timing is not None else TimingVerdict.UNTIMED) if passed else TimingVerdict.FAILED
        wall = round(sum(r.wall_s for r in ran), 3)
        base = {**self._base(response), "ok": error is None, "error": error, "wall_s": wall,
                "device_s": wall if self.kind.accelerator else 0.0}  # fmt: skip
        return VerifyOutcome(
            **base,
            passed=passed,
            verdict=outcome_verdict,
            reason="" if passed else (error.kind if error else "failed"),
            cases=[_case_check(c, timing) for c in result.get("cases", ())],
            checked=list(result.get("checked", ())),
            skipped=list(result.get("skipped", ())),
            input_cases=tuple(_input_case(c) for c in result.get("input_shapes", ())),
            seeds=list(result.get("seeds", seeds)),
            notes=tuple(str(n) for n in result.get("notes", ())),
            timing=timing,
            faster=bool(timing and timing.faster),
            suspect=bool(timing and timing.suspect),
            speedup=timing.speedup if timing else None,
            profile=verify_profile(result, timing) if passed else None,
            compile_dropped=tuple(
                DroppedCompile(str(d.get("kernel", "")), str(d.get("config", "")), float(d.get("limit_s") or 0.0))
                for d in result.get("compile_dropped", ())
            ),
        )

    def time(
        self,
        parent_path: str,
        candidate_path: str | None = None,
        *,
        cases: Sequence[int] | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> TimingOutcome:
        """Median times of the parent's ModelNew, the candidate's (same process, interleaved) and
        the reference, per case; no correctness check. On cpu: `timing.timed` is False."""
        response = self.run(
            self._request(
                "time",
                parent_path,
                candidate=candidate_path,
                cases=list(cases) if cases is not None else None,
                options=dict(options or {}),
            )
        )
        timing = timing_comparison(response.result) if response.ok else None
        return TimingOutcome(**self._base(response), timing=timing)

    def profile(
        self,
        path: str,
        ncu: bool = False,
        *,
        cases: Sequence[int] | None = None,
        options: JobOptions | None = None,
    ) -> ProfileOutcome:
        """Tier-1 evidence: per case time, reference time, bytes, FLOPs, launches, %SOL; ncu
        counters per Triton kernel when `ncu` and the device allows it (see `profile.notes`)."""
        opts = {"ncu": ncu, **(options or {})}
        response = self.run(
            self._request("profile", path, cases=list(cases) if cases is not None else None, options=opts)
        )
        profile = None
        if response.ok and response.result is not None:
            profile = sol.fill_profile(ProfileResult.from_json(response.result))
        return ProfileOutcome(**self._base(response), profile=profile)

    def compile(
        self,
        path: str,
        target: str | None = None,
        options: JobOptions | None = None,
        cases: Sequence[int] | None = None,
    ) -> CompileOutcome:
        """Ahead-of-time compile for `target` (default: the executor's) of the launches of the
        input `cases` (default: case 0); see runner.childlib.compile."""
        target = target or self.target
        response = self.run(
            self._request(
                "compile", path, target=target, options=dict(options or {}),
                cases=list(cases) if cases else None,
            ),  # fmt: skip
            python=self.compile_python(target),
        )
        result = CompileResult.from_json(response.result) if response.result is not None else None
        return CompileOutcome(**self._base(response), result=result)

    def compile_python(self, target: str | None) -> str | None:
        """The interpreter of a compile job: an npu target needs triton-ascend, which lives in its
        own environment (`child_python('npu')`), also when the run is on cpu; None: the executor's."""
        if target and target.startswith("npu:") and self.device != "npu":
            return child_python("npu")
        return None
