"""Run the optimization loop over a directory of kernel modules and record what it achieved.

Usage:
  python bench/run.py [DIR_OR_FILES...] --device cuda --rounds 15 --out bench/results
                      [--jobs N] [--only PATTERN] [--time-budget SECONDS]
  python bench/run.py --merge PART.json [PART.json ...] --out bench/results

Each module goes through `diagnosis.engine.loop.run_loop` with the rules proposer and the
sandboxed executor, then (when the loop changed it) one final verification of the best
version on fresh seeds. The result is `<out>/<date>-<device>.json` (per operator: speedup over
the initial kernel and over PyTorch eager, geomean over its cases; final %SOL; rounds; tier
of the winning rounds; device seconds) and a table in RESULTS.md.

`--jobs N` runs N operators at once, each in its own process pinned to one GPU with
CUDA_VISIBLE_DEVICES=i (machines with several GPUs). Two operators on one GPU, even taking
turns under a lock for their device work, were tried on the H200 (2026-11-30): the other
operator's imports and compiles on the host slowed launch-bound cases up to 3x (a 17 us fixed
launch timed at 54 us), so each operator has its GPU to itself. `--time-budget` stops
starting operators once that many seconds have passed and lists the ones not run. `--merge` combines partial results (from split device
calls) into one result and table.

Needs only the engine and the sandbox child: no Django, no database.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime as dt
import json
import os
import queue
import re
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as `python bench/run.py` from anywhere
    sys.path.insert(0, str(ROOT))

from diagnosis.engine import devices, report, serialize  # noqa: E402
from diagnosis.engine.evidence import Tier  # noqa: E402
from diagnosis.engine.loop import run_loop  # noqa: E402
from diagnosis.engine.records import LoopConfig, LoopResult, NullObserver, RoundRecord, StopReason  # noqa: E402
from runner.execute import Executor  # noqa: E402
from runner.sandbox import Limits  # noqa: E402

SUITE = ROOT / "bench" / "suite"
DEFAULT_OUT = ROOT / "bench" / "results"
RESULTS_MD = ROOT / "bench" / "RESULTS.md"
FINAL_CHECK_SEEDS = (1001, 1002)
SCHEMA = 1


# --- discovering modules --------------------------------------------------------------------


def discover(paths: list[str], only: str | None = None) -> list[Path]:
    """Module files from directories (every *.py but __init__ and _private) and plain files."""
    files: list[Path] = []
    for raw in paths or [str(SUITE)]:
        p = Path(raw)
        if p.is_dir():
            files += sorted(f for f in p.glob("*.py") if not f.name.startswith("_"))
        elif p.is_file():
            files.append(p)
        else:
            raise SystemExit(f"no such file or directory: {raw}")
    if only:
        pattern = re.compile(only)
        files = [f for f in files if pattern.search(f.name)]
    seen: set[Path] = set()
    out = []
    for f in files:
        r = f.resolve()
        if r not in seen:
            seen.add(r)
            out.append(r)
    return out


def op_name(path: Path) -> str:
    return path.stem


# --- one operator -----------------------------------------------------------------------------


class BenchObserver(NullObserver):
    """Prints one line per round and stops the loop at the operator's deadline."""

    def __init__(self, name: str, deadline: float | None, quiet: bool = False) -> None:
        self.name = name
        self.deadline = deadline
        self.quiet = quiet
        self.stopped_by_deadline = False

    def round_finished(self, index: int, record: RoundRecord) -> None:
        if self.quiet:
            return
        family = (
            record.proposal.family
            if record.proposal
            else (record.hypothesis.family if record.hypothesis else "-")
        )
        speed = f"{record.speedup:.3f}x" if record.speedup else "-"
        print(
            f"  [{self.name}] round {index}: tier {int(record.tier_reached)} {family} -> {record.verdict} {speed} "
            f"({record.cost.wall_s:.1f} s, device {record.cost.device_s:.1f} s) {record.reason[:100]}",
            flush=True,
        )

    def should_stop(self) -> bool:
        if self.deadline is not None and time.monotonic() > self.deadline:
            self.stopped_by_deadline = True
            return True
        return False


def make_executor(device: str, target: str | None, job_timeout: float | None) -> Executor:
    limits = Limits(wall_s=job_timeout) if job_timeout else None
    return Executor(device, target, python=sys.executable, limits=limits)


def run_operator(path: Path, args: argparse.Namespace, deadline: float | None = None) -> dict[str, Any]:
    """Run the loop on one module and return its operator record (never raises)."""
    name = op_name(path)
    t0 = time.monotonic()
    record: dict[str, Any] = {"name": name, "file": str(path), "status": "error"}
    # one Triton cache for the operator's jobs, the final check's included: it runs the best
    # version, which the loop compiled and autotuned already (a released fla kernel's verify
    # spent 160 s benchmarking its autotuner's 30 configs again in a fresh cache)
    cache = tempfile.TemporaryDirectory(prefix="kernelopt-op-")
    try:
        source = path.read_text()
        executor = make_executor(args.device, args.target, args.job_timeout)
        executor.cache_dir = str(Path(cache.name) / "triton-cache")
        config = LoopConfig(
            round_budget=args.rounds,
            sol_stop_fraction=args.sol_stop,
            max_tier=Tier(args.max_tier),
            device=args.device,
            target=args.target,
            proposer="rules",
            patience=args.patience,
            # --op-budget is the rounds' budget: the initial version's verify (a first compile
            # can take minutes: a 2^20-element block on the H200) is recorded apart, as
            # baseline_wall_s, and never leaves an operator without rounds
            round_time_budget_s=args.op_budget,
            compile_timeout_s=args.compile_timeout,
            verify_options={
                "timed_case_seeds": args.timed_case_seeds,
                "rounds": args.timing_rounds,
                "warmup_ms": args.warmup_ms,
                "rep_ms": args.rep_ms,
            },
        )
        # the suite's --time-budget is wall clock, baseline included
        observer = BenchObserver(name, deadline, quiet=args.quiet)
        result = run_loop(source, executor=executor, config=config, observer=observer)
        record.update(serialize.loop_result_json(result, sources=False, rounds=True))
        record["best_source"] = result.best_source if result.improved else None
        record["device_name"] = result.device_name
        if result.initial is None:
            record["status"] = "initial_failed"
            record["final_check"] = "skipped"
        else:
            record["status"] = "ok"
            record["final_check"], extra_s = final_check(executor, result, args)
            record["device_s"] = round((record.get("device_s") or 0.0) + extra_s, 3)
        record["jobs"] = job_summary(executor)
        record["timeline"] = job_timeline(executor)
        if result.stop_reason is StopReason.TIME_BUDGET:  # the name results files have used for it
            record["stop_reason"] = "op_budget"
        elif observer.stopped_by_deadline:  # the loop says 'cancelled'; say whose budget it was
            record["stop_reason"] = "time_budget"
            record["stop_detail"] = (record.get("stop_detail") or "") + " (the suite's --time-budget)"
    except Exception as exc:  # an operator that breaks the harness must not stop the suite
        record["error"] = f"{type(exc).__name__}: {exc}"
        record["traceback"] = traceback.format_exc()[-4000:]
    finally:
        cache.cleanup()
    record["wall_s"] = round(time.monotonic() - t0, 3)
    return record


def job_summary(executor: Executor) -> dict[str, dict[str, Any]]:
    """Child jobs by kind: how many, their wall seconds (what the device time went to) and
    those seconds by phase (`runner.childlib.phases`, plus 'process' for start-up and exit)."""
    out: dict[str, dict[str, Any]] = {}
    for c in executor.costs:
        row = out.setdefault(c.job, {"n": 0, "wall_s": 0.0, "phases": {}})
        row["n"] += 1
        row["wall_s"] = round(row["wall_s"] + c.wall_s, 3)
        for name, seconds in c.phases.items():
            row["phases"][name] = round(row["phases"].get(name, 0.0) + seconds, 3)
    return out


def job_timeline(executor: Executor) -> list[dict[str, Any]]:
    """Every child job in order: kind, start (epoch seconds), wall seconds and phases. With
    --jobs N the operators' timelines show what ran beside a job (a slow case's timing window
    is the end of its verify job: `timing` is that job's last phase)."""
    return [
        {"job": c.job, "start": round(c.started_at, 3), "wall_s": c.wall_s, "ok": c.ok, "phases": dict(c.phases)}
        for c in executor.costs
    ]


def phase_totals(ops: list[dict[str, Any]]) -> dict[str, float]:
    """Device seconds by phase over every operator's jobs, largest first."""
    totals: dict[str, float] = {}
    for o in ops:
        for row in (o.get("jobs") or {}).values():
            for name, seconds in (row.get("phases") or {}).items():
                totals[name] = totals.get(name, 0.0) + seconds
    return {k: round(v, 1) for k, v in sorted(totals.items(), key=lambda kv: -kv[1])}


def final_check(executor: Executor, result: LoopResult, args: argparse.Namespace) -> tuple[str, float]:
    """Verify the best version once more on seeds the loop never used: 'ok' or 'incorrect'.

    The loop verified every accepted proposal already; this guards the reported figures
    against a candidate that passed by luck of the seeds. The initial version is not checked
    again (the loop's baseline verified it).
    """
    if not result.improved or args.no_final_check:
        return "skipped", 0.0
    with tempfile.TemporaryDirectory(prefix="kernelopt-final-") as tmp:
        path = Path(tmp) / "best.py"
        path.write_text(result.best_source)
        initial = Path(tmp) / "initial.py"  # the reference: never the promoted candidate's own Model
        initial.write_text(result.initial_source)
        outcome = executor.verify(str(path), seeds=list(FINAL_CHECK_SEEDS), time=False, reference=str(initial))
    return ("ok" if outcome.ok and outcome.passed else "incorrect"), outcome.device_s


# --- many operators ---------------------------------------------------------------------------


MIN_OPERATOR_S = 45.0  # less than this left of --time-budget: do not start another operator


def child_argv(path: Path, args: argparse.Namespace, out_json: Path, remaining: float | None) -> list[str]:
    argv = [
        sys.executable,
        str(Path(__file__).resolve()),
        str(path),
        "--device", args.device,
        "--rounds", str(args.rounds),
        "--sol-stop", str(args.sol_stop),
        "--max-tier", str(args.max_tier),
        "--patience", str(args.patience),
        "--timed-case-seeds", str(args.timed_case_seeds),
        "--timing-rounds", str(args.timing_rounds),
        "--warmup-ms", str(args.warmup_ms),
        "--rep-ms", str(args.rep_ms),
        "--one-json", str(out_json),
    ]  # fmt: skip
    if args.target:
        argv += ["--target", args.target]
    if args.job_timeout:
        argv += ["--job-timeout", str(args.job_timeout)]
    if args.compile_timeout:
        argv += ["--compile-timeout", str(args.compile_timeout)]
    if args.op_budget:  # the rounds' budget, after the operator's baseline
        argv += ["--op-budget", str(args.op_budget)]
    if remaining is not None:  # what is left of the suite's --time-budget: wall clock, baseline included
        argv += ["--deadline-in", str(max(1.0, remaining))]
    if args.no_final_check:
        argv.append("--no-final-check")
    if args.quiet:
        argv.append("--quiet")
    return argv


def run_in_subprocess(path: Path, args: argparse.Namespace, gpu: int | None, remaining: float | None) -> dict:
    """One operator in its own process, pinned to one GPU; its record comes back as JSON."""
    with tempfile.TemporaryDirectory(prefix="kernelopt-bench-") as tmp:
        out_json = Path(tmp) / "op.json"
        env = dict(os.environ)
        if gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = str(gpu)
        proc = subprocess.run(child_argv(path, args, out_json, remaining), env=env, check=False)
        if out_json.exists():
            return json.loads(out_json.read_text())
        return {"name": op_name(path), "file": str(path), "status": "error",
                "error": f"the operator's process exited with {proc.returncode} and wrote no result"}  # fmt: skip


def longest_first(files: list[Path], previous: dict[str, Any]) -> list[Path]:
    """`files` in the order to start them: by the wall seconds each operator took in a previous
    result, longest first, those it does not list (cost unknown) before all. With --jobs N the
    long operators then share the GPUs from the start and short ones fill the end, instead of one
    long operator running alone at the end (in the fa716f3 run 36_conv1x1, started last in
    file order, ran its last 50 s alone and 37 was left for a third call: 905 s over three
    parts; replayed on its operators' walls, longest first in two parts takes 864 s)."""
    walls = {
        o["name"]: float(o["wall_s"])
        for o in previous.get("operators", [])
        if o.get("status") == "ok" and o.get("wall_s") is not None
    }
    return sorted(files, key=lambda f: (op_name(f) in walls, -walls.get(op_name(f), 0.0)))


def run_all(
    files: list[Path],
    args: argparse.Namespace,
    on_record: Callable[[list[dict], list[str]], object] | None = None,
) -> tuple[list[dict], list[str]]:
    """Run every module (N at a time with --jobs N); returns records and the names not run,
    in the order of `files` whatever order they ran in. `on_record` is called after each
    operator with the records so far and the names not yet run."""
    order = [op_name(p) for p in files]

    def so_far() -> None:
        if on_record is not None:
            on_record([records[n] for n in order if n in records], [n for n in order if n not in records])

    if args.longest_first:
        files = longest_first(files, json.loads(Path(args.longest_first).read_text()))
    start = time.monotonic()
    budget_end = start + args.time_budget if args.time_budget is not None else None
    records: dict[str, dict] = {}
    not_run: list[str] = []
    lock = threading.Lock()

    def over_budget() -> bool:
        return budget_end is not None and time.monotonic() > budget_end

    if args.jobs <= 1:
        for path in files:
            if over_budget():
                not_run.append(op_name(path))
                continue
            print(f"[{op_name(path)}] start ({time.monotonic() - start:.0f} s elapsed)", flush=True)
            rec = run_operator(path, args, deadline=budget_end)
            records[rec["name"]] = rec
            print(_one_line(rec), flush=True)
            so_far()
        return [records[n] for n in order if n in records], [n for n in order if n in not_run]

    gpus: queue.Queue[int | None] = queue.Queue()
    for i in range(args.jobs):
        gpus.put(i if args.device == "cuda" else None)

    def work(path: Path) -> None:
        gpu = gpus.get()
        try:
            with lock:
                # an operator that could not finish its baseline and one round is left out
                # rather than reported at 1.00x
                left = None if budget_end is None else budget_end - time.monotonic()
                if over_budget() or (left is not None and left < MIN_OPERATOR_S):
                    not_run.append(op_name(path))
                    return
                print(
                    f"[{op_name(path)}] start on gpu {gpu} ({time.monotonic() - start:.0f} s elapsed)",
                    flush=True,
                )
            remaining = None if budget_end is None else budget_end - time.monotonic() + args.op_budget_grace
            rec = run_in_subprocess(path, args, gpu, remaining)
            with lock:
                records[rec["name"]] = rec
                print(_one_line(rec), flush=True)
                so_far()
        finally:
            gpus.put(gpu)

    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        list(pool.map(work, files))
    return [records[n] for n in order if n in records], [n for n in order if n in not_run]


def _one_line(rec: dict) -> str:
    if rec.get("status") != "ok":
        return f"[{rec['name']}] {rec.get('status')}: {(rec.get('error') or '')[:300]}"

    def x(v: float | None, fmt: str = ".2f", unit: str = "x") -> str:
        return "-" if v is None else f"{v:{fmt}}{unit}"

    jobs = ", ".join(
        f"{k} {v['n']}x{v['wall_s'] / max(1, v['n']):.1f}s" for k, v in (rec.get("jobs") or {}).items()
    )
    return (
        f"[{rec['name']}] {x(rec.get('speedup_over_initial'))} over initial, "
        f"{x(rec.get('speedup_over_eager'))} over eager, %SOL {x(rec.get('initial_pct_sol'), '.1f', '')} -> "
        f"{x(rec.get('pct_sol'), '.1f', '')}, {rec.get('rounds_used')} rounds, winning tiers "
        f"{rec.get('winning_tiers')}, device {rec.get('device_s') or 0:.1f} s, wall {rec.get('wall_s') or 0:.1f} s, "
        f"stop {rec.get('stop_reason')}, final check {rec.get('final_check')}; jobs: {jobs}"
    )


# --- results files ----------------------------------------------------------------------------


def device_label(device: str, records: list[dict]) -> str:
    names = [r.get("device_name") for r in records if r.get("device_name")]
    if device != "cpu" and names:
        return re.sub(r"[^a-z0-9]+", "-", names[0].lower()).strip("-")
    return device


def build_result(records: list[dict], not_run: list[str], meta: dict[str, Any]) -> dict[str, Any]:
    operators = list(records) + [{"name": n, "status": "not_run"} for n in not_run]
    return {"schema": SCHEMA, "meta": meta, "operators": operators, "summary": report.summarize(operators)}


def merge(parts: list[dict[str, Any]], names: list[str] | None = None) -> dict[str, Any]:
    """Combine partial results: an operator that ran in any part replaces one not run elsewhere;
    between two runs of one operator the later part wins. `names`: the parts' files as given
    (each part's own `file` is the name it was written under, the same for every part of a
    run whose parts went to different directories)."""
    if not parts:
        raise ValueError("nothing to merge")
    by_name: dict[str, dict] = {}
    order: list[str] = []
    for part in parts:
        for op in part.get("operators", []):
            name = op["name"]
            if name not in by_name:
                order.append(name)
                by_name[name] = op
            elif op.get("status") != "not_run" or by_name[name].get("status") == "not_run":
                by_name[name] = op
    metas = [p.get("meta", {}) for p in parts]
    meta = {k: v for k, v in metas[0].items() if k not in ("command", "commands", "tree", "trees")}
    meta["merged_from"] = list(names) if names else [m.get("file", "") for m in metas]
    # a part that is itself a merge brings its own parts' commands, trees and round budgets
    meta["commands"] = [c for m in metas for c in (m.get("commands") or [m.get("command")]) if c]
    rounds = sorted({r for m in metas for r in _listed(m.get("rounds"))})
    meta["rounds"] = rounds[0] if len(rounds) == 1 else "/".join(map(str, rounds))
    meta["wall_s"] = round(sum(m.get("wall_s") or 0.0 for m in metas), 1)
    meta["only"] = None  # each part's own filter is in its command; the merge covers them all
    budgets = [m["op_budget"] for m in metas if m.get("op_budget")]
    meta["op_budget"] = max(budgets) if budgets else None
    jobs = sorted({m.get("jobs") for m in metas if m.get("jobs")})
    meta["jobs"] = jobs[0] if len(jobs) == 1 else jobs
    trees = list(dict.fromkeys(t for m in metas for t in (m.get("trees") or [m.get("tree")]) if t))
    meta["tree"] = trees[0] if len(trees) == 1 else None
    if len(trees) > 1:
        meta["trees"] = trees  # parts measured different code: the table mixes them
    meta["date"] = max(m.get("date", "") for m in metas)
    operators = [by_name[n] for n in sorted(order)]
    return {"schema": SCHEMA, "meta": meta, "operators": operators, "summary": report.summarize(operators)}


def _listed(value: Any) -> list:
    """A merged meta's "3/5" or a part's 3, as a list of the values."""
    if isinstance(value, str):
        return [int(v) for v in value.split("/") if v.strip().isdigit()]
    return [value] if value is not None else []


def result_path(out_dir: Path, date: str, label: str) -> Path:
    path = out_dir / f"{date}-{label}.json"
    n = 2
    while path.exists():
        path = out_dir / f"{date}-{label}-{n}.json"
        n += 1
    return path


METHOD = """\
## Method

- **Loop.** Each module runs through `diagnosis.engine.loop.run_loop` with the rules proposer
  (deterministic libcst transforms, no LLM) for at most the stated number of rounds. A round
  diagnoses the current best verified version (tier 0 source patterns, then tier 1 profile,
  tier 2 per-line IR, tier 3 pass dumps and counterfactual recompiles, climbing only while the
  evidence fails to localize, narrow to one family or explain), proposes one rewrite and
  verifies it. The loop stops at the round budget, at 85 % of speed-of-light (geomean of the
  cases), or when consecutive rounds find nothing left to try.
- **Correctness.** The initial version is verified on every case: the `get_verify_inputs`
  cases over three seeds, the big timed cases over the first seed (`--timed-case-seeds 1`);
  the same job times it against PyTorch eager, and those times with its recorded launches are
  its tier-1 profile (since the fourth session; before, a separate profile job).
  A candidate is verified over one seed on every timed case and every `get_verify_inputs`
  case, in the same child job that times it. On a GPU the child draws the inputs on the device
  (`torch.device` around the module's input functions), so a seed costs milliseconds to draw
  but a full reference and candidate run per case. The gate: match `Model` within dtype-aware
  tolerances, NaN/Inf in the same places, launch Triton kernels, and change the output when
  the input changes (each case is run again on a second input set). A candidate may not
  change `Model` or the input functions. After the loop, the best version is verified once
  more on two fresh seeds ("final check").
- **Timing.** The median device time of one call, from CUDA events around it, with the L2
  cold and clean before every call (a 256 MB buffer read; `triton.testing.do_bench` zeroes
  one, which leaves dirty lines that the timed kernel writes back: a read-only 134 MB row
  reduction on the H200 timed 42.1 us after a zeroing flush and 34.4 us after a reading one,
  a one-off probe; `tests/gpu/test_cuda_backend.py` checks it; changed after the `3eb0c9c` run) and a 250 us GPU-side sleep
  before each call, so that a busy host cannot leave the GPU waiting inside the measurement
  (added after the `af00bc9` run of 2026-11-30, where host contention doubled a 27 us case;
  `runner/backends/cuda.py`); the host's per-call Python is not in the times. Each contender gets one
  untimed call first (compiles and autotuning happen there) and one discarded measurement
  (added after the 2026-11-30 run). An autotuner there has its configs compiled side by side
  in forks before it benchmarks them, and times each for 10 ms of warm-up and 30 ms of
  repetitions where the kernel names no benchmark of its own (Triton: 25 and 100;
  `runner/childlib/precompile.py`, `runner/childlib/launches.py`; since 2026-12-06). A candidate is
  timed against its parent *in the same process*, interleaved round-robin (`--timing-rounds`,
  2 by default, each `--warmup-ms` 10 + `--rep-ms` 40 per measurement), so the two see the same
  clocks and GPU state; PyTorch eager is timed once per case in the same process. A case
  whose rounds disagree by more than 5 % gets more rounds, up to 6 in all, until they agree
  (added after the first run of 2026-11-30).
- **Noise floor.** Per case, the parent's repeated medians in that process give the relative
  spread (max - min) / min, leaving out the slowest from four medians on (interference only
  slows a measurement), or the candidate's where they spread wider (since `273e747`, after
  the `3eb0c9c` run), at least 1 %, and at least the loop's minimum gain of 2 %. A candidate
  counts as faster only when no case is slower by more than its own floor and the geomean
  speedup over the cases exceeds the combined floor, the geomean of (1 + each case's floor)
  (until the after-fix runs of 2026-11-30: the largest case floor). A time below the datasheet
  speed-of-light bound is flagged suspect and never counted as a win.
- **Speedups.** Per operator, the geomean over its 5 shape cases. "vs initial" multiplies the
  same-process speedups of the accepted rounds (each measured against its own parent), so
  an operator the loop did not change is exactly 1.00x. "vs eager" is PyTorch eager's time
  (the `Model`) over the best version's time, measured in the same child as that version.
  %SOL is 100 x speed-of-light time / measured time, geomean over the cases, with
  datasheet peaks (a memory-bound kernel at the H200's measured copy bandwidth shows about
  90 %SOL).
- **Cost.** Device seconds are the sandbox child's wall time for every job run on the GPU
  device (validate, verify, time, profile, compile: on the device machine all of them occupy
  it); wall seconds include the parent's analysis. Each job reports its seconds by phase
  (interpreter start and exit, imports, module load, first calls with their compiles and
  autotuning, reference runs, timing, compile job), summed under the cost table.
"""


def render_results_md(result: dict[str, Any], json_name: str, notes: str = "") -> str:
    """The markdown page of one result; `json_name` is shown as given (a path from the
    repository root where the file is inside it); `notes` (markdown) goes after the summary."""
    meta = result.get("meta", {})
    ops = result.get("operators", [])
    lines = [
        "# Benchmark results",
        "",
        "Written by `bench/run.py` (edit the method text there, not here).",
        "",
        f"Latest: `{json_name}`, {meta.get('date', '?')}, device {meta.get('device_name') or '?'} "
        f"({meta.get('device', '?')}), {meta.get('rounds', '?')} rounds per operator, "
        f"{len(ops)} operators from `{meta.get('source', '?')}`"
        + (f" matching `{meta['only']}`" if meta.get("only") else "")
        + (f", at most {meta['op_budget']:.0f} s of rounds per operator" if meta.get("op_budget") else "")
        + (f", code tree `{meta['tree'][:12]}`" if meta.get("tree") else "")
        + (f" (commit `{meta['commit']}`)" if meta.get("tree") and meta.get("commit") else "")
        + (f", code trees {', '.join(f'`{t[:12]}`' for t in meta['trees'])} (mixed)" if meta.get("trees") else "")
        + (f"; runner wall {meta['wall_s']:.1f} s" if meta.get("wall_s") else "")
        + (f" over {len(meta['commands'])} calls" if len(meta.get("commands") or ()) > 1 else "")
        + ".",
        "",
        (
            "Commands (merged parts, in order): " + "; ".join(f"`{c}`" for c in meta["commands"])
            if len(meta.get("commands") or ()) > 1
            else f"Command: `{meta['command']}`" if meta.get("command") else ""
        ),
        "",
        "## Summary",
        "",
        report.summary_table(result["summary"]),
        "",
        *(["## Notes", "", notes.strip(), ""] if notes.strip() else []),
        "## Per operator",
        "",
        "Speedups are the geomean over the operator's cases; `winning tiers` lists the tier each",
        "accepted round reached; `-` means no round won.",
        "",
        report.operators_table(ops),
        "",
    ]
    not_run = [o["name"] for o in ops if o.get("status") == "not_run"]
    if not_run:
        lines += ["Not run (time budget): " + ", ".join(not_run), ""]
    lines += ["## Where the device time went", "", cost_table(ops), ""]
    phases = phase_totals(ops)
    if phases:
        lines += [
            "Seconds by phase inside the jobs, all operators (`process`: interpreter start-up and",
            "exit; `import`: torch and triton; `load`: the module; `candidate`: its first call per",
            "case, compiles and autotuning included): "
            + ", ".join(f"{k} {v:.1f}" for k, v in phases.items()),
            "",
        ]
    return "\n".join(lines) + "\n" + METHOD


def cost_table(ops: list[dict[str, Any]]) -> str:
    """Per operator: the baseline's device seconds and the child jobs by kind (count x mean)."""
    kinds = ["verify", "profile", "compile", "time", "validate", "capture"]
    rows = []
    for o in ops:
        if o.get("status") == "not_run":
            continue
        jobs = o.get("jobs") or {}
        cells = [
            f"{j['n']} x {j['wall_s'] / max(1, j['n']):.1f}" if (j := jobs.get(k)) else "-" for k in kinds
        ]
        rows.append(
            [o["name"], f"{o.get('baseline_device_s') or 0:.1f}", *cells, f"{o.get('device_s') or 0:.1f}"]
        )
    used = [i for i, k in enumerate(kinds) if any(r[2 + i] != "-" for r in rows)]
    header = ["operator", "baseline s", *[f"{kinds[i]} (n x s)" for i in used], "device s"]
    return report.markdown_table(header, [[r[0], r[1], *[r[2 + i] for i in used], r[-1]] for r in rows])


def _shown(path: Path) -> str:
    """`path` from the repository root when it is inside the repository, else as it is."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def write_outputs(
    result: dict[str, Any], out_dir: Path, results_md: Path | None, notes: str = "", path: Path | None = None
) -> tuple[Path, Path]:
    """Write the JSON (to `path`, else to a new name in `out_dir`) and its table."""
    out_dir.mkdir(parents=True, exist_ok=True)
    meta = result["meta"]
    path = path or result_path(out_dir, meta["date"], meta["label"])
    meta["file"] = path.name
    path.write_text(json.dumps(result, indent=1, default=str) + "\n")
    md_path = results_md or (out_dir / "RESULTS.md")
    md_path.write_text(render_results_md(result, _shown(path), notes))
    return path, md_path


# --- command line -------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("paths", nargs="*", help="directories of modules, or module files (default: bench/suite)")
    p.add_argument("--device", default="cuda", choices=devices.NAMES)
    p.add_argument("--target", default=None, help="compile target for tiers 2/3 (default: the device's)")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--out", default=str(DEFAULT_OUT))
    p.add_argument("--results-md", default=None,
                   help="where the table goes (default: bench/RESULTS.md when --out is bench/results, "
                        "else OUT/RESULTS.md)")  # fmt: skip
    p.add_argument("--jobs", type=int, default=1, help="operators at once, one GPU each")
    p.add_argument("--only", default=None, help="regex over module file names")
    p.add_argument("--time-budget", type=float, default=None, help="seconds; start no operator after that")
    p.add_argument("--longest-first", default=None, metavar="JSON",
                   help="start operators in order of their wall seconds in this earlier result, longest first")  # fmt: skip
    p.add_argument(
        "--op-budget", type=float, default=None,
        help="seconds of rounds per operator, counted after its initial version's verify; no new round after that",
    )  # fmt: skip
    p.add_argument("--job-timeout", type=float, default=None, help="wall seconds per child job")
    p.add_argument("--compile-timeout", type=float, default=None,
                   help="seconds each compile of a candidate's kernels may take; a config past it is dropped")  # fmt: skip
    p.add_argument("--sol-stop", type=float, default=0.85)
    p.add_argument("--max-tier", type=int, default=int(Tier.COMPILER), choices=[int(t) for t in Tier])
    p.add_argument("--patience", type=int, default=2)
    p.add_argument("--no-final-check", action="store_true")
    p.add_argument("--op-budget-grace", type=float, default=60.0,
                   help="seconds an operator started before --time-budget may run past it")
    p.add_argument("--timed-case-seeds", type=int, default=1,
                   help="seeds for the big timed cases (verify inputs always get every seed)")
    p.add_argument("--timing-rounds", type=int, default=2,
                   help="interleaved timing rounds per contender (>= 2: their spread is the noise floor)")
    p.add_argument("--warmup-ms", type=float, default=10.0, help="warm-up per measurement")
    p.add_argument("--rep-ms", type=float, default=40.0, help="measuring time per measurement")
    p.add_argument("--quiet", action="store_true", help="no per-round lines")
    p.add_argument("--merge", nargs="+", default=None, metavar="JSON", help="combine partial result files")
    p.add_argument("--notes", default=None, metavar="MD",
                   help="a markdown file whose text goes into the results page after the summary")  # fmt: skip
    p.add_argument("--one-json", default=None, help=argparse.SUPPRESS)  # internal: --jobs worker
    # internal: what is left of the suite's --time-budget for a --jobs worker
    p.add_argument("--deadline-in", type=float, default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out_dir = Path(args.out)
    notes = Path(args.notes).read_text() if args.notes else ""
    if args.results_md:
        results_md: Path | None = Path(args.results_md)
    elif out_dir.resolve() == DEFAULT_OUT.resolve():
        results_md = RESULTS_MD
    else:
        results_md = None

    if args.merge:
        parts = [json.loads(Path(f).read_text()) for f in args.merge]
        for part, f in zip(parts, args.merge, strict=True):
            part.setdefault("meta", {}).setdefault("file", Path(f).name)
        result = merge(parts, names=list(args.merge))
        result["meta"]["label"] = result["meta"].get("label") or "merged"
        name_commit(result["meta"])
        path, md = write_outputs(result, out_dir, results_md, notes)
        print(report.summary_table(result["summary"]))
        print(f"wrote {path} and {md}")
        return 0

    files = discover(args.paths, args.only)
    if args.one_json:  # worker of --jobs: one operator, record to a file
        deadline = time.monotonic() + args.deadline_in if args.deadline_in is not None else None
        rec = run_operator(files[0], args, deadline)
        Path(args.one_json).write_text(json.dumps(rec, default=str))
        return 0
    if not files:
        print("no modules to run", file=sys.stderr)
        return 2

    t0 = time.monotonic()
    # what does not change during the run, read once before it: the tree id in particular must
    # name the code, not a tree holding this run's own partial results (--out inside the repo)
    static = _static_meta(args, argv)
    written: list[Path] = []  # the run's JSON, named at its first write and rewritten after

    def write(records: list[dict], not_run: list[str]) -> tuple[dict, Path, Path]:
        """Written after every operator too: a run killed at its call's limit keeps what it
        measured (the operators not reached yet are listed as not run until the last write)."""
        meta = _run_meta(args, static, records, t0)
        result = build_result(records, not_run, meta)
        path, md = write_outputs(result, out_dir, results_md, notes, written[0] if written else None)
        written[:] = [path]
        return result, path, md

    records, not_run = run_all(files, args, on_record=write)
    result, path, md = write(records, not_run)
    print()
    print(report.operators_table(result["operators"]))
    print()
    print(report.summary_table(result["summary"]))
    if not_run:
        print(f"not run (time budget): {', '.join(not_run)}")
    print(f"wrote {path} and {md}")
    return 0


def _static_meta(args: argparse.Namespace, argv: list[str] | None) -> dict[str, Any]:
    now = dt.datetime.now(dt.UTC)
    return {
        "date": now.strftime("%Y-%m-%d"),
        "started": now.isoformat(timespec="seconds"),
        "commit": _commit(),
        "tree": source_tree(),
        "command": " ".join(["bench/run.py", *(argv if argv is not None else sys.argv[1:])]),
        "source": ", ".join(sorted({str(Path(p)) for p in (args.paths or ["bench/suite"])})),
        "versions": _versions(),
    }


def _run_meta(args: argparse.Namespace, static: dict[str, Any], records: list[dict], t0: float) -> dict[str, Any]:
    meta = {
        "date": static["date"],
        "started": static["started"],
        "device": args.device,
        "device_name": next((r.get("device_name") for r in records if r.get("device_name")), None),
        "target": args.target,
        "rounds": args.rounds,
        "sol_stop": args.sol_stop,
        "max_tier": args.max_tier,
        "jobs": args.jobs,
        "time_budget": args.time_budget,
        "op_budget": args.op_budget,
        "job_timeout": args.job_timeout,
        "only": args.only,
        "longest_first": args.longest_first,
        "commit": static["commit"],
        "tree": static["tree"],
        "command": static["command"],
        "source": static["source"],
        "wall_s": round(time.monotonic() - t0, 1),
        "python": sys.version.split()[0],
        "versions": static["versions"],
    }
    meta["label"] = device_label(args.device, records)
    return meta


def _versions() -> dict[str, str]:
    from importlib import metadata

    out = {}
    for name in ("torch", "triton", "numpy", "libcst"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "missing"
    return out


def _commit() -> str | None:
    try:
        # "-dirty" when tracked files differ from the commit: the run measured uncommitted code
        proc = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty", "--abbrev=7"],
                              capture_output=True, text=True, timeout=10, check=False)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() or None


def source_tree(root: Path = ROOT) -> str | None:
    """The git tree id of the files as they are (tracked and untracked, less the ignored):
    equal to `git rev-parse COMMIT^{tree}` of the commit that holds exactly this code.

    Why: a device call runs on a copy of the working tree whose .git may be an older commit
    (on 2026-11-30 the H200 runs recorded `2cf9b03-dirty` for code committed as d1deeaf); the
    tree id names the code whatever HEAD says."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "GIT_INDEX_FILE": str(Path(tmp) / "index")}
        try:
            for cmd in (["add", "-A", "."], ["write-tree"]):
                proc = subprocess.run(["git", "-C", str(root), *cmd], capture_output=True, text=True,
                                      timeout=60, check=False, env=env)  # fmt: skip
                if proc.returncode != 0:
                    return None
        except (OSError, subprocess.SubprocessError):
            return None
    return proc.stdout.strip() or None


def commit_of_tree(tree: str, root: Path = ROOT) -> str | None:
    """The oldest commit (short hash) whose tree is `tree`, on any branch: the one that made
    that code (later commits with the same tree changed nothing); None when no commit holds it."""
    try:
        proc = subprocess.run(["git", "-C", str(root), "log", "--all", "--format=%h %T"],
                              capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    found = None
    for line in proc.stdout.splitlines():  # newest first
        short, _, commit_tree = line.partition(" ")
        if commit_tree == tree:
            found = short
    return found


def name_commit(meta: dict[str, Any], root: Path = ROOT) -> None:
    """Set `meta["commit"]` from the tree id the run recorded, where a commit holds that tree.

    A device call records the commit of its copy's .git (the session's base, `<base>-dirty`),
    not the commit that holds the code it ran; the tree id names that code, and here, where the
    commits are, it is looked up. The recorded value stays in `commit_recorded`."""
    tree = meta.get("tree")
    if not tree:
        return
    recorded = meta.get("commit")
    found = commit_of_tree(tree, root)
    if found is None:
        meta["commit_note"] = f"no commit holds the measured tree {tree[:12]} (recorded: {recorded})"
    elif recorded != found:
        meta["commit_recorded"] = recorded
        meta["commit"] = found
        meta["commit_note"] = f"commit {found} holds the measured tree {tree[:12]} (recorded: {recorded})"


if __name__ == "__main__":
    sys.exit(main())
