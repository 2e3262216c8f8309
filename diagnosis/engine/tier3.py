"""Tier 3: compiler-grounded analysis. Why the compiler did what tier 2 shows.

Reads the IR after each pass (which passes changed what), names the condition that stopped
an optimization (divisibility or contiguity for vectorization, num_stages or load shape for
software pipelining, operand types and shapes for MMA lowering, tile size per thread for
spills, the consumer that forced a layout conversion), and confirms the mechanism with
counterfactual recompiles before any hardware run.
"""

from __future__ import annotations

import difflib
import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from diagnosis.engine.counterfactual import (
    CONFIRMED,
    NO_EFFECT,
    NO_SPILLS,
    PIPELINE,
    VECTORIZE,
    Counterfactual,
    run_counterfactual,
)
from diagnosis.engine.evidence import (
    Artefact,
    ArtefactRef,
    Family,
    Finding,
    Severity,
    Tier,
    TierResult,
    register_code,
)
from diagnosis.engine.ir import (
    GLOBAL_LOAD,
    CompiledKernel,
    CompileResult,
    LaunchArg,
    LineStats,
    PassDump,
    excerpt,
    line_table,
    parse_mlir,
    tensor_shape,
)
from diagnosis.engine.tier2 import (
    DOT_FMA,
    LAYOUT_CONVERT,
    NO_ASYNC_COPY,
    SCALAR_GLOBAL,
    SPILLS,
    kernel_findings,
    slice_access,
)

VEC_BLOCKED = register_code(
    "CG_VECTORIZATION_BLOCKED",
    Tier.COMPILER,
    Family.HINTS,
    "line {line}: the {what} stays {width}-bit because {reason}",
    "Vectorization blocked (divisibility or layout)",
)
STRIDED = register_code(
    "CG_STRIDED_ACCESS",
    Tier.COMPILER,
    Family.COALESCE,
    "line {line}: consecutive elements of the tile are {stride} apart ({reason}); no vector access is possible",
    "Strided access along the tile's fast dimension",
)
NOT_PIPELINED = register_code(
    "CG_NOT_PIPELINED",
    Tier.COMPILER,
    Family.PIPELINING,
    "the loop at line {line} is not software-pipelined: {reason}",
    "Loop not pipelined",
)
DOT_NO_MMA = register_code(
    "CG_DOT_NO_MMA",
    Tier.COMPILER,
    Family.DOT_PRECISION,
    "line {line}: tl.dot is not lowered to tensor cores because {reason}",
    "Dot not lowered to MMA",
)
SPILL_CAUSE = register_code(
    "CG_SPILL_CAUSE",
    Tier.COMPILER,
    Family.LAUNCH_CONFIG,
    "{kernel} spills because {reason}",
    "Cause of register spills",
)
LAYOUT_CAUSE = register_code(
    "CG_LAYOUT_CONVERSION",
    Tier.COMPILER,
    Family.NONE,
    "line {line}: {src} -> {dst} conversion through shared memory, forced by {consumer} on line {consumer_line}",
    "Layout conversion and what forced it",
)
PASS_EFFECT = register_code(
    "CG_PASS_EFFECTS",
    Tier.COMPILER,
    Family.NONE,
    "{kernel}: {changed} of {total} passes changed the IR ({names})",
    "What the passes did",
)

Recompile = Callable[..., CompileResult]  # recompile(overrides, case=None): see counterfactual.Recompile
_TENSOR_ANY = re.compile(r"tensor<((?:\d+x)+)([a-z]+\d*)")
_REG_BUDGET = 128  # values per thread above which a kernel risks spilling (255 registers, plus temporaries)


def run_tier3(
    result: CompileResult,
    source: str,
    *,
    recompile: Recompile | None = None,
    prior: Sequence[Finding] = (),
    extra: Sequence[Counterfactual] = (),
    max_counterfactuals: int = 3,
) -> TierResult:
    """Explain the tier-2 problems of every kernel in `result` (compiled with pass_dumps=True).

    `recompile(overrides, case=None)` runs the compile job again with options.overrides=overrides
    (for the specialization of input `case`, where given) and
    returns its CompileResult; without it no counterfactual runs and `explains` stays False.
    `extra` adds hypotheses of the caller's own (e.g. an alternative source file).
    """
    if result.backend == "npu":
        from diagnosis.engine.ascend import run_tier3_npu

        return run_tier3_npu(result, source, prior=prior)
    t0 = time.perf_counter()
    out = TierResult(tier=Tier.COMPILER)
    src_lines = source.splitlines()
    hypotheses: list[Counterfactual] = []
    data: dict[str, Any] = {"kernels": {}, "counterfactuals": [], "prior": sorted({f.code for f in prior})}
    for kernel in result.kernels:
        if kernel.error:
            out.notes.append(
                f"{kernel.name}: compile failed, nothing to analyse: {kernel.error.splitlines()[0]}"
            )
            continue
        table = line_table(kernel)
        basis = kernel_findings(kernel, table, result, src_lines)
        passes = pass_effects(kernel.pass_dumps)
        data["kernels"][kernel.name] = {"passes": passes, "tier2": [f.code for f in basis]}
        if kernel.pass_dumps:
            out.findings.append(_pass_summary(kernel, passes))
            for dump in kernel.pass_dumps:
                if dump.text:
                    out.artefacts.append(
                        Artefact("pass_dump", f"{kernel.name}/{dump.index:02d}-{dump.name}", dump.text)
                    )
        else:
            out.notes.append(
                f"{kernel.name}: compiled without pass dumps; pass effects come from the final IR only"
            )
        for finding in basis:
            explained, hyp = explain(kernel, table, finding, src_lines)
            out.findings.extend(explained)
            hypotheses.extend(hyp)
    hypotheses.extend(extra)
    ran = 0
    for h in _merge(hypotheses):
        if recompile is None:
            data["counterfactuals"].append({"hypothesis": h.describe(), "kernel": h.kernel, "ran": False})
            continue
        if ran >= max_counterfactuals:
            out.notes.append(f"counterfactual not run (limit {max_counterfactuals}): {h.describe()}")
            continue
        ran += 1
        t1 = time.perf_counter()
        finding = run_counterfactual(h, result, recompile)
        out.findings = [_refuted(f, h, finding) for f in out.findings]
        out.findings.append(finding)
        data["counterfactuals"].append(
            {
                "hypothesis": h.describe(),
                "kernel": h.kernel,
                "ran": True,
                "code": finding.code,
                "effect": finding.args.get("effect"),
                "seconds": round(time.perf_counter() - t1, 3),
            }
        )
    out.data = data
    confirmed = [f for f in out.findings if f.code == CONFIRMED.code]
    causes = [
        f for f in out.findings if f.severity in (Severity.MEDIUM, Severity.HIGH) and f.code != CONFIRMED.code
    ]
    out.localizes = any(f.lines for f in causes + confirmed)
    families = {f.family for f in confirmed} or {f.family for f in causes}
    out.narrows = len(families) == 1 and Family.NONE not in families
    out.explains = bool(confirmed)
    if recompile is None and hypotheses:
        out.notes.append("no recompile callable: hypotheses listed in data['counterfactuals'], none tested")
    out.wall_s = time.perf_counter() - t0
    return out


UNPROVABLE_INDEX = "the index goes through an operation (%, //, &, a select) whose contiguity the compiler cannot prove"


def _refuted(f: Finding, h: Counterfactual, result: Finding) -> Finding:
    """`f` as the counterfactual `h` (with its `result`) leaves it: a vectorization finding whose
    blockers the recompile made divisible, while its access stayed as narrow, no longer names
    them as the cause; it says so, and gives what else explains the access, where anything
    does. Any other finding, or a recompile that did not compile, leaves `f` as it is."""
    if not (
        f.code == VEC_BLOCKED.code
        and h.tests == VEC_BLOCKED.code
        and result.code == NO_EFFECT.code
        and "after" in result.args  # it compiled: the access was compared
        and f.kernel == h.kernel
        and set(f.lines) <= set(h.lines)
    ):
        return f
    named = sorted(b["arg"] for b in f.args.get("blockers", ()))
    if not named or not set(named) <= set(h.overrides.get("divisibility", ())):
        return f
    tried = ", ".join(f"`{n}`" for n in named)
    reason = (
        f"{f.args['reason']}; yet recompiled with {tried} divisible by 16 it stays {f.args['width']}-bit, "
        "so that is not the cause"
    )
    reason += f": {f.args['otherwise']}" if f.args.get("otherwise") else ""
    return replace(f, args={**f.args, "reason": reason, "refuted": named})


def _merge(hypotheses: Sequence[Counterfactual]) -> list[Counterfactual]:
    """One hypothesis per distinct change; the lines it should affect are pooled."""
    merged: dict[tuple, Counterfactual] = {}
    for h in hypotheses:
        old = merged.get(h.key)
        if old is None:
            merged[h.key] = h
        else:
            merged[h.key] = replace(old, lines=tuple(sorted(set(old.lines) | set(h.lines))))
    return list(merged.values())


# ---------------------------------------------------------------------------------------------
# Pass effects


def pass_effects(dumps: Sequence[PassDump]) -> list[dict[str, Any]]:
    """For each pass that changed the IR: the op-count delta against the IR before it."""
    out = []
    prev: dict[str, int] | None = None
    for d in dumps:
        if d.name == "(input)":
            prev = dict(d.ops)
            continue
        if d.changed and prev is not None:
            delta = {k: d.ops.get(k, 0) - prev.get(k, 0) for k in set(d.ops) | set(prev)}
            delta = {k: v for k, v in sorted(delta.items()) if v}
            out.append({"index": d.index, "pass": d.name, "delta": delta})
        if d.changed is not None and d.ops:
            prev = dict(d.ops)
    return out


def _pass_summary(kernel: CompiledKernel, passes: list[dict[str, Any]]) -> Finding:
    names = ", ".join(p["pass"] for p in passes[:12]) + (" ..." if len(passes) > 12 else "")
    return Finding(
        PASS_EFFECT.code,
        Severity.INFO,
        {
            "kernel": kernel.name,
            "changed": len(passes),
            "total": len(kernel.pass_dumps) - 1,
            "names": names,
            "passes": passes,
        },
        kernel=kernel.name,
    )


def _dump_after(kernel: CompiledKernel, name: str) -> PassDump | None:
    """The first dump after the pass `name` ran (the IR it produced), if it was kept."""
    hits = [d for d in kernel.pass_dumps if d.name == name]
    return hits[-1] if hits else None


def _pass_ref(kernel: CompiledKernel, name: str, pattern: str, limit: int = 6) -> ArtefactRef | None:
    dump = _dump_after(kernel, name)
    if dump is None or not dump.text:
        return None
    lines = [i for i, ln in enumerate(dump.text.splitlines(), 1) if re.search(pattern, ln)]
    return ArtefactRef(
        "pass_dump", kernel.name, tuple(lines[:limit]), excerpt(dump.text, lines, limit=limit), name=name
    )


def pass_diff(before: str, after: str, limit: int = 40) -> str:
    """A short unified diff of two IR dumps, location aliases left out."""
    strip = lambda t: [ln for ln in t.splitlines() if not ln.startswith("#loc")]  # noqa: E731
    diff = list(difflib.unified_diff(strip(before), strip(after), lineterm="", n=0))
    return "\n".join(diff[:limit]) + (f"\n... {len(diff) - limit} more" if len(diff) > limit else "")


# ---------------------------------------------------------------------------------------------
# Explanations


def explain(
    kernel: CompiledKernel, table: dict[int, LineStats], finding: Finding, src_lines: list[str]
) -> tuple[list[Finding], list[Counterfactual]]:
    if finding.code == SCALAR_GLOBAL.code:
        return _explain_scalar(kernel, table, finding)
    if finding.code == NO_ASYNC_COPY.code:
        return _explain_pipeline(kernel, table, finding)
    if finding.code == DOT_FMA.code:
        return _explain_dot(kernel, finding)
    if finding.code == SPILLS.code:
        return _explain_spills(kernel, finding)
    if finding.code == LAYOUT_CONVERT.code:
        return _explain_layout(kernel, finding)
    return [], []


def _arg_desc(arg: LaunchArg | None, name: str) -> str:
    if arg is None:
        return f"`{name}`"
    if arg.is_pointer:
        return f"pointer `{name}`"
    return f"`{name}` (= {arg.value})" if arg.value is not None else f"`{name}`"


def _not_divisible(role: str, arg: LaunchArg, name: str) -> str:
    if isinstance(arg.value, int) and arg.value and arg.value % 16 == 0:
        # the JIT specializes every integer argument on divisibility by 16 unless the kernel
        # says not to (`@triton.jit(do_not_specialize=[...])`)
        return (
            f"{role} {_arg_desc(arg, name)} is a multiple of 16, but the JIT did not specialize it "
            "(`do_not_specialize`), so the compiler cannot assume so"
        )
    return f"{role} {_arg_desc(arg, name)} is not divisible by 16"


def _unscaled_pid(kernel: CompiledKernel, axis: int) -> str:
    why = (
        f"the address adds `tl.program_id({axis})` unscaled, and a program index has no known "
        "divisibility: the compiler can align the access to one element only"
    )
    if kernel.grid[axis] == 1:
        why += f" (this launch runs one program on axis {axis}: the term is always 0)"
    return why


def _explain_scalar(
    kernel: CompiledKernel, table: dict[int, LineStats], finding: Finding
) -> tuple[list[Finding], list[Counterfactual]]:
    a = finding.args
    line = finding.lines[0]
    row = table.get(line)
    accesses = [
        x
        for x in (row.accesses if row else [])
        if x["op"] == ("tt.load" if a["what"] == "load" else "tt.store")
    ]
    evidence = finding.evidence
    if a["access"].startswith("strided"):
        stride_args = a.get("stride_args") or []
        values = []
        for name in stride_args:
            if name.lstrip("-").isdigit():  # a constant scale (`i * 2`)
                values.append(name)
                continue
            arg = kernel.arg(name)
            values.append(
                f"`{name}` = {arg.value}" if arg is not None and arg.value is not None else f"`{name}`"
            )
        tensors = [kernel.arg(p) for p in a.get("pointer_args", [])]
        layout = "; ".join(f"`{t.name}` has strides {list(t.stride)}" for t in tensors if t and t.stride)
        reason = "the tile index is multiplied by " + (", ".join(values) if values else "a runtime value")
        if layout:
            reason += f", while {layout}"
        return [
            Finding(
                STRIDED.code,
                Severity.HIGH,
                {
                    "line": line,
                    "stride": " * ".join(values) or "a runtime stride",
                    "reason": reason,
                    "stride_args": stride_args,
                    "what": a["what"],
                },
                lines=(line,),
                kernel=kernel.name,
                evidence=evidence,
            )
        ], []
    # Contiguous (or unknown) but scalar: the compiler could not prove alignment/divisibility.
    blockers: list[dict[str, Any]] = []
    for acc in accesses:
        for name in acc["pointer_args"]:
            arg = kernel.arg(name)
            if arg is not None and not arg.divisible_16:
                blockers.append(
                    {
                        "arg": name,
                        "role": "pointer",
                        "value": None,
                        "why": f"pointer `{name}` is not known to be 16-byte aligned",
                    }
                )
        for name in acc["offset_args"]:
            arg = kernel.arg(name)
            if arg is not None and arg.kind == "int" and not arg.divisible_16 and not arg.equal_1:
                blockers.append(
                    {
                        "arg": name,
                        "role": "offset",
                        "value": arg.value,
                        "why": _not_divisible("the offset term", arg, name),
                    }
                )
        for name in acc["mask_args"]:
            arg = kernel.arg(name)
            if arg is not None and arg.kind == "int" and not arg.divisible_16:
                blockers.append(
                    {
                        "arg": name,
                        "role": "mask",
                        "value": arg.value,
                        "why": _not_divisible("the mask bound", arg, name),
                    }
                )
    uniq: dict[str, dict[str, Any]] = {}
    for b in blockers:
        uniq.setdefault(b["arg"], b)
    blockers = list(uniq.values())
    pids = sorted({axis for acc in accesses for axis in acc.get("program_ids", ())})
    if not blockers and a.get("fit_warps"):
        return _explain_thin(kernel, finding)
    # what explains the access without the blockers: the cause left if a counterfactual with
    # every blocker divisible still leaves it narrow (`_refuted`)
    sliced = slice_access(kernel, line, "tt.store" if a["what"] == "store" else "tt.load")
    if sliced is not None and sliced["per_thread"] == 1:  # one element a thread at a time: scalar
        otherwise = _sliced(sliced, a["what"])
    elif pids:
        otherwise = "; ".join(_unscaled_pid(kernel, axis) for axis in pids)
    elif any(x["kind"] == "unknown" for x in accesses):
        otherwise = UNPROVABLE_INDEX
    else:
        otherwise = ""
    if blockers:
        reason = "; ".join(b["why"] for b in blockers)
    else:
        reason = otherwise or "every argument it depends on is already divisible by 16: the cause is not a missing hint"
    family = Family.MASKING if blockers and all(b["role"] == "mask" for b in blockers) else Family.HINTS
    out = [
        Finding(
            VEC_BLOCKED.code,
            Severity.HIGH,
            {
                "line": line,
                "what": a["what"],
                "width": a["width"],
                "reason": reason,
                "blockers": blockers,
                "otherwise": otherwise,
                "op": a["op"],
            },
            lines=(line,),
            kernel=kernel.name,
            evidence=evidence,
            family_override=family,
        )
    ]
    hyps = []
    if blockers:
        hyps.append(
            Counterfactual(
                kernel.name,
                {"divisibility": sorted(b["arg"] for b in blockers)},
                VECTORIZE,
                (line,),
                family,
                VEC_BLOCKED.code,
                kernel.case,
            )
        )
    return out, hyps


def _sliced(sliced: dict[str, Any], what: str) -> str:
    """Why an access laid out as a slice of a tile's layout, one element a thread at a time,
    stays one element wide."""
    why = (
        f"its tensor is laid out as a slice of a {sliced['rank']}-D tile's layout (`{sliced['layout']}`), which gives "
        "each thread one element of it at a time"
    )
    if sliced["lanes"] > 1:
        why += f", and {sliced['lanes']} threads hold each element, each issuing the same {what}"
    return why


def _explain_thin(kernel: CompiledKernel, finding: Finding) -> tuple[list[Finding], list[Counterfactual]]:
    """A contiguous access every argument of which is divisible, narrow because its layout gives
    each thread one access's worth of the tile (tier 2 says so): the warps, not a hint, are the
    cause, and a recompile on fewer warps is the test (LAUNCH_CONFIG)."""
    a, line = finding.args, finding.lines[0]
    reason = (
        f"of its layout, not of a hint: every argument it depends on is divisible by 16, but the tile "
        f"gives each thread {a['per_thread']} element(s) on {a['warps']} warps, one {a['width']}-bit access; "
        f"on {a['fit_warps']} warp(s) each thread holds a vector's worth"
    )
    explained = Finding(
        VEC_BLOCKED.code,
        Severity.HIGH,
        {"line": line, "what": a["what"], "width": a["width"], "reason": reason, "blockers": [], "op": a["op"]},
        lines=(line,),
        kernel=kernel.name,
        evidence=finding.evidence,
        family_override=Family.LAUNCH_CONFIG,
    )
    fewer = Counterfactual(
        kernel.name,
        {"num_warps": a["fit_warps"]},
        VECTORIZE,
        (line,),
        Family.LAUNCH_CONFIG,
        VEC_BLOCKED.code,
        kernel.case,
    )
    return [explained], [fewer]


def _loop_line(kernel: CompiledKernel) -> int | None:
    for op in parse_mlir(kernel.stages.get("ttgir", ""), kernel.filename).ops:
        if op.name == "scf.for" and op.line:
            return op.line
    return None


def _explain_pipeline(
    kernel: CompiledKernel, table: dict[int, LineStats], finding: Finding
) -> tuple[list[Finding], list[Counterfactual]]:
    loop_line = _loop_line(kernel) or finding.args["line"]
    dump = _dump_after(kernel, "TritonGPUPipeline")
    async_after = dump.ops.get("ttg.async_copy_global_to_local", 0) if dump else None
    load_lines = finding.args.get("load_lines", [])
    narrow = [ln for ln in load_lines if (table[ln].max_width(GLOBAL_LOAD) or 128) < 32]
    hyps: list[Counterfactual] = []
    if kernel.num_stages <= 1:
        reason = (
            f"num_stages={kernel.num_stages}: the pipeliner has no stage to prefetch into, so each iteration "
            "loads its tiles, waits, then computes"
        )
        hyps.append(
            Counterfactual(
                kernel.name,
                {"num_stages": 3},
                PIPELINE,
                tuple(load_lines),
                Family.PIPELINING,
                NOT_PIPELINED.code,
                kernel.case,
            )
        )
    elif narrow:
        reason = (
            f"the loads on line(s) {', '.join(map(str, narrow))} are narrower than 32 bits per thread "
            "(unknown divisibility), and cp.async needs at least 4 contiguous, aligned bytes"
        )
    else:
        reason = f"TritonGPUPipeline produced {async_after if async_after is not None else 'no'} async copies"
    evidence = list(finding.evidence)
    ref = _pass_ref(kernel, "TritonGPUPipeline", r"scf\.for|tt\.load")
    if ref is not None:
        evidence.append(ref)
    return [
        Finding(
            NOT_PIPELINED.code,
            Severity.HIGH,
            {
                "line": loop_line,
                "reason": reason,
                "num_stages": kernel.num_stages,
                "async_copies": async_after,
                "load_lines": load_lines,
            },
            lines=tuple(sorted({loop_line, *load_lines})),
            kernel=kernel.name,
            evidence=tuple(evidence),
        )
    ], hyps


def _explain_dot(kernel: CompiledKernel, finding: Finding) -> tuple[list[Finding], list[Counterfactual]]:
    line = finding.lines[0]
    func = parse_mlir(kernel.stages.get("ttir", ""), kernel.filename)
    dots = [op for op in func.ops if op.name == "tt.dot" and op.line == line] or [
        op for op in func.ops if op.name == "tt.dot"
    ]
    reasons = []
    args: dict[str, Any] = {"line": line}
    family = Family.DOT_PRECISION
    for op in dots[:1]:
        types = _TENSOR_ANY.findall(op.attrs)
        shapes = [tuple(int(x) for x in dims.split("x") if x) for dims, _ in types]
        dtypes = [dt for _, dt in types]
        precision = re.search(r"inputPrecision = (\w+)", op.attrs)
        prec = precision.group(1) if precision else "ieee"
        args.update(shapes=[list(s) for s in shapes], dtypes=dtypes, input_precision=prec)
        if len(shapes) >= 2 and len(shapes[0]) >= 2 and len(shapes[1]) >= 2:
            m, k = shapes[0][-2], shapes[0][-1]
            n = shapes[1][-1]
            args.update(m=m, n=n, k=k)
            if min(m, n) < 16 or k < 16:
                reasons.append(f"the tile {m}x{n}x{k} is below the 16x16x16 tensor-core minimum")
                family = Family.LAUNCH_CONFIG
        if dtypes and dtypes[0] == "f32" and prec == "ieee":
            reasons.append(
                "its operands are fp32 with input_precision='ieee', which no tensor-core instruction computes "
                "(tf32, or bf16x3 for more accuracy, would)"
            )
        if dtypes and dtypes[0] in ("f64", "i32", "i64"):
            reasons.append(f"{dtypes[0]} operands have no tensor-core instruction on this target")
    if not reasons:
        reasons.append("TritonGPUAccelerateMatmul left it a plain tt.dot (no MMA encoding chosen)")
    evidence = list(finding.evidence)
    ref = _pass_ref(kernel, "TritonGPUAccelerateMatmul", r"tt\.dot|warp_group_dot|#mma")
    if ref is not None:
        evidence.append(ref)
    args["reason"] = "; ".join(reasons)
    return [
        Finding(
            DOT_NO_MMA.code,
            Severity.HIGH,
            args,
            lines=(line,),
            kernel=kernel.name,
            evidence=tuple(evidence),
            family_override=family,
        )
    ], []


def _largest_tensor(kernel: CompiledKernel) -> tuple[int, str, int | None, str] | None:
    """(elements, element type, source line, op text) of the largest register-resident tensor."""
    best = None
    for op in parse_mlir(kernel.stages.get("ttgir", ""), kernel.filename).ops:
        if "!ttg.memdesc" in op.attrs and "tensor<" not in op.attrs:
            continue
        if op.line is None:
            continue  # constants and the like: the value that matters has a line
        for dims, dtype in _TENSOR_ANY.findall(op.result_type):
            n = math.prod(int(x) for x in dims.split("x") if x)
            if dtype in ("i1",):
                continue
            # floats first: the index tensors (i32 ranges) of a tile are usually rematerialized
            if best is None or (dtype[0] in "fb", n) > (best[1][0] in "fb", best[0]):
                best = (n, dtype, op.line, op.text)
    return best


def _explain_spills(kernel: CompiledKernel, finding: Finding) -> tuple[list[Finding], list[Counterfactual]]:
    threads = kernel.num_warps * 32
    big = _largest_tensor(kernel)
    hyps: list[Counterfactual] = []
    args: dict[str, Any] = {
        "kernel": kernel.name,
        "num_warps": kernel.num_warps,
        "registers": kernel.resources.registers,
        "spills": kernel.resources.spills,
    }
    lines = finding.lines
    if big is not None:
        n, dtype, line, _ = big
        bits = int(re.sub(r"\D", "", dtype) or 32)
        per_thread = math.ceil(n / threads * max(bits, 32) / 32)
        args.update(elements=n, dtype=dtype, values_per_thread=per_thread, tensor_line=line)
        reason = (
            f"a {n}-element {dtype} tensor (line {line}) spread over {kernel.num_warps} warp(s) "
            f"is {per_thread} registers per thread before any temporaries"
        )
        if per_thread > _REG_BUDGET // 2 and kernel.num_warps < 16:
            want = min(16, 1 << max(0, math.ceil(math.log2(max(1, n * max(bits, 32) / 32 / (32 * 64))))))
            want = max(want, kernel.num_warps * 2)
            args["suggested_num_warps"] = want
            reason += (
                f"; num_warps={want} would bring it to {math.ceil(per_thread * kernel.num_warps / want)}"
            )
            hyps.append(
                Counterfactual(
                    kernel.name, {"num_warps": want}, NO_SPILLS, (), Family.LAUNCH_CONFIG, SPILL_CAUSE.code,
                    kernel.case,
                )
            )
        if line:
            lines = tuple(sorted({line, *lines}))
    else:
        reason = "the register demand of the kernel exceeds 255 per thread"
    args["reason"] = reason
    return [
        Finding(
            SPILL_CAUSE.code, Severity.HIGH, args, lines=lines, kernel=kernel.name, evidence=finding.evidence
        )
    ], hyps


_ENC = re.compile(r"#(blocked\d*|mma\d*|linear\d*|shared\d*|ttg\.slice<[^>]*>|ttg\.dot_op<[^>]*>)")


def _explain_layout(kernel: CompiledKernel, finding: Finding) -> tuple[list[Finding], list[Counterfactual]]:
    line = finding.lines[0]
    func = parse_mlir(kernel.stages.get("ttgir", ""), kernel.filename)
    users: dict[str, list] = {}
    for op in func.ops:
        for o in op.operands:
            users.setdefault(o, []).append(op)
    out = []
    for op in func.ops:
        if op.name != "ttg.convert_layout" or op.line != line or not op.loops:
            continue
        encs = _ENC.findall(op.attrs)
        src = encs[0] if encs else "?"
        dst = encs[-1] if len(encs) > 1 else "?"
        consumers = [u for r in op.results for u in users.get(r, [])]
        consumer = consumers[0] if consumers else None
        out.append(
            Finding(
                LAYOUT_CAUSE.code,
                Severity.MEDIUM,
                {
                    "line": line,
                    "src": src,
                    "dst": dst,
                    "consumer": consumer.name if consumer else "its user",
                    "consumer_line": consumer.line if consumer else line,
                },
                lines=tuple(sorted({line, *([consumer.line] if consumer and consumer.line else [])})),
                kernel=kernel.name,
                evidence=(
                    ArtefactRef(
                        "ttgir",
                        kernel.name,
                        (op.ir_line,),
                        excerpt(kernel.stages.get("ttgir", ""), [op.ir_line]),
                    ),
                    *finding.evidence,
                ),
            )
        )
        break
    return out, []


__all__ = ["run_tier3", "pass_effects", "pass_diff", "explain", "Counterfactual", "tensor_shape"]
