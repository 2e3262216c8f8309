"""The reference half of the verification gate: inputs and `Model` outputs, as plain data.

`python -m runner.child` runs this job on the *reference module* (the run's initial upload:
candidates may not change Model or the input functions, see `loop.reference_changes`). No
candidate's code is ever imported here. For every seed it draws the module's cases, builds
Model from the seed, runs it on each selected case, and writes into the job's directory:

    gate/<case>-s<seed>-<variant>.in.kot     the inputs (runner.tensordata, layout kept)
    gate/<case>-s<seed>-<variant>.out.kot    Model's output
    gate/<case>-s<seed>-<variant>.exact.kot  Model's output in float64 (see below)

`variant` is `main`, or `alt` for the sensitivity check: the same case drawn from another
seed (seed + ALT_SEED_OFFSET) and run through the same seed's Model. When the module has no
`get_verify_inputs()`, odd-shaped cases are derived from the first timed case
(runner.childlib.derive). The response says which cases were selected, skipped, derived (or
why none could be), and each run's FLOPs and bytes; the worker keeps the outputs and hands the
inputs to each candidate's verify job (runner/gate.py). See runner/childlib/verify.py for the
whole gate and its threat model.

When Model's output holds a float32 tensor and no input is a 16-bit or 8-bit float, it is also
run once more with its parameters and its float32 inputs cast to float64 (exactly: every
float32 is a float64). That output says how far the float32 reference itself is from the
exact answer: a long float32 sum or dot whose terms cancel is off by far more than the
float32 tolerance, and a candidate as accurate as the reference must not be failed for it
(runner/compare.py, `within_reference_error`). A Model that cannot run in float64 (an op
without a float64 kernel, an output of another structure) just has no exact output: its run's
record says `"exact": false`, and its comparisons keep the float32 table alone. Nor is one kept
where the float32 output is the float64 one rounded (element-wise work): nothing to allow.

Options: seeds (the request's), timed_seeds (seeds on which the timed cases run; default all),
alt_seeds (seeds that also get the alt variant), cpu_max_elements, derive (default true), exact
(default true: the float64 run above).
Runs only in the sandbox child.
"""

from __future__ import annotations

import copy
import os
import types
from collections.abc import Sequence
from typing import Any

from runner import tensordata
from runner.backends import Backend
from runner.childlib import derive
from runner.childlib.hostile import (
    CaseSpec,
    clone_inputs,
    draw_device,
    inputs_of,
    numel_of,
    seeded_inputs,
    select_cases,
    user_call,
)
from runner.childlib.module import to_device
from runner.childlib.phases import phase
from runner.childlib.timing import Reads, count_flops, flatten, storage_key, work_of_case
from runner.errors import JobFailed
from runner.protocol import ALT_SEED_OFFSET, GATE_DIR, JobRequest, gate_file, run_key

DEFAULT_CPU_MAX_ELEMENTS = 1 << 16


def build_reference(module: types.ModuleType, seed: int, device: Any) -> Any:
    """Model alone, from the seed (the candidate job builds it the same way for ModelNew's state)."""
    import torch

    init = list(module.get_init_inputs())
    torch.manual_seed(seed)
    return module.Model(*init).to(device).eval()


def run_reference(
    ref: Any, inputs: list[Any], backend: Backend, paths: Sequence[str], reads: Reads | None = None
) -> tuple[Any, int]:
    """Model's output on `inputs` (copies: a forward that writes its inputs changes nothing) and
    its FLOPs; `reads` records what it read of `inputs` themselves."""
    import torch

    copies = clone_inputs(inputs)

    def forward() -> Any:
        with torch.no_grad():
            out = ref(*copies)
        backend.synchronize()
        return out

    result = user_call(lambda: count_flops(forward, reads), what="the reference Model.forward", paths=paths)
    if reads is not None:
        reads.rename(
            {storage_key(c): storage_key(x) for c, x in zip(copies, inputs, strict=True) if c is not x}
        )
    return result


def wants_exact(inputs: Sequence[Any], out: Any) -> bool:
    """Whether a float64 run says something: a float32 output, and inputs that cast exactly."""
    import torch

    narrow = (torch.float16, torch.bfloat16)
    if any(isinstance(x, torch.Tensor) and (x.dtype in narrow or x.element_size() == 1 and x.is_floating_point())
           for x in inputs):  # fmt: skip
        return False  # the reference's precision is the 16-bit inputs', and their tolerance wide
    return any(t.dtype == torch.float32 for t in flatten(out))


def run_exact(
    module: types.ModuleType, seed: int, inputs: list[Any], out: Any, backend: Backend, models: dict[int, Any]
) -> Any:
    """Model (built from `seed`, in float64; kept in `models` for the seed's other runs) on
    `inputs` with float32 tensors cast to float64. None where it raises, where its output's
    structure differs from `out`'s (then no exact bound), or where every float32 output of the
    reference is the float64 one rounded (element-wise work: the reference has no error to allow,
    and the file would only cost its write)."""
    import torch

    def widen(x: Any) -> Any:
        return x.to(torch.float64) if isinstance(x, torch.Tensor) and x.dtype == torch.float32 else x

    try:
        if seed not in models:
            models.clear()
            models[seed] = build_reference(module, seed, backend.device).double()
        with torch.no_grad():
            exact = models[seed](*[widen(x) for x in clone_inputs(inputs)])
        backend.synchronize()
    except Exception:  # an op without a float64 kernel: the run keeps its float32 bound
        return None
    got, want = flatten(exact), flatten(out)
    if len(got) != len(want) or any(g.shape != w.shape for g, w in zip(got, want, strict=True)):
        return None
    if all(torch.equal(g.to(w.dtype), w) for g, w in zip(got, want, strict=True) if w.dtype == torch.float32):
        return None
    return exact


def input_shapes(timed: list[list], extra: list[list]) -> list[dict[str, Any]]:
    """Shapes and dtypes of every case's inputs, in forward's argument order (scalars: shape []
    and their type name): what the rules proposer sizes autotune spaces and row limits by."""
    import torch

    out = []
    for kind, pool in (("timed", timed), ("verify", extra)):
        for i, inputs in enumerate(pool):
            out.append(
                {
                    "kind": kind,
                    "index": i,
                    "shapes": [list(x.shape) if isinstance(x, torch.Tensor) else [] for x in inputs],
                    "dtypes": [
                        str(x.dtype).removeprefix("torch.")
                        if isinstance(x, torch.Tensor)
                        else type(x).__name__
                        for x in inputs
                    ],
                }
            )
    return out


def same_layout(a: Sequence[Any], b: Sequence[Any]) -> bool:
    """Two input lists with the same tensor shapes in the same places (some modules draw shapes too)."""
    import torch

    if len(a) != len(b):
        return False
    return all(
        (not isinstance(x, torch.Tensor) and not isinstance(y, torch.Tensor))
        or (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.shape == y.shape)
        for x, y in zip(a, b, strict=True)
    )


def _shape_only_output(module: types.ModuleType, seed: int, inputs: list[Any]) -> Any:
    """Model's output on `inputs` computed on the meta device (shapes, no values): the original
    case's output structure when that case is too big to run here; None if meta cannot run it."""
    import torch

    try:
        ref = build_reference(module, seed, "meta")
        with torch.no_grad():
            return ref(*[x.to("meta") if isinstance(x, torch.Tensor) else x for x in inputs])
    except Exception:  # not every op has a meta kernel: then derived cases are not shape-checked
        return None


def reference_job(req: JobRequest, backend: Backend, module: types.ModuleType) -> dict[str, Any]:
    opts = req.options
    paths = [req.module]
    seeds = list(req.seeds) or [0]
    timed_seeds = set(opts.get("timed_seeds", seeds))
    alt_seeds = set(opts.get("alt_seeds", ()))
    max_numel = int(opts.get("cpu_max_elements", DEFAULT_CPU_MAX_ELEMENTS)) if backend.kind == "cpu" else None
    os.makedirs(GATE_DIR, exist_ok=True)
    result: dict[str, Any] = {
        "input_shapes": [],
        "selected": [],
        "skipped": [],
        "derived": [],
        "derive_note": "",
        "runs": [],
        "alt_unavailable": [],
        "seeds": seeds,
    }
    selected: list[CaseSpec] = []
    derivations: list[derive.Derivation] = []
    derived_specs: list[CaseSpec] = []

    models64: dict[int, Any] = {}  # the float64 Model of the seed being run

    def run(ref: Any, spec: CaseSpec, seed: int, variant: str, inputs: list[Any]) -> Any:
        key = run_key(spec.label, seed, variant)
        with phase("handoff"):
            tensordata.write(gate_file(key, "in"), list(inputs), keep_layout=True)
        device_inputs = to_device(list(inputs), backend.device)
        with phase("reference"):
            reads = Reads()
            out, flops = run_reference(ref, device_inputs, backend, paths, reads)
        work = work_of_case(ref, device_inputs, out, reads)
        with phase("handoff"):
            tensordata.write(gate_file(key, "out"), out)
        exact = None
        if opts.get("exact", True) and wants_exact(device_inputs, out):
            with phase("reference"):
                exact = run_exact(module, seed, device_inputs, out, backend, models64)
            if exact is not None:
                with phase("handoff"):
                    tensordata.write(gate_file(key, "exact"), exact)
        result["runs"].append(
            {
                "label": spec.label,
                "seed": seed,
                "variant": variant,
                "flops": flops,
                "exact": exact is not None,
                **work,
            }
        )
        return out

    for si, seed in enumerate(seeds):
        timed, extra = seeded_inputs(module, seed, paths, draw_device(backend))
        if si == 0:
            result["input_shapes"] = input_shapes(timed, extra)
            selected, skipped = select_cases(timed, extra, indices=req.cases, max_numel=max_numel)
            result["skipped"] = [s.to_json() for s in skipped]
            if not selected:
                raise JobFailed(
                    "no_checkable_case",
                    "no case is small enough to check on this device "
                    f"(limit {max_numel} elements); add get_verify_inputs() with small shapes",
                    result=result,
                )
        with phase("build"):
            ref = user_call(lambda seed=seed: build_reference(module, seed, backend.device),
                            what="building Model", paths=paths)  # fmt: skip
        alt = (
            seeded_inputs(module, seed + ALT_SEED_OFFSET, paths, draw_device(backend))
            if seed in alt_seeds
            else None
        )
        outputs: dict[str, Any] = {}
        for spec in selected:
            if spec.kind == "timed" and seed not in timed_seeds:
                continue
            inputs = inputs_of(spec, timed, extra)
            outputs[spec.label] = run(ref, spec, seed, "main", inputs)
            if alt is not None:
                pool = alt[0] if spec.kind == "timed" else alt[1]
                if spec.index < len(pool) and same_layout(inputs, pool[spec.index]):
                    run(ref, spec, seed, "alt", pool[spec.index])
                else:
                    result["alt_unavailable"].append([spec.label, seed])
        if si == 0 and not extra and opts.get("derive", True):
            with phase("derive"):
                derivations, why = _derive(
                    module, seed, ref, timed[0], outputs.get("case 0"), max_numel, backend, paths
                )
            result["derived"] = [
                {
                    "label": f"derived {i}",
                    "from": "case 0",
                    "sizes": [list(p) for p in d.sizes],
                    "what": d.what,
                }
                for i, d in enumerate(derivations)
            ]
            result["derive_note"] = _note(derivations, why)
        for i, d in enumerate(derivations):
            inputs = d.apply(timed[0])
            spec = CaseSpec(f"derived {i}", "derived", i, numel_of(inputs))
            if si == 0:
                derived_specs.append(spec)
            run(ref, spec, seed, "main", inputs)
            if alt is not None:
                if same_layout(timed[0], alt[0][0]):
                    run(ref, spec, seed, "alt", d.apply(alt[0][0]))
                else:
                    result["alt_unavailable"].append([spec.label, seed])
        del ref, outputs
        models64.clear()
        backend.empty_cache()
    result["selected"] = [s.to_json() for s in (*selected, *derived_specs)]
    return result


def _derive(
    module: types.ModuleType,
    seed: int,
    ref: Any,
    first: list[Any],
    first_output: Any,
    max_numel: int | None,
    backend: Backend,
    paths: Sequence[str],
) -> tuple[list[derive.Derivation], str]:
    """Derivations of the first timed case that the reference accepts. The trial runs are on
    the CPU: shrunk integer indices out of range raise there, where on a GPU they would end
    the device context in a device-side assert."""
    import torch

    init = list(module.get_init_inputs())
    fixed = derive.fixed_sizes(ref, init)
    cpu_ref = ref if backend.kind == "cpu" else copy.deepcopy(ref).to("cpu")
    cpu_first = [x.cpu() if isinstance(x, torch.Tensor) else x for x in first]
    original = first_output
    if original is None:
        original = _shape_only_output(module, seed, cpu_first)

    def trial(inputs: list[Any]) -> Any:
        with torch.no_grad():
            return user_call(lambda: cpu_ref(*clone_inputs(inputs)), what="the reference on a derived case",
                             paths=paths)  # fmt: skip

    return derive.choose(cpu_first, fixed, original, trial, max_numel)


def _note(derivations: list[derive.Derivation], why: str) -> str:
    if derivations:
        return "odd-shaped cases derived from case 0 (the module has no get_verify_inputs): " + "; ".join(
            f"derived {i}: {d.describe()}" for i, d in enumerate(derivations)
        )
    return f"no odd-shaped case could be derived from case 0: {why or 'none applies'}"
