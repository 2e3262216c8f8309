"""What ran beside each timing window of a benchmark run with `--jobs N`.

Usage:
  python bench/overlaps.py RESULT.json [--op NAME]

Each operator record carries a `timeline` (bench/run.py): every child job with its start
(epoch seconds), wall seconds and seconds by phase. A job's phases run in a known order (the
interpreter's start-up, imports, the module's load, the correctness runs, then the timing),
so each job can be laid out as segments, and every verify job's timing window compared with
what the other operators' jobs were doing at that time. Written to find out why a short case
timed slower on the H200 when another operator ran on the other GPU (bench/results,
2026-11-30-af00bc9-notes.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

# The order phases happen in inside a job (runner/child.py, runner/childlib/*): 'process' is
# mostly the interpreter's start-up, so it goes first; the exit after it is short.
PHASE_ORDER = ("process", "import", "load", "build", "reference", "candidate", "sensitivity", "timing",
               "compile", "ncu")  # fmt: skip

Segment = tuple[str, float, float]  # phase, start, end (epoch seconds)


def segments(job: dict[str, Any]) -> list[Segment]:
    """The job's phases laid end to end from its start, in PHASE_ORDER (others after them)."""
    phases = job.get("phases") or {}
    order = [p for p in PHASE_ORDER if p in phases] + sorted(p for p in phases if p not in PHASE_ORDER)
    t = float(job.get("start") or 0.0)
    out = []
    for name in order:
        seconds = float(phases[name])
        out.append((name, t, t + seconds))
        t += seconds
    return out


def timing_windows(op: dict[str, Any]) -> list[tuple[int, float, float]]:
    """(job index, start, end) of every verify job's timing phase."""
    windows = []
    for i, job in enumerate(op.get("timeline") or ()):
        if job.get("job") != "verify":
            continue
        for name, start, end in segments(job):
            if name == "timing" and end > start:
                windows.append((i, start, end))
    return windows


def beside(ops: list[dict[str, Any]], name: str, start: float, end: float) -> dict[str, dict[str, float]]:
    """Other operators' seconds by phase inside [start, end]: {operator: {phase: seconds}}."""
    out: dict[str, dict[str, float]] = {}
    for other in ops:
        if other.get("name") == name:
            continue
        for job in other.get("timeline") or ():
            for phase, s, e in segments(job):
                overlap = min(e, end) - max(s, start)
                if overlap > 0:
                    key = f"{job.get('job')}:{phase}"
                    row = out.setdefault(other["name"], {})
                    row[key] = row.get(key, 0.0) + overlap
    return out


def report(result: dict[str, Any], only: str | None = None) -> str:
    ops = [o for o in result.get("operators", ()) if o.get("timeline")]
    if not ops:
        return "no operator in this result has a job timeline (recorded since d63aef5)"
    t0 = min(float(j.get("start") or 0.0) for o in ops for j in o["timeline"])
    lines = []
    for op in ops:
        if only and op["name"] != only:
            continue
        for index, start, end in timing_windows(op):
            others = beside(ops, op["name"], start, end)
            text = "; ".join(
                f"{name} " + ", ".join(f"{k} {v:.1f} s" for k, v in sorted(row.items(), key=lambda kv: -kv[1]))
                for name, row in others.items()
            )
            lines.append(
                f"{op['name']} job {index} timing {start - t0:.1f}-{end - t0:.1f} s: "
                + (f"beside {text}" if text else "alone")
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("result", help="a bench/run.py result JSON")
    p.add_argument("--op", default=None, help="only this operator's timing windows")
    args = p.parse_args(argv)
    print(report(json.loads(Path(args.result).read_text()), args.op))
    return 0


if __name__ == "__main__":
    sys.exit(main())
