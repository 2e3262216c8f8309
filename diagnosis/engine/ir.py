"""Typed records for the child's `compile` job and parsers of the texts it returns.

`CompileResult.from_json` turns the job's JSON into frozen records; the parsers attribute
TTIR/TTGIR operations, PTX and AMDGCN instructions and SASS to lines of the uploaded file,
and `line_table` folds them into one row per source line (what tier 2 shows and tiers 3 and
the counterfactuals diff). `access_pattern` reads TTIR def-use chains to say whether a
load's addresses are contiguous, strided by a runtime argument, or uniform, and which
kernel arguments its pointer and mask depend on. Pure Python: no torch, no triton.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

# ---------------------------------------------------------------------------------------------
# Records


@dataclass(frozen=True)
class LaunchArg:
    name: str
    kind: str  # tensor, int, float, bool, none, constexpr, other
    type: str  # Triton signature type: '*fp32', 'i32', 'constexpr'
    value: Any = None
    dtype: str | None = None
    shape: tuple[int, ...] | None = None
    stride: tuple[int, ...] | None = None
    divisible_16: bool = False
    equal_1: bool = False

    @property
    def is_pointer(self) -> bool:
        return self.type.startswith("*")

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> LaunchArg:
        return cls(
            name=str(d.get("name", "")),
            kind=str(d.get("kind", "other")),
            type=str(d.get("type", "")),
            value=d.get("value"),
            dtype=d.get("dtype"),
            shape=tuple(d["shape"]) if d.get("shape") is not None else None,
            stride=tuple(d["stride"]) if d.get("stride") is not None else None,
            divisible_16=bool(d.get("divisible_16")),
            equal_1=bool(d.get("equal_1")),
        )


@dataclass(frozen=True)
class PassDump:
    """What one MLIR pass did: `text` is the IR after it (kept only where it changed)."""

    index: int
    name: str
    changed: bool | None  # None: the last pass, whose output was not dumped
    ops: dict[str, int] = field(default_factory=dict, hash=False)  # op name -> count, after the pass
    text: str | None = None
    scope: str = ""


@dataclass(frozen=True)
class Resources:
    registers: int | None = None
    spills_store: int = 0  # bytes (CUDA) or spilled registers (AMD)
    spills_load: int = 0
    stack: int = 0
    shared: int = 0  # bytes of shared memory / LDS the launch needs
    sgpr: int | None = None
    vgpr: int | None = None
    waves_per_simd: int | None = None  # AMD occupancy as the compiler reports it

    @property
    def spills(self) -> int:
        return self.spills_store + self.spills_load


@dataclass(frozen=True)
class CompiledKernel:
    name: str
    def_line: int
    filename: str
    num_warps: int
    num_stages: int
    grid: tuple[int, int, int]
    args: tuple[LaunchArg, ...]
    stages: dict[str, str] = field(default_factory=dict, hash=False)
    pass_dumps: tuple[PassDump, ...] = ()
    resources: Resources = Resources()
    compile_s: float | None = None
    error: str | None = None
    notes: tuple[str, ...] = ()
    applied: tuple[str, ...] = ()  # counterfactual overrides that reached this kernel
    # the input case whose launch this is (a compile of several cases has one kernel per
    # distinct specialization: the same name, other divisibility of its arguments)
    case: int | None = None
    # npu (triton-ascend): the stages compiled, the one that could not run and why
    # ({"stage", "reason": needs_cann | compile_error, "message"}), and the TTIR's %argN names
    reached: tuple[str, ...] = ()
    stopped: dict[str, str] | None = field(default=None, hash=False)
    ir_args: tuple[str, ...] = ()

    def arg(self, name: str) -> LaunchArg | None:
        return next((a for a in self.args if a.name == name), None)

    @property
    def asm_kind(self) -> str:
        return "amdgcn" if "amdgcn" in self.stages else "ptx"

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CompiledKernel:
        launch = d.get("launch") or {}
        res = d.get("resources") or {}
        return cls(
            name=str(d["name"]),
            def_line=int(d.get("def_line") or 0),
            filename=str(d.get("filename") or ""),
            num_warps=int(d.get("num_warps") or launch.get("num_warps") or 4),
            num_stages=int(d.get("num_stages") or launch.get("num_stages") or 0),
            case=launch.get("case") if isinstance(launch.get("case"), int) else None,
            grid=tuple((list(launch.get("grid") or [1, 1, 1]) + [1, 1, 1])[:3]),  # type: ignore[arg-type]
            args=tuple(LaunchArg.from_json(a) for a in launch.get("args") or []),
            stages={k: v for k, v in (d.get("stages") or {}).items() if isinstance(v, str)},
            pass_dumps=tuple(
                PassDump(
                    int(p.get("index", i)),
                    str(p.get("pass", "")),
                    p.get("changed"),
                    dict(p.get("ops") or {}),
                    p.get("text"),
                    str(p.get("scope", "")),
                )
                for i, p in enumerate(d.get("pass_dumps") or [])
            ),
            resources=Resources(
                registers=res.get("registers"),
                spills_store=int(res.get("spills_store") or 0),
                spills_load=int(res.get("spills_load") or 0),
                stack=int(res.get("stack") or 0),
                shared=int(res.get("shared") or res.get("lds") or 0),
                sgpr=res.get("sgpr"),
                vgpr=res.get("vgpr"),
                waves_per_simd=res.get("occupancy_waves_per_simd"),
            ),
            compile_s=d.get("compile_s"),
            error=d.get("error"),
            notes=tuple(d.get("dumps_dropped") or ()),
            applied=tuple(d.get("applied") or ()),
            reached=tuple(d.get("reached") or ()),
            stopped=dict(d["stopped"]) if isinstance(d.get("stopped"), dict) else None,
            ir_args=tuple(str(a) for a in d.get("ir_args") or ()),
        )


@dataclass(frozen=True)
class CompileResult:
    target: str
    backend: str
    arch: str
    kernels: tuple[CompiledKernel, ...]
    overrides: dict[str, Any] = field(default_factory=dict, hash=False)
    notes: tuple[str, ...] = ()
    capture_s: float = 0.0
    total_s: float = 0.0
    module: str = ""
    triton_version: str = ""  # of the compiling toolchain (triton-ascend reports 3.2.0)

    def kernel(self, name: str, case: int | None = None) -> CompiledKernel | None:
        """The kernel `name`; with `case`, the specialization launched by that case if there is
        one (else the first, as without)."""
        named = [k for k in self.kernels if k.name == name]
        return next((k for k in named if case is not None and k.case == case), named[0] if named else None)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CompileResult:
        return cls(
            target=str(d.get("target") or ""),
            backend=str(d.get("backend") or "cuda"),
            arch=str(d.get("arch") or ""),
            kernels=tuple(CompiledKernel.from_json(k) for k in d.get("kernels") or []),
            overrides=dict(d.get("overrides") or {}),
            notes=tuple(d.get("notes") or ()),
            capture_s=float(d.get("capture_s") or 0.0),
            total_s=float(d.get("total_s") or 0.0),
            module=str(d.get("module") or ""),
            triton_version=str(d.get("triton_version") or ""),
        )


# ---------------------------------------------------------------------------------------------
# MLIR (TTIR / TTGIR) locations and operations

# `#loc3 = loc("/work/main/tests/kernels/colsum_strided.py":12:24)`
# `#loc24 = loc("col"(#loc3))`
# `#loc35 = loc(callsite(#loc2 at #loc15))`
_LOC_ALIAS = re.compile(r"^#(loc\d*) = loc\((.*)\)\s*$", re.M)
# `"/work/main/tests/kernels/colsum_strided.py":12:24`
_LOC_FILELINE = re.compile(r'^"([^"]*)":(\d+):(\d+)$')
# `"col"(#loc3)` or `"x_ptr"("/path/f.py":3:0)`
_LOC_NAMED = re.compile(r'^"[^"]*"\((.*)\)$')
# `callsite(#loc2 at #loc15)`
_LOC_CALLSITE = re.compile(r"^callsite\((.*) at (.*)\)$")
# `fused[#loc7, #loc8]` or `fused<"x">[#loc7, #loc8]`
_LOC_FUSED = re.compile(r"^fused(?:<[^>]*>)?\[(.*)\]$")
# `    %x_10 = tt.load %x_9, %x_3, %cst : tensor<512x!tt.ptr<f32>> loc(#loc32)`
# `    %acc_21:3 = scf.for %k = %c0_i32 to %K step %c64_i32 iter_args(%a_ptrs_28 = %a_ptrs_12) -> ...`
# `    %1 = "tt.reduce"(%acc) <{axis = 0 : i32}> ({`
_MLIR_OP = re.compile(
    r"^\s*(?:(%[\w$.#-]+(?::\d+)?(?:\s*,\s*%[\w$.#-]+)*)\s*=\s*)?\"?([a-z_][\w]*\.[\w.]+)\"?(.*)$"
)
_SSA = re.compile(r"%[\w$.-]+")
# `  tt.func public @add_kernel(%x_ptr: !tt.ptr<f32> {tt.divisibility = 16 : i32} loc("x_ptr"(#loc)), %n: i32 loc(...))`
_FUNC_ARG = re.compile(r"(%[\w$.-]+): ([^ ,){]+)")
# `iter_args(%a_ptrs_28 = %a_ptrs_12, %acc_30 = %acc)`
_ITER_ARGS = re.compile(r"iter_args\(([^)]*)\)")
# `tensor<128x64xf16>` / `tensor<512x!tt.ptr<f32>, #blocked>`
_TENSOR_TYPE = re.compile(r"tensor<((?:\d+x)+)([^,>]+(?:<[^>]*>)?)")


def _split_top(text: str, sep: str = ",") -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "([<{":
            depth += 1
        elif ch in ")]>}":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return [p for p in parts if p]


class LocResolver:
    """Resolves MLIR location expressions (aliases, named, callsite, fused) to file:line frames."""

    def __init__(self, text: str) -> None:
        self.aliases = {m.group(1): m.group(2) for m in _LOC_ALIAS.finditer(text)}
        self._cache: dict[str, tuple[tuple[str, int], ...]] = {}

    def frames(self, expr: str, depth: int = 0) -> tuple[tuple[str, int], ...]:
        """Innermost first: for a call site, the callee's frames come before the caller's."""
        expr = expr.strip()
        if depth > 50:
            return ()
        if expr.startswith("#"):
            name = expr[1:]
            if name not in self._cache:
                self._cache[name] = ()  # guards against cycles
                self._cache[name] = self.frames(self.aliases.get(name, "unknown"), depth + 1)
            return self._cache[name]
        if expr.startswith("loc(") and expr.endswith(")"):
            return self.frames(expr[4:-1], depth + 1)
        m = _LOC_FILELINE.match(expr)
        if m:
            return ((m.group(1), int(m.group(2))),)
        m = _LOC_NAMED.match(expr)
        if m:
            return self.frames(m.group(1), depth + 1)
        m = _LOC_CALLSITE.match(expr)
        if m:
            return self.frames(m.group(1), depth + 1) + self.frames(m.group(2), depth + 1)
        m = _LOC_FUSED.match(expr)
        if m:
            out: tuple[tuple[str, int], ...] = ()
            for part in _split_top(m.group(1)):
                out += self.frames(part, depth + 1)
            return out
        return ()

    def line(self, expr: str, filename: str) -> int | None:
        """The line in `filename` this location points at (innermost frame in that file)."""
        for file, line in self.frames(expr):
            if _same_file(file, filename):
                return line
        return None


def _same_file(a: str, b: str) -> bool:
    if not b:
        return True
    return (
        a == b
        or os.path.basename(a) == os.path.basename(b)
        and (not os.path.isabs(a) or not os.path.isabs(b))
    )


def _trailing_loc(line: str) -> tuple[str, str]:
    """Split `... loc(#loc32)` into (op text, loc expression); nested parens are balanced."""
    idx = line.rfind(" loc(")
    while idx != -1:
        depth, j = 0, idx + 4
        for j in range(idx + 4, len(line)):
            if line[j] == "(":
                depth += 1
            elif line[j] == ")":
                depth -= 1
                if depth == 0:
                    break
        if depth == 0 and line[j + 1 :].strip() in ("", "{"):
            return line[:idx], line[idx + 1 : j + 1]
        idx = line.rfind(" loc(", 0, idx)
    return line, ""


@dataclass(frozen=True)
class MlirOp:
    ir_line: int  # 1-based line in the IR text
    name: str  # tt.load, ttg.convert_layout, scf.for ...
    results: tuple[str, ...]
    operands: tuple[str, ...]
    line: int | None  # line of the uploaded file
    loops: int  # how many scf.for / scf.while enclose it
    text: str
    attrs: str = ""  # the text after the operands: attributes and types

    @property
    def result_type(self) -> str:
        return self.attrs.rsplit("->", 1)[-1] if "->" in self.attrs else self.attrs.rsplit(" : ", 1)[-1]


@dataclass(frozen=True)
class MlirFunc:
    name: str
    args: dict[str, str]  # %name -> type
    ops: tuple[MlirOp, ...]
    iter_args: dict[str, str] = field(
        default_factory=dict, hash=False
    )  # loop-carried %x -> its initial value

    def defs(self) -> dict[str, MlirOp]:
        out = {}
        for op in self.ops:
            for r in op.results:
                out[r.split(":")[0]] = op
        return out


def parse_mlir(text: str, filename: str = "") -> MlirFunc:
    """Operations of the (single) kernel function in a TTIR/TTGIR text, attributed to lines."""
    locs = LocResolver(text)
    ops: list[MlirOp] = []
    args: dict[str, str] = {}
    iter_args: dict[str, str] = {}
    func_name = ""
    stack: list[str] = []
    for n, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not stripped or stripped.startswith(("#", "//", "module", "^bb")):
            continue
        if stripped.startswith("}"):
            kind = ""
            if stack:
                kind, opened = stack.pop()
                # a region op's location is printed after its closing brace: `} loc(#loc25)`
                _, loc = _trailing_loc(raw)
                if opened is not None and loc and ops[opened].line is None:
                    ops[opened] = replace(ops[opened], line=locs.line(loc, filename))
            # `} else {` closes one region and opens another
            if stripped.rstrip().endswith("{"):
                stack.append((kind, None))
            continue
        if stripped.startswith(("tt.func", "llvm.func")):
            m = re.search(r"@([\w$.-]+)\(", stripped)
            func_name = m.group(1) if m else ""
            args.update(dict(_FUNC_ARG.findall(stripped)))
            stack.append(("func", None))
            continue
        body, loc = _trailing_loc(raw)
        m = _MLIR_OP.match(body)
        if not m:
            if stripped.endswith("{"):
                stack.append(("", None))
            continue
        results = tuple(r.strip() for r in (m.group(1) or "").split(",") if r.strip())
        name, rest = m.group(2), m.group(3)
        head = rest.split(" : ", 1)[0]
        operands = tuple(_SSA.findall(head))
        if name in ("scf.for", "scf.while"):
            ia = _ITER_ARGS.search(rest)
            if ia:
                for pair in _split_top(ia.group(1)):
                    if "=" in pair:
                        k, v = (p.strip() for p in pair.split("=", 1))
                        iter_args[k] = v
        loops = sum(1 for kind, _ in stack if kind in ("scf.for", "scf.while"))
        line = locs.line(loc, filename) if loc else None
        ops.append(MlirOp(n, name, results, operands, line, loops, stripped, rest))
        if stripped.endswith("{"):
            stack.append((name, len(ops) - 1))
    return MlirFunc(func_name, args, tuple(ops), iter_args)


# ---------------------------------------------------------------------------------------------
# Access patterns from TTIR def-use chains

_PASSTHROUGH = {
    "arith.extsi",
    "arith.extui",
    "arith.trunci",
    "ttg.convert_layout",
    "tt.broadcast",
    "arith.index_cast",
    "tt.bitcast",
    "tt.int_to_ptr",
    "tt.ptr_to_int",
    "arith.sitofp",
}
_UNIFORM = {"tt.splat", "tt.get_program_id", "tt.get_num_programs", "arith.constant"}


@dataclass(frozen=True)
class Access:
    """How a load/store's addresses vary across the tile, and what they depend on."""

    kind: str  # contiguous, strided, uniform, scalar, unknown
    stride_args: tuple[str, ...] = ()  # what multiplies the fastest index: arguments, or a constant ("2")
    pointer_args: tuple[str, ...] = ()  # pointer arguments the address starts from
    offset_args: tuple[str, ...] = ()  # integer arguments the address depends on
    mask_args: tuple[str, ...] = ()  # integer arguments the mask depends on
    has_mask: bool = False
    dims: int = 0  # how many tile dims have a range of unit stride
    # axes of program ids the address adds unscaled (`+ tl.program_id(1)`): the compiler knows
    # nothing of their divisibility, so the address is aligned to one element
    program_ids: tuple[int, ...] = ()


def access_pattern(func: MlirFunc, op: MlirOp) -> Access:
    """Classify tt.load / tt.store `op` from the TTIR (after canonicalization)."""
    defs = func.defs()
    if not op.operands:
        return Access("unknown")
    ptr = op.operands[0] if op.name == "tt.load" else op.operands[0]
    mask = None
    if op.name == "tt.load" and len(op.operands) >= 2:
        mask = op.operands[1]
    elif op.name == "tt.store" and len(op.operands) >= 3:
        mask = op.operands[2]
    memo: dict[str, dict[int, tuple[str, frozenset]]] = {}

    def base(v: str) -> str:
        return v.split("#")[0]

    def dims_of(v: str, depth: int = 0) -> dict[int, tuple[str, frozenset]]:
        v = base(v)
        if v in memo:
            return memo[v]
        memo[v] = {}
        if depth > 200:
            return {}
        if v in func.iter_args:
            out = dims_of(func.iter_args[v], depth + 1)
        elif v in func.args or v not in defs:
            out = {}
        else:
            d = defs[v]
            out = _combine(d, [dims_of(o, depth + 1) for o in d.operands], func, defs)
        memo[v] = out
        return out

    def args_of(v: str, seen: set[str]) -> None:
        v = base(v)
        if v in seen:
            return
        seen.add(v)
        if v in func.iter_args:
            args_of(func.iter_args[v], seen)
        elif v in defs:
            for o in defs[v].operands:
                args_of(o, seen)

    ptr_seen: set[str] = set()
    args_of(ptr, ptr_seen)
    pointer_args = tuple(sorted(a.lstrip("%") for a in ptr_seen if a in func.args and "ptr" in func.args[a]))
    offset_args = tuple(
        sorted(a.lstrip("%") for a in ptr_seen if a in func.args and "ptr" not in func.args[a])
    )
    mask_args: tuple[str, ...] = ()
    if mask:
        mseen: set[str] = set()
        args_of(mask, mseen)
        mask_args = tuple(
            sorted(a.lstrip("%") for a in mseen if a in func.args and "ptr" not in func.args[a])
        )
    is_tensor = "tensor<" in op.attrs
    if not is_tensor:
        return Access("scalar", (), pointer_args, offset_args, mask_args, mask is not None)
    dims = dims_of(ptr)
    units = [d for d, (s, _) in dims.items() if s == "unit"]
    strided = [(d, a) for d, (s, a) in dims.items() if s == "strided"]
    stride_args = tuple(sorted({x for _, a in strided for x in a}))
    if units:
        kind = "contiguous"
    elif strided:
        kind = "strided"
    elif not dims:
        kind = "uniform"
    else:
        kind = "unknown"
    pids = tuple(sorted(_unscaled_program_ids(ptr, func, defs)))
    return Access(kind, stride_args, pointer_args, offset_args, mask_args, mask is not None, len(units), pids)


# ops through which a term reaches an address unscaled
_SUMS = {"tt.addptr", "arith.addi", "tt.splat", "tt.broadcast", "tt.expand_dims", *_PASSTHROUGH}


def _unscaled_program_ids(v: str, func: MlirFunc, defs: dict[str, MlirOp], depth: int = 0) -> frozenset[int]:
    v = v.split("#")[0]
    if depth > 100:
        return frozenset()
    if v in func.iter_args:
        return _unscaled_program_ids(func.iter_args[v], func, defs, depth + 1)
    d = defs.get(v)
    if d is None:
        return frozenset()
    if d.name == "tt.get_program_id":
        m = re.search(r"get_program_id ([xyz])", d.text)
        return frozenset({"xyz".index(m.group(1))}) if m else frozenset()
    if d.name not in _SUMS:
        return frozenset()
    out: frozenset[int] = frozenset()
    for o in d.operands:
        out |= _unscaled_program_ids(o, func, defs, depth + 1)
    return out


def _const_value(op: MlirOp | None) -> int | None:
    # `%c1_i32 = arith.constant 1 : i32` / `%cst = arith.constant dense<64> : tensor<128x64xi32>`
    if op is None or op.name != "arith.constant":
        return None
    m = re.search(r"arith\.constant (?:dense<)?(-?\d+)(?:>)? :", op.text)
    return int(m.group(1)) if m else None


_DIVIDES = ("arith.remsi", "arith.remui", "arith.divsi", "arith.divui")


def _operand_const(v: str, defs: dict[str, MlirOp]) -> int | None:
    """The integer a constant operand holds, through a `tt.splat` of a constant too."""
    op = defs.get(v.split("#")[0])
    const = _const_value(op)
    if const is None and op is not None and op.name == "tt.splat" and op.operands:
        const = _const_value(defs.get(op.operands[0].split("#")[0]))
    return const


def _uniform_args(v: str, func: MlirFunc, defs: dict[str, MlirOp], depth: int = 0) -> frozenset:
    v = v.split("#")[0]
    if depth > 50:
        return frozenset()
    if v in func.args:
        return frozenset({v.lstrip("%")})
    if v in func.iter_args:
        return _uniform_args(func.iter_args[v], func, defs, depth + 1)
    d = defs.get(v)
    if d is None:
        return frozenset()
    out: frozenset = frozenset()
    for o in d.operands:
        out |= _uniform_args(o, func, defs, depth + 1)
    return out


def _combine(
    op: MlirOp, ins: list[dict[int, tuple[str, frozenset]]], func: MlirFunc, defs: dict[str, MlirOp]
) -> dict[int, tuple[str, frozenset]]:
    name = op.name
    if name == "tt.make_range":
        return {0: ("unit", frozenset())}
    if name in _UNIFORM or not ins:
        return {}
    if name == "tt.expand_dims":
        m = re.search(r"axis = (\d+)", op.attrs)
        axis = int(m.group(1)) if m else 0
        return {(d if d < axis else d + 1): s for d, s in ins[0].items()}
    if name in _PASSTHROUGH:
        return dict(ins[0])
    if name in ("arith.addi", "tt.addptr", "arith.subi"):
        out: dict[int, tuple[str, frozenset]] = {}
        for part in ins:
            for d, (s, a) in part.items():
                old = out.get(d)
                if old is None:
                    out[d] = (s, a)
                else:
                    kinds = (s, old[0])
                    kind = "strided" if "strided" in kinds else "opaque" if "opaque" in kinds else "unit"
                    out[d] = (kind, a | old[1])
        return out
    if name == "arith.muli":
        a, b = ins[0], ins[1] if len(ins) > 1 else {}
        if a and b:
            return {d: ("strided", s[1]) for d, s in {**a, **b}.items()}
        ranged, other_idx = (a, 1) if a else (b, 0)
        if not ranged:
            return {}
        other = op.operands[other_idx] if other_idx < len(op.operands) else ""
        const = _operand_const(other, defs)
        if const == 1:
            return dict(ranged)
        # the scale: the arguments it reads, or the constant itself (`i * 2`: "2")
        factor = frozenset({str(const)}) if const is not None else _uniform_args(other, func, defs)
        # an index the compiler cannot follow (`i % 2`), scaled, is no walk along the scale
        return {d: ("opaque" if s[0] == "opaque" else "strided", s[1] | factor) for d, s in ranged.items()}
    if name in _DIVIDES and len(ins) == 2 and ins[0] and not ins[1] and len(op.operands) == 2:
        # a flat offset split by a divisor uniform over the tile (`row = offs // D`,
        # `col = offs % D`): the quotient is constant and the remainder keeps the offset's walk
        # within runs of D. Only for D of at least 16 or unknown until run time (an argument):
        # a small D (`offs // 2`) makes runs too short to count as either.
        const = _operand_const(op.operands[1], defs)
        if const is None or const >= 16:
            if name.startswith("arith.div"):
                return {d: s for d, s in ins[0].items() if s[0] != "unit"}
            return dict(ins[0])
    if name in (
        "arith.remsi",
        "arith.remui",
        "arith.divsi",
        "arith.divui",
        "arith.andi",
        "arith.ori",
        "arith.select",
        "arith.maxsi",
        "arith.minsi",
    ):
        merged: dict[int, tuple[str, frozenset]] = {}
        for part in ins:
            merged.update({d: ("opaque", s[1]) for d, s in part.items()})
        return merged
    return {}


# ---------------------------------------------------------------------------------------------
# Assembly attribution: PTX, AMDGCN, SASS

# `	.file	1 "/tmp/exp/axpy.py"` or `	.file	1 "/tmp/exp" "axpy.py"`
_PTX_FILE = re.compile(r'^\s*\.file\s+(\d+)\s+"([^"]*)"(?:\s+"([^"]*)")?', re.M)
# `	.loc	1 7 16                          // axpy.py:7:16`
# `	.loc	2 293 36                        // standard.py:293:36 @[ colsum_strided.py:18:35 ]`
_PTX_LOC = re.compile(r"^\s*\.loc\s+(\d+)\s+(\d+)\s+(\d+)(.*)$")
# the `@[ colsum_strided.py:18:35 ]` inlining chain in the comment of a .loc
_INLINED_AT = re.compile(r"([\w.-]+\.py):(\d+):\d+")
# `	@%p1 ld.global.v4.b32 { %r1, %r2, %r3, %r4 }, [ %rd1 + 0 ];`   `	@!%p9 st.global.b32 [ %rd9 + 0 ], { %r9 };`
_PTX_INSTR = re.compile(r"^\s*(?:@!?%\w+\s+)?([a-z][\w.:]*)")
# AMDGCN: `	global_load_dwordx4 v[2:5], v[0:1], off`
_AMD_INSTR = re.compile(r"^\s*([sv]_[\w]+|global_\w+|buffer_\w+|ds_\w+|flat_\w+|scratch_\w+)\b")
# `	//## File "/tmp/exp/axpy.py", line 7`  (nvdisasm -c -g)
_SASS_FILE = re.compile(r'^\s*//## File "([^"]*)", line (\d+)')
# `        /*0180*/              @!P0 LDG.E.128 R16, desc[UR4][R2.64] ;`
_SASS_INSTR = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Za-z0-9_.]*)")


@dataclass(frozen=True)
class AsmInstr:
    asm_line: int  # 1-based line in the assembly text
    opcode: str
    line: int | None  # line of the uploaded file
    text: str


def parse_ptx(ptx: str, filename: str = "") -> list[AsmInstr]:
    """Every PTX instruction with the uploaded-file line of the `.loc` above it.

    A `.loc` in another file (triton/language/standard.py for tl.sum) is attributed to the
    uploaded file's line through the `@[ file.py:L:C ]` inlining chain LLVM prints after it.
    """
    files = {}
    for m in _PTX_FILE.finditer(ptx):
        path = os.path.join(m.group(2), m.group(3)) if m.group(3) else m.group(2)
        files[m.group(1)] = path
    base = os.path.basename(filename) if filename else ""
    out: list[AsmInstr] = []
    current: int | None = None
    for n, raw in enumerate(ptx.splitlines(), 1):
        s = raw.strip()
        if not s or s.startswith("//") or s.endswith(":") or s in ("{", "}", ")", "("):
            continue
        if s.startswith("."):
            m = _PTX_LOC.match(raw)
            if m:
                path = files.get(m.group(1), "")
                if not filename or _same_file(path, filename):
                    current = int(m.group(2))
                else:
                    current = None
                    for fname, line in _INLINED_AT.findall(m.group(4)):
                        if fname == base:
                            current = int(line)
            continue
        m = _PTX_INSTR.match(raw)
        if m:
            out.append(AsmInstr(n, m.group(1), current, s))
    return out


def parse_amdgcn(text: str, filename: str = "") -> list[AsmInstr]:
    """AMDGCN instructions under `.loc` directives (same directive syntax as PTX)."""
    files = {}
    # `	.file	1 "/work/main/tests/kernels" "vadd_unaligned.py" md5 0x...`
    for m in _PTX_FILE.finditer(text):
        files[m.group(1)] = os.path.join(m.group(2), m.group(3)) if m.group(3) else m.group(2)
    out: list[AsmInstr] = []
    current: int | None = None
    for n, raw in enumerate(text.splitlines(), 1):
        m = _PTX_LOC.match(raw)
        if m:
            path = files.get(m.group(1), "")
            current = int(m.group(2)) if not filename or _same_file(path, filename) else None
            continue
        m = _AMD_INSTR.match(raw)
        if m:
            out.append(AsmInstr(n, m.group(1), current, raw.strip()))
    return out


def parse_sass(sass: str, filename: str = "") -> list[AsmInstr]:
    out: list[AsmInstr] = []
    current: int | None = None
    for n, raw in enumerate(sass.splitlines(), 1):
        m = _SASS_FILE.match(raw)
        if m:
            current = int(m.group(2)) if not filename or _same_file(m.group(1), filename) else None
            continue
        m = _SASS_INSTR.match(raw)
        if m:
            out.append(AsmInstr(n, m.group(1), current, raw.strip()))
    return out


# Categories shared by PTX, AMDGCN and SASS
GLOBAL_LOAD, GLOBAL_STORE, SHARED_LOAD, SHARED_STORE = (
    "global_load",
    "global_store",
    "shared_load",
    "shared_store",
)
LOCAL, ATOMIC, CP_ASYNC, TMA, MMA, WGMMA, FMA, BARRIER = (
    "local",
    "atomic",
    "cp_async",
    "tma",
    "mma",
    "wgmma",
    "fma",
    "barrier",
)

_TYPE_BITS = re.compile(r"^[bufs](\d+)$")


def classify_ptx(opcode: str) -> tuple[str | None, int | None]:
    """(category, access width in bits) of a PTX opcode; width None where it does not apply."""
    parts = opcode.split(".")
    head = parts[0]
    width = None
    vec = 1
    bits = None
    for p in parts[1:]:
        if p in ("v2", "v4", "v8"):
            vec = int(p[1])
        m = _TYPE_BITS.match(p)
        if m:
            bits = int(m.group(1))
    if bits is not None:
        width = vec * bits
    spaces = set(parts[1:])
    shared = any(p.startswith("shared") for p in parts[1:])
    if head in ("ld", "st"):
        if "global" in spaces:
            return (GLOBAL_LOAD if head == "ld" else GLOBAL_STORE), width
        if shared:
            return (SHARED_LOAD if head == "ld" else SHARED_STORE), width
        if "local" in spaces:
            return LOCAL, width
        return None, width
    if head == "ldmatrix":
        return SHARED_LOAD, None
    if head == "stmatrix":
        return SHARED_STORE, None
    if head in ("atom", "red") and "global" in spaces:
        return ATOMIC, width
    if head == "cp" and len(parts) > 1 and parts[1] == "async":
        if "bulk" in spaces:
            return TMA, None
        if "commit_group" in spaces or "wait_group" in spaces or "wait_all" in spaces:
            return None, None
        return CP_ASYNC, None
    if head == "mma":
        return MMA, None
    if head == "wgmma" and "mma_async" in spaces:
        return WGMMA, None
    if head == "fma" and "f32" in spaces:
        return FMA, None
    if head in ("bar", "barrier"):
        return BARRIER, None
    return None, None


_AMD_DWORD = {
    "dword": 32,
    "dwordx2": 64,
    "dwordx3": 96,
    "dwordx4": 128,
    "ubyte": 8,
    "sbyte": 8,
    "ushort": 16,
    "sshort": 16,
    "short": 16,
    "byte": 8,
    "b32": 32,
    "b64": 64,
    "b96": 96,
    "b128": 128,
    "b16": 16,
    "b8": 8,
    "u8": 8,
    "u16": 16,
    "i8": 8,
    "i16": 16,
}


def classify_amdgcn(opcode: str) -> tuple[str | None, int | None]:
    width = None
    for suffix, bits in _AMD_DWORD.items():
        if opcode.endswith("_" + suffix):
            width = bits
    if opcode.startswith(("global_load", "buffer_load")):
        return GLOBAL_LOAD, width
    if opcode.startswith(("global_store", "buffer_store")):
        return GLOBAL_STORE, width
    if opcode.startswith(("global_atomic", "buffer_atomic")):
        return ATOMIC, width
    if opcode.startswith(("ds_read", "ds_load")):
        return SHARED_LOAD, width
    if opcode.startswith(("ds_write", "ds_store")):
        return SHARED_STORE, width
    if opcode.startswith("scratch_"):
        return LOCAL, width
    if opcode.startswith(("v_mfma", "v_smfmac", "v_wmma")):
        return MMA, None
    if opcode.startswith(("v_fma_f32", "v_fmac_f32", "v_pk_fma_f32")):
        return FMA, None
    if opcode == "s_barrier":
        return BARRIER, None
    return None, None


def classify_sass(opcode: str) -> tuple[str | None, int | None]:
    parts = opcode.split(".")
    head = parts[0]
    width = 32
    for p in parts[1:]:
        if p in ("64", "128"):
            width = int(p)
        elif p in ("U16", "S16"):
            width = 16
        elif p in ("U8", "S8"):
            width = 8
    table = {
        "LDG": GLOBAL_LOAD,
        "STG": GLOBAL_STORE,
        "LDS": SHARED_LOAD,
        "LDSM": SHARED_LOAD,
        "STS": SHARED_STORE,
        "STSM": SHARED_STORE,
        "LDL": LOCAL,
        "STL": LOCAL,
        "LDGSTS": CP_ASYNC,
        "UTMALDG": TMA,
        "UBLKCP": TMA,
        "HMMA": MMA,
        "IMMA": MMA,
        "HGMMA": WGMMA,
        "IGMMA": WGMMA,
        "FFMA": FMA,
        "BAR": BARRIER,
        "RED": ATOMIC,
        "ATOMG": ATOMIC,
    }
    cat = table.get(head)
    return cat, (width if cat in (GLOBAL_LOAD, GLOBAL_STORE, SHARED_LOAD, SHARED_STORE, LOCAL) else None)


# ---------------------------------------------------------------------------------------------
# The per-line table


_TTGIR_OPS = (
    "tt.load",
    "tt.store",
    "tt.dot",
    "ttng.warp_group_dot",
    "ttg.convert_layout",
    "ttg.async_copy_global_to_local",
    "ttng.async_tma_copy_global_to_local",
    "ttg.local_alloc",
    "ttg.local_load",
    "ttg.local_store",
    "tt.reduce",
    "tt.atomic_rmw",
    "tt.descriptor_load",
    "ttng.tc_gen5_mma",
    "tt.trans",
)


@dataclass
class LineStats:
    """What one line of the uploaded file became in one kernel."""

    line: int
    asm: dict[str, dict[str, int]] = field(default_factory=dict)  # category -> opcode -> count
    asm_lines: dict[str, list[int]] = field(default_factory=dict)  # category -> lines in the PTX/AMDGCN
    widths: dict[str, list[int]] = field(
        default_factory=dict
    )  # category -> access widths (bits), one per instr
    sass: dict[str, int] = field(default_factory=dict)  # category -> count
    sass_lines: dict[str, list[int]] = field(default_factory=dict)
    ir: dict[str, int] = field(default_factory=dict)  # TTGIR op -> count
    loop_ir: dict[str, int] = field(default_factory=dict)  # the same, only ops inside a loop
    in_loop: bool = False
    accesses: list[dict[str, Any]] = field(default_factory=list)  # from TTIR: one per tt.load/tt.store

    def count(self, category: str) -> int:
        return sum(self.asm.get(category, {}).values())

    def max_width(self, category: str) -> int | None:
        w = self.widths.get(category)
        return max(w) if w else None

    def to_json(self) -> dict[str, Any]:
        return {
            "line": self.line,
            "asm": self.asm,
            "asm_lines": {k: v[:64] for k, v in self.asm_lines.items()},
            "widths": {k: sorted(set(v)) for k, v in self.widths.items()},
            "sass": self.sass,
            "ir": self.ir,
            "loop_ir": self.loop_ir,
            "in_loop": self.in_loop,
            "accesses": self.accesses,
        }


def line_table(kernel: CompiledKernel) -> dict[int, LineStats]:
    """One LineStats per uploaded-file line that produced anything, from every stage present."""
    table: dict[int, LineStats] = {}
    fname = kernel.filename

    def row(line: int) -> LineStats:
        if line not in table:
            table[line] = LineStats(line)
        return table[line]

    asm_kind = kernel.asm_kind
    asm_text = kernel.stages.get(asm_kind, "")
    instrs = parse_amdgcn(asm_text, fname) if asm_kind == "amdgcn" else parse_ptx(asm_text, fname)
    classify = classify_amdgcn if asm_kind == "amdgcn" else classify_ptx
    for ins in instrs:
        if ins.line is None:
            continue
        cat, width = classify(ins.opcode)
        if cat is None:
            continue
        r = row(ins.line)
        r.asm.setdefault(cat, {})
        r.asm[cat][ins.opcode] = r.asm[cat].get(ins.opcode, 0) + 1
        r.asm_lines.setdefault(cat, []).append(ins.asm_line)
        if width is not None:
            r.widths.setdefault(cat, []).append(width)
    for ins in parse_sass(kernel.stages.get("sass", ""), fname):
        if ins.line is None:
            continue
        cat, _ = classify_sass(ins.opcode)
        if cat is None:
            continue
        r = row(ins.line)
        r.sass[cat] = r.sass.get(cat, 0) + 1
        r.sass_lines.setdefault(cat, []).append(ins.asm_line)
    if kernel.stages.get("ttgir"):
        for op in parse_mlir(kernel.stages["ttgir"], fname).ops:
            if op.line is None:
                continue
            r = row(op.line)
            if op.name in _TTGIR_OPS:
                r.ir[op.name] = r.ir.get(op.name, 0) + 1
                if op.loops:
                    r.loop_ir[op.name] = r.loop_ir.get(op.name, 0) + 1
            if op.loops and op.name not in ("scf.for", "scf.yield"):
                r.in_loop = True
    if kernel.stages.get("ttir"):
        func = parse_mlir(kernel.stages["ttir"], fname)
        for op in func.ops:
            if op.line is None or op.name not in ("tt.load", "tt.store"):
                continue
            acc = access_pattern(func, op)
            row(op.line).accesses.append(
                {
                    "op": op.name,
                    "kind": acc.kind,
                    "stride_args": list(acc.stride_args),
                    "pointer_args": list(acc.pointer_args),
                    "offset_args": list(acc.offset_args),
                    "mask_args": list(acc.mask_args),
                    "program_ids": list(acc.program_ids),
                    "masked": acc.has_mask,
                    "type": _short_type(op.attrs),
                }
            )
    return dict(sorted(table.items()))


def _short_type(attrs: str) -> str:
    m = _TENSOR_TYPE.search(attrs)
    return m.group(0) + ">" if m else attrs.rsplit(" : ", 1)[-1].strip()


def tensor_shape(type_text: str) -> tuple[tuple[int, ...], str] | None:
    """`tensor<64x32xf32, #blocked>` -> ((64, 32), 'f32')."""
    m = _TENSOR_TYPE.search(type_text)
    if not m:
        return None
    dims = tuple(int(x) for x in m.group(1).split("x") if x)
    return dims, m.group(2).strip()


def excerpt(text: str, lines: Iterable[int], context: int = 0, limit: int = 12) -> str:
    """The given 1-based lines of `text` (deduplicated, in order), at most `limit` of them."""
    src = text.splitlines()
    wanted: list[int] = []
    for n in sorted(set(lines)):
        for k in range(n - context, n + context + 1):
            if 1 <= k <= len(src) and k not in wanted:
                wanted.append(k)
    shown = wanted[:limit]
    out = [f"{k:>6}: {src[k - 1].strip()}" for k in shown]
    if len(wanted) > limit:
        out.append(f"        ... {len(wanted) - limit} more")
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------
# Occupancy


@dataclass(frozen=True)
class SmSpec:
    regs: int = 65536
    smem: int = 233472  # bytes per SM usable by blocks
    smem_per_block_reserved: int = 1024
    max_threads: int = 2048
    max_blocks: int = 32
    reg_unit: int = 256  # registers are allocated per warp in units of this


_SM_SPECS = {
    90: SmSpec(),
    80: SmSpec(smem=167936),
    86: SmSpec(smem=102400, max_threads=1536, max_blocks=16),
    89: SmSpec(smem=102400, max_threads=1536, max_blocks=24),
    75: SmSpec(smem=65536, max_threads=1024, max_blocks=16),
}


@dataclass(frozen=True)
class Occupancy:
    blocks_per_sm: int
    warps_per_sm: int
    fraction: float  # of the SM's warp slots (CUDA) or of 8 waves per SIMD (AMD)
    limiter: str  # registers, shared, threads, blocks, compiler
    detail: dict[str, int] = field(default_factory=dict, hash=False)


def occupancy(kernel: CompiledKernel, backend: str, arch: str) -> Occupancy | None:
    res = kernel.resources
    if backend == "hip":
        if res.waves_per_simd is None:
            return None
        return Occupancy(
            0,
            res.waves_per_simd,
            res.waves_per_simd / 8.0,
            "compiler",
            {"waves_per_simd": res.waves_per_simd},
        )
    if backend != "cuda" or res.registers is None:
        return None
    try:
        cc = int(arch)
    except ValueError:
        cc = 90
    spec = _SM_SPECS.get(cc, _SM_SPECS[90])
    warps = max(1, kernel.num_warps)
    regs_per_warp = math.ceil(max(res.registers, 1) * 32 / spec.reg_unit) * spec.reg_unit
    limits = {
        "threads": spec.max_threads // (warps * 32),
        "blocks": spec.max_blocks,
        "registers": (spec.regs // regs_per_warp) // warps,
        "shared": spec.smem // (res.shared + spec.smem_per_block_reserved) if res.shared else spec.max_blocks,
    }
    limiter = min(limits, key=lambda k: limits[k])
    blocks = max(0, limits[limiter])
    max_warps = spec.max_threads // 32
    return Occupancy(blocks, blocks * warps, blocks * warps / max_warps, limiter, limits)
