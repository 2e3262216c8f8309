"""bench/run.py: the benchmark driver, on cpu with the real sandboxed executor.

On cpu nothing is timed, so every speedup is 1.0 or absent; what is checked is that a
directory of modules runs end to end, that the JSON and the table come out, that `--jobs`
and `--time-budget` behave, and that `--merge` combines partial results.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KERNELS = ROOT / "tests" / "kernels"


def _load_bench():
    spec = importlib.util.spec_from_file_location("bench_run", ROOT / "bench" / "run.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_run"] = module
    spec.loader.exec_module(module)
    return module


bench = _load_bench()


@pytest.fixture
def two_modules(tmp_path: Path) -> Path:
    d = tmp_path / "ops"
    d.mkdir()
    shutil.copy(ROOT / "tests" / "modules" / "correct_softmax.py", d / "01_softmax.py")
    shutil.copy(KERNELS / "vadd_unaligned.py", d / "02_vadd_unaligned.py")
    (d / "_helper.py").write_text("# not a module of the benchmark\n")
    return d


def _result(out: Path) -> dict:
    files = sorted(out.glob("*.json"))
    assert len(files) == 1, files
    return json.loads(files[0].read_text())


def test_discover_takes_directories_and_files_and_filters(two_modules: Path) -> None:
    files = bench.discover([str(two_modules)])
    assert [f.name for f in files] == ["01_softmax.py", "02_vadd_unaligned.py"]
    assert [f.name for f in bench.discover([str(two_modules)], only="02_")] == ["02_vadd_unaligned.py"]
    one = str(two_modules / "01_softmax.py")
    assert len(bench.discover([one, str(two_modules)])) == 2  # no duplicates


@pytest.mark.slow
def test_it_runs_a_directory_on_cpu_and_writes_the_json_and_the_table(
    two_modules: Path, tmp_path: Path
) -> None:
    out = tmp_path / "results"
    md = tmp_path / "RESULTS.md"
    rc = bench.main([str(two_modules), "--device", "cpu", "--rounds", "2", "--max-tier", "0",
                     "--jobs", "2", "--out", str(out), "--results-md", str(md), "--quiet"])  # fmt: skip
    assert rc == 0
    result = _result(out)
    ops = {o["name"]: o for o in result["operators"]}
    assert set(ops) == {"01_softmax", "02_vadd_unaligned"}
    for op in ops.values():
        assert op["status"] == "ok", op.get("error")
        assert op["improved"] is False and op["speedup_over_initial"] is None  # cpu: nothing timed
        assert op["stop_reason"] in ("round_budget", "nothing_left")
        assert op["device_s"] == 0.0 and op["wall_s"] > 0
        assert isinstance(op["rounds"], list)
    summary = result["summary"]
    assert summary["operators"] == 2 and summary["ran"] == 2 and summary["errors"] == 0
    assert summary["slower_than_initial"] == 0 and summary["incorrect"] == 0
    assert result["meta"]["device"] == "cpu" and result["meta"]["file"].endswith("-cpu.json")
    text = md.read_text()
    assert "| 01_softmax | ok |" in text and "## Method" in text and "noise floor" in text.lower()


@pytest.mark.slow
def test_one_operator_in_process(two_modules: Path, tmp_path: Path) -> None:
    out = tmp_path / "results"
    rc = bench.main([str(two_modules / "01_softmax.py"), "--device", "cpu", "--rounds", "0",
                     "--out", str(out), "--quiet"])  # fmt: skip
    assert rc == 0
    op = _result(out)["operators"][0]
    assert op["status"] == "ok" and op["rounds_used"] == 0
    assert (out / "RESULTS.md").exists()  # --out elsewhere: the table goes next to the JSON
    # the baseline's jobs say where their seconds went, phase by phase
    verify = op["jobs"]["verify"]
    phases = verify["phases"]
    assert {"import", "load", "build", "candidate", "process"} <= set(phases)
    assert 0 < sum(phases.values()) <= verify["wall_s"] * 1.01 + 0.01
    # the reference runs in a job of its own, before the candidate's
    assert "reference" in op["jobs"]["reference"]["phases"] and "reference" not in phases
    assert "Seconds by phase inside the jobs" in (out / "RESULTS.md").read_text()
    # and when each ran: what ran beside a noisy case can be read from the operators' timelines
    reference, job = op["timeline"]
    assert reference["job"] == "reference" and reference["start"] <= job["start"]
    assert job["job"] == "verify" and job["wall_s"] == verify["wall_s"] and job["phases"] == phases
    assert abs(job["start"] - time.time()) < 600


def test_the_final_check_shares_the_loops_triton_cache(
    two_modules: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The final check runs the best version the loop compiled (and autotuned) already: its
    job gets the Triton cache the loop's jobs used, removed once the operator is done."""
    seen: dict[str, list] = {"loop": [], "final": []}
    real_make, real_final = bench.make_executor, bench.final_check

    def make(*a, **kw):
        executor = real_make(*a, **kw)
        verify = executor.verify

        def recording(*va, **vkw):
            seen["loop"].append(executor.cache_dir)
            return verify(*va, **vkw)

        executor.verify = recording
        return executor

    def final(executor, result, args):
        seen["final"].append((executor.cache_dir, Path(executor.cache_dir).is_dir()))
        return real_final(executor, result, args)

    monkeypatch.setattr(bench, "make_executor", make)
    monkeypatch.setattr(bench, "final_check", final)
    rc = bench.main([str(two_modules / "02_vadd_unaligned.py"), "--device", "cpu", "--rounds", "0",
                     "--out", str(tmp_path / "results"), "--quiet"])  # fmt: skip
    assert rc == 0
    (shared,) = set(seen["loop"])
    ((cache, alive),) = seen["final"]
    assert shared is not None and cache == shared and alive  # the loop's cache, still there
    assert not Path(shared).exists()


def test_a_run_killed_after_its_first_operator_keeps_its_record(
    two_modules: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The JSON and the table are written after every operator: a device call killed at its
    limit in the middle of the second operator leaves the first one's record."""
    out = tmp_path / "results"
    real = bench.run_operator

    def killed_on_the_second(path: Path, *args, **kwargs) -> dict:
        if path.name.startswith("02_"):
            raise KeyboardInterrupt  # what the call's limit does to a run, as near as a test gets
        return real(path, *args, **kwargs)

    monkeypatch.setattr(bench, "run_operator", killed_on_the_second)
    with pytest.raises(KeyboardInterrupt):
        bench.main([str(two_modules), "--device", "cpu", "--rounds", "0", "--out", str(out), "--quiet"])
    result = _result(out)
    assert [(o["name"], o["status"]) for o in result["operators"]] == [
        ("01_softmax", "ok"),
        ("02_vadd_unaligned", "not_run"),
    ]
    assert "01_softmax" in (out / "RESULTS.md").read_text()


@pytest.mark.slow
def test_the_op_budget_is_the_rounds_and_starts_after_the_baseline(two_modules: Path, tmp_path: Path) -> None:
    """An operator whose initial verify takes longer than its whole --op-budget (a first
    compile of minutes on the H200) still gets a round; the baseline is recorded apart."""
    out = tmp_path / "results"
    # tiers 2 and 3 make a round last seconds (a compile job): the second never starts
    rc = bench.main([str(two_modules / "01_softmax.py"), "--device", "cpu", "--rounds", "3", "--max-tier", "3",
                     "--op-budget", "0.5", "--out", str(out), "--quiet", "--no-final-check"])  # fmt: skip
    assert rc == 0
    op = _result(out)["operators"][0]
    assert op["status"] == "ok", op.get("error")
    assert op["baseline_wall_s"] > 0.5  # the verify job alone outlasts the budget
    assert op["rounds_used"] == 1 and op["stop_reason"] == "op_budget", op["stop_detail"]
    assert "not counted" in op["stop_detail"]


def test_a_jobs_worker_gets_the_rounds_budget_and_the_suites_deadline_apart(tmp_path: Path) -> None:
    args = bench.parse_args(["--op-budget", "300", "--device", "cpu"])
    argv = bench.child_argv(Path("op.py"), args, tmp_path / "op.json", remaining=120.0)
    worker = bench.parse_args(argv[2:])
    # the operator's rounds keep their 300 s after its baseline; the suite's wall clock is 120 s
    assert (worker.op_budget, worker.deadline_in) == (300.0, 120.0)
    alone = bench.child_argv(Path("op.py"), args, tmp_path / "op.json", None)
    assert bench.parse_args(alone[2:]).deadline_in is None


def test_the_time_budget_stops_starting_operators(two_modules: Path, tmp_path: Path) -> None:
    out = tmp_path / "results"
    rc = bench.main([str(two_modules), "--device", "cpu", "--time-budget", "0", "--out", str(out), "--quiet"])
    assert rc == 0
    result = _result(out)
    assert [o["status"] for o in result["operators"]] == ["not_run", "not_run"]
    assert result["summary"]["not_run"] == 2
    assert "Not run (time budget): 01_softmax, 02_vadd_unaligned" in (out / "RESULTS.md").read_text()


def test_longest_first_starts_unknown_then_longest_operators() -> None:
    files = [Path(f"/s/{n}.py") for n in ("01_a", "02_b", "03_c", "04_d", "05_e")]
    previous = {"operators": [
        {"name": "01_a", "status": "ok", "wall_s": 10.0},
        {"name": "02_b", "status": "ok", "wall_s": 120.0},
        {"name": "03_c", "status": "error", "wall_s": 300.0},  # failed: its wall says nothing
        {"name": "05_e", "status": "ok", "wall_s": 45.5},
    ]}  # fmt: skip
    order = [f.stem for f in bench.longest_first(files, previous)]
    assert order == ["03_c", "04_d", "02_b", "05_e", "01_a"]


def test_longest_first_keeps_the_result_in_file_order(two_modules: Path, tmp_path: Path) -> None:
    previous = tmp_path / "prev.json"
    previous.write_text(json.dumps({"operators": [
        {"name": "01_softmax", "status": "ok", "wall_s": 1.0},
        {"name": "02_vadd_unaligned", "status": "ok", "wall_s": 9.0},
    ]}))  # fmt: skip
    files = bench.discover([str(two_modules)])
    assert [f.stem for f in bench.longest_first(files, json.loads(previous.read_text()))] == [
        "02_vadd_unaligned", "01_softmax"]  # fmt: skip
    out = tmp_path / "results"
    rc = bench.main([str(two_modules), "--device", "cpu", "--time-budget", "0", "--longest-first", str(previous),
                     "--out", str(out), "--quiet"])  # fmt: skip
    assert rc == 0
    result = _result(out)
    assert [o["name"] for o in result["operators"]] == ["01_softmax", "02_vadd_unaligned"]
    assert result["meta"]["longest_first"] == str(previous)


def _op(name: str, up: float | None, status: str = "ok", device_s: float = 10.0) -> dict:
    if status != "ok":
        return {"name": name, "status": status}
    return {"name": name, "status": "ok", "speedup_over_initial": up, "speedup_over_eager": up,
            "pct_sol": 40.0, "initial_pct_sol": 20.0, "improved": up > 1.0, "rounds_used": 3,
            "winning_tiers": [1] if up > 1.0 else [], "device_s": device_s, "wall_s": device_s,
            "stop_reason": "nothing_left", "final_check": "ok" if up > 1.0 else "skipped"}  # fmt: skip


def test_merge_combines_partial_results(tmp_path: Path) -> None:
    meta = {"date": "2026-11-30", "device": "cuda", "device_name": "NVIDIA H200", "label": "nvidia-h200",
            "rounds": 15, "wall_s": 100.0}  # fmt: skip
    part_a = bench.build_result([_op("01_a", 2.0), _op("02_b", 1.0)], ["03_c", "04_d"],
                                {**meta, "only": "^0[12]_", "jobs": 2, "op_budget": 110.0})  # fmt: skip
    part_b = bench.build_result([_op("03_c", 8.0), _op("04_d", 3.0)], ["01_a"],
                                {**meta, "only": "^0[34]_", "jobs": 1, "op_budget": 100.0})  # fmt: skip
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(part_a))
    b.write_text(json.dumps(part_b))
    out = tmp_path / "merged"
    md = tmp_path / "RESULTS.md"
    assert bench.main(["--merge", str(a), str(b), "--out", str(out), "--results-md", str(md)]) == 0

    merged = _result(out)
    ops = {o["name"]: o for o in merged["operators"]}
    assert [o["name"] for o in merged["operators"]] == ["01_a", "02_b", "03_c", "04_d"]
    assert ops["01_a"]["status"] == "ok"  # a run beats "not run" whichever part comes later
    s = merged["summary"]
    assert s["ran"] == 4 and s["not_run"] == 0
    assert s["geomean_speedup_over_initial"] == pytest.approx((2.0 * 1.0 * 8.0 * 3.0) ** 0.25, rel=1e-3)
    assert s["median_speedup_over_initial"] == pytest.approx(2.5)
    assert (s["above_2x"], s["above_5x"], s["slower_than_initial"]) == (3, 1, 0)
    assert s["device_s"] == pytest.approx(40.0)
    assert merged["meta"]["merged_from"] == [str(a), str(b)] and merged["meta"]["wall_s"] == 200.0
    # the parts' own filters do not describe the merge; what differed between them is listed
    assert merged["meta"]["only"] is None and merged["meta"]["jobs"] == [1, 2]
    assert merged["meta"]["op_budget"] == 110.0
    text = md.read_text()
    assert "| 03_c | ok | 8.00x |" in text and "matching" not in text
    assert "; runner wall 200.0 s." in text  # the parts' runner walls summed: the suite's time
    both = bench.build_result([_op("01_a", 2.0)], [], {**meta, "tree": "c" * 40, "commit": "abc1234",
                                                      "commands": ["run a", "run b"]})  # fmt: skip
    assert "code tree `cccccccccccc` (commit `abc1234`); runner wall 100.0 s over 2 calls." in (
        bench.render_results_md(both, "x.json")
    )


def test_merge_puts_the_notes_after_the_summary_and_names_the_json_it_wrote(tmp_path: Path) -> None:
    meta = {"date": "2026-11-30", "device": "cuda", "device_name": "NVIDIA H200", "label": "nvidia-h200",
            "rounds": 1, "wall_s": 10.0}  # fmt: skip
    part = tmp_path / "a.json"
    part.write_text(json.dumps(bench.build_result([_op("01_a", 2.0)], [], dict(meta))))
    notes = tmp_path / "notes.md"
    notes.write_text("Re-run after the recorder fix: see `elsewhere.json`.\n")
    out, md = tmp_path / "out", tmp_path / "RESULTS.md"
    argv = ["--merge", str(part), "--out", str(out), "--results-md", str(md), "--notes", str(notes)]
    assert bench.main(argv) == 0
    text = md.read_text()
    written = out / "2026-11-30-nvidia-h200.json"
    assert written.is_file()
    assert f"Latest: `{written}`" in text  # outside the repository: the path as it is
    summary, notes_at, per_op = text.index("## Summary"), text.index("## Notes"), text.index("## Per operator")
    assert summary < notes_at < per_op
    assert "Re-run after the recorder fix: see `elsewhere.json`." in text[notes_at:per_op]
    assert "## Notes" not in bench.render_results_md(json.loads(written.read_text()), "x.json")
    assert bench._shown(ROOT / "bench" / "results" / "x.json") == "bench/results/x.json"


def test_the_source_tree_id_names_the_code_whatever_head_says(tmp_path: Path) -> None:
    """A device call runs on a copy of the working tree whose .git may be an older commit: the
    tree id of the files is what identifies the code measured."""
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True,
                              text=True).stdout.strip()  # fmt: skip

    git("init", "-q")
    (tmp_path / ".gitignore").write_text("out/\n")
    (tmp_path / "kernel.py").write_text("A = 1\n")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    clean = bench.source_tree(tmp_path)
    assert clean == git("rev-parse", "HEAD^{tree}")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "result.json").write_text("{}")  # ignored: not code
    assert bench.source_tree(tmp_path) == clean
    (tmp_path / "kernel.py").write_text("A = 2\n")
    (tmp_path / "new.py").write_text("B = 1\n")  # untracked code counts
    changed = bench.source_tree(tmp_path)
    assert changed not in (None, clean)
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "two")
    assert git("rev-parse", "HEAD^{tree}") == changed
    assert git("status", "--porcelain") == ""  # the probe's index left the repository's alone


def test_merged_parts_of_different_code_say_so(tmp_path: Path) -> None:
    meta = {"date": "2026-11-30", "device": "cuda", "device_name": "NVIDIA H200", "label": "nvidia-h200",
            "rounds": 15, "wall_s": 100.0}  # fmt: skip
    part_a = bench.build_result([_op("01_a", 2.0)], [], {**meta, "tree": "a" * 40})
    part_b = bench.build_result([_op("02_b", 1.0)], [], {**meta, "tree": "b" * 40})
    same = bench.merge([part_a, dict(part_a)])
    assert same["meta"]["tree"] == "a" * 40 and "trees" not in same["meta"]
    mixed = bench.merge([part_a, part_b])
    assert mixed["meta"]["tree"] is None and mixed["meta"]["trees"] == ["a" * 40, "b" * 40]
    assert "code trees `aaaaaaaaaaaa`, `bbbbbbbbbbbb` (mixed)" in bench.render_results_md(mixed, "x.json")


def test_a_merge_of_a_merge_keeps_every_call_tree_and_round_budget() -> None:
    """A table merged from earlier parts, merged again with later runs, still lists every call,
    every tree measured and every round budget (the header read "3 rounds over 3 calls" for a
    table of four calls at 3 and 5 rounds)."""
    meta = {"date": "2026-12-01", "device": "cuda", "device_name": "NVIDIA H200", "wall_s": 10.0}
    a = bench.build_result([_op("01_a", 2.0)], [], {**meta, "rounds": 3, "tree": "a" * 40, "command": "run a"})
    b = bench.build_result([_op("02_b", 1.0)], [], {**meta, "rounds": 3, "tree": "b" * 40, "command": "run b"})
    c = bench.build_result([_op("01_a", 4.0)], [], {**meta, "rounds": 5, "tree": "c" * 40, "command": "run c"})
    merged = bench.merge([bench.merge([a, b]), c])
    assert merged["meta"]["commands"] == ["run a", "run b", "run c"]
    assert merged["meta"]["trees"] == ["a" * 40, "b" * 40, "c" * 40] and merged["meta"]["tree"] is None
    assert merged["meta"]["rounds"] == "3/5"
    assert {o["name"]: o["speedup_over_initial"] for o in merged["operators"]}["01_a"] == pytest.approx(4.0)
    text = bench.render_results_md(merged, "x.json")
    assert "3/5 rounds per operator" in text and "over 3 calls" in text


def test_merged_from_names_the_parts_as_given(tmp_path: Path) -> None:
    """Parts written under one name in different directories stay told apart."""
    meta = {"date": "2026-11-30", "device": "cuda", "device_name": "NVIDIA H200", "rounds": 15,
            "file": "2026-11-30-nvidia-h200.json"}  # fmt: skip
    part_a = bench.build_result([_op("01_a", 2.0)], [], dict(meta))
    part_b = bench.build_result([_op("02_b", 1.0)], [], dict(meta))
    assert bench.merge([part_a, part_b])["meta"]["merged_from"] == [meta["file"]] * 2
    named = bench.merge([part_a, part_b], names=["parts/part-a.json", "parts/part-b.json"])
    assert named["meta"]["merged_from"] == ["parts/part-a.json", "parts/part-b.json"]


def test_a_merge_names_the_commit_that_holds_the_measured_tree(tmp_path: Path) -> None:
    """Device runs record their copy's base commit as `<base>-dirty`; the merge looks the
    recorded tree id up among the commits and names the one that holds it."""
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True,
                              text=True).stdout.strip()  # fmt: skip

    git("init", "-q")
    (tmp_path / "kernel.py").write_text("A = 1\n")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "base")
    base = git("rev-parse", "--short=7", "HEAD")
    (tmp_path / "kernel.py").write_text("A = 2\n")
    measured = bench.source_tree(tmp_path)  # what a device call on this working tree records
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "the measured code")
    holder = git("rev-parse", "--short=7", "HEAD")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "later")

    meta = {"commit": f"{base}-dirty", "tree": measured}
    bench.name_commit(meta, tmp_path)
    assert bench.commit_of_tree(measured, tmp_path) == holder
    assert meta["commit"] == holder and meta["commit_recorded"] == f"{base}-dirty"
    assert f"commit {holder} holds the measured tree {measured[:12]}" in meta["commit_note"]

    unknown = {"commit": f"{base}-dirty", "tree": "f" * 40}
    bench.name_commit(unknown, tmp_path)
    assert unknown["commit"] == f"{base}-dirty" and "no commit holds" in unknown["commit_note"]
    same = {"commit": holder, "tree": measured}
    bench.name_commit(same, tmp_path)
    assert same == {"commit": holder, "tree": measured}  # nothing to correct
