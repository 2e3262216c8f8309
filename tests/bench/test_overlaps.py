"""bench/overlaps.py: what ran beside each timing window of a --jobs N run."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("bench_overlaps", ROOT / "bench" / "overlaps.py")
overlaps = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(overlaps)  # type: ignore[union-attr]


def _job(kind: str, start: float, phases: dict[str, float]) -> dict:
    return {"job": kind, "start": start, "wall_s": sum(phases.values()), "ok": True, "phases": phases}


def _result() -> dict:
    # A: a verify job from t=100: process 1, import 2, candidate 3, timing 2 -> timing at 106-108
    a = {"name": "A", "timeline": [
        _job("verify", 100.0, {"timing": 2.0, "candidate": 3.0, "import": 2.0, "process": 1.0})]}
    # B: a compile job 105-109 (import 105-107, compile 107-109), then a verify job from 109
    b = {"name": "B", "timeline": [_job("compile", 105.0, {"compile": 2.0, "import": 2.0}),
                                   _job("verify", 109.0, {"process": 0.5, "timing": 1.0})]}
    return {"operators": [a, b, {"name": "C", "status": "not_run"}]}  # fmt: skip


def test_phases_are_laid_out_in_the_order_a_job_runs_them() -> None:
    job = {"job": "verify", "start": 10.0, "phases": {"timing": 2.0, "import": 1.0, "process": 0.5, "odd": 1.0}}
    assert overlaps.segments(job) == [
        ("process", 10.0, 10.5), ("import", 10.5, 11.5), ("timing", 11.5, 13.5), ("odd", 13.5, 14.5)
    ]


def test_a_timing_window_lists_what_the_other_operators_were_doing() -> None:
    result = _result()
    ops = result["operators"]
    assert overlaps.timing_windows(ops[0]) == [(0, 106.0, 108.0)]
    # B imported 106-107 and compiled 107-108 during A's timing
    assert overlaps.beside(ops, "A", 106.0, 108.0) == {"B": {"compile:import": pytest.approx(1.0),
                                                             "compile:compile": pytest.approx(1.0)}}  # fmt: skip
    text = overlaps.report(result)
    assert "A job 0 timing 6.0-8.0 s: beside B" in text
    assert "B job 1 timing 9.5-10.5 s: alone" in text


def test_the_command_reads_a_result_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps(_result()))
    assert overlaps.main([str(path), "--op", "B"]) == 0
    out = capsys.readouterr().out
    assert "B job 1" in out and "A job" not in out
    path.write_text(json.dumps({"operators": [{"name": "X", "status": "ok"}]}))
    overlaps.main([str(path)])
    assert "no operator in this result has a job timeline" in capsys.readouterr().out
