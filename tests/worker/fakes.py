"""A scripted stand-in for `diagnosis.engine.loop.run_loop`, for the worker's own mechanics.

It drives the observer exactly as the loop's protocol says (round_started, tier_done per tier,
proposal_made, proposal_verified, round_finished, should_stop) with realistic records, and
can block at a gate or raise, so claims, heartbeats, cancellation, retries and persistence
are tested without compiling anything. Tests of real execution use the real loop.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

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
from diagnosis.engine.proposers.base import Candidate, unified_diff
from diagnosis.engine.records import (
    CandidateOutcome,
    CaseTiming,
    DecisionRecord,
    Hypothesis,
    LoopResult,
    RoundCost,
    RoundRecord,
    StopReason,
    VersionStats,
    sha256,
)
from diagnosis.engine.verdict import Verdict

register_code(
    "test_worker.small_block", Tier.TRIAGE, Family.LAUNCH_CONFIG, "BLOCK={block} is small for {kernel}"
)
register_code(
    "test_worker.scalar_loads", Tier.IR, Family.HINTS, "{kernel}: line {line} loads compile to scalar {insn}"
)

PTX = "\n".join(f"    ld.global.b32 %r{i}, [%rd{i}];" for i in range(1, 40))

TRIAGE = Finding(
    code="test_worker.small_block",
    severity=Severity.MEDIUM,
    args={"block": 128, "kernel": "double_kernel"},
    lines=(23,),
    kernel="double_kernel",
    gain=1.2,
)
SCALAR = Finding(
    code="test_worker.scalar_loads",
    severity=Severity.HIGH,
    args={"kernel": "double_kernel", "line": 16, "insn": "ld.global.b32", "widths": (32, 32)},
    lines=(16,),
    kernel="double_kernel",
    evidence=(ArtefactRef(kind="ptx", kernel="double_kernel", lines=(12, 13), excerpt=PTX[:200], name=""),),
    gain=1.5,
)


@dataclass
class ScriptedLoop:
    """Callable like run_loop. `raises`: exceptions for successive calls (None: run normally)."""

    raises: list[BaseException | None] = field(default_factory=list)
    gate: threading.Event | None = None  # when set, round 1 waits here after its proposal
    reached_gate: threading.Event = field(default_factory=threading.Event)
    calls: list[dict[str, Any]] = field(default_factory=list)
    statuses_seen: list[tuple[str, str]] = field(default_factory=list)  # (status, worker) at round start

    def __call__(
        self, source: str, *, executor: Any, config: Any, observer: Any, proposer: Any = None
    ) -> LoopResult:
        from diagnosis.models import DiagnosisRun

        self.calls.append({"source": source, "config": config, "executor": executor, "proposer": proposer})
        if self.raises:
            exc = self.raises.pop(0)
            if exc is not None:
                raise exc
        run = getattr(observer, "run", None)
        if run is not None:
            self.statuses_seen.append(
                tuple(DiagnosisRun.objects.filter(id=run.id).values_list("status", "worker").get())
            )
        revised = source.replace("BLOCK=128", "BLOCK=1024").replace("cdiv(n, 128)", "cdiv(n, 1024)")
        initial = VersionStats(sha256(source), (CaseTiming(0, 2.0, 3.0, 0.5),))
        best = VersionStats(sha256(revised), (CaseTiming(0, 1.0, 3.0, 0.5),))

        observer.round_started(1, source)
        d0 = DecisionRecord(
            Tier.TRIAGE, True, Tier.PROFILE, "tier 0 does not localize the hotspot", None, ("localizes",)
        )
        observer.tier_done(1, TierResult(Tier.TRIAGE, findings=[TRIAGE], narrows=True, wall_s=0.01), d0)
        d2 = DecisionRecord(Tier.IR, False, None, "evidence sufficient", Family.HINTS, ())
        observer.tier_done(
            1,
            TierResult(
                Tier.IR,
                findings=[SCALAR],
                artefacts=[Artefact("ptx", "double_kernel.ptx", PTX), Artefact("weird", "notes", "x")],
                localizes=True,
                narrows=True,
                explains=True,
                wall_s=0.2,
            ),
            d2,
        )
        proposal = Candidate(
            source=revised,
            diff=unified_diff(source, revised),
            family=Family.LAUNCH_CONFIG,
            rationale="a larger block moves more bytes per program",
            proposer="rules",
            findings_addressed=("test_worker.small_block",),
            mechanism="BLOCK 128 -> 1024",
            expected="more bytes in flight per program",
        )
        observer.proposal_made(1, proposal)
        if self.gate is not None:
            self.reached_gate.set()
            self.gate.wait(30)
        cost = RoundCost(wall_s=1.5, device_s=0.25, tokens=0)
        if observer.should_stop():
            record = RoundRecord(
                1, sha256(source), Tier.IR, Verdict.INCONCLUSIVE, reason="cancelled", cost=cost
            )
            observer.round_finished(1, record)
            return LoopResult(source, source, initial, initial, [record], StopReason.CANCELLED, wall_s=2.0)
        outcome = CandidateOutcome(
            correct=True, cases=best.cases, parent_ms=(2.0,), noise=0.01, case_noise=(0.01,), wall_s=1.0
        )
        observer.proposal_verified(1, proposal, outcome)
        record = RoundRecord(
            index=1,
            parent_sha256=sha256(source),
            tier_reached=Tier.IR,
            verdict=Verdict.IMPROVED,
            hypothesis=Hypothesis(Family.LAUNCH_CONFIG, "more bytes in flight", ("test_worker.small_block",)),
            findings=[TRIAGE, SCALAR],
            decisions=[d0, d2],
            proposal=proposal,
            outcome=outcome,
            cost=cost,
        )
        observer.round_finished(1, record)
        return LoopResult(
            initial_source=source,
            best_source=revised,
            initial=initial,
            best=best,
            rounds=[record],
            stop_reason=StopReason.ROUND_BUDGET,
            speedups_over_initial=(2.0,),
            wall_s=2.5,
            device_s=0.5,
            baseline_wall_s=1.0,
            baseline_device_s=0.25,
        )
