"""The gate's comparison, on the trusted side: tolerances by dtype, NaN/Inf parity, structure.

`runner.gate` applies it in the worker to tensors the reference job and the candidate job
handed back as plain data (`runner.tensordata`); no candidate code runs in the process that
compares (see runner/childlib/verify.py for the whole gate and its threat model).

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

When the float32 reference is itself far from the exact answer. A float32 sum or dot whose terms
cancel (a dot of 1000 random products whose result is 0.1; a sparsemax threshold) carries a
rounding error the table's float32 bounds do not allow, so a candidate as accurate as the
reference, summing in another order, failed them. The reference job therefore also runs Model
in float64 (runner/childlib/reference.py), and an output that fails the table is judged again
against that exact output, with the reference's own error as the measure of float32 rounding
(`within_reference_error`): it passes when

    elementwise   |out - exact| <= atol * s + rtol * |exact| + 4 * max|ref - exact|
    global        ||out - exact||_2 / ||exact||_2 <= max(l2, 4 * ||ref - exact||_2 / ||exact||_2)

and only while the reference's error is rounding: a relative L2 of at most 1e-3, and the slack
at most 1e-3 of the output's largest magnitude (a Model that takes another path in float64
gives no slack at all). The comparison records that it was judged so (`tolerance["float64"]`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from runner.tensordata import Opaque


@dataclass(frozen=True)
class Tolerance:
    atol: float  # in units of the reference's RMS
    rtol: float
    l2: float  # relative L2 error
    exact: bool = False


EXACT = Tolerance(0.0, 0.0, 0.0, exact=True)
# judged against the float64 run: the float32 reference's own error, times this, is allowed ...
EXACT_FACTOR = 4.0
# ... while that error is rounding (relative L2, and slack against the largest magnitude)
EXACT_MAX_REL = 1e-3

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


# The comparison's passes run over chunks of this many elements: each pass over a whole output
# of 10^8 elements allocated and streamed a temporary as large (about ten of them); on chunks
# they stay in cache. On a 2-core machine a 59M-element bfloat16 output took 1.5-2.2 s whole,
# 0.45-0.57 s in chunks of 2^20.
CHUNK = 1 << 20


def _chunks(x: Any) -> Any:
    """The consecutive slices of a 1-D tensor, CHUNK elements each (views, nothing copied)."""
    return (x[i : i + CHUNK] for i in range(0, x.numel(), CHUNK))


def _finite(x: Any) -> bool:
    """Whether a 1-D floating tensor is finite everywhere. A finite sum says so at once (a NaN or
    an infinity anywhere makes it NaN or infinite), one pass where `isfinite` is two and slow on
    16-bit types; a sum that overflowed is checked element by element."""
    import torch

    return all(
        bool(torch.isfinite(c.sum(dtype=torch.float32))) or bool(torch.isfinite(c).all()) for c in _chunks(x)
    )


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
    o, r = o.reshape(-1), r.reshape(-1)
    # outputs are almost always finite everywhere: then the NaN/Inf parity holds and no element
    # is left out, and the whole comparison runs in chunks (below)
    everywhere = _finite(r) and _finite(o)
    if not everywhere:
        o, r = o.to(work), r.to(work)
        finite = torch.isfinite(r)
        for what, test in (("NaN", torch.isnan), ("+Inf", torch.isposinf), ("-Inf", torch.isneginf)):
            mask_o, mask_r = test(o), test(r)
            mismatch = int((mask_o != mask_r).sum().item())
            if mismatch:
                return Comparison(
                    False,
                    "nan_mismatch",
                    f"{name}: {what} in {int(mask_o.sum())} places, the reference in "
                    f"{int(mask_r.sum())} ({mismatch} places differ)",
                    tolerance=tol_json,
                )
        o, r = o[finite], r[finite]
    if r.numel() == 0:
        return Comparison(True, tolerance=tol_json)
    ref_norm = math.hypot(*(float(torch.linalg.vector_norm(c.to(work))) for c in _chunks(r)))
    scale = ref_norm / math.sqrt(r.numel()) if ref_norm > 0 else 1.0
    err_parts, bad, max_abs, max_rel = [], 0, 0.0, 0.0
    for oc, rc in zip(_chunks(o), _chunks(r), strict=True):
        rc = rc.to(work)
        diff, magnitude = (oc.to(work) - rc).abs(), rc.abs()
        err_parts.append(float(torch.linalg.vector_norm(diff)))
        bad += int(torch.count_nonzero(diff > tol.atol * scale + tol.rtol * magnitude))
        max_abs = max(max_abs, _float(diff.max()))
        significant = magnitude > tol.atol * scale
        if bool(significant.any()):
            max_rel = max(max_rel, _float(torch.where(significant, diff / magnitude, 0.0).max()))
    err_norm = math.hypot(*err_parts)
    rel_l2 = err_norm / ref_norm if ref_norm > 0 else (0.0 if err_norm == 0 else float("inf"))
    result = Comparison(True, None, "", max_abs, max_rel, rel_l2, bad, tol_json)
    if bad or (ref_norm > 0 and rel_l2 > tol.l2):
        result.ok = False
        result.kind = "incorrect"
        result.message = (
            f"{name}: max abs error {max_abs:.3g}, max rel error {max_rel:.3g}, "
            f"relative L2 error {rel_l2:.3g}; {bad} of {r.numel()} elements outside "
            f"atol {tol.atol:g}*rms + rtol {tol.rtol:g}*|ref| (l2 bound {tol.l2:g})"
        )
    return result


def within_reference_error(
    out: Any, ref: Any, exact: Any, tol: Tolerance, name: str = "output"
) -> Comparison:
    """`out` judged against Model's float64 output `exact`, allowing the float32 reference's own
    error from it (the module docstring); a failed Comparison when the reference's error is not
    rounding or `out` is further off."""
    import torch

    o = out.detach().to(torch.float64)
    r = ref.detach().to(o.device, torch.float64)
    e = exact.detach().to(o.device, torch.float64)
    finite = torch.isfinite(r) & torch.isfinite(e)
    of, rf, ef = o[finite], r[finite], e[finite]
    if ef.numel() == 0:
        return Comparison(False, "incorrect", f"{name}: no finite element to judge against float64")
    exact_norm = float(torch.linalg.vector_norm(ef))
    if exact_norm == 0:
        return Comparison(False, "incorrect", f"{name}: the float64 output is all zeros")
    ref_diff = (rf - ef).abs()
    ref_l2 = float(torch.linalg.vector_norm(ref_diff)) / exact_norm
    slack = EXACT_FACTOR * float(ref_diff.max())
    figures = {"ref_rel_l2": ref_l2, "ref_max_abs": float(ref_diff.max()), "factor": EXACT_FACTOR}
    if ref_l2 > EXACT_MAX_REL or slack > EXACT_MAX_REL * float(ef.abs().max()):
        return Comparison(
            False,
            "incorrect",
            f"{name}: the float32 reference is {ref_l2:.3g} (relative L2) from its float64 run, more "
            "than rounding: the float64 run does not bound this output",
        )
    diff = (of - ef).abs()
    scale = exact_norm / math.sqrt(ef.numel())
    bad = int((diff > tol.atol * scale + tol.rtol * ef.abs() + slack).sum().item())
    rel_l2 = float(torch.linalg.vector_norm(diff)) / exact_norm
    l2 = max(tol.l2, EXACT_FACTOR * ref_l2)
    figures.update(rel_l2=rel_l2, max_abs_err=_float(diff.max()), l2=l2)
    tol_json = {**asdict(tol), "float64": figures}
    if bad or rel_l2 > l2:
        return Comparison(
            False,
            "incorrect",
            f"{name}: against the float64 run too: relative L2 error {rel_l2:.3g} (bound {l2:.3g}, "
            f"{EXACT_FACTOR:g}x the float32 reference's {ref_l2:.3g}); {bad} of {ef.numel()} elements "
            f"outside atol {tol.atol:g}*rms + rtol {tol.rtol:g}*|exact| + {slack:.3g}",
            tolerance=tol_json,
        )
    return Comparison(True, tolerance=tol_json)


def compare_outputs(
    out: Any,
    ref: Any,
    *,
    has_dot: bool,
    override: dict[str, float] | None = None,
    exact: Callable[[], Any] | None = None,
) -> Comparison:
    """Compare a forward's whole output (a tensor or nested tuples/lists/dicts of tensors).

    `out` is what the candidate job handed back: an `Opaque` where it refused a value (a
    subclass, an impostor, a tensor on another device) is a `type_mismatch` or
    `device_mismatch` at that place; number leaves are compared too. `exact`, when given,
    reads Model's float64 output (None if there is none): a float32 output whose values fail
    the table is judged again against it (`within_reference_error`)."""
    import torch

    refused = _refused(out, ref, "output")
    if refused is not None:
        return refused
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
    exacts: list[Any] | None = None
    for i, (o, r) in enumerate(zip(outs, refs, strict=True)):
        name = "output" if len(refs) == 1 else f"output[{i}]"
        tol = tolerance_for(r.dtype, has_dot, override)
        cmp = compare_tensor(o, r, tol, name)
        if not cmp.ok and cmp.kind == "incorrect" and exact is not None and r.dtype == torch.float32:
            if exacts is None:
                value = exact()
                exacts = flatten(value) if value is not None else []
            if (
                len(exacts) == len(refs)
                and isinstance(exacts[i], torch.Tensor)
                and exacts[i].shape == r.shape
            ):
                again = within_reference_error(o, r, exacts[i], tol, name)
                if again.ok:
                    again.max_abs_err, again.max_rel_err = cmp.max_abs_err, cmp.max_rel_err
                    again.rel_l2_err = cmp.rel_l2_err
                    cmp = again
                else:
                    cmp.message += f"; {again.message.removeprefix(name + ': ')}"
        total = total.merge(cmp)
        if not total.ok:
            return total
    return total.merge(_compare_numbers(out, ref, override))


def flatten(value: Any) -> list[Any]:
    """The tensors of a forward's output (a tensor, or nested tuples / lists / dicts of them)."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in flatten(v)]
    if isinstance(value, dict):
        return [t for k in sorted(value, key=str) for t in flatten(value[k])]
    return []


def _refused(out: Any, ref: Any, name: str) -> Comparison | None:
    """The first place where the candidate's writer refused a value the reference has."""
    if isinstance(out, Opaque):
        if out.device:
            return Comparison(
                False, "device_mismatch", f"{name} is a tensor on {out.device}, not on the job's device"
            )
        return Comparison(
            False,
            "type_mismatch",
            f"{name} is of type {out.type_name} ({out.why}); only a plain torch.Tensor is accepted",
        )
    if isinstance(out, (list, tuple)) and isinstance(ref, (list, tuple)):
        for i, (o, r) in enumerate(zip(out, ref, strict=False)):
            found = _refused(o, r, f"{name}[{i}]")
            if found is not None:
                return found
    if isinstance(out, dict) and isinstance(ref, dict):
        for key in sorted(set(out) & set(ref), key=str):
            found = _refused(out[key], ref[key], f"{name}[{key!r}]")
            if found is not None:
                return found
    return None


def _compare_numbers(
    out: Any, ref: Any, override: dict[str, float] | None, name: str = "output"
) -> Comparison:
    """Number leaves of the output (a forward that returns a Python float or int beside its
    tensors): ints, bools and strings exactly, floats within the float32 tolerance."""
    import torch

    if isinstance(ref, (list, tuple)):
        total = Comparison(True)
        for i, (o, r) in enumerate(zip(out, ref, strict=False)):
            total = total.merge(_compare_numbers(o, r, override, f"{name}[{i}]"))
        return total
    if isinstance(ref, dict):
        total = Comparison(True)
        for key in sorted(ref, key=str):
            total = total.merge(_compare_numbers(out[key], ref[key], override, f"{name}[{key!r}]"))
        return total
    if isinstance(ref, float):
        return compare_tensor(
            torch.tensor(float(out), dtype=torch.float64),
            torch.tensor(ref, dtype=torch.float64),
            tolerance_for("float32", False, override),
            name,
        )
    if isinstance(ref, (bool, int, str)) and out != ref:
        return Comparison(False, "incorrect", f"{name} is {out!r}, the reference {ref!r}")
    return Comparison(True)


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
        views = [t.detach().reshape(-1) for t in (oa, ob.to(oa.device), ra, rb)]
        floating = ra.is_floating_point()
        # almost always both references, and both outputs, are finite everywhere
        refs_finite = floating and _finite(views[2]) and _finite(views[3])
        outs_finite = all(not v.is_floating_point() or _finite(v) for v in views[:2])
        if floating:
            tol = tolerance_for(ra.dtype, has_dot)
            squares, count = 0.0, 0  # the RMS of ref_a where both references are finite
            for ca, cb in zip(_chunks(views[2]), _chunks(views[3]), strict=True):
                a = ca.float()
                if refs_finite:
                    count += a.numel()
                else:
                    both = torch.isfinite(a) & torch.isfinite(cb)
                    a = torch.where(both, a, 0.0)
                    count += int(both.sum())
                squares += float(torch.linalg.vector_norm(a, dtype=torch.float64)) ** 2
            scale = math.sqrt(squares / count) if count else 1.0
        for co, cob, ca, cb in zip(*map(_chunks, views), strict=True):
            if not floating:
                changed = ca != cb
            else:
                a, b = ca.float(), cb.float()
                changed = (a - b).abs_() > a.abs().mul_(tol.rtol).add_(tol.atol * (scale or 1.0))
                if not refs_finite:
                    changed &= torch.isfinite(a) & torch.isfinite(b)
            same = co == cob
            if not outs_finite and co.is_floating_point():
                same |= torch.isnan(co) & torch.isnan(cob)
            changed_total += int(changed.sum())
            unchanged_total += int((changed & same.to(changed.device)).sum())
    if changed_total == 0:
        return None
    return unchanged_total / changed_total


_INT_OF_SIZE = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}


def changed_elements(out_a: Any, out_b: Any) -> tuple[int, int]:
    """(elements whose bits differ, elements compared) between two outputs of one structure:
    how much a run with the kernels' writes perturbed moved the output (NaN counts as
    unchanged only where the bits are the same)."""
    import torch

    changed = total = 0
    for a, b in zip(flatten(out_a), flatten(out_b), strict=False):
        if a.shape != b.shape or a.dtype != b.dtype:
            changed += max(a.numel(), b.numel())
            total += max(a.numel(), b.numel())
            continue
        if a.is_complex():
            a, b = torch.view_as_real(a), torch.view_as_real(b)
        bits = getattr(torch, _INT_OF_SIZE.get(a.element_size(), "uint8"))
        va, vb = (a.view(bits), b.view(bits)) if a.element_size() in _INT_OF_SIZE else (a, b)
        changed += int((va != vb).sum())
        total += a.numel()
    return changed, total
