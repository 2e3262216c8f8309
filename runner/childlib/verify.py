"""The verification gate (DESIGN.md, "Verification gate"), run inside the sandbox child.

A candidate `ModelNew` passes only when, for every selected case and every seed:

1. both models are built from the same seed, ModelNew taking Model's state dict, Model and
   the inputs always coming from the *parent* file (a candidate cannot redefine what it is
   judged against);
2. it launches at least one Triton kernel (every timed case must launch one);
3. its output has the reference's structure, shapes and dtypes (`shape_mismatch`,
   `dtype_mismatch`);
4. NaN, +Inf and -Inf sit in exactly the same places (`nan_mismatch`);
5. the finite values agree within the tolerance of the output dtype (`incorrect`, table below);
6. its output changes where the reference's changes when the input changes (first seed:
   each case is run again on another seed's inputs; `constant_output` catches cached or
   stored answers).

Unwritten outputs: before each candidate call the backend refills the allocator's free
memory with NaN (`Backend.poison`), so an element the kernel never stores reads as NaN, not
as a lucky leftover of the reference's run, and step 4 or 5 fails.

Tolerances, by output dtype and by whether the reference does matmul-like work (FLOPs
counted by torch's FlopCounterMode > 0 means a dot: Triton's `tl.dot` on fp32 uses TF32 by
default, ~1e-3 relative error per product). An output passes when BOTH hold on its finite
elements, with s = RMS of the reference (1 when the reference is all zeros):

    elementwise   |out - ref| <= atol * s + rtol * |ref|
    global        ||out - ref||_2 / ||ref||_2 <= l2

| dtype          | work | atol | rtol | l2    | why |
|----------------|------|------|------|-------|-----|
| float64        | any  | 1e-7 | 1e-7 | 1e-9  | fp64 math; only summation order differs |
| float32        | none | 1e-4 | 1e-4 | 1e-5  | element-wise/reductions: order and fast exp/div differ by ulps |
| float32        | dot  | 2e-2 | 1e-2 | 5e-3  | TF32 (10-bit mantissa) dots accumulate ~1e-3 relative error |
| float16        | none | 1e-3 | 5e-3 | 2e-3  | 1 ulp of fp16 is ~1e-3 relative |
| float16        | dot  | 1e-2 | 1e-2 | 5e-3  | fp32 accumulation in another order, rounded to fp16 |
| bfloat16       | none | 1e-2 | 2e-2 | 1e-2  | 1 ulp of bf16 is ~8e-3 relative |
| bfloat16       | dot  | 3e-2 | 3e-2 | 2e-2  | |
| float8 (any)   | any  | 1.25e-1 | 1.25e-1 | 6e-2 | 3-bit mantissa |
| integer / bool | any  | exact | | | |

Why atol scales with s: a reduction or a dot produces values near zero by cancellation whose
absolute error is set by the size of the operands, not by the value itself; an absolute
tolerance in units of the output's RMS is scale-free (it judges a 1e-6-scaled and a
1e6-scaled problem alike). Why two checks: the global L2 check is the precision bar (it sees
a slightly wrong constant everywhere); the elementwise check catches a few grossly wrong
elements (one bad row of a big tensor) that an L2 over millions of elements would hide.
Options: `tolerance` = {"atol":..,"rtol":..,"l2":..} overrides the table for every output.
"""

from __future__ import annotations

import math
import types
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from runner.backends import Backend
from runner.childlib.hostile import (
    CaseSpec,
    clone_inputs,
    draw_device,
    inputs_of,
    seeded_inputs,
    select_cases,
    user_call,
)
from runner.childlib.launches import parse_target, record_launches
from runner.childlib.module import build_models, to_device
from runner.childlib.phases import phase
from runner.childlib.timing import count_flops, flatten, time_cases, work_of_case
from runner.errors import JobFailed
from runner.protocol import JobRequest

DEFAULT_CPU_MAX_ELEMENTS = 1 << 16
SENSITIVITY_SEED_OFFSET = 1_000_003


@dataclass(frozen=True)
class Tolerance:
    atol: float  # in units of the reference's RMS
    rtol: float
    l2: float  # relative L2 error
    exact: bool = False


EXACT = Tolerance(0.0, 0.0, 0.0, exact=True)

# (dtype class, has_dot) -> tolerance; see the table in the module docstring.
TOLERANCES: dict[tuple[str, bool], Tolerance] = {
    ("float64", False): Tolerance(1e-7, 1e-7, 1e-9),
    ("float64", True): Tolerance(1e-7, 1e-7, 1e-9),
    ("float32", False): Tolerance(1e-4, 1e-4, 1e-5),
    ("float32", True): Tolerance(2e-2, 1e-2, 5e-3),
    ("float16", False): Tolerance(1e-3, 5e-3, 2e-3),
    ("float16", True): Tolerance(1e-2, 1e-2, 5e-3),
    ("bfloat16", False): Tolerance(1e-2, 2e-2, 1e-2),
    ("bfloat16", True): Tolerance(3e-2, 3e-2, 2e-2),
    ("float8", False): Tolerance(1.25e-1, 1.25e-1, 6e-2),
    ("float8", True): Tolerance(1.25e-1, 1.25e-1, 6e-2),
}


def tolerance_for(dtype: Any, has_dot: bool, override: dict[str, float] | None = None) -> Tolerance:
    """The tolerance for an output of `dtype` (a torch dtype or its name)."""
    name = str(dtype).removeprefix("torch.")
    if name.startswith("complex"):
        name = "float64" if name == "complex128" else "float32"
    if name.startswith("float8"):
        name = "float8"
    base = TOLERANCES.get((name, has_dot))
    if base is None:
        return EXACT
    if override:
        return Tolerance(
            float(override.get("atol", base.atol)),
            float(override.get("rtol", base.rtol)),
            float(override.get("l2", base.l2)),
        )
    return base


@dataclass
class Comparison:
    ok: bool
    kind: str | None = None  # failure kind when not ok
    message: str = ""
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    rel_l2_err: float = 0.0
    bad_elements: int = 0
    tolerance: dict[str, Any] | None = None

    def merge(self, other: Comparison) -> Comparison:
        """The worst of two comparisons (over outputs, or over seeds)."""
        first_bad = self if not self.ok else other
        return Comparison(
            ok=self.ok and other.ok,
            kind=first_bad.kind,
            message=first_bad.message,
            max_abs_err=max(self.max_abs_err, other.max_abs_err),
            max_rel_err=max(self.max_rel_err, other.max_rel_err),
            rel_l2_err=max(self.rel_l2_err, other.rel_l2_err),
            bad_elements=self.bad_elements + other.bad_elements,
            tolerance=self.tolerance or other.tolerance,
        )


def _float(x: Any) -> float:
    value = float(x)
    return value if math.isfinite(value) else float("inf")


def compare_tensor(out: Any, ref: Any, tol: Tolerance, name: str = "output") -> Comparison:
    """Compare one output tensor with the reference's (shape, dtype, NaN/Inf parity, values)."""
    import torch

    if not isinstance(out, torch.Tensor):
        return Comparison(
            False, "shape_mismatch", f"{name} is a {type(out).__name__}, the reference a tensor"
        )
    if tuple(out.shape) != tuple(ref.shape):
        return Comparison(
            False, "shape_mismatch", f"{name} has shape {tuple(out.shape)}, the reference {tuple(ref.shape)}"
        )
    if out.dtype != ref.dtype:
        return Comparison(False, "dtype_mismatch", f"{name} has dtype {out.dtype}, the reference {ref.dtype}")
    o, r = out.detach(), ref.detach().to(out.device)
    if o.is_complex():
        o, r = torch.view_as_real(o), torch.view_as_real(r)
    tol_json = asdict(tol)
    if tol.exact or not o.is_floating_point():
        bad = int((o != r).sum().item())
        if bad:
            diff = (o.to(torch.float64) - r.to(torch.float64)).abs()
            return Comparison(
                False,
                "incorrect",
                f"{name}: {bad} of {r.numel()} elements differ (exact dtype)",
                max_abs_err=_float(diff.max()),
                bad_elements=bad,
                tolerance=tol_json,
            )
        return Comparison(True, tolerance=tol_json)
    work = torch.float64 if r.dtype == torch.float64 else torch.float32
    o, r = o.to(work), r.to(work)
    for what, mask_o, mask_r in (
        ("NaN", torch.isnan(o), torch.isnan(r)),
        ("+Inf", o == math.inf, r == math.inf),
        ("-Inf", o == -math.inf, r == -math.inf),
    ):
        mismatch = int((mask_o != mask_r).sum().item())
        if mismatch:
            return Comparison(
                False,
                "nan_mismatch",
                f"{name}: {what} in {int(mask_o.sum())} places, the reference in "
                f"{int(mask_r.sum())} ({mismatch} places differ)",
                tolerance=tol_json,
            )
    finite = torch.isfinite(r)
    of, rf = o[finite], r[finite]
    if rf.numel() == 0:
        return Comparison(True, tolerance=tol_json)
    diff = (of - rf).abs()
    ref_norm = float(torch.linalg.vector_norm(rf))
    err_norm = float(torch.linalg.vector_norm(diff))
    scale = ref_norm / math.sqrt(rf.numel()) if ref_norm > 0 else 1.0
    bound = tol.atol * scale + tol.rtol * rf.abs()
    bad = int((diff > bound).sum().item())
    max_abs = _float(diff.max())
    significant = rf.abs() > tol.atol * scale
    max_rel = _float((diff[significant] / rf[significant].abs()).max()) if bool(significant.any()) else 0.0
    rel_l2 = err_norm / ref_norm if ref_norm > 0 else (0.0 if err_norm == 0 else float("inf"))
    result = Comparison(True, None, "", max_abs, max_rel, rel_l2, bad, tol_json)
    if bad or (ref_norm > 0 and rel_l2 > tol.l2):
        result.ok = False
        result.kind = "incorrect"
        result.message = (
            f"{name}: max abs error {max_abs:.3g}, max rel error {max_rel:.3g}, "
            f"relative L2 error {rel_l2:.3g}; {bad} of {rf.numel()} elements outside "
            f"atol {tol.atol:g}*rms + rtol {tol.rtol:g}*|ref| (l2 bound {tol.l2:g})"
        )
    return result


def compare_outputs(
    out: Any, ref: Any, *, has_dot: bool, override: dict[str, float] | None = None
) -> Comparison:
    """Compare a forward's whole output (a tensor or nested tuples/lists of tensors)."""
    got, want = _structure(out), _structure(ref)
    if got != want:
        return Comparison(
            False, "shape_mismatch", f"ModelNew returned {_describe(got)}, the reference {_describe(want)}"
        )
    outs, refs = flatten(out), flatten(ref)
    if len(refs) == 0:
        return Comparison(False, "bad_inputs", "the reference Model returned no tensor")
    if len(outs) != len(refs):
        return Comparison(
            False, "shape_mismatch", f"ModelNew returned {len(outs)} tensors, the reference {len(refs)}"
        )
    total = Comparison(True)
    for i, (o, r) in enumerate(zip(outs, refs, strict=True)):
        name = "output" if len(refs) == 1 else f"output[{i}]"
        total = total.merge(compare_tensor(o, r, tolerance_for(r.dtype, has_dot, override), name))
        if not total.ok:
            break
    return total


def _structure(value: Any) -> Any:
    """The nesting of a forward's output: 'tensor', ('seq', ...), ('dict', keys, ...) or a type name.

    Lists and tuples count as the same (callers unpack both alike)."""
    import torch

    if isinstance(value, torch.Tensor):
        return "tensor"
    if isinstance(value, (list, tuple)):
        return ("seq", tuple(_structure(v) for v in value))
    if isinstance(value, dict):
        keys = tuple(sorted(value, key=str))
        return ("dict", keys, tuple(_structure(value[k]) for k in keys))
    return type(value).__name__


def _describe(structure: Any) -> str:
    if structure == "tensor":
        return "a tensor"
    if isinstance(structure, tuple) and structure[0] == "seq":
        return f"a sequence of {len(structure[1])} ({', '.join(_describe(s) for s in structure[1])})"
    if isinstance(structure, tuple) and structure[0] == "dict":
        return f"a dict with keys {list(structure[1])}"
    return f"a {structure}"


def unchanged_fraction(out_a: Any, out_b: Any, ref_a: Any, ref_b: Any, *, has_dot: bool) -> float | None:
    """Of the elements where the reference changed between two inputs (beyond tolerance), the
    fraction where the candidate's output stayed bit-identical; None if the reference did not change."""
    import torch

    changed_total = 0
    unchanged_total = 0
    for oa, ob, ra, rb in zip(flatten(out_a), flatten(out_b), flatten(ref_a), flatten(ref_b), strict=False):
        if ra.shape != rb.shape or oa.shape != ra.shape or ob.shape != rb.shape:
            continue
        if not ra.is_floating_point():
            changed = ra != rb
        else:
            tol = tolerance_for(ra.dtype, has_dot)
            a, b = ra.detach().float(), rb.detach().float()
            both = torch.isfinite(a) & torch.isfinite(b)
            scale = float(a[both].pow(2).mean().sqrt()) if bool(both.any()) else 1.0
            changed = both & ((a - b).abs() > tol.atol * (scale or 1.0) + tol.rtol * a.abs())
        same = (
            (oa.detach() == ob.detach().to(oa.device)) | (torch.isnan(oa) & torch.isnan(ob))
            if oa.is_floating_point()
            else (oa.detach() == ob.detach().to(oa.device))
        )
        changed_total += int(changed.sum())
        unchanged_total += int((changed & same.to(changed.device)).sum())
    if changed_total == 0:
        return None
    return unchanged_total / changed_total


# ---------------------------------------------------------------- the gate


@dataclass
class CaseRecord:
    """One case's verdict over all seeds; raw numbers only (the parent applies the policy)."""

    label: str
    kind: str
    index: int
    numel: int
    seeds: list[int]
    correct: bool = True
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    rel_l2_err: float = 0.0
    tolerance: dict[str, Any] | None = None
    launches: int = 0
    kernels: list[str] | None = None
    # what @triton.autotune chose for this case's shapes, one line per autotuned launch
    autotune_choices: list[str] = field(default_factory=list)
    # kernel -> its integer arguments at this case's first launch of it (sizes the rules proposer
    # cannot work out from the input shapes, e.g. a weight's dimension)
    launch_ints: dict[str, dict[str, int]] = field(default_factory=dict)
    # the first seed's launches (kernel, grid, num_warps, num_stages): with the timing, the
    # tier-1 profile of the version under test, so no profile job has to run it again
    launch_info: list[dict[str, Any]] = field(default_factory=list)
    sensitivity: str = "not checked"  # 'changes with input', 'reference constant', 'not checked'
    flops: int = 0
    bytes: int = 0
    dtype: str = ""


def _build(
    parent: types.ModuleType, cand: types.ModuleType, seed: int, backend: Backend, paths: Sequence[str]
) -> tuple[Any, Any]:
    def build() -> tuple[Any, Any]:
        return build_models(parent, seed, backend.device, new_module=cand)

    try:
        return user_call(build, what="building Model / ModelNew", paths=paths)
    except JobFailed as exc:
        text = str(exc.__cause__ or "")
        if "state_dict" in text or "Missing key(s)" in text or "Unexpected key(s)" in text:
            raise JobFailed("state_dict_mismatch", exc.message, line=exc.line) from exc.__cause__
        raise


def _launch_target(req: JobRequest, backend: Backend) -> Any:
    return backend.target() or parse_target(req.target)


def run_candidate(
    new: Any,
    inputs: list[Any],
    backend: Backend,
    target: Any,
    paths: Sequence[str],
    poison_sizes: Sequence[int],
) -> tuple[Any, list[Any]]:
    """One candidate forward with launches recorded (and executed); (output, launches).

    `poison_sizes`: byte sizes of the reference's outputs; a NaN block of each size is freed
    just before the call, so the candidate's output buffers are likely to be those blocks.
    """
    import torch

    args = clone_inputs(inputs)  # before poisoning: the clones must not take the NaN blocks
    for size in reversed(poison_sizes):
        backend.poison(size)
    with record_launches(execute=True, target=target) as recorder:

        def forward() -> Any:
            with torch.no_grad():
                out = new(*args)
            backend.synchronize()
            return out

        out = user_call(forward, what="ModelNew.forward", paths=paths)
    return out, recorder.launches


def run_reference(ref: Any, inputs: list[Any], backend: Backend, paths: Sequence[str]) -> tuple[Any, int]:
    import torch

    def forward() -> Any:
        with torch.no_grad():
            out = ref(*clone_inputs(inputs))
        backend.synchronize()
        return out

    return user_call(lambda: count_flops(forward), what="the reference Model.forward", paths=paths)


def verify_job(req: JobRequest, backend: Backend, parent: types.ModuleType, cand: types.ModuleType) -> dict:
    """The whole gate; returns the raw result or raises JobFailed carrying the partial result."""
    opts = req.options
    paths = [p for p in (req.module, req.candidate) if p]
    seeds = list(req.seeds) or [0]
    max_numel = int(opts.get("cpu_max_elements", DEFAULT_CPU_MAX_ELEMENTS)) if backend.kind == "cpu" else None
    override = opts.get("tolerance")
    # Big timed cases may be checked on fewer seeds than the small verify cases (each extra
    # seed costs a full reference and candidate run); None: every seed.
    timed_seeds = opts.get("timed_case_seeds")
    target = _launch_target(req, backend)
    records: dict[str, CaseRecord] = {}
    selected: list[CaseSpec] = []
    skipped: list[CaseSpec] = []

    shapes: list[dict[str, Any]] = []

    def partial() -> dict:
        return {
            "input_shapes": shapes,
            "passed": False,
            "cases": [asdict(r) for r in records.values()],
            "checked": [s.label for s in selected],
            "skipped": [s.to_json() for s in skipped],
            "seeds": seeds,
        }

    def fail(kind: str, message: str, spec: CaseSpec, seed: int, line: int | None = None) -> JobFailed:
        if spec.label in records:
            records[spec.label].correct = False
        return JobFailed(kind, f"{spec.label}, seed {seed}: {message}", line=line, result=partial())

    for si, seed in enumerate(seeds):
        timed, extra = seeded_inputs(parent, seed, paths, draw_device(backend))
        if si == 0:
            shapes = input_shapes(timed, extra)
            selected, skipped = select_cases(timed, extra, indices=req.cases, max_numel=max_numel)
            if not selected:
                raise JobFailed(
                    "no_checkable_case",
                    "no case is small enough to check on this device "
                    f"(limit {max_numel} elements); add get_verify_inputs() with small shapes",
                    result=partial(),
                )
        with phase("build"):
            ref, new = _build(parent, cand, seed, backend, paths)
        alt = (
            seeded_inputs(parent, seed + SENSITIVITY_SEED_OFFSET, paths, draw_device(backend))
            if si == 0
            else None
        )
        for spec in selected:
            if spec.kind == "timed" and timed_seeds is not None and si >= int(timed_seeds):
                continue
            record = records.setdefault(
                spec.label, CaseRecord(spec.label, spec.kind, spec.index, spec.numel, [])
            )
            record.seeds.append(seed)
            inputs = to_device(inputs_of(spec, timed, extra), backend.device)
            try:
                with phase("reference"):
                    ref_out, flops = run_reference(ref, inputs, backend, paths)
                work = work_of_case(ref, inputs, ref_out)
                sizes = [t.numel() * t.element_size() for t in flatten(ref_out)]
                with phase("candidate"):  # the first call of a case compiles (and autotunes)
                    out, launches = run_candidate(new, inputs, backend, target, paths, sizes)
            except JobFailed as exc:
                exc.message = f"{spec.label}, seed {seed}: {exc.message}"
                exc.args = (exc.message,)
                exc.result = partial()
                raise
            record.flops, record.bytes, record.dtype = flops, work["bytes"], work["dtype"]
            record.launches = max(record.launches, len(launches))
            record.kernels = sorted({launch.kernel for launch in launches})
            for choice in (launch.chosen_config() for launch in launches):
                if choice and choice not in record.autotune_choices:
                    record.autotune_choices.append(choice)
            if not record.launch_info:
                record.launch_info = [launch.info() for launch in launches]
            for launch in launches:
                record.launch_ints.setdefault(
                    launch.kernel, {a.name: int(a.value) for a in launch.args if a.kind == "int"}
                )
            if not launches and spec.kind == "timed":
                raise fail(
                    "no_triton_launch",
                    "ModelNew.forward launched no Triton kernel "
                    "(a ModelNew that only calls PyTorch is not a Triton kernel)",
                    spec,
                    seed,
                )
            cmp = compare_outputs(out, ref_out, has_dot=flops > 0, override=override)
            record.max_abs_err = max(record.max_abs_err, cmp.max_abs_err)
            record.max_rel_err = max(record.max_rel_err, cmp.max_rel_err)
            record.rel_l2_err = max(record.rel_l2_err, cmp.rel_l2_err)
            record.tolerance = cmp.tolerance or record.tolerance
            if not cmp.ok:
                raise fail(cmp.kind or "incorrect", cmp.message, spec, seed)
            if alt is not None:
                alt_inputs = inputs_of(spec, *alt) if _same_layout(spec, alt, timed, extra) else None
                if alt_inputs is None:
                    record.sensitivity = "not checked"
                else:
                    with phase("sensitivity"):
                        alt_inputs = to_device(alt_inputs, backend.device)
                        ref_b, _ = run_reference(ref, alt_inputs, backend, paths)
                        out_b, _ = run_candidate(new, alt_inputs, backend, target, paths, sizes)
                    frac = unchanged_fraction(out, out_b, ref_out, ref_b, has_dot=flops > 0)
                    if frac is None:
                        record.sensitivity = "reference constant"
                    elif frac > 0.5:
                        raise fail(
                            "constant_output",
                            f"the output did not change where the reference's did when the input "
                            f"changed ({100 * frac:.0f}% of those elements bit-identical): a cached "
                            "or stored answer",
                            spec,
                            seed,
                        )
                    else:
                        cmp_b = compare_outputs(out_b, ref_b, has_dot=flops > 0, override=override)
                        if not cmp_b.ok:
                            raise fail(
                                cmp_b.kind or "incorrect", "on other inputs: " + cmp_b.message, spec, seed
                            )
                        record.sensitivity = "changes with input"
                    del ref_b, out_b
            del out, ref_out
        if not any(r.launches for r in records.values()):
            raise JobFailed(
                "no_triton_launch", "ModelNew.forward launched no Triton kernel in any case", result=partial()
            )
        del ref, new
        backend.empty_cache()

    result = partial()
    result["passed"] = True
    if opts.get("time", True):
        work = {
            r.index: {"bytes": r.bytes, "flops": r.flops, "dtype": r.dtype}
            for r in records.values()
            if r.kind == "timed"
        }
        indices = [s.index for s in selected if s.kind == "timed"]
        with phase("timing"):
            result["timing"] = time_cases(
                req, backend, parent, cand if req.candidate else None, indices=indices, work=work, paths=paths
            )
    return result


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


def _same_layout(
    spec: CaseSpec, alt: tuple[list[list], list[list]], timed: list[list], extra: list[list]
) -> bool:
    """The other seed's case exists and has the same tensor shapes (some modules draw shapes too)."""
    import torch

    pool_alt = alt[0] if spec.kind == "timed" else alt[1]
    pool = timed if spec.kind == "timed" else extra
    if spec.index >= len(pool_alt):
        return False
    a, b = pool[spec.index], pool_alt[spec.index]
    if len(a) != len(b):
        return False
    return all(
        (not isinstance(x, torch.Tensor) and not isinstance(y, torch.Tensor))
        or (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.shape == y.shape)
        for x, y in zip(a, b, strict=True)
    )
