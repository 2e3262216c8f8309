"""Render loop results as plain-text tables for people, and summarize a benchmark.

`rounds_table`, `operators_table` and `summary_table` are what a terminal or RESULTS.md shows;
the JSON that bench/run.py writes per operator is `diagnosis.engine.serialize.loop_result_json`.
Plain Python: no Django.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from typing import Any

from diagnosis.engine.records import LoopResult
from diagnosis.engine.serialize import rounded as _r
from diagnosis.engine.verdict import geomean

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
