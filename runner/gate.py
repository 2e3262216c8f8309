"""The trusted side of the verification gate: reference data, the verify job's plan, the verdict.

Runs in the worker (no uploaded code ever runs in this process; see runner/childlib/verify.py
for the whole gate and its threat model). `runner.execute.Executor.verify` drives it:

1. `GateStore.reference(...)` runs the reference job of a reference module once per run (the
   outputs depend only on the module, the cases, the seeds and the device) and keeps what it
   handed back: the outputs parsed into this process's memory, the inputs as files in a
   private directory (0700) that no job directory contains;
2. `plan(...)` lists the verify job's runs (case, seed, variant) and the runs to repeat with
   the kernels' writes perturbed; `stage_inputs` copies those runs' inputs into the job's
   directory (gate-in/; never anything of the reference's outputs);
3. `judge(...)` reads what the verify job wrote, strictly (runner.tensordata), and compares it
   with the reference (runner.compare); the JSON the job answered contributes only its launch
   records, the perturbation's bookkeeping and the timings. `Decider` judges the same files
   while a timed job waits, so that a candidate that fails is not timed.

`judge` returns the verify result in the shape the verify job returned before the gate moved
here (cases, checked, skipped, input_shapes, seeds, passed, timing) plus `notes`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from runner import tensordata
from runner.compare import changed_elements, compare_outputs, flatten, unchanged_fraction
from runner.errors import KINDS, BadTensorData, JobFailed
from runner.protocol import (
    ALT_SEED_OFFSET,
    GATE_DECISION,
    GATE_DIR,
    GATE_INPUTS,
    GATE_READY,
    JobError,
    JobRequest,
    gate_file,
    run_key,
)
from runner.sandbox import SandboxResponse, workdirs

__all__ = ["ALT_SEED_OFFSET", "Decider", "GateStore", "Plan", "ReferenceSet", "judge", "plan", "stage_inputs"]

# a candidate's output file may be at most this much larger than the reference's output
OUTPUT_SLACK_BYTES = 1 << 20
DEFAULT_CPU_MAX_ELEMENTS = 1 << 16


@dataclass(frozen=True)
class Spec:
    label: str  # 'case 0', 'verify 1', 'derived 0'
    kind: str  # 'timed', 'verify', 'derived'
    index: int
    numel: int


@dataclass
class RefRun:
    spec: Spec
    seed: int
    variant: str  # 'main' or 'alt'
    input_path: Path
    output: Any  # Model's output, parsed (CPU tensors)
    flops: int
    bytes: int
    dtype: str
    exact_path: Path | None = None  # Model's float64 output (runner/childlib/reference.py), kept as a file

    @property
    def key(self) -> str:
        return run_key(self.spec.label, self.seed, self.variant)

    def exact(self) -> Any:
        """Model's float64 output, read when a comparison needs it; None where there is none."""
        return tensordata.read(str(self.exact_path)) if self.exact_path is not None else None

    @property
    def out_sizes(self) -> list[int]:
        return [t.numel() * t.element_size() for t in flatten(self.output)]


@dataclass
class ReferenceSet:
    """What the reference jobs of one reference module handed back, over every seed asked so far."""

    input_shapes: list[dict[str, Any]]
    specs: list[Spec]
    skipped: list[dict[str, Any]]
    notes: list[str]
    runs: dict[tuple[str, int, str], RefRun] = field(default_factory=dict)
    alt_unavailable: set[tuple[str, int]] = field(default_factory=set)
    seeds_done: set[int] = field(default_factory=set)  # verify and derived cases
    timed_done: set[int] = field(default_factory=set)
    alt_done: set[int] = field(default_factory=set)


@dataclass(frozen=True)
class Need:
    """The reference job still to run for a verify call: seeds, those with timed cases, alt seeds."""

    seeds: list[int]
    timed_seeds: list[int]
    alt_seeds: list[int]


def timed_seeds_of(seeds: Sequence[int], options: Mapping[str, Any]) -> list[int]:
    """The seeds the timed cases are checked on: the first `timed_case_seeds` (None: every seed)."""
    n = options.get("timed_case_seeds")
    return list(seeds) if n is None else list(seeds)[: int(n)]


def missing(ref: ReferenceSet | None, seeds: Sequence[int], options: Mapping[str, Any]) -> Need | None:
    seeds = list(seeds) or [0]
    timed = timed_seeds_of(seeds, options)
    first = seeds[0]
    if ref is None:
        return Need(seeds, timed, [first])
    todo = [
        s
        for s in seeds
        if s not in ref.seeds_done
        or (s in timed and s not in ref.timed_done)
        or (s == first and s not in ref.alt_done)
    ]
    if not todo:
        return None
    return Need(
        todo, [s for s in todo if s in timed], [first] if first in todo and first not in ref.alt_done else []
    )


def _remove(directory: Path) -> None:
    workdirs.release(directory)
    shutil.rmtree(directory, ignore_errors=True)


class GateStore:
    """Reference data of one executor (one run): parsed outputs in memory, inputs on disk in a
    private directory, removed when the store is closed or garbage collected."""

    def __init__(self) -> None:
        self.sets: dict[tuple, ReferenceSet] = {}
        self.lock = threading.Lock()
        self._dir: Path | None = None
        self._finalizer: weakref.finalize | None = None

    @property
    def dir(self) -> Path:
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="kernelopt-ref-"))  # mode 0700
            # claimed like a run directory: the stale sweep removes it after a killed worker,
            # never while this process lives
            workdirs.claim(self._dir)
            self._finalizer = weakref.finalize(self, _remove, self._dir)
        return self._dir

    def close(self) -> None:
        if self._finalizer is not None:
            self._finalizer()
        self._dir, self._finalizer = None, None
        self.sets.clear()

    @staticmethod
    def key(path: str, device: str, cases: Sequence[int] | None, options: Mapping[str, Any]) -> tuple:
        """The reference depends on the module's bytes, the device, the cases, the size limit and
        whether it has its float64 run."""
        digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
        limit = int(options.get("cpu_max_elements", DEFAULT_CPU_MAX_ELEMENTS)) if device == "cpu" else None
        exact = bool(options.get("exact", True))
        return (digest, device, tuple(cases) if cases is not None else None, limit, exact)

    def reference(
        self,
        run: Callable[[JobRequest, str], SandboxResponse],
        request: Callable[[Need], JobRequest],
        key: tuple,
        seeds: Sequence[int],
        options: Mapping[str, Any],
    ) -> tuple[ReferenceSet | None, SandboxResponse | None]:
        """The reference set for `key`, running the reference job for what is missing.

        `run(request, workdir)` runs a job; `request(need)` builds the reference job's request.
        Returns (set, None), or (None, the failed reference job's response)."""
        with self.lock:
            ref = self.sets.get(key)
            need = missing(ref, seeds, options)
            if need is None:
                return ref, None
            workdir = tempfile.mkdtemp(prefix="kernelopt-job-")
            try:
                response = run(request(need), workdir)
                if not response.ok:
                    return None, response
                try:
                    ref = absorb(ref, response.result, Path(workdir), self.dir / key[0][:16], need)
                except (JobFailed, BadTensorData) as exc:
                    response.ok = False
                    response.error = JobError(exc.kind, f"the reference job's answer: {exc.message}")
                    return None, response
                self.sets[key] = ref
                return ref, None
            finally:
                shutil.rmtree(workdir, ignore_errors=True)


def _spec(raw: Any) -> Spec:
    if not isinstance(raw, Mapping):
        raise JobFailed("bad_output", f"a case is not an object: {str(raw)[:80]}")
    kind = str(raw.get("kind"))
    if kind not in ("timed", "verify", "derived"):
        raise JobFailed("bad_output", f"unknown case kind {kind!r}")
    return Spec(str(raw["label"]), kind, int(raw["index"]), int(raw.get("numel", 0)))


def absorb(ref: ReferenceSet | None, result: Any, workdir: Path, store: Path, need: Need) -> ReferenceSet:
    """Take a reference job's answer and files into the set (a new one when `ref` is None)."""
    if not isinstance(result, Mapping):
        raise JobFailed("bad_output", "no result")
    try:
        specs = [_spec(s) for s in result.get("selected") or ()]
        notes = [str(result["derive_note"])] if result.get("derive_note") else []
        fresh = ReferenceSet(
            input_shapes=list(result.get("input_shapes") or ()),
            specs=specs,
            skipped=list(result.get("skipped") or ()),
            notes=notes,
        )
        if ref is None:
            ref = fresh
        elif [s.label for s in ref.specs] != [s.label for s in specs]:
            raise JobFailed(
                "bad_output",
                f"the cases differ between seeds: {[s.label for s in ref.specs]} and {[s.label for s in specs]}",
            )
        by_label = {s.label: s for s in ref.specs}
        store.mkdir(parents=True, exist_ok=True)
        for raw in result.get("runs") or ():
            spec = by_label.get(str(raw["label"]))
            seed, variant = int(raw["seed"]), str(raw["variant"])
            if spec is None or variant not in ("main", "alt"):
                raise JobFailed("bad_output", f"a run of an unknown case or variant: {str(raw)[:120]}")
            key = run_key(spec.label, seed, variant)
            output = tensordata.read(str(workdir / gate_file(key, "out")))
            kept = store / f"{key}.in.kot"
            shutil.copyfile(workdir / gate_file(key, "in"), kept)  # a copy: the job's directory is its own
            exact = None
            if raw.get("exact") is True:
                exact = store / f"{key}.exact.kot"
                shutil.copyfile(workdir / gate_file(key, "exact"), exact)
            ref.runs[(spec.label, seed, variant)] = RefRun(
                spec, seed, variant, kept, output, int(raw.get("flops", 0)), int(raw.get("bytes", 0)),
                str(raw.get("dtype", "float32")), exact,
            )  # fmt: skip
        for label, seed in result.get("alt_unavailable") or ():
            ref.alt_unavailable.add((str(label), int(seed)))
    except (KeyError, TypeError, ValueError) as exc:
        raise JobFailed("bad_output", f"malformed: {exc}") from exc
    except OSError as exc:
        raise JobFailed("bad_output", f"a file is missing: {exc}") from exc
    ref.seeds_done |= set(need.seeds)
    ref.timed_done |= set(need.timed_seeds)
    ref.alt_done |= set(need.alt_seeds)
    return ref


# ---------------------------------------------------------------- the verify job's plan


@dataclass(frozen=True)
class PlanRun:
    ref: RefRun

    @property
    def key(self) -> str:
        return self.ref.key

    def to_json(self) -> dict[str, Any]:
        r = self.ref
        return {
            "key": r.key,
            "label": r.spec.label,
            "seed": r.seed,
            "variant": r.variant,
            "poison": r.out_sizes,
        }


@dataclass(frozen=True)
class Plan:
    seeds: list[int]
    runs: list[PlanRun]
    perturb: list[PlanRun]  # first-seed main runs repeated with the kernels' writes perturbed
    timed: list[int]
    work: dict[int, dict[str, Any]]
    decision: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "runs": [r.to_json() for r in self.runs],
            "perturb": [r.key for r in self.perturb],
            "decision": self.decision,
            "timed": self.timed,
            "work": {str(k): v for k, v in self.work.items()},
        }


def plan(ref: ReferenceSet, seeds: Sequence[int], options: Mapping[str, Any], *, decision: bool) -> Plan:
    """The verify job's runs, in the order the gate judges them: per seed, per case, the main
    run and (first seed) its alt run right after it."""
    seeds = list(seeds) or [0]
    timed_seeds = set(timed_seeds_of(seeds, options))
    runs: list[PlanRun] = []
    for si, seed in enumerate(seeds):
        for spec in ref.specs:
            if spec.kind == "timed" and seed not in timed_seeds:
                continue
            main = ref.runs.get((spec.label, seed, "main"))
            if main is None:
                continue
            runs.append(PlanRun(main))
            alt = ref.runs.get((spec.label, seed, "alt"))
            if si == 0 and alt is not None:
                runs.append(PlanRun(alt))
    first = [r for r in runs if r.ref.seed == seeds[0] and r.ref.variant == "main"]
    perturb = [r for r in first if r.ref.spec.kind != "timed"]
    if not perturb and first:  # no verify case: the smallest timed case
        perturb = [min(first, key=lambda r: r.ref.spec.numel)]
    timed = [s.index for s in ref.specs if s.kind == "timed"]
    work = {
        r.ref.spec.index: {"bytes": r.ref.bytes, "flops": r.ref.flops, "dtype": r.ref.dtype}
        for r in first
        if r.ref.spec.kind == "timed"
    }
    return Plan(seeds, runs, perturb, timed, work, decision)


def stage_inputs(p: Plan, jobdir: Path) -> None:
    """Copy the plan's inputs into the verify job's directory (copies: the job may write there)."""
    (jobdir / GATE_INPUTS).mkdir(parents=True, exist_ok=True)
    for r in p.runs:
        shutil.copyfile(r.ref.input_path, jobdir / gate_file(r.key, "in", GATE_INPUTS))


# ---------------------------------------------------------------- the verdict


@dataclass
class CaseRecord:
    """One case's verdict over all seeds (the shape runner.execute turns into a CaseCheck)."""

    label: str
    kind: str
    index: int
    numel: int
    seeds: list[int] = field(default_factory=list)
    correct: bool = True
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    rel_l2_err: float = 0.0
    tolerance: dict[str, Any] | None = None
    launches: int = 0
    kernels: list[str] | None = None
    autotune_choices: list[str] = field(default_factory=list)
    launch_ints: dict[str, dict[str, int]] = field(default_factory=dict)
    launch_info: list[dict[str, Any]] = field(default_factory=list)
    sensitivity: str = "not checked"  # 'changes with input', 'reference constant', 'not checked'
    launch_dependence: str = "not checked"  # 'changes when the kernels' writes are perturbed', ...
    flops: int = 0
    bytes: int = 0
    dtype: str = ""


def _launch_fields(raw: Any) -> dict[str, Any]:
    """A run's launch record from the verify job's JSON, as plain typed fields (untrusted input)."""
    if not isinstance(raw, Mapping):
        return {}
    try:
        return {
            "launches": int(raw.get("launches", 0)),
            "kernels": sorted(str(k) for k in raw.get("kernels") or ()),
            "autotune_choices": [str(c) for c in raw.get("autotune_choices") or ()],
            "launch_ints": {
                str(k): {str(n): int(v) for n, v in (args or {}).items() if isinstance(v, int)}
                for k, args in (raw.get("launch_ints") or {}).items()
            },
            "launch_info": [dict(li) for li in raw.get("launch_info") or () if isinstance(li, Mapping)],
        }
    except (TypeError, ValueError, AttributeError):
        return {}


def _signature(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


@dataclass
class Verdict:
    result: dict[str, Any]
    error: JobError | None


class _Judge:
    def __init__(
        self,
        ref: ReferenceSet,
        p: Plan,
        jobdir: Path,
        *,
        override: dict[str, float] | None,
        memo: dict[str, Any],
    ) -> None:
        self.ref, self.plan, self.jobdir = ref, p, jobdir
        self.override, self.memo = override, memo
        self.records: dict[str, CaseRecord] = {}
        self.float64: list[str] = []  # runs that passed only against Model's float64 run, in words

    def read(self, key: str, suffix: str, ref_run: RefRun) -> Any:
        cap = 2 * sum(ref_run.out_sizes) + OUTPUT_SLACK_BYTES
        try:
            return tensordata.read(str(self.jobdir / gate_file(key, suffix)), max_bytes=cap)
        except BadTensorData as exc:
            raise JobFailed(
                "bad_output", f"{ref_run.spec.label}, seed {ref_run.seed}: its output data: {exc}"
            ) from exc

    def runs(self, answer: Mapping[str, Any] | None, job_error: JobError | None) -> None:
        """Judge every run of the plan in order; raises JobFailed at the first that fails."""
        # before the job has answered (the decision before timing) there are no launch records yet
        answered = answer is not None
        answer = answer or {}
        launch_records = answer.get("runs") if isinstance(answer.get("runs"), Mapping) else {}
        mains: dict[tuple[str, int], Any] = {}
        for pr in self.plan.runs:
            r = pr.ref
            rec = self.records.setdefault(r.spec.label, CaseRecord(r.spec.label, r.spec.kind, r.spec.index,
                                                                   r.spec.numel))  # fmt: skip
            where = f"{r.spec.label}, seed {r.seed}"
            if r.variant == "main":
                rec.seeds.append(r.seed)
                rec.flops, rec.bytes, rec.dtype = r.flops, r.bytes, r.dtype
            path = self.jobdir / gate_file(r.key, "out")
            fields = _launch_fields(launch_records.get(r.key))
            if (answered and not fields) or _signature(path) is None:
                rec.correct = False
                if job_error is not None:
                    raise JobFailed(job_error.kind, job_error.message)
                raise JobFailed("bad_output", f"{where}: the verify job handed back no output for this run")
            if r.variant == "main" and answered:
                rec.launches = max(rec.launches, fields["launches"])
                rec.kernels = fields["kernels"]
                for choice in fields["autotune_choices"]:
                    if choice not in rec.autotune_choices:
                        rec.autotune_choices.append(choice)
                if not rec.launch_info:
                    rec.launch_info = fields["launch_info"]
                for kernel, ints in fields["launch_ints"].items():
                    rec.launch_ints.setdefault(kernel, ints)
                if not fields["launches"] and r.spec.kind == "timed":
                    rec.correct = False
                    raise JobFailed(
                        "no_triton_launch",
                        f"{where}: ModelNew.forward launched no Triton kernel "
                        "(a ModelNew that only calls PyTorch is not a Triton kernel)",
                    )
            try:
                if r.variant == "main":
                    mains[(r.spec.label, r.seed)] = self.main(pr, rec)
                else:
                    self.alt(pr, rec, mains.pop((r.spec.label, r.seed), None))
            except JobFailed as exc:
                rec.correct = False
                exc.message = f"{where}: {exc.message}"
                exc.args = (exc.message,)
                raise
        if answered and not any(rec.launches for rec in self.records.values()):
            raise JobFailed("no_triton_launch", "ModelNew.forward launched no Triton kernel in any case")

    def main(self, pr: PlanRun, rec: CaseRecord) -> Any:
        r = pr.ref
        sig = _signature(self.jobdir / gate_file(r.key, "out"))
        cached = self.memo.get(r.key)
        value = None
        if cached is not None and cached[0] == sig:
            cmp = cached[1]
        else:
            value = self.read(r.key, "out", r)
            cmp = compare_outputs(value, r.output, has_dot=r.flops > 0, override=self.override, exact=r.exact)
            self.memo[r.key] = (sig, cmp)
        rec.max_abs_err = max(rec.max_abs_err, cmp.max_abs_err)
        rec.max_rel_err = max(rec.max_rel_err, cmp.max_rel_err)
        rec.rel_l2_err = max(rec.rel_l2_err, cmp.rel_l2_err)
        rec.tolerance = cmp.tolerance or rec.tolerance
        self._note_float64(r, cmp)
        if not cmp.ok:
            raise JobFailed(cmp.kind or "incorrect", cmp.message)
        return value

    def alt(self, pr: PlanRun, rec: CaseRecord, main_value: Any) -> None:
        r = pr.ref
        main_ref = self.ref.runs[(r.spec.label, r.seed, "main")]
        sigs = (
            _signature(self.jobdir / gate_file(main_ref.key, "out")),
            _signature(self.jobdir / gate_file(r.key, "out")),
        )
        cached = self.memo.get(r.key)
        if cached is not None and cached[0] == sigs:
            frac, cmp_b = cached[1]
        else:
            if main_value is None:
                main_value = self.read(main_ref.key, "out", main_ref)
            value = self.read(r.key, "out", r)
            frac = unchanged_fraction(main_value, value, main_ref.output, r.output, has_dot=r.flops > 0)
            cmp_b = compare_outputs(
                value, r.output, has_dot=r.flops > 0, override=self.override, exact=r.exact
            )
            self.memo[r.key] = (sigs, (frac, cmp_b))
        self._note_float64(r, cmp_b)
        if frac is None:
            rec.sensitivity = "reference constant"
        elif frac > 0.5:
            raise JobFailed(
                "constant_output",
                f"the output did not change where the reference's did when the input changed "
                f"({100 * frac:.0f}% of those elements bit-identical): a cached or stored answer",
            )
        elif not cmp_b.ok:
            raise JobFailed(cmp_b.kind or "incorrect", "on other inputs: " + cmp_b.message)
        else:
            rec.sensitivity = "changes with input"

    def _note_float64(self, r: RefRun, cmp: Any) -> None:
        """Say so when `cmp` passed only against Model's float64 run."""
        figures = (cmp.tolerance or {}).get("float64") if cmp.ok else None
        if isinstance(figures, Mapping):
            other = " (other inputs)" if r.variant == "alt" else ""
            self.float64.append(
                f"{r.spec.label}, seed {r.seed}{other}: outside the float32 tolerance of the reference, "
                f"within its own rounding: judged against Model's float64 run, the output is "
                f"{figures['rel_l2']:.2g} off it (relative L2) and the float32 reference {figures['ref_rel_l2']:.2g}"
            )

    def dependence(self, answer: Mapping[str, Any]) -> None:
        """The launch-dependence check on the plan's perturbed runs."""
        perturbed = answer.get("perturbed") if isinstance(answer.get("perturbed"), Mapping) else {}
        for pr in self.plan.perturb:
            r = pr.ref
            rec = self.records[r.spec.label]
            where = f"{r.spec.label}, seed {r.seed}"
            info = perturbed.get(r.key)
            if not isinstance(info, Mapping):
                rec.correct = False
                raise JobFailed(
                    "bad_output", f"{where}: the verify job did not run it with the kernels' writes perturbed"
                )
            if info.get("raised"):
                rec.launch_dependence = "the forward failed when the kernels' writes were perturbed"
                continue
            if not int(info.get("buffers", 0) or 0):
                rec.correct = False
                raise JobFailed(
                    "launch_independent",
                    f"{where}: the Triton launches changed none of their tensor arguments, so the output "
                    "cannot come from them",
                )
            main = self.read(r.key, "out", r)
            moved = self.read(r.key, "perturbed", r)
            changed, total = changed_elements(main, moved)
            if not changed:
                rec.correct = False
                raise JobFailed(
                    "launch_independent",
                    f"{where}: the output stayed bit-identical when what the Triton kernels wrote was "
                    "perturbed: it does not come from them (a decoy launch)",
                )
            rec.launch_dependence = (
                f"changes when the kernels' writes are perturbed ({changed} of {total} elements)"
            )


def judge(
    ref: ReferenceSet,
    p: Plan,
    response: SandboxResponse | None,
    jobdir: Path,
    *,
    override: dict[str, float] | None = None,
    memo: dict[str, Any] | None = None,
    final: bool = True,
) -> Verdict:
    """The gate's verdict on what the verify job wrote. `final=False` judges the outputs only
    (the decision before timing: no perturbation, no response yet)."""
    answer: Mapping[str, Any] | None = None
    if response is not None:
        answer = response.result if isinstance(response.result, Mapping) else {}
    job_error = response.error if response is not None and not response.ok else None
    if job_error is not None and job_error.kind not in KINDS:  # the job's JSON is not to be trusted
        job_error = JobError(
            "bad_output", f"the verify job answered an unknown error kind {job_error.kind[:40]!r}"
        )
    j = _Judge(ref, p, jobdir, override=override, memo={} if memo is None else memo)
    error: JobError | None = None
    try:
        j.runs(answer, job_error)
        if final:
            if job_error is not None:
                raise JobFailed(job_error.kind, job_error.message)
            j.dependence(answer or {})
    except JobFailed as exc:
        error = JobError(exc.kind, exc.message)
        if job_error is not None and exc.kind == job_error.kind and exc.message == job_error.message:
            error = job_error  # the job's own error: keep its line, traceback and stderr
        elif response is not None:
            error.stderr_tail = response.stderr_tail
    passed = error is None
    result = {
        "input_shapes": ref.input_shapes,
        "passed": passed,
        "cases": [asdict(rec) for rec in j.records.values()],
        "checked": [s.label for s in ref.specs],
        "skipped": ref.skipped,
        "seeds": p.seeds,
        "notes": [*ref.notes, *j.float64],
    }
    if passed and final and answer and isinstance(answer.get("timing"), Mapping):
        result["timing"] = answer["timing"]
    # compiles the job stopped at the compile bound (runner.childlib.compile_bound): the job's own
    # word, like its timings; what they say is shown, never trusted for correctness
    dropped = (answer or {}).get("compile_dropped")
    if isinstance(dropped, list):
        result["compile_dropped"] = [d for d in dropped if isinstance(d, Mapping)][:100]
    return Verdict(result, error)


class Decider:
    """Judges a timed verify job's outputs while it waits (gate/ready), and answers whether to
    time it (gate/decision.json): a candidate that fails is not timed. The memo it fills lets
    the final judgement reuse its comparisons of files that did not change since.

    It does not wait for gate/ready to start: each run's output is compared as soon as the job
    has written it (the job writes each file whole, by rename), while the job runs the next
    case, so the job's wait at gate/ready is for the last comparisons only (on the H200 a
    candidate's verify job waited 44 of its 115 s for them, all done after the last run). A
    comparison made ahead counts only while its file's signature (inode, size, mtime) is the
    one the verdict at gate/ready sees; a file that cannot be read ahead is judged then."""

    def __init__(
        self, ref: ReferenceSet, p: Plan, jobdir: Path, *, override: dict[str, float] | None
    ) -> None:
        self.ref, self.plan, self.jobdir, self.override = ref, p, jobdir, override
        self.memo: dict[str, Any] = {}
        self.decided: bool | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="gate-decider", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        ready = self.jobdir / GATE_DIR / GATE_READY
        ahead = _Judge(self.ref, self.plan, self.jobdir, override=self.override, memo=self.memo)
        pending = list(self.plan.runs)
        while not self._stop.wait(0.05):
            if not ready.exists():
                pending = self._judge_ahead(ahead, pending)
                continue
            verdict = judge(
                self.ref, self.plan, None, self.jobdir, override=self.override, memo=self.memo, final=False
            )
            self.decided = verdict.error is None
            tmp = self.jobdir / GATE_INPUTS / (GATE_DECISION + ".part")
            tmp.write_text(json.dumps({"time": self.decided}))
            os.replace(tmp, self.jobdir / GATE_INPUTS / GATE_DECISION)
            return

    def _judge_ahead(self, ahead: _Judge, pending: list[PlanRun]) -> list[PlanRun]:
        """Compare the first pending run whose output (and, for an alt run, its main run's) is
        written; the rest stay pending. A failure is left for the verdict at gate/ready."""
        for i, pr in enumerate(pending):
            r = pr.ref
            wanted = [r.key] if r.variant == "main" else [run_key(r.spec.label, r.seed, "main"), r.key]
            if any(_signature(self.jobdir / gate_file(k, "out")) is None for k in wanted):
                continue
            rec = CaseRecord(r.spec.label, r.spec.kind, r.spec.index, r.spec.numel)  # thrown away
            try:
                if r.variant == "main":
                    ahead.main(pr, rec)
                else:
                    ahead.alt(pr, rec, None)
            except Exception:  # noqa: BLE001 - whatever went wrong, the verdict at gate/ready says it
                pass
            return pending[:i] + pending[i + 1 :]
        return pending
