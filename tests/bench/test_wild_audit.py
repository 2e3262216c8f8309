"""bench/wild/audit.py: tier 0 and every family on a folder of modules, and its report. The
pinned wheels are not needed: the audit of a folder takes the same path after reading it."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from bench.wild import audit

KERNELS = Path(__file__).resolve().parents[1] / "kernels"


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    src = tmp_path_factory.mktemp("src")
    for name in ("rows_small_tile.py", "softmax_warps.py"):
        shutil.copy(KERNELS / name, src / name)
    (src / "notes.py").write_text("import torch\n\nSCALE = 2\n")  # no kernel: not audited
    out = src.parent / "audit.jsonl"
    assert audit.main(["run", "--dir", str(src), "--out", str(out), "--jobs", "1"]) == 0
    return src, out


def test_every_module_with_a_kernel_gets_tier0_and_every_family(audited: tuple[Path, Path]) -> None:
    from diagnosis.engine.proposers.rules import registered_families

    _, out = audited
    rows = {row["file"]: row for row in map(json.loads, out.read_text().splitlines())}
    assert set(rows) == {"rows_small_tile.py", "softmax_warps.py"}
    for row in rows.values():
        assert [r["what"] for r in row["runs"]] == ["tier0", *(f.value for f in registered_families())]
        assert all(r["status"] == "ok" for r in row["runs"]), row["runs"]
    # the whole-tile row of 64 keeps its block: only its warps are tuned
    (tuned,) = [
        rw["source"] for rw in rows["rows_small_tile.py"]["rewrites"] if rw["family"] == "launch_config"
    ]
    assert "BLOCK=64," in tuned and '"BLOCK":' not in tuned


def test_the_report_counts_rewrites_and_lists_what_changed(
    audited: tuple[Path, Path], tmp_path: Path
) -> None:
    _, out = audited
    summary = audit.report(out)
    assert summary["files"] == 2 and summary["failed"] == [] and summary["review_problems"] == {}
    assert summary["rewrites"]["launch_config"] == 2

    rows = [json.loads(line) for line in out.read_text().splitlines()]
    older = []
    for row in rows:
        kept = [dict(rw, source=rw["source"] + "# before\n") if row["file"] == "softmax_warps.py" else rw
                for rw in row["rewrites"] if not (row["file"] == "rows_small_tile.py" and rw["family"] == "launch_config")]  # fmt: skip
        older.append(dict(row, rewrites=kept))
    old = tmp_path / "old.jsonl"
    old.write_text("".join(json.dumps(row) + "\n" for row in older))
    diff = audit.report(out, against=old)
    assert diff["new"] == ["rows_small_tile.py :: launch_config"]
    assert "softmax_warps.py :: launch_config" in diff["changed"] and diff["gone"] == []


def test_a_rule_that_raises_or_hangs_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    from diagnosis.engine.proposers import rules

    def apply_family(family, source, inp):  # noqa: ANN001, ANN202
        if family.value == "launch_config":
            raise ValueError("no grid")
        if family.value == "hints":
            time.sleep(3)
        return None

    monkeypatch.setattr(rules, "apply_family", apply_family)
    monkeypatch.setattr(audit, "ALARM_S", 1)
    row = audit.audit_one(("k.py", (KERNELS / "rows_small_tile.py").read_text()))
    status = {r["what"]: r["status"] for r in row["runs"]}
    assert status["launch_config"].startswith("crash: ValueError: no grid at ")
    assert status["hints"] == "timeout"
    assert status["tier0"] == "ok" and row["rewrites"] == []
