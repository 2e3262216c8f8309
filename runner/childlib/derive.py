"""Odd-shaped verify cases derived from a module's inputs when it gives none of its own.

A kernel that is right only on the shapes it was given (a grid of `n // BLOCK`, a missing
mask, a row length taken for a multiple of the block) passes every case the module declares
when those are multiples of its block sizes. When a module defines no `get_verify_inputs()`,
the reference job derives up to `MAX_DERIVED` cases from the first timed case: the same
inputs (same rank, dtype and values: each tensor is sliced, so integer indices stay in range
and positive data stays positive) with their larger sizes shrunk to small primes (97, 61,
37, ...), which no power-of-two block size divides.

Sizes are shrunk by value, so dimensions that must agree (a GEMM's K in both operands, a
size passed as an integer argument) still agree. A size that Model's parameters or buffers
have, or that `get_init_inputs()` passes as an integer, is fixed (the model was built for it).
Each derivation is kept only when the reference runs on it and returns the same structure,
ranks and dtypes as on the original case; otherwise `why_not` says what happened, and the
gate's outcome says that no odd-shaped case could be derived and why.

Runs in the reference job (sandbox child: standard library and torch).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

PRIMES = (97, 61, 37, 29, 23, 19, 13, 11, 7, 5, 3)
MIN_SIZE = 16  # sizes below this (channels, heads, a small fixed width) are kept
MAX_DERIVED = 2


@dataclass(frozen=True)
class Derivation:
    """One way to shrink a case: original size -> new size, applied to every dimension (and
    integer input) equal to the original size."""

    sizes: tuple[tuple[int, int], ...]
    what: str  # which sizes it shrinks, for the outcome's note

    def describe(self) -> str:
        return ", ".join(f"{a}->{b}" for a, b in self.sizes) + f" ({self.what})"

    def apply(self, inputs: Sequence[Any]) -> list[Any]:
        import torch

        mapping = dict(self.sizes)
        out = []
        for x in inputs:
            if isinstance(x, torch.Tensor):
                index = tuple(slice(0, mapping.get(int(n), int(n))) for n in x.shape)
                part = x[index] if index else x
                out.append(part.contiguous() if x.is_contiguous() else part)
            elif type(x) is int and x in mapping:
                out.append(mapping[x])
            else:
                out.append(x)
        return out


def _assign(sizes: Sequence[int]) -> tuple[tuple[int, int], ...]:
    """Each size (largest first) to the largest unused prime below it."""
    used: set[int] = set()
    pairs = []
    for size in sorted(set(sizes), reverse=True):
        prime = next((p for p in PRIMES if p < size and p not in used), None)
        if prime is not None:
            used.add(prime)
            pairs.append((size, prime))
    return tuple(pairs)


def derivations(inputs: Sequence[Any], fixed: set[int]) -> tuple[list[Derivation], str]:
    """Candidate derivations of `inputs`, most shrinking first, and why there are none ('' if some)."""
    import torch

    tensors = [x for x in inputs if isinstance(x, torch.Tensor) and x.dim() > 0]
    if not tensors:
        return [], "no tensor input has a dimension"
    every = {int(n) for t in tensors for n in t.shape if int(n) >= MIN_SIZE}
    if not every:
        return [], f"no input dimension is {MIN_SIZE} or larger"
    free = every - fixed
    if not free:
        return (
            [],
            f"every size of {MIN_SIZE} or more is fixed by Model's parameters or init arguments: {sorted(every)}",
        )
    last = {int(t.shape[-1]) for t in tensors}
    first = {int(t.shape[0]) for t in tensors}
    elsewhere = {int(n) for t in tensors for n in t.shape[1:]}
    options = [
        (free, "every size"),
        (free - last, "all but the last dimensions' sizes"),
        ((free & first) - elsewhere, "the leading dimensions' sizes only"),
    ]
    out: list[Derivation] = []
    for sizes, what in options:
        pairs = _assign(sorted(sizes))
        if pairs and all(d.sizes != pairs for d in out):
            out.append(Derivation(pairs, what))
    if not out:
        return [], "no size could be shrunk to a smaller prime"
    return out, ""


def consistent(derived: Any, original: Any) -> str:
    """'' when the reference's output on a derived case has the original's structure, ranks and
    dtypes (and no empty tensor); else what differs."""
    import torch

    if isinstance(original, torch.Tensor):
        if not isinstance(derived, torch.Tensor):
            return f"a {type(derived).__name__} where the original case gives a tensor"
        if derived.dim() != original.dim() or derived.dtype != original.dtype:
            return f"an output of rank {derived.dim()} {derived.dtype}, the original {original.dim()} {original.dtype}"
        if derived.numel() == 0:
            return "an empty output"
        return ""
    if isinstance(original, (list, tuple)):
        if not isinstance(derived, (list, tuple)) or len(derived) != len(original):
            return "another output structure"
        for d, o in zip(derived, original, strict=True):
            why = consistent(d, o)
            if why:
                return why
        return ""
    if isinstance(original, dict):
        if not isinstance(derived, dict) or set(derived) != set(original):
            return "another output structure"
        for key in original:
            why = consistent(derived[key], original[key])
            if why:
                return why
        return ""
    return "" if type(derived) is type(original) else "another output structure"


def fixed_sizes(model: Any, init_inputs: Sequence[Any]) -> set[int]:
    """Sizes the reference was built for: every dimension of its parameters and buffers, and
    every integer it was constructed with."""
    import torch

    sizes = {int(n) for t in model.state_dict().values() if isinstance(t, torch.Tensor) for n in t.shape}
    sizes |= {x for x in init_inputs if type(x) is int}
    return sizes


def choose(
    inputs: Sequence[Any],
    fixed: set[int],
    original_output: Any,
    run_reference: Callable[[list[Any]], Any],
    max_numel: int | None,
) -> tuple[list[Derivation], str]:
    """The derivations the reference accepts (at most MAX_DERIVED) and, when there is none,
    why. `run_reference` raises (a JobFailed) when the reference cannot run on them;
    `original_output` is None when the original case's output is unknown (not checked)."""
    import torch

    options, why = derivations(inputs, fixed)
    if not options:
        return [], why
    kept: list[Derivation] = []
    reasons = []
    for d in options:
        derived = d.apply(inputs)
        numel = sum(x.numel() for x in derived if isinstance(x, torch.Tensor))
        if max_numel is not None and numel > max_numel:
            reasons.append(f"shrinking {d.what}: {numel} elements, over this device's limit of {max_numel}")
            continue
        try:
            out = run_reference(derived)
        except Exception as exc:  # the reference cannot run on these sizes: try the next
            reasons.append(f"shrinking {d.what}: {getattr(exc, 'message', None) or exc}"[:300])
            continue
        differs = consistent(out, original_output) if original_output is not None else ""
        if differs:
            reasons.append(f"shrinking {d.what}: the reference gives {differs}")
            continue
        kept.append(d)
        if len(kept) == MAX_DERIVED:
            break
    return kept, "" if kept else "; ".join(reasons)
