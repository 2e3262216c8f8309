"""Render loop results: JSON for storage and the benchmark, plain-text tables for people.

`loop_result_json` is what bench/run.py writes per operator; `rounds_table` and
`summary_table` are what a terminal or RESULTS.md shows. Plain Python: no Django.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from typing import Any

from diagnosis.engine.proposers.base import Candidate
from diagnosis.engine.records import (
    CandidateOutcome,
    CaseTiming,
    DecisionRecord,
    Hypothesis,
    LoopResult,
    RoundCost,
    RoundRecord,
    VersionStats,
    sha256,
)
from diagnosis.engine.verdict import geomean


def _r(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(float(value), digits)


def case_json(case: CaseTiming) -> dict[str, Any]:
    return {
        "index": case.index,
        "time_ms": _r(case.time_ms, 6),
        "ref_ms": _r(case.ref_ms, 6),
        "sol_ms": _r(case.sol_ms, 6),
        "pct_sol": _r(case.pct_sol, 2),
        "speedup_over_eager": _r(case.speedup_over_eager),
    }


def version_json(stats: VersionStats | None) -> dict[str, Any] | None:
    if stats is None:
        return None
    return {
        "sha256": stats.sha256,
        "cases": [case_json(c) for c in stats.cases],
        "pct_sol": _r(stats.pct_sol, 2),
        "speedup_over_eager": _r(stats.speedup_over_eager),
    }


def hypothesis_json(h: Hypothesis | None) -> dict[str, Any] | None:
    if h is None:
        return None
    return {"family": str(h.family), "mechanism": h.mechanism, "findings": list(h.findings), "text": h.text}


def decision_json(d: DecisionRecord) -> dict[str, Any]:
    return {
        "tier": int(d.tier),
        "climb": d.climb,
        "next_tier": None if d.next_tier is None else int(d.next_tier),
        "reason": d.reason,
        "family": None if d.family is None else str(d.family),
        "failed_tests": list(d.failed_tests),
    }


def proposal_json(p: Candidate | None, *, sources: bool = False) -> dict[str, Any] | None:
    if p is None:
        return None
    out = {
        "sha256": sha256(p.source),
        "family": str(p.family),
        "rationale": p.rationale,
        "proposer": p.proposer,
        "findings_addressed": list(p.findings_addressed),
        "tokens": p.tokens,
        "diff": p.diff,
    }
    if sources:
        out["source"] = p.source
    return out


def outcome_json(o: CandidateOutcome | None) -> dict[str, Any] | None:
    if o is None:
        return None
    return {
        "correct": o.correct,
        "error_kind": o.error_kind,
        "message": o.message,
        "cases": [case_json(c) for c in o.cases],
        "parent_ms": [_r(p, 6) for p in o.parent_ms],
        "speedups": [_r(s) for s in o.speedups],
        "speedup": _r(o.speedup),
        "noise": _r(o.noise),
        "case_noise": [_r(n) for n in o.case_noise],
        "case_rounds": [
            {"candidate_ms": [_r(t, 6) for t in cand], "parent_ms": [_r(t, 6) for t in par]}
            for cand, par in o.case_rounds
        ],
        "suspect": o.suspect,
        "wall_s": _r(o.wall_s, 3),
        "device_s": _r(o.device_s, 3),
        "autotune_choices": {label: list(c) for label, c in o.autotune_choices},
    }


def cost_json(c: RoundCost) -> dict[str, Any]:
    return {
        "wall_s": _r(c.wall_s, 3),
        "device_s": _r(c.device_s, 3),
        "tokens": c.tokens,
        "wall_by_tier": {str(k): _r(v, 3) for k, v in sorted(c.wall_by_tier.items())},
        "device_by_tier": {str(k): _r(v, 3) for k, v in sorted(c.device_by_tier.items())},
        "verify_wall_s": _r(c.verify_wall_s, 3),
        "verify_device_s": _r(c.verify_device_s, 3),
    }


def round_json(r: RoundRecord, *, sources: bool = False) -> dict[str, Any]:
    return {
        "index": r.index,
        "parent_sha256": r.parent_sha256,
        "tier_reached": int(r.tier_reached),
        "verdict": str(r.verdict),
        "reason": r.reason,
        "hypothesis": hypothesis_json(r.hypothesis),
        "evidence": [
            {
                "code": e.code,
                "tier": int(e.tier),
                "family": str(e.family),
                "lines": list(e.lines),
                "kernel": e.kernel,
                "artefacts": list(e.artefacts),
            }
            for e in r.evidence
        ],
        "findings": [f.to_json() for f in r.findings],
        "decisions": [decision_json(d) for d in r.decisions],
        "proposal": proposal_json(r.proposal, sources=sources),
        "outcome": outcome_json(r.outcome),
        "cost": cost_json(r.cost),
    }


def loop_result_json(result: LoopResult, *, sources: bool = False, rounds: bool = True) -> dict[str, Any]:
    """Everything a benchmark or a stored run needs about one loop; sources only when asked."""
    initial_cases = result.initial.cases if result.initial else ()
    best_cases = result.best.cases if result.best else ()
    cases = []
    for i, b in enumerate(best_cases):
        a = initial_cases[i] if i < len(initial_cases) else None
        up = result.speedups_over_initial[i] if i < len(result.speedups_over_initial) else None
        cases.append(
            {
                "index": b.index,
                "initial_ms": _r(a.time_ms if a else None, 6),
                "best_ms": _r(b.time_ms, 6),
                "ref_ms": _r(b.ref_ms, 6),
                "sol_ms": _r(b.sol_ms, 6),
                "speedup_over_initial": _r(up),
                "speedup_over_eager": _r(b.speedup_over_eager),
                "pct_sol": _r(b.pct_sol, 2),
            }
        )
    out: dict[str, Any] = {
        "initial_sha256": result.initial.sha256 if result.initial else None,
        "best_sha256": result.best.sha256 if result.best else None,
        "improved": result.improved,
        "cases": cases,
        "speedup_over_initial": _r(result.speedup_over_initial),
        "speedup_over_eager": _r(result.speedup_over_eager),
        "initial_speedup_over_eager": _r(result.initial.speedup_over_eager if result.initial else None),
        "initial_pct_sol": _r(result.initial.pct_sol if result.initial else None, 2),
        "pct_sol": _r(result.pct_sol, 2),
        "rounds_used": len(result.rounds),
        "verdicts": {v: sum(1 for r in result.rounds if str(r.verdict) == v) for v in _VERDICTS},
        "winning_rounds": [r.index for r in result.winning_rounds],
        "winning_tiers": [int(t) for t in result.winning_tiers],
        "winning_families": [str(r.proposal.family) for r in result.winning_rounds if r.proposal],
        "stop_reason": str(result.stop_reason),
        "stop_detail": result.stop_detail,
        "error": result.error,
        "wall_s": _r(result.wall_s, 3),
        "device_s": _r(result.device_s, 3),
        "baseline_wall_s": _r(result.baseline_wall_s, 3),
        "baseline_device_s": _r(result.baseline_device_s, 3),
        "tokens": result.tokens,
    }
    if rounds:
        out["rounds"] = [round_json(r, sources=sources) for r in result.rounds]
    if sources:
        out["initial_source"] = result.initial_source
        out["best_source"] = result.best_source
    return out


_VERDICTS = ("improved", "no-gain", "failed", "inconclusive")


# ---------------------------------------------------------------------------------------
# tables


def _fmt(value: Any, spec: str = ".2f", suffix: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:{spec}}{suffix}"
    return f"{value}{suffix}"


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def rounds_table(result: LoopResult) -> str:
    """One line per round: tier reached, family, verdict, speedup vs parent, cost, reason."""
    rows = []
    for r in result.rounds:
        rows.append(
            [
                r.index,
                int(r.tier_reached),
                str(r.proposal.family) if r.proposal else (str(r.hypothesis.family) if r.hypothesis else "-"),
                str(r.verdict),
                _fmt(r.speedup, ".3f", "x"),
                _fmt(r.cost.wall_s, ".1f"),
                _fmt(r.cost.device_s, ".1f"),
                (r.reason or "").replace("|", "/")[:90],
            ]
        )
    return markdown_table(
        ["round", "tier", "family", "verdict", "speedup", "wall s", "device s", "reason"], rows
    )


def summarize(operators: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Across operators (each a bench operator record): geomean, median, shares, totals."""
    ran = [o for o in operators if o.get("status") == "ok"]
    ups = [o["speedup_over_initial"] for o in ran if o.get("speedup_over_initial")]
    eager = [o["speedup_over_eager"] for o in ran if o.get("speedup_over_eager")]
    sols = [o["pct_sol"] for o in ran if o.get("pct_sol") is not None]
    return {
        "operators": len(operators),
        "ran": len(ran),
        "errors": sum(1 for o in operators if o.get("status") == "error"),
        "not_run": sum(1 for o in operators if o.get("status") == "not_run"),
        "geomean_speedup_over_initial": _r(geomean(ups)),
        "median_speedup_over_initial": _r(statistics.median(ups)) if ups else None,
        "geomean_speedup_over_eager": _r(geomean(eager)),
        "median_speedup_over_eager": _r(statistics.median(eager)) if eager else None,
        "median_pct_sol": _r(statistics.median(sols), 2) if sols else None,
        "above_2x": sum(1 for u in ups if u >= 2.0),
        "above_5x": sum(1 for u in ups if u >= 5.0),
        "improved": sum(1 for o in ran if o.get("improved")),
        "slower_than_initial": sum(1 for u in ups if u < 1.0),
        "incorrect": sum(1 for o in operators if o.get("final_check") == "incorrect"),
        "device_s": _r(sum(o.get("device_s") or 0.0 for o in operators), 1),
        "wall_s": _r(sum(o.get("wall_s") or 0.0 for o in operators), 1),
        "rounds": sum(o.get("rounds_used") or 0 for o in ran),
        "winning_tiers": _count(t for o in ran for t in o.get("winning_tiers", [])),
    }


def _count(values: Iterable[Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[str(v)] = out.get(str(v), 0) + 1
    return dict(sorted(out.items()))


def operators_table(operators: Sequence[dict[str, Any]]) -> str:
    """Per operator: speedups (geomean over cases), %SOL, rounds, winning tiers, device seconds."""
    rows = []
    for o in operators:
        if o.get("status") != "ok":
            rows.append(
                [
                    o["name"],
                    o.get("status"),
                    "-",
                    "-",
                    "-",
                    "-",
                    "-",
                    "-",
                    _fmt(o.get("device_s"), ".1f"),
                    (o.get("error") or "")[:60].replace("|", "/"),
                ]
            )
            continue
        tiers = ",".join(str(t) for t in o.get("winning_tiers", [])) or "-"
        rows.append(
            [
                o["name"],
                "ok",
                _fmt(o.get("speedup_over_initial"), ".2f", "x"),
                _fmt(o.get("speedup_over_eager"), ".2f", "x"),
                _fmt(o.get("initial_pct_sol"), ".1f"),
                _fmt(o.get("pct_sol"), ".1f"),
                o.get("rounds_used", 0),
                tiers,
                _fmt(o.get("device_s"), ".1f"),
                (o.get("stop_reason") or "")
                + (
                    ""
                    if o.get("final_check") in (None, "ok", "skipped")
                    else f"; final check {o.get('final_check')}"
                ),
            ]
        )
    return markdown_table(
        [
            "operator",
            "status",
            "vs initial",
            "vs eager",
            "%SOL before",
            "%SOL after",
            "rounds",
            "winning tiers",
            "device s",
            "stop",
        ],
        rows,
    )


def summary_table(summary: dict[str, Any]) -> str:
    rows = [
        [
            "operators (ran / errors / not run)",
            f"{summary['operators']} ({summary['ran']} / {summary['errors']} / {summary['not_run']})",
        ],
        ["geomean speedup over initial", _fmt(summary["geomean_speedup_over_initial"], ".2f", "x")],
        ["median speedup over initial", _fmt(summary["median_speedup_over_initial"], ".2f", "x")],
        ["geomean speedup over eager", _fmt(summary["geomean_speedup_over_eager"], ".2f", "x")],
        ["median speedup over eager", _fmt(summary["median_speedup_over_eager"], ".2f", "x")],
        ["median final %SOL", _fmt(summary["median_pct_sol"], ".1f")],
        ["at least 2x / 5x over initial", f"{summary['above_2x']} / {summary['above_5x']}"],
        ["improved at all", summary["improved"]],
        ["slower than initial (must be 0)", summary["slower_than_initial"]],
        ["incorrect at the final check (must be 0)", summary["incorrect"]],
        ["rounds run", summary["rounds"]],
        [
            "winning rounds by tier",
            ", ".join(f"tier {k}: {v}" for k, v in summary["winning_tiers"].items()) or "-",
        ],
        ["device seconds (total)", _fmt(summary["device_s"], ".1f")],
        ["wall seconds (total, summed over operators)", _fmt(summary["wall_s"], ".1f")],
    ]
    return markdown_table(["measure", "value"], rows)
