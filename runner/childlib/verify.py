"""The verification gate (DESIGN.md, "Verification gate"); here: its candidate half, the one
child process that runs the candidate's code.

The gate is three pieces in three places:

1. the **reference job** (runner/childlib/reference.py, a child that imports the run's
   reference module, never a candidate): per seed the inputs of every selected case, and
   Model's outputs on them, written as plain tensor data (runner/tensordata.py);
2. the **verify job** (this module): ModelNew of the candidate on exactly those inputs, each
   output written as plain tensor data, the Triton launches it made, a second run with what
   the kernels wrote perturbed, and (on a device) the timing against the parent;
3. the **trusted side** (runner/gate.py and runner/compare.py, in the worker, where no
   uploaded code runs): it parses both jobs' files strictly and decides. A candidate passes
   only when, for every selected case and every seed,
   - its output is plain `torch.Tensor`s (`type(x) is torch.Tensor`) on the job's device, in
     the reference's structure, shapes and dtypes (`type_mismatch`, `device_mismatch`,
     `shape_mismatch`, `dtype_mismatch`);
   - NaN, +Inf and -Inf sit exactly where the reference has them (`nan_mismatch`) and the
     finite values agree within the output dtype's tolerance (`incorrect`; the table is in
     runner/compare.py);
   - every timed case launched at least one Triton kernel (`no_triton_launch`);
   - on the first seed, its output changes where the reference's does when the inputs are
     drawn from another seed (`constant_output`: cached or stored answers);
   - on the verify and derived cases of the first seed (the smallest timed case when there
     are none), its output changes when every tensor argument the kernels wrote has the
     written elements perturbed after each launch (`launch_independent`: a decoy launch
     beside a PyTorch computation).
   When the module has no `get_verify_inputs()`, odd-shaped cases derived from its first case
   are checked too (runner/childlib/derive.py; the outcome's notes say which, or why none).

Unwritten outputs: before each candidate call the backend refills the allocator's free memory
with NaN (`Backend.poison`), so an element the kernel never stores reads as NaN, not as a lucky
leftover, and the NaN or value check fails.

Threat model (what each piece must assume, and what still holds against it):

* The candidate's code (ModelNew, its kernels, its module-level code) is hostile and runs in
  this process with the harness: it can patch anything here, walk the frames, read and write
  every file descriptor, and write any bytes to its job directory. So nothing it hands back
  is believed: the inputs come from the reference job; the reference's outputs never enter
  this process (the worker keeps them in its memory); the verdict is the worker's comparison
  of the bytes this job wrote with those outputs. Patching the harness, a tensor subclass, an
  object posing as a tensor, a lying `dtype`, patched `torch.isnan`, a forged response on the
  response pipe (found through /proc/self/fd) or forged output files can at most hand back
  wrong bytes, or none, which fail (`type_mismatch`, `incorrect`, `nan_mismatch`,
  `bad_output`, ...). What it cannot do is produce the reference's values without computing
  them: that is what the gate guarantees, on every case, seed and derived shape.
* The response channel (this job's JSON on stdout) can be forged; the worker takes from it only
  what cannot turn a wrong answer into a verified one: the launch records (counts, kernels,
  autotune choices, integer arguments: evidence for the proposers and the no-launch check),
  the perturbation run's bookkeeping, and the timings.
* What a hostile candidate can therefore still forge, and what bounds it:
  - that its output comes from its Triton kernels: the no-launch and launch-dependence checks
    run here and a candidate that subverts them (forged launch counts, detecting the perturbed
    run) passes them, but only with correct outputs: the worst case is a correct PyTorch
    forward reported as a Triton kernel;
  - its times, and its parent's (timed in this same process): a forged speedup can promote a
    *correct* candidate that is not faster. A time below the speed-of-light bound is flagged
    `suspect` and never counts as a win; above it nothing in this design re-measures the
    candidate outside its own process, so a forged but plausible time stands until a reviewer
    or a later run re-times it (bench/run.py re-verifies correctness, not speed). Times are
    evidence for ranking rewrites that a reviewer accepts or rejects, not part of the
    correctness guarantee.
* The reference job runs the reference module's code (Model, the input functions and
  whatever its module level does). That module is the uploader's own: it defines what is
  correct, so it can redefine its own reference (a module-level patch there is no different
  from another Model), but no candidate's code ever runs in it; for later candidates the
  worker caches its outputs per run and never recomputes them from a promoted candidate's file.
* The worker holds the reference outputs in its memory and the reference inputs in a private
  directory (0700). The candidate cannot read either only where the sandbox keeps the child
  out of the worker's memory and file system (runner/sandbox.py: an unprivileged uid in its
  own namespaces, a file system of its own); a child running as root with the host's /proc
  could read them.

The verify job's plan comes in `options["gate"]` (runner/gate.py builds it): the runs (case,
seed, variant and the bytes to poison), the runs to repeat perturbed, whether to wait for the
worker's decision before timing (so a candidate that fails is not timed), and the timed cases'
work. Inputs are read from gate-in/<run>.in.kot, outputs written to gate/<run>.out.kot in the
job's directory (runner.protocol).
"""

from __future__ import annotations

import json
import os
import time
import types
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from runner import tensordata
from runner.backends import Backend
from runner.childlib.compile_bound import with_compile_bound
from runner.childlib.hostile import clone_inputs, user_call
from runner.childlib.launches import Perturber, filled_allocations, parse_target, record_launches
from runner.childlib.module import build_models, to_device
from runner.childlib.phases import phase
from runner.childlib.timing import time_cases
from runner.errors import JobFailed
from runner.protocol import GATE_DECISION, GATE_DIR, GATE_INPUTS, GATE_READY, JobRequest, gate_file

DECISION_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Run:
    key: str  # file stem: runner.protocol.run_key(label, seed, variant)
    label: str
    seed: int
    variant: str  # 'main' or 'alt'
    poison: tuple[int, ...]  # byte sizes of the reference's outputs


@dataclass(frozen=True)
class Plan:
    runs: tuple[Run, ...]
    perturb: tuple[str, ...]  # keys of runs to repeat with the kernels' writes perturbed
    decision: bool  # wait for the worker's decision before timing
    decision_timeout_s: float
    timed: tuple[int, ...]  # timed case indices, for timing
    work: dict[int, dict[str, Any]]  # timed case index -> bytes, flops, dtype (the reference's)

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> Plan:
        raw = options.get("gate")
        if not isinstance(raw, dict):
            raise JobFailed("bad_request", "a verify job needs the gate's plan (runner.gate builds it)")
        try:
            runs = tuple(
                Run(
                    str(r["key"]),
                    str(r["label"]),
                    int(r["seed"]),
                    str(r["variant"]),
                    tuple(int(n) for n in r.get("poison", ())),
                )
                for r in raw["runs"]
            )
            return cls(
                runs=runs,
                perturb=tuple(str(k) for k in raw.get("perturb", ())),
                decision=bool(raw.get("decision", False)),
                decision_timeout_s=float(raw.get("decision_timeout_s", DECISION_TIMEOUT_S)),
                timed=tuple(int(i) for i in raw.get("timed", ())),
                work={int(k): dict(v) for k, v in (raw.get("work") or {}).items()},
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise JobFailed("bad_request", f"malformed gate plan: {exc}") from exc


def run_candidate(
    new: Any,
    inputs: list[Any],
    backend: Backend,
    target: Any,
    paths: Sequence[str],
    poison_sizes: Sequence[int],
    perturber: Perturber | None = None,
) -> tuple[Any, list[Any]]:
    """One candidate forward with launches recorded (and executed); (output, launches).

    `poison_sizes`: byte sizes of the reference's outputs; a NaN block of each size is freed
    just before the call, so the candidate's output buffers are likely to be those blocks.
    """
    import torch

    args = clone_inputs(inputs)  # before poisoning: the clones must not take the NaN blocks
    for size in reversed(poison_sizes):
        backend.poison(size)
    with record_launches(execute=True, target=target, perturber=perturber) as recorder:

        def forward() -> Any:
            with torch.no_grad():
                out = new(*args)
            backend.synchronize()
            return out

        out = user_call(forward, what="ModelNew.forward", paths=paths)
    return out, recorder.launches


def _launch_record(launches: list[Any]) -> dict[str, Any]:
    choices: list[str] = []
    for choice in (launch.chosen_config() for launch in launches):
        if choice and choice not in choices:
            choices.append(choice)
    ints: dict[str, dict[str, int]] = {}
    for launch in launches:
        ints.setdefault(launch.kernel, {a.name: int(a.value) for a in launch.args if a.kind == "int"})
    return {
        "launches": len(launches),
        "kernels": sorted({launch.kernel for launch in launches}),
        "autotune_choices": choices,
        "launch_ints": ints,
        "launch_info": [launch.info() for launch in launches],
    }


def _build(
    parent: types.ModuleType, cand: types.ModuleType, seed: int, backend: Backend, paths: Sequence[str]
) -> Any:
    """ModelNew of the candidate, with the state dict of the parent's Model built from `seed`."""

    def build() -> tuple[Any, Any]:
        return build_models(parent, seed, backend.device, new_module=cand)

    try:
        return user_call(build, what="building Model / ModelNew", paths=paths)[1]
    except JobFailed as exc:
        text = str(exc.__cause__ or "")
        if "state_dict" in text or "Missing key(s)" in text or "Unexpected key(s)" in text:
            raise JobFailed("state_dict_mismatch", exc.message, line=exc.line) from exc.__cause__
        raise


def _inputs(key: str, backend: Backend) -> list[Any]:
    try:
        value = tensordata.read(gate_file(key, "in", GATE_INPUTS))
    except tensordata.BadTensorData as exc:
        raise JobFailed("bad_request", f"the inputs of run {key}: {exc}") from exc
    if not isinstance(value, list):
        raise JobFailed("bad_request", f"the inputs of run {key} are not a list")
    return to_device(value, backend.device)


def _await_decision(plan: Plan) -> bool | None:
    """Tell the worker every output is out, and wait for whether to time: True, False, or
    None when no decision came within the plan's timeout."""
    with open(os.path.join(GATE_DIR, GATE_READY), "w") as fh:
        fh.write("ready\n")
    deadline = time.monotonic() + plan.decision_timeout_s
    path = os.path.join(GATE_INPUTS, GATE_DECISION)
    while time.monotonic() < deadline:
        try:
            with open(path, encoding="utf-8") as fh:
                return bool(json.load(fh).get("time"))
        except (OSError, ValueError, AttributeError):
            time.sleep(0.05)
    return None


@with_compile_bound  # options.compile_timeout_s: each compile of the candidate's kernels is bounded
def verify_job(req: JobRequest, backend: Backend, parent: types.ModuleType, cand: types.ModuleType) -> dict:
    """The candidate half of the gate: run the plan, hand back data; raises JobFailed with the
    records so far when user code fails."""
    plan = Plan.from_options(req.options)
    os.makedirs(GATE_DIR, exist_ok=True)
    paths = [p for p in (req.module, req.candidate) if p]
    target = backend.target() or parse_target(req.target)
    device_type = str(backend.device).split(":")[0]
    runs: dict[str, dict[str, Any]] = {}
    result: dict[str, Any] = {"runs": runs, "perturbed": {}}
    new, built_for = None, None
    by_key = {r.key: r for r in plan.runs}

    def model(seed: int) -> Any:
        nonlocal new, built_for
        if built_for != seed:
            new = None
            backend.empty_cache()
            with phase("build"):
                new = _build(parent, cand, seed, backend, paths)
            built_for = seed
        return new

    for run in plan.runs:
        try:
            inputs = _inputs(run.key, backend)
            with phase("candidate"):  # the first call of a case compiles (and autotunes)
                out, launches = run_candidate(model(run.seed), inputs, backend, target, paths, run.poison)
        except JobFailed as exc:
            exc.message = f"{run.label}, seed {run.seed}: {exc.message}"
            exc.args = (exc.message,)
            exc.result = result
            raise
        with phase("handoff"):
            tensordata.write(gate_file(run.key, "out"), out, strict=True, device=device_type)
        runs[run.key] = _launch_record(launches)
        del out, inputs

    go_on = True
    if plan.decision:
        with phase("decision"):
            decided = _await_decision(plan)
        result["decision"] = {True: "time", False: "stop", None: "none"}[decided]
        go_on = bool(decided)
    if req.options.get("time", True):
        if go_on:
            with phase("timing"):
                result["timing"] = time_cases(
                    req, backend, parent, cand if req.candidate else None, indices=list(plan.timed),
                    work=plan.work, paths=paths,
                )  # fmt: skip
        else:
            result["timing"] = {"timed": False, "reason": "not timed: the gate did not pass", "cases": []}
    # Last, after timing: a perturbed integer index can end a CUDA context in a device-side
    # assert, which must not cost the timing of a candidate that passed. Not at all when the
    # worker has already judged the candidate wrong.
    for key in plan.perturb if go_on else ():
        run = by_key[key]
        perturber = Perturber(backend.synchronize)
        raised = ""
        with phase("perturbation"):
            inputs, new_model = _inputs(key, backend), model(run.seed)
            try:
                with filled_allocations():
                    out, _ = run_candidate(new_model, inputs, backend, target, paths, run.poison, perturber)
            except JobFailed as exc:  # the forward failed on what the kernels wrote: it used it
                raised = exc.message
            else:
                tensordata.write(gate_file(key, "perturbed"), out, strict=True, device=device_type)
                del out
        result["perturbed"][key] = {
            "buffers": perturber.buffers,
            "elements": perturber.elements,
            "raised": raised,
        }
    return result
