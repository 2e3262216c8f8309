"""Real evidence for the evidence pages' tests: a module compiled for sm_90 on this CPU through
the sandbox child's entry point, recorded by runner.persist as the round loop records it; and a
measured H200 profile loaded from the committed benchmark result (bench/results)."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from diagnosis.engine.evidence import Family, Tier
from diagnosis.engine.ir import CompileResult
from diagnosis.engine.profile import ProfileCase, ProfileResult
from diagnosis.engine.proposers.base import Candidate, unified_diff
from diagnosis.engine.records import CandidateOutcome, CaseTiming, DecisionRecord
from diagnosis.engine.sol import device_spec, fill_case
from diagnosis.engine.tier1 import run_tier1
from diagnosis.engine.tier2 import run_tier2
from diagnosis.engine.tier3 import run_tier3
from diagnosis.models import DiagnosisRun, Kernel, KernelVersion, Team
from runner.persist import RunRecorder
from runner.protocol import JobRequest

ROOT = Path(__file__).resolve().parents[2]
VADD = ROOT / "tests" / "kernels" / "vadd_unaligned.py"  # line 15: x = tl.load(x_ptr + offs, mask=mask)
LOAD_LINE = 15
H200_RESULT = ROOT / "bench" / "results" / "2026-11-30-nvidia-h200-6.json"
GEMM = "01_gemm_fp16"
# bench/suite/01_gemm_fp16.py's _CASES: (M, N, K); the result file keeps FLOPs, not shapes
GEMM_SHAPES = [
    (4096, 4096, 4096),
    (8192, 8192, 8192),
    (2048, 2048, 2048),
    (1024, 1024, 1024),
    (3000, 5000, 2500),
]


@functools.cache
def compiled_vadd() -> str:
    """The compile job's JSON for vadd_unaligned, from `python -m runner.child`, with pass dumps
    and the default SASS setting. The module is copied to a temporary directory, as the round
    loop writes its versions, so the stored text must lose that path."""
    work = Path(tempfile.mkdtemp(prefix="kernelopt-loop-"))
    try:
        module = work / "v_0123456789abcdef.py"
        shutil.copy(VADD, module)
        request = JobRequest(job="compile", module=str(module), target="sm_90", options={"pass_dumps": True})
        proc = subprocess.run(
            [sys.executable, "-m", "runner.child"],
            input=request.dumps(),
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            timeout=300,
        )
        response = json.loads(proc.stdout)
        assert response["ok"], response["error"]
        return json.dumps(response["result"])
    finally:
        shutil.rmtree(work, ignore_errors=True)


def vadd_run(owner, team: Team) -> DiagnosisRun:
    """A run of vadd_unaligned whose round 1 reached tier 3 on the real compile."""
    source = VADD.read_text()
    kernel = Kernel.objects.create(team=team, name="vadd", owner=owner)
    version = KernelVersion.objects.create(
        kernel=kernel, number=1, source=source, sha256=KernelVersion.digest(source), filename="vadd.py"
    )
    run = DiagnosisRun.objects.create(version=version, device="cpu", target="sm_90", requested_by=owner)
    result = CompileResult.from_json(json.loads(compiled_vadd()))
    recorder = RunRecorder(DiagnosisRun.objects.select_related("version").get(pk=run.pk))
    for index in (1, 2):  # a cpu run diagnoses the same upload every round
        recorder.round_started(index, source)
        recorder.tier_done(
            index, run_tier2(result, source), DecisionRecord(Tier.IR, True, Tier.COMPILER, "", None, ())
        )
        recorder.tier_done(
            index, run_tier3(result, source), DecisionRecord(Tier.COMPILER, False, None, "", None, ())
        )
    return run


def gemm_report() -> dict:
    data = json.loads(H200_RESULT.read_text())
    return next(op for op in data["operators"] if op["name"] == GEMM)


def gemm_profile() -> ProfileResult:
    """01_gemm_fp16's initial version as measured on the H200: times from the result file,
    FLOPs from its tier-1 findings, bytes from the suite's shapes (fp16: A and B read once, C
    written once)."""
    op = gemm_report()
    flops = {
        f["args"]["case"]: f["args"]["flops"]
        for r in op["rounds"]
        for f in r["findings"]
        if isinstance(f["args"].get("case"), int) and "flops" in f["args"]
    }
    spec = device_spec("NVIDIA H200", sm_count=132)
    cases = []
    for c, (m, n, k) in zip(op["cases"], GEMM_SHAPES, strict=True):
        assert flops[c["index"]] == 2 * m * n * k  # the shapes are the ones measured
        case = ProfileCase(
            c["index"],
            c["initial_ms"],
            c["ref_ms"],
            2 * (m * k + k * n + m * n),
            flops[c["index"]],
            dtype="float16",
        )
        cases.append(fill_case(case, spec))
    return ProfileResult(
        spec, tuple(cases), notes=("measured on the H200 (bench/results/2026-11-30-nvidia-h200-6.json)",)
    )


def gemm_run(owner, team: Team) -> tuple[DiagnosisRun, int]:
    """A cuda run of 01_gemm_fp16 with the H200 profile of its upload and the measured best
    rewrite as round 1's verified proposal. Returns the run and the proposal's id."""
    op = gemm_report()
    source = (ROOT / "bench" / "suite" / f"{GEMM}.py").read_text()
    best = op["best_source"]
    kernel = Kernel.objects.create(team=team, name="gemm", owner=owner)
    version = KernelVersion.objects.create(
        kernel=kernel, number=1, source=source, sha256=KernelVersion.digest(source), filename=f"{GEMM}.py"
    )
    run = DiagnosisRun.objects.create(version=version, device="cuda", target="sm_90", requested_by=owner)
    recorder = RunRecorder(DiagnosisRun.objects.select_related("version").get(pk=run.pk))
    recorder.round_started(1, source)
    recorder.tier_done(
        1, run_tier1(gemm_profile(), source=source), DecisionRecord(Tier.PROFILE, False, None, "", None, ())
    )
    candidate = Candidate(
        best, unified_diff(source, best), Family.LAUNCH_CONFIG, "measured on the H200", (), "rules"
    )
    recorder.proposal_made(1, candidate)
    outcome = CandidateOutcome(
        correct=True,
        cases=tuple(CaseTiming(c["index"], c["best_ms"], c["ref_ms"], c["sol_ms"]) for c in op["cases"]),
        parent_ms=tuple(c["initial_ms"] for c in op["cases"]),
    )
    recorder.proposal_verified(1, candidate, outcome)
    return run, recorder.proposals[next(iter(recorder.proposals))].pk
