"""Tier 2: IR attribution. What each source line of the kernel became in the compiled code.

Input: the `compile` job's result (stages of every launched kernel, resource usage) and the
uploaded source. Output: a per-line table (global and shared memory traffic with vector
widths, layout conversions, MMA/wgmma, async copies) and findings that name a line and point
at the assembly lines that show the problem.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from typing import Any

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
    BARRIER,
    CP_ASYNC,
    FMA,
    GLOBAL_LOAD,
    GLOBAL_STORE,
    LOCAL,
    MMA,
    SHARED_LOAD,
    SHARED_STORE,
    TMA,
    WGMMA,
    CompiledKernel,
    CompileResult,
    LineStats,
    excerpt,
    line_table,
    occupancy,
    parse_mlir,
    tensor_shape,
)

SCALAR_GLOBAL = register_code(
    "IR_SCALAR_GLOBAL",
    Tier.IR,
    Family.HINTS,
    "line {line}: the {what} compiles to {count} {op} per thread ({width}-bit each); the access is {access}",
    "Scalar global memory access",
)
SPILLS = register_code(
    "IR_SPILLS",
    Tier.IR,
    Family.LAUNCH_CONFIG,
    "{kernel} spills registers: {spills_store} bytes stored to and {spills_load} bytes loaded from local memory "
    "({registers} registers per thread)",
    "Register spills",
)
LOW_OCCUPANCY = register_code(
    "IR_LOW_OCCUPANCY",
    Tier.IR,
    Family.LAUNCH_CONFIG,
    "{kernel}: at most {occupancy} ({percent}% of the slots), limited by {limiter}",
    "Low occupancy limit",
)
DOT_FMA = register_code(
    "IR_DOT_FMA",
    Tier.IR,
    Family.DOT_PRECISION,
    "line {line}: tl.dot is lowered to {fma} FMA instructions; no MMA or wgmma instruction is emitted",
    "Dot lowered to FMA",
)
LAYOUT_CONVERT = register_code(
    "IR_LAYOUT_CONVERT",
    Tier.IR,
    Family.NONE,
    "line {line}: a layout conversion inside a loop goes through shared memory "
    "({stores} shared stores, {loads} shared loads, {barriers} barriers per iteration)",
    "Layout conversion through shared memory",
)
NO_ASYNC_COPY = register_code(
    "IR_NO_ASYNC_COPY",
    Tier.IR,
    Family.PIPELINING,
    "the dot loop (line {line}) loads its operands with plain global loads: no cp.async or TMA in {kernel}",
    "Dot loop without async copies",
)
REPLICATED_TILE = register_code(
    "IR_REPLICATED_TILE",
    Tier.IR,
    Family.LAUNCH_CONFIG,
    "line {line}: the load of a {shape} tile is laid over {threads} threads ({warps} warps), so each "
    "element is held by {copies} threads and {idle}% of the lanes repeat another's load: fewer warps, "
    "or more elements per program",
    "Tile smaller than the threads",
)
THIN_TILE = register_code(
    "IR_THIN_TILE",
    Tier.IR,
    Family.LAUNCH_CONFIG,
    "line {line}: the contiguous load of a {shape} {dtype} tile is spread over {threads} threads "
    "({warps} warps), {per_thread} element(s) and {bytes} bytes per thread where one vector load "
    "takes 16: on {fit_warps} warp(s) each thread would load {fit_bytes} bytes at once",
    "Tile too thin for vector loads",
)
COMPILE_ERROR = register_code(
    "IR_COMPILE_ERROR",
    Tier.IR,
    Family.NONE,
    "{kernel} failed to compile for {target}: {error}",
    "Compile error",
)

LOW_OCCUPANCY_FRACTION = 0.25
_DOT_OPS = ("tt.dot", "ttng.warp_group_dot", "ttng.tc_gen5_mma")


def run_tier2(result: CompileResult, source: str) -> TierResult:
    if result.backend == "npu":  # no assembly on Ascend: the linalg of triton-ascend's adapter
        from diagnosis.engine.ascend import run_tier2_npu

        return run_tier2_npu(result, source)
    t0 = time.perf_counter()
    out = TierResult(tier=Tier.IR)
    src_lines = source.splitlines()
    kernels_data: dict[str, Any] = {}
    for kernel in result.kernels:
        if kernel.error:
            out.findings.append(
                Finding(
                    COMPILE_ERROR.code,
                    Severity.HIGH,
                    {
                        "kernel": kernel.name,
                        "target": result.target,
                        "error": kernel.error.splitlines()[0][:300],
                    },
                    lines=(kernel.def_line,) if kernel.def_line else (),
                    kernel=kernel.name,
                    evidence=(ArtefactRef("log", kernel.name, excerpt=kernel.error[:2000]),),
                )
            )
            continue
        table = line_table(kernel)
        occ = occupancy(kernel, result.backend, result.arch)
        kernels_data[kernel.name] = {
            "def_line": kernel.def_line,
            "num_warps": kernel.num_warps,
            "num_stages": kernel.num_stages,
            "resources": kernel.resources.__dict__,
            "occupancy": None
            if occ is None
            else {
                "blocks_per_sm": occ.blocks_per_sm,
                "warps_per_sm": occ.warps_per_sm,
                "fraction": round(occ.fraction, 3),
                "limiter": occ.limiter,
                "limits": occ.detail,
            },
            "lines": {
                str(line): {**row.to_json(), "code": _src(src_lines, line)} for line, row in table.items()
            },
            "compile_s": kernel.compile_s,
        }
        out.findings.extend(kernel_findings(kernel, table, result, src_lines))
        for stage, text in kernel.stages.items():
            out.artefacts.append(Artefact(stage, f"{kernel.name}.{stage}", text))
    out.data = {"target": result.target, "kernels": kernels_data}
    serious = [f for f in out.findings if f.severity in (Severity.MEDIUM, Severity.HIGH)]
    out.localizes = any(f.lines for f in serious)
    out.narrows = _narrows(serious)
    out.explains = False  # tier 2 says what the code became, not why the compiler chose it
    if not result.kernels:
        out.notes.append("the compile job returned no kernel")
    out.wall_s = time.perf_counter() - t0
    return out


def _narrows(findings: list[Finding]) -> bool:
    if not findings:
        return False
    top = max(f.severity.rank for f in findings)
    families = {f.family for f in findings if f.severity.rank == top}
    return len(families) == 1 and Family.NONE not in families




def _src(src_lines: list[str], line: int) -> str:
    return src_lines[line - 1].strip() if 0 < line <= len(src_lines) else ""


def _asm_ref(kernel: CompiledKernel, lines: list[int], limit: int = 8) -> ArtefactRef:
    kind = kernel.asm_kind
    shown = sorted(set(lines))
    return ArtefactRef(
        kind, kernel.name, tuple(shown), excerpt(kernel.stages.get(kind, ""), shown, limit=limit)
    )


def kernel_findings(
    kernel: CompiledKernel, table: dict[int, LineStats], result: CompileResult, src_lines: list[str]
) -> list[Finding]:
    """All tier-2 findings of one compiled kernel (used by tier 3 and the counterfactuals too)."""
    found: list[Finding] = []
    tiles = _tile_accesses(kernel)
    found.extend(_scalar_access(kernel, table, src_lines, tiles))
    found.extend(_dot_findings(kernel, table, src_lines))
    found.extend(_layout_conversions(kernel, table, src_lines))
    found.extend(_resource_findings(kernel, table, result))
    loads = [t for t in tiles if t.op == "tt.load"]
    found.extend(_replicated_tiles(kernel, loads, src_lines))
    found.extend(_thin_tiles(kernel, loads, table, src_lines))
    return found


_BLOCKED = re.compile(
    r"^(#[\w]+) = #ttg\.blocked<\{sizePerThread = \[([\d, ]+)\], threadsPerWarp = \[([\d, ]+)\], "
    r"warpsPerCTA = \[([\d, ]+)\]",
    re.MULTILINE,
)
_LAYOUT_OF = re.compile(r"tensor<[^#]*(#[\w]+)>")
_POINTEE = re.compile(r"!tt\.ptr<(\w+)")
_ELEMENT_BYTES = {"i8": 1, "f8E4M3FN": 1, "f8E5M2": 1, "i16": 2, "f16": 2, "bf16": 2, "i32": 4, "f32": 4, "i64": 8, "f64": 8}


@dataclass(frozen=True)
class _TileAccess:
    """A global load or store of a tensor in a blocked layout, as TTGIR writes it."""

    line: int  # the source line
    ir_lines: tuple[int, int]  # the TTGIR lines of the layout and of the access
    shape: tuple[int, ...]
    element: str  # the pointee type: bf16, f32
    cover: list[int]  # the elements the layout spans per dimension
    per_thread: int  # elements one thread holds per repetition
    threads: int
    op: str = "tt.load"  # or tt.store

    def fit(self) -> tuple[int, int] | None:
        """(warps, bytes a thread would move at once on them): the warps that give each thread a
        16-byte vector of this tile (at least one), when fewer than the layout spreads it over and
        the layout does not wrap; None otherwise (a tile that wraps is IR_REPLICATED_TILE's, one
        whose threads hold 16 bytes is fine)."""
        size = _ELEMENT_BYTES.get(self.element)
        if size is None or any(c > d for c, d in zip(self.cover, self.shape, strict=True)):
            return None
        if self.per_thread * size >= 16:
            return None
        threads = max(32, math.prod(self.shape) * size // 16)
        if threads >= self.threads:
            return None
        return threads // 32, min(16, math.prod(self.shape) * size // threads)


def _tile_accesses(kernel: CompiledKernel) -> list[_TileAccess]:
    ttgir = kernel.stages.get("ttgir", "")
    layouts: dict[str, tuple[list[int], int, int, int]] = {}
    for m in _BLOCKED.finditer(ttgir):
        per_thread, lanes, warps = (tuple(int(x) for x in m.group(i).split(",")) for i in (2, 3, 4))
        cover = [a * b * c for a, b, c in zip(per_thread, lanes, warps, strict=True)]
        defined = ttgir.count("\n", 0, m.start()) + 1
        layouts[m.group(1)] = (cover, math.prod(per_thread), math.prod(lanes) * math.prod(warps), defined)
    if not layouts:
        return []
    out = []
    for op in parse_mlir(ttgir).ops:
        if op.name not in ("tt.load", "tt.store") or op.line is None:
            continue
        shape_type = tensor_shape(op.attrs)
        layout = _LAYOUT_OF.search(op.attrs)
        if shape_type is None or layout is None or layout.group(1) not in layouts:
            continue
        cover, per_thread, threads, defined = layouts[layout.group(1)]
        if len(cover) != len(shape_type[0]):
            continue
        pointee = _POINTEE.search(shape_type[1])
        element = pointee.group(1) if pointee else shape_type[1]
        tile = _TileAccess(op.line, (defined, op.ir_line), shape_type[0], element, cover, per_thread, threads, op.name)
        out.append(tile)
    return out


_SLICE_OF = re.compile(r"tensor<[^#]*#ttg\.slice<\{dim = (\d+), parent = (#[\w]+)\}>>")


def slice_access(kernel: CompiledKernel, line: int, op: str) -> dict[str, Any] | None:
    """How a 1-D global access at source `line` is laid out when its tensor is a slice of a
    blocked tile's layout (a row vector next to a 2-D tile: `rows` of `x[rows[:, None], cols]`):
    each thread holds `per_thread` adjacent elements of it at a time, so no access is wider; with
    the layout, the tile's rank and `lanes`, the threads that hold the same element (a warp's
    lanes across the dropped dimension). None for any other access."""
    ttgir = kernel.stages.get("ttgir", "")
    layouts = {m.group(1): m for m in _BLOCKED.finditer(ttgir)}
    for mop in parse_mlir(ttgir).ops:
        if mop.name != op or mop.line != line:
            continue
        found = _SLICE_OF.search(mop.attrs)
        parent = layouts.get(found.group(2)) if found else None
        if parent is None:
            continue
        dim = int(found.group(1))
        per_thread, lanes, warps = (tuple(int(x) for x in parent.group(i).split(",")) for i in (2, 3, 4))
        if dim >= len(per_thread):
            continue
        kept = [i for i in range(len(per_thread)) if i != dim]
        return {
            "layout": f"#ttg.slice<{{dim = {dim}, parent = {found.group(2)}}}>",
            "rank": len(per_thread),  # of the tile it is a slice of
            "per_thread": math.prod(per_thread[i] for i in kept),
            "lanes": lanes[dim] * warps[dim],
        }
    return None


def _replicated_tiles(kernel: CompiledKernel, tiles: list[_TileAccess], src_lines: list[str]) -> list[Finding]:
    """Global loads of a tile smaller than the threads its blocked layout spans: the layout
    wraps, several threads hold each element, the extra lanes only repeat the load. (Stores are
    left out: a reduction's small result stored after a big tile is read says nothing.)"""
    # source line -> (copies, shape, threads, the TTGIR lines of the layout and of the load)
    worst: dict[int, tuple[int, tuple[int, ...], int, tuple[int, int]]] = {}
    for t in tiles:
        copies = math.prod(max(1, c // d) for c, d in zip(t.cover, t.shape, strict=True))
        if copies >= 2 and copies > worst.get(t.line, (1,))[0]:
            worst[t.line] = (copies, t.shape, t.threads, t.ir_lines)
    ttgir = kernel.stages.get("ttgir", "")
    return [
        Finding(
            REPLICATED_TILE.code,
            Severity.MEDIUM,
            {
                "line": line,
                "shape": "x".join(map(str, shape)),
                "threads": threads,
                "warps": kernel.num_warps,
                "copies": copies,
                "idle": round(100 * (1 - 1 / copies)),
                "code": _src(src_lines, line),
            },
            lines=(line,),
            kernel=kernel.name,
            evidence=(ArtefactRef("ttgir", kernel.name, ir_lines, excerpt(ttgir, ir_lines)),),
        )
        for line, (copies, shape, threads, ir_lines) in sorted(worst.items())
    ]


def _thin_tiles(
    kernel: CompiledKernel, tiles: list[_TileAccess], table: dict[int, LineStats], src_lines: list[str]
) -> list[Finding]:
    """Contiguous global loads whose layout gives each thread less than a 16-byte vector while
    fewer warps would give every thread more: a 128-element bf16 row on four warps holds one
    element (2 bytes) per thread, on one warp four (8 bytes). The coalescing pass sizes a thread's
    elements by the tile over the threads, so the vector width follows the warps; a tile that
    wraps (IR_REPLICATED_TILE) is left to that finding."""
    ttgir = kernel.stages.get("ttgir", "")
    found: list[Finding] = []
    seen: set[int] = set()
    for t in tiles:
        size = _ELEMENT_BYTES.get(t.element)
        row = table.get(t.line)
        fit = t.fit()
        if size is None or row is None or t.line in seen or fit is None:
            continue
        kinds = {a["kind"] for a in row.accesses if a["op"] == "tt.load"}
        if kinds != {"contiguous"}:
            continue
        seen.add(t.line)
        found.append(
            Finding(
                THIN_TILE.code,
                Severity.MEDIUM,
                {
                    "line": t.line,
                    "shape": "x".join(map(str, t.shape)),
                    "dtype": t.element,
                    "threads": t.threads,
                    "warps": kernel.num_warps,
                    "per_thread": t.per_thread,
                    "bytes": t.per_thread * size,
                    "fit_warps": fit[0],
                    "fit_bytes": fit[1],
                    "code": _src(src_lines, t.line),
                },
                lines=(t.line,),
                kernel=kernel.name,
                evidence=(ArtefactRef("ttgir", kernel.name, t.ir_lines, excerpt(ttgir, t.ir_lines)),),
            )
        )
    return found


def _scalar_access(
    kernel: CompiledKernel, table: dict[int, LineStats], src_lines: list[str], tiles: list[_TileAccess]
) -> list[Finding]:
    """Global loads and stores narrower than 64 bits. A contiguous one whose layout gives each
    thread no more of the tile than one such access holds is narrow because of the warps, not of
    a missing hint: 128 bf16 on four warps are one element a thread whatever the compiler proves
    (flag_gems' rotary embedding, a head per loop step). That one points at LAUNCH_CONFIG, and
    says how many warps give each thread a 16-byte vector."""
    found = []
    for line, row in table.items():
        for cat, what, op_name in ((GLOBAL_LOAD, "load", "tt.load"), (GLOBAL_STORE, "store", "tt.store")):
            count = row.count(cat)
            width = row.max_width(cat)
            if width is None or width > 32:
                continue  # nothing scalar here, or already vectorized
            accesses = [a for a in row.accesses if a["op"] == op_name]
            kinds = {a["kind"] for a in accesses}
            if kinds and kinds <= {"uniform", "scalar"}:
                continue  # every thread reads the same address: nothing to vectorize
            access = (
                "strided"
                if "strided" in kinds and "contiguous" not in kinds
                else ("contiguous" if "contiguous" in kinds else "of unknown contiguity")
            )
            if count < 2 and access != "strided":
                continue  # one element per thread: adjacent lanes still share sectors
            op = max(row.asm[cat], key=lambda k: row.asm[cat][k])
            stride_args = sorted({s for a in accesses for s in a["stride_args"]})
            args = {
                "line": line,
                "what": what,
                "count": count,
                "op": op,
                "width": width,
                "access": access,
                "code": _src(src_lines, line),
                "stride_args": stride_args,
                "mask_args": sorted({s for a in accesses for s in a["mask_args"]}),
                "pointer_args": sorted({s for a in accesses for s in a["pointer_args"]}),
                "in_loop": row.in_loop,
            }
            if access == "strided" and stride_args:
                args["access"] = f"strided (index times {', '.join(stride_args)})"
            family = Family.COALESCE if access.startswith("strided") else None
            thin = _thin_for(tiles, line, op_name, width) if access == "contiguous" else None
            if thin is not None:
                warps, moved = thin.fit() or (0, 0)
                family = Family.LAUNCH_CONFIG
                args.update(per_thread=thin.per_thread, warps=kernel.num_warps, fit_warps=warps)
                args["access"] = (
                    f"contiguous, but a {'x'.join(map(str, thin.shape))} tile on {thin.threads} threads gives "
                    f"each {thin.per_thread} element(s): on {warps} warp(s) each would move {moved} bytes at once"
                )
            found.append(
                Finding(
                    SCALAR_GLOBAL.code,
                    Severity.HIGH if access == "contiguous" else Severity.MEDIUM,
                    args,
                    lines=(line,),
                    kernel=kernel.name,
                    evidence=(_asm_ref(kernel, row.asm_lines.get(cat, [])),),
                    family_override=family,
                )
            )
    return found


def _thin_for(tiles: list[_TileAccess], line: int, op: str, width: int) -> _TileAccess | None:
    """The tile of the `op` at `line` whose layout gives a thread at most `width` bits, so that no
    wider access was possible, when fewer warps would give it more."""
    for t in tiles:
        size = _ELEMENT_BYTES.get(t.element)
        if t.line == line and t.op == op and size is not None and t.per_thread * size * 8 <= width and t.fit():
            return t
    return None


def _kernel_count(table: dict[int, LineStats], *cats: str) -> int:
    return sum(row.count(c) for row in table.values() for c in cats)


def _dot_lines(table: dict[int, LineStats]) -> list[int]:
    return [line for line, row in table.items() if any(row.ir.get(op) for op in _DOT_OPS)]


def _dot_findings(kernel: CompiledKernel, table: dict[int, LineStats], src_lines: list[str]) -> list[Finding]:
    found = []
    dots = _dot_lines(table)
    if not dots:
        return found
    tensor_core = _kernel_count(table, MMA, WGMMA)
    for line in dots:
        row = table[line]
        fma = row.count(FMA)
        if tensor_core == 0 and fma:
            found.append(
                Finding(
                    DOT_FMA.code,
                    Severity.HIGH,
                    {"line": line, "fma": fma, "code": _src(src_lines, line)},
                    lines=(line,),
                    kernel=kernel.name,
                    evidence=(_asm_ref(kernel, row.asm_lines.get(FMA, []), limit=6),),
                )
            )
    async_copies = _kernel_count(table, CP_ASYNC, TMA)
    loop_dots = [line for line in dots if table[line].in_loop]
    if loop_dots and async_copies == 0 and kernel.asm_kind == "ptx":
        load_lines = [line for line, row in table.items() if row.in_loop and row.count(GLOBAL_LOAD)]
        if load_lines:
            ptx_lines = [n for ln in load_lines for n in table[ln].asm_lines.get(GLOBAL_LOAD, [])]
            found.append(
                Finding(
                    NO_ASYNC_COPY.code,
                    Severity.MEDIUM,
                    {
                        "line": loop_dots[0],
                        "kernel": kernel.name,
                        "load_lines": load_lines,
                        "num_stages": kernel.num_stages,
                    },
                    lines=tuple(sorted(set(load_lines + loop_dots))),
                    kernel=kernel.name,
                    evidence=(_asm_ref(kernel, ptx_lines),),
                )
            )
    return found


def _layout_conversions(
    kernel: CompiledKernel, table: dict[int, LineStats], src_lines: list[str]
) -> list[Finding]:
    found = []
    for line, row in table.items():
        if not row.loop_ir.get("ttg.convert_layout"):
            continue
        stores, loads = row.count(SHARED_STORE), row.count(SHARED_LOAD)
        if not (stores and loads):
            continue  # a conversion done in registers or by warp shuffles
        if any(row.ir.get(op) for op in _DOT_OPS):
            continue  # operand staging of a dot is the dot's business (pipelining, MMA)
        lines = row.asm_lines.get(SHARED_STORE, []) + row.asm_lines.get(SHARED_LOAD, [])
        found.append(
            Finding(
                LAYOUT_CONVERT.code,
                Severity.MEDIUM,
                {
                    "line": line,
                    "stores": stores,
                    "loads": loads,
                    "barriers": row.count(BARRIER),
                    "code": _src(src_lines, line),
                },
                lines=(line,),
                kernel=kernel.name,
                evidence=(_asm_ref(kernel, lines),),
            )
        )
    return found


def _resource_findings(
    kernel: CompiledKernel, table: dict[int, LineStats], result: CompileResult
) -> list[Finding]:
    found = []
    res = kernel.resources
    if res.spills:
        spill_lines = sorted(table, key=lambda ln: -table[ln].sass.get(LOCAL, 0) - table[ln].count(LOCAL))
        spill_lines = [ln for ln in spill_lines if table[ln].sass.get(LOCAL) or table[ln].count(LOCAL)][:5]
        evidence = [
            ArtefactRef(
                "log",
                kernel.name,
                excerpt=(
                    f"registers {res.registers}, stack {res.stack} bytes, spill stores {res.spills_store} bytes, "
                    f"spill loads {res.spills_load} bytes"
                ),
            )
        ]
        sass = kernel.stages.get("sass")
        if sass and spill_lines:
            sass_lines = [n for ln in spill_lines for n in table[ln].sass_lines.get(LOCAL, [])][:8]
            evidence.append(ArtefactRef("sass", kernel.name, tuple(sass_lines), excerpt(sass, sass_lines)))
        found.append(
            Finding(
                SPILLS.code,
                Severity.HIGH,
                {
                    "kernel": kernel.name,
                    "spills_store": res.spills_store,
                    "spills_load": res.spills_load,
                    "registers": res.registers,
                    "stack": res.stack,
                    "num_warps": kernel.num_warps,
                    "spill_lines": spill_lines,
                },
                lines=tuple(spill_lines) or ((kernel.def_line,) if kernel.def_line else ()),
                kernel=kernel.name,
                evidence=tuple(evidence),
            )
        )
    occ = occupancy(kernel, result.backend, result.arch)
    has_dot = bool(_dot_lines(table))
    if occ is not None and occ.fraction <= LOW_OCCUPANCY_FRACTION and not has_dot:
        # GEMM-like kernels live well at one or two big blocks per SM; streaming kernels do not.
        found.append(
            Finding(
                LOW_OCCUPANCY.code,
                Severity.MEDIUM,
                {
                    "kernel": kernel.name,
                    "warps_per_sm": occ.warps_per_sm,
                    "occupancy": (
                        f"{occ.warps_per_sm} waves per SIMD"
                        if result.backend == "hip"
                        else f"{occ.warps_per_sm} warps per SM"
                    ),
                    "percent": round(100 * occ.fraction),
                    "limiter": occ.limiter,
                    "registers": res.registers,
                    "shared": res.shared,
                    "num_warps": kernel.num_warps,
                    "limits": occ.detail,
                },
                lines=(kernel.def_line,) if kernel.def_line else (),
                kernel=kernel.name,
                evidence=(
                    ArtefactRef(
                        "log",
                        kernel.name,
                        excerpt=(
                            f"num_warps {kernel.num_warps}, registers {res.registers}, shared {res.shared} bytes -> "
                            f"{occ.blocks_per_sm} blocks/SM, limits {occ.detail}"
                        ),
                    ),
                ),
            )
        )
    return found
