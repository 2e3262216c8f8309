"""Counterfactual recompiles: test a hypothesis by compiling the changed kernel and diffing
its IR against the original, before any hardware run.

A Counterfactual names the change (the `overrides` of a `compile` job: divisibility hints on
named arguments, num_stages, num_warps, or an alternative source file) and what it is
expected to fix. `run_counterfactual` calls the caller's `recompile(overrides, case=...)` and turns
the per-line difference into a finding: confirmed (the expected effect shows in the IR) or
not.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from diagnosis.engine.evidence import ArtefactRef, Family, Finding, Severity, Tier, register_code
from diagnosis.engine.ir import (
    CP_ASYNC,
    FMA,
    GLOBAL_LOAD,
    GLOBAL_STORE,
    MMA,
    TMA,
    WGMMA,
    CompiledKernel,
    CompileResult,
    LineStats,
    excerpt,
    line_table,
)

CONFIRMED = register_code(
    "CG_COUNTERFACTUAL",
    Tier.COMPILER,
    Family.NONE,
    "with {hypothesis}: {effect}",
    "Counterfactual recompile confirms the mechanism",
)
NO_EFFECT = register_code(
    "CG_COUNTERFACTUAL_NO_EFFECT",
    Tier.COMPILER,
    Family.NONE,
    "with {hypothesis}: {effect}",
    "Counterfactual recompile changes nothing that matters",
)

# recompile(overrides, case=None): the compile job again with options.overrides; `case`, where
# given, is the input case whose specialization the hypothesis compares (the caller may compile
# that case alone)
Recompile = Callable[..., CompileResult]

# What a hypothesis is expected to change
VECTORIZE, PIPELINE, NO_SPILLS, TENSOR_CORES = "vectorize", "pipeline", "no_spills", "tensor_cores"


@dataclass(frozen=True)
class Counterfactual:
    """One change to try. `overrides` is exactly what the compile job's options.overrides takes."""

    kernel: str
    overrides: dict[str, Any] = field(hash=False)
    expect: str  # vectorize, pipeline, no_spills, tensor_cores
    lines: tuple[int, ...] = ()  # lines of the uploaded file the effect should show on
    family: Family = Family.NONE
    tests: str = ""  # the finding code this hypothesis tests
    case: int | None = None  # which specialization of the kernel (its launching case) is compared

    @property
    def key(self) -> tuple:
        overrides = tuple(sorted((k, str(v)) for k, v in self.overrides.items()))
        return (self.kernel, overrides, self.expect, self.case)

    def describe(self) -> str:
        parts = []
        div = self.overrides.get("divisibility")
        if div:
            names = ", ".join(f"`{n}`" for n in div)
            parts.append(f"{names} known divisible by 16" if len(div) > 1 else f"{names} divisible by 16")
        for key in ("num_stages", "num_warps"):
            if self.overrides.get(key) is not None:
                parts.append(f"{key}={self.overrides[key]}")
        if self.overrides.get("source"):
            parts.append(f"the source of {self.overrides['source']}")
        return " and ".join(parts) or "no change"


@dataclass(frozen=True)
class KernelFigures:
    """The figures a counterfactual compares, for one kernel."""

    registers: int | None
    spills: int
    shared: int
    tensor_core: int
    fma: int
    async_copies: int
    widths: dict[int, dict[str, tuple[int, ...]]] = field(
        hash=False, default_factory=dict
    )  # line -> cat -> widths
    ops: dict[int, dict[str, dict[str, int]]] = field(hash=False, default_factory=dict)
    async_lines: dict[int, int] = field(hash=False, default_factory=dict)  # line -> cp.async/TMA instructions

    def to_json(self) -> dict[str, Any]:
        return {
            "registers": self.registers,
            "spills": self.spills,
            "shared": self.shared,
            "tensor_core_instructions": self.tensor_core,
            "fma": self.fma,
            "async_copies": self.async_copies,
            "widths": {str(k): {c: list(w) for c, w in v.items()} for k, v in self.widths.items()},
        }


def figures(kernel: CompiledKernel, table: dict[int, LineStats] | None = None) -> KernelFigures:
    table = table if table is not None else line_table(kernel)
    total = lambda *cats: sum(r.count(c) for r in table.values() for c in cats)  # noqa: E731
    widths: dict[int, dict[str, tuple[int, ...]]] = {}
    ops: dict[int, dict[str, dict[str, int]]] = {}
    for line, row in table.items():
        for cat in (GLOBAL_LOAD, GLOBAL_STORE):
            if row.widths.get(cat):
                widths.setdefault(line, {})[cat] = tuple(sorted(set(row.widths[cat])))
                ops.setdefault(line, {})[cat] = dict(row.asm.get(cat, {}))
    return KernelFigures(
        registers=kernel.resources.registers,
        spills=kernel.resources.spills,
        shared=kernel.resources.shared,
        tensor_core=total(MMA, WGMMA),
        fma=total(FMA),
        async_copies=total(CP_ASYNC, TMA),
        widths=widths,
        ops=ops,
        async_lines={ln: n for ln, row in table.items() if (n := row.count(CP_ASYNC) + row.count(TMA))},
    )


def _line_widths(fig: KernelFigures, lines: tuple[int, ...]) -> dict[int, dict[str, tuple[int, ...]]]:
    return {ln: fig.widths[ln] for ln in lines if ln in fig.widths}


def _fmt_ops(ops: dict[str, int]) -> str:
    return ", ".join(f"{op} x{n}" for op, n in sorted(ops.items(), key=lambda kv: -kv[1]))


def evaluate(h: Counterfactual, before: KernelFigures, after: KernelFigures) -> tuple[bool, str]:
    """(confirmed, one sentence saying what changed)."""
    if h.expect == VECTORIZE:
        lines = h.lines or tuple(before.widths)
        changed, said = False, []
        for ln in lines:
            for cat, what in ((GLOBAL_LOAD, "loads"), (GLOBAL_STORE, "stores")):
                b = before.widths.get(ln, {}).get(cat)
                a = after.widths.get(ln, {}).get(cat)
                if b and not a and cat == GLOBAL_LOAD and after.async_lines.get(ln):
                    # the line's loads left the registers' path: copied straight to shared
                    # memory (cp.async is 4-16 bytes a thread, TMA a whole tile)
                    changed = True
                    said.append(
                        f"the loads on line {ln} become {after.async_lines[ln]} async copies to shared "
                        f"memory (cp.async/TMA; were {max(b)}-bit loads)"
                    )
                    continue
                if not b or not a:
                    continue
                if max(a) > max(b):
                    changed = True
                    said.append(
                        f"the {what} on line {ln} become {max(a)}-bit "
                        f"({_fmt_ops(after.ops.get(ln, {}).get(cat, {}))}; were {max(b)}-bit)"
                    )
                else:
                    said.append(f"the {what} on line {ln} stay {max(a)}-bit")
        if not said and not h.lines:
            return False, "no global access to compare"
        return changed, "; ".join(said) or "the lines compared have no global access after the change"
    if h.expect == PIPELINE:
        if after.async_copies and not before.async_copies:
            return True, (
                f"the loop is software-pipelined: {after.async_copies} async copies (cp.async/TMA) appear, "
                f"shared memory {before.shared} -> {after.shared} bytes"
            )
        return False, f"still {after.async_copies} async copies (before {before.async_copies})"
    if h.expect == NO_SPILLS:
        if before.spills and after.spills < before.spills:
            return True, (
                f"spills drop from {before.spills} to {after.spills} bytes "
                f"(registers {before.registers} -> {after.registers})"
            )
        return False, f"spills {before.spills} -> {after.spills} bytes"
    if h.expect == TENSOR_CORES:
        if after.tensor_core and not before.tensor_core:
            return True, (
                f"the dot uses {after.tensor_core} tensor-core instructions instead of {before.fma} FMAs "
                f"(now {after.fma})"
            )
        return False, f"still {after.tensor_core} tensor-core instructions"
    return False, f"unknown expectation {h.expect!r}"


def run_counterfactual(h: Counterfactual, before: CompileResult, recompile: Recompile) -> Finding:
    """Compile `h` and compare with `before`; the finding says what changed (or that nothing did)."""
    base = before.kernel(h.kernel, h.case)
    if base is None:
        raise ValueError(f"no kernel {h.kernel!r} in the compile result")
    after_result = recompile(dict(h.overrides), case=h.case)
    after = after_result.kernel(h.kernel, h.case)
    args: dict[str, Any] = {
        "hypothesis": h.describe(),
        "overrides": dict(h.overrides),
        "expect": h.expect,
        "tests": h.tests,
    }
    if after is None or after.error:
        args["effect"] = (
            f"the kernel does not compile ({after.error.splitlines()[0][:200]})"
            if after is not None and after.error
            else f"kernel {h.kernel} is not launched any more"
        )
        return Finding(
            NO_EFFECT.code, Severity.INFO, args, lines=h.lines, kernel=h.kernel, family_override=h.family
        )
    fb, fa = figures(base), figures(after)
    same_file = not h.overrides.get("source")
    if not same_file:
        # Line numbers of another file do not match: compare the kernel as a whole.
        h = replace(h, lines=())
    confirmed, effect = evaluate(h, fb, fa) if same_file or h.expect != VECTORIZE else _whole_kernel(fb, fa)
    args.update(
        effect=effect,
        before=fb.to_json() if not h.lines else {**fb.to_json(), "widths": _jsonw(_line_widths(fb, h.lines))},
        after=fa.to_json() if not h.lines else {**fa.to_json(), "widths": _jsonw(_line_widths(fa, h.lines))},
        compile_s=after.compile_s,
    )
    evidence = []
    kind = after.asm_kind
    table = line_table(after)
    asm_lines = [
        n
        for ln in h.lines
        if ln in table
        for c in (GLOBAL_LOAD, GLOBAL_STORE)
        for n in table[ln].asm_lines.get(c, [])
    ]
    if asm_lines:
        evidence.append(
            ArtefactRef(
                kind,
                h.kernel,
                tuple(asm_lines[:8]),
                excerpt(after.stages.get(kind, ""), asm_lines[:8]),
                name="counterfactual",
            )
        )
    evidence.append(
        ArtefactRef("log", h.kernel, excerpt=f"overrides {h.overrides}: {effect}", name="counterfactual")
    )
    return Finding(
        CONFIRMED.code if confirmed else NO_EFFECT.code,
        Severity.MEDIUM if confirmed else Severity.INFO,
        args,
        lines=h.lines,
        kernel=h.kernel,
        evidence=tuple(evidence),
        gain=None,  # the IR shows the mechanism; only a timed run can say how much it is worth
        family_override=h.family,
    )


def _jsonw(w: dict[int, dict[str, tuple[int, ...]]]) -> dict[str, dict[str, list[int]]]:
    return {str(k): {c: list(x) for c, x in v.items()} for k, v in w.items()}


def _whole_kernel(fb: KernelFigures, fa: KernelFigures) -> tuple[bool, str]:
    def widest(f: KernelFigures) -> int:
        return min((max(w) for d in f.widths.values() for w in d.values()), default=0)

    b, a = widest(fb), widest(fa)
    return a > b, f"the narrowest global access is {a}-bit (was {b}-bit)"


def diff_tables(before: CompiledKernel, after: CompiledKernel) -> dict[int, dict[str, Any]]:
    """Per-line differences of the assembly categories: line -> {category: (before, after)}."""
    tb, ta = line_table(before), line_table(after)
    out: dict[int, dict[str, Any]] = {}
    for line in sorted(set(tb) | set(ta)):
        rb, ra = tb.get(line), ta.get(line)
        cats = set(rb.asm if rb else {}) | set(ra.asm if ra else {})
        for cat in cats:
            b = rb.asm.get(cat, {}) if rb else {}
            a = ra.asm.get(cat, {}) if ra else {}
            if a != b:
                out.setdefault(line, {})[cat] = {"before": b, "after": a}
    return out
