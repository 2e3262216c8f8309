"""Tiers 2 and 3 on an Ascend target: what triton-ascend made of each load and store.

An npu compile (runner.childlib.ascend) stops before the binary without CANN, so there is no
assembly: the evidence is the TTIR and the linalg that triton-ascend's adapter (`ttadapter`)
lowers it to, and the IR after each pass of both pipelines. In that linalg every global access
is one of three shapes (checked with triton-ascend 3.2.0 on CPU):

* a block transfer: `memref.reinterpret_cast %argN to offset: [..], sizes: [32, 32], strides:
  [%s, 1]` copied into a `memref.alloc` (the tile in the core's Unified Buffer, UB) or written
  back with `bufferization.materialize_in_destination`; a masked tail is a `memref.subview` of
  dynamic size. The innermost stride decides whether the DMA moves contiguous 32-byte blocks;
* a discrete access: offsets the adapter cannot express as strides (read from memory, or
  computed with % or //) become an `scf.for` over the tile's elements, each a 1-element
  `memref.load`/`memref.store` (the TritonToUnstructure pass, marked `DiscreteMemAccess`);
* a select: a mask that is not a bound of the offsets (`offs % 2 == 0`) makes the adapter load
  the whole block and apply the mask with `arith.select` (DiscreteMaskAccessConversion).

The tiles (`memref.alloc`) are compared with the UB size and its 32-byte alignment, and the grid
with the core count, from the SOL table (`sol.AscendCores`). Pure Python, no Django.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from diagnosis.engine import sol
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
    CompiledKernel,
    CompileResult,
    MlirFunc,
    MlirOp,
    access_pattern,
    excerpt,
    parse_mlir,
)

DISCRETE = register_code(
    "NPU_DISCRETE_ACCESS",
    Tier.IR,
    Family.INDEX_MATH,
    "line {line}: the {what} is lowered to a loop of {count} one-element accesses (scalar, no block "
    "transfer into the UB) because its offsets are {why}",
    "Discrete (element-by-element) global access on Ascend",
)
STRIDED = register_code(
    "NPU_STRIDED_ACCESS",
    Tier.IR,
    Family.COALESCE,
    "line {line}: the {what} of a {shape} {dtype} tile has innermost stride {stride}: every element "
    "moves in its own {align}-byte UB block instead of {per_block} per block",
    "Strided innermost access on Ascend",
)
MASK_SELECT = register_code(
    "NPU_MASK_SELECT",
    Tier.IR,
    Family.MASKING,
    "line {line}: the mask of the {what} is not a bound of its offsets ({why}): the whole {count}-element "
    "block is loaded and the mask applied by a select",
    "Mask applied by a select after a full-block load",
)
UB_OVERFLOW = register_code(
    "NPU_UB_OVERFLOW",
    Tier.IR,
    Family.LAUNCH_CONFIG,
    "{kernel}: its tiles need at least {need} bytes of UB ({tiles}), {percent}% of the {ub}-byte Unified "
    "Buffer of a {device} vector core",
    "Tiles larger than the Unified Buffer",
)
UB_UNALIGNED = register_code(
    "NPU_UB_UNALIGNED",
    Tier.IR,
    Family.LAUNCH_CONFIG,
    "line {line}: the {shape} {dtype} tile has {row_bytes}-byte rows, not a multiple of the UB's {align}-byte "
    "blocks: each row is padded to {padded} bytes",
    "Tile rows not aligned to the UB's 32-byte blocks",
)
GRID = register_code(
    "NPU_GRID_CORES",
    Tier.IR,
    Family.LAUNCH_CONFIG,
    "{kernel}: {programs} programs on {cores} {core_kind} cores of a {device} ({waves} rounds per core); "
    "{advice}",
    "Grid against the NPU's physical cores",
)
STAGE_NEEDS = register_code(
    "NPU_STAGE_UNAVAILABLE",
    Tier.IR,
    Family.NONE,
    "{kernel}: compiled through {reached}; the {stage} stage did not run: {message}",
    "Compile stage that needs the CANN toolkit",
)
LOWERED_BY = register_code(
    "CG_NPU_LOWERING",
    Tier.COMPILER,
    Family.NONE,
    "line {line}: {pass_name} turned the {what} into {result}",
    "The adapter pass that decided an access's lowering",
)

# `func.func @k(%arg0: memref<?xi8> loc(..), ..., %arg5: i32 loc(..)) attributes {SyncBlockLockArgIdx = 0 : i64, ...`
_FUNC_ARG = re.compile(r"%arg(\d+): ")
_HIDDEN_ARG = re.compile(r"(?:SyncBlockLockArgIdx|WorkspaceArgIdx) = (\d+)")
# `attributes {..., mix_mode = "aiv", parallel_mode = "simd"}`
_MIX_MODE = re.compile(r'mix_mode = "(\w+)"')
# `memref.reinterpret_cast %arg2 to offset: [%11], sizes: [32, 32], strides: [%3, 1] : memref<?xf32> to ...`
_CAST = re.compile(r"sizes: \[([^\]]*)\], strides: \[([^\]]*)\] : memref<\?x(\w+)>")
# `memref.alloc() : memref<32x32xf32>` / `tensor<256xf32>` / `memref<1024xf32, strided<[1], offset: ?>>`
_SHAPED = re.compile(r"(?:memref|tensor)<((?:\d+x)+)(\w+)")
# `%c256 = arith.constant 256 : index`
_CONST = re.compile(r"arith\.constant (-?\d+) :")
_INDEX_MATH = frozenset({"arith.remsi", "arith.remui", "arith.divsi", "arith.divui", "arith.floordivsi"})
_VIEWS = frozenset({"memref.subview", "memref.cast", "memref.collapse_shape", "memref.expand_shape"})
_TYPE_BYTES = {"i1": 1, "i8": 1, "i16": 2, "i32": 4, "i64": 8, "f16": 2, "bf16": 2, "f32": 4, "f64": 8}
GRID_ROUNDS_LOW = 2  # more programs than this many per core: each core runs them in turn


@dataclass(frozen=True)
class Transfer:
    """One global load or store as the adapter lowered it."""

    what: str  # load, store
    mode: str  # block, discrete, select
    line: int
    arg: str  # the pointer parameter it reads or writes
    shape: tuple[int, ...]
    dtype: str
    inner_stride: str  # '1', an argument name, a number, or '?' (computed)
    bounded: bool  # a masked tail (memref.subview of dynamic size)
    ir_lines: tuple[int, ...]
    via: str = ""  # discrete: gather, index math, other

    def to_json(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class Tile:
    """One UB buffer (`memref.alloc`) of the linalg."""

    line: int | None
    shape: tuple[int, ...]
    dtype: str
    ir_line: int
    in_loop: bool

    @property
    def bytes(self) -> int:
        return math.prod(self.shape) * _TYPE_BYTES.get(self.dtype, 4)

    @property
    def row_bytes(self) -> int:
        return self.shape[-1] * _TYPE_BYTES.get(self.dtype, 4)


@dataclass
class LinalgView:
    """What tier 2 reads from one kernel's linalg."""

    transfers: list[Transfer] = field(default_factory=list)
    tiles: list[Tile] = field(default_factory=list)
    mix_mode: str = ""
    func: MlirFunc | None = None


def read_linalg(text: str, filename: str, ir_args: Sequence[str]) -> LinalgView:
    """Transfers and UB tiles of a `ttadapter` text; `ir_args` names the kernel's arguments in
    the order the TTIR has them (the linalg adds hidden ones: workspace, lock, grid, ids)."""
    view = LinalgView()
    header = next((ln for ln in text.splitlines() if ln.lstrip().startswith("func.func @")), "")
    hidden = {int(n) for n in _HIDDEN_ARG.findall(header)}
    mode = _MIX_MODE.search(header)
    view.mix_mode = mode.group(1) if mode else ""
    numbers = [int(n) for n in _FUNC_ARG.findall(header.split(" attributes ")[0]) if int(n) not in hidden]
    names = {f"%arg{n}": name for n, name in zip(numbers, ir_args, strict=False)}
    func = parse_mlir(text, filename)
    view.func = func
    defs = func.defs()
    by_line: dict[int, list[MlirOp]] = {}
    for op in func.ops:
        if op.line is not None:
            by_line.setdefault(op.line, []).append(op)

    def root(value: str) -> tuple[MlirOp | None, bool]:
        """The reinterpret_cast or alloc a memref value views, and whether a subview bounds it."""
        bounded = False
        op = defs.get(value.split("#")[0])
        for _ in range(20):
            if op is None or op.name not in _VIEWS:
                break
            bounded = bounded or op.name == "memref.subview"
            op = defs.get(op.operands[0]) if op.operands else None
        return op, bounded

    def scalar(value: str) -> str:
        value = value.strip()
        if re.fullmatch(r"-?\d+", value):
            return value
        op = defs.get(value)
        for _ in range(5):
            if op is None:
                return "?"
            if op.name == "arith.constant":
                m = _CONST.search(op.text)
                return m.group(1) if m else "?"
            if op.name in ("arith.index_cast", "arith.extsi", "arith.extui") and op.operands:
                src = op.operands[0]
                if src in names:
                    return names[src]
                op = defs.get(src)
                continue
            return "?"
        return "?"

    def cast_info(op: MlirOp) -> tuple[str, tuple[int, ...], str, str] | None:
        m = _CAST.search(op.text)
        if m is None or not op.operands:
            return None
        sizes = tuple(int(x) for x in re.findall(r"-?\d+", m.group(1)))
        strides = [s.strip() for s in m.group(2).split(",")]
        return names.get(op.operands[0], op.operands[0].lstrip("%")), sizes, scalar(strides[-1]), m.group(3)

    for op in func.ops:
        if op.line is None:
            continue
        if op.name == "memref.copy" and len(op.operands) >= 2:
            src, src_bounded = root(op.operands[0])
            dst, dst_bounded = root(op.operands[1])
            for what, cast, bounded in (("load", src, src_bounded), ("store", dst, dst_bounded)):
                if cast is None or cast.name != "memref.reinterpret_cast":
                    continue
                info = cast_info(cast)
                if info is None:
                    continue
                arg, shape, stride, dtype = info
                select = what == "load" and not bounded and _selected(by_line.get(op.line, []))
                view.transfers.append(
                    Transfer(
                        what,
                        "select" if select else "block",
                        op.line,
                        arg,
                        shape,
                        dtype,
                        stride,
                        bounded,
                        (cast.ir_line, op.ir_line),
                    )  # fmt: skip
                )
        elif op.name == "bufferization.materialize_in_destination" and len(op.operands) >= 2:
            dst, bounded = root(op.operands[-1])
            info = cast_info(dst) if dst is not None and dst.name == "memref.reinterpret_cast" else None
            if info is not None:
                arg, shape, stride, dtype = info
                view.transfers.append(
                    Transfer(
                        "store",
                        "block",
                        op.line,
                        arg,
                        shape,
                        dtype,
                        stride,
                        bounded,
                        (dst.ir_line, op.ir_line),
                    )
                )
        elif op.name in ("memref.load", "memref.store") and op.loops and _discrete(by_line.get(op.line, [])):
            cast, _ = root(op.operands[0] if op.name == "memref.load" else op.operands[1])
            info = cast_info(cast) if cast is not None and cast.name == "memref.reinterpret_cast" else None
            arg, dtype = (info[0], info[3]) if info else ("?", "")
            same = by_line.get(op.line, [])
            count = _tile_elements(same)
            view.transfers.append(
                Transfer(
                    "load" if op.name == "memref.load" else "store",
                    "discrete",
                    op.line,
                    arg,
                    count,
                    dtype,
                    "?",
                    False,
                    tuple(o.ir_line for o in same if o.loops and o.name != "arith.constant"),
                    _discrete_cause(same),
                )  # fmt: skip
            )
        elif op.name == "memref.alloc":
            m = _SHAPED.search(op.attrs)
            if m:
                shape = tuple(int(x) for x in m.group(1).split("x") if x)
                view.tiles.append(Tile(op.line, shape, m.group(2), op.ir_line, bool(op.loops)))
    return view


def _selected(ops: list[MlirOp]) -> bool:
    return any(o.name == "arith.select" and "DiscreteMemAccess" not in o.text for o in ops)


def _discrete(ops: list[MlirOp]) -> bool:
    return any("DiscreteMemAccess" in o.text for o in ops)


def _discrete_cause(ops: list[MlirOp]) -> str:
    looped = [o for o in ops if o.loops]
    if any(o.name == "tensor.extract" and "DiscreteMemAccess" in o.text for o in looped):
        return "gather"
    if any(o.name in _INDEX_MATH for o in looped):
        return "index math"
    return "other"


def _tile_elements(ops: list[MlirOp]) -> tuple[int, ...]:
    for o in ops:
        if o.name in ("tensor.insert", "scf.for"):
            m = _SHAPED.search(o.attrs)
            if m:
                return tuple(int(x) for x in m.group(1).split("x") if x)
    return ()


# ---------------------------------------------------------------------------------------------
# Tier 2


def device_entry(arch: str) -> sol.PeakEntry | None:
    entry = sol.lookup(arch)
    return entry if entry is not None and entry.ascend is not None else None


def run_tier2_npu(result: CompileResult, source: str) -> TierResult:
    """Tier 2 for an npu target: artefacts of every stage reached, findings on the linalg."""
    from diagnosis.engine.tier2 import COMPILE_ERROR

    t0 = time.perf_counter()
    out = TierResult(tier=Tier.IR)
    src_lines = source.splitlines()
    entry = device_entry(result.arch)
    kernels_data: dict[str, Any] = {}
    for kernel in result.kernels:
        for stage, text in kernel.stages.items():
            out.artefacts.append(Artefact(_artefact_kind(stage), f"{kernel.name}.{stage}", text))
        if kernel.stopped and kernel.stopped.get("reason") == "needs_cann":
            out.findings.append(_stage_finding(kernel))
            out.notes.append(f"{kernel.name}: {kernel.stopped.get('message', '')}")
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
        view = kernel_view(kernel)
        found = npu_findings(kernel, view, entry, src_lines, result.arch)
        out.findings.extend(found)
        kernels_data[kernel.name] = {
            "def_line": kernel.def_line,
            "reached": list(kernel.reached),
            "stopped": kernel.stopped,
            "mix_mode": view.mix_mode,
            "ub_bytes": sum(t.bytes for t in view.tiles),
            "lines": _line_rows(view, src_lines),
            "compile_s": kernel.compile_s,
        }
    out.data = {"target": result.target, "kernels": kernels_data}
    serious = [f for f in out.findings if f.severity in (Severity.MEDIUM, Severity.HIGH)]
    out.localizes = any(f.lines for f in serious)
    families = {f.family for f in serious}
    out.narrows = len(families) == 1 and Family.NONE not in families
    out.explains = False  # what the adapter made of the code, not yet why
    if not result.kernels:
        out.notes.append("the compile job returned no kernel")
    out.wall_s = time.perf_counter() - t0
    return out


def _artefact_kind(stage: str) -> str:
    return "linalg" if stage == "ttadapter" else stage


def kernel_view(kernel: CompiledKernel) -> LinalgView:
    return read_linalg(kernel.stages.get("ttadapter", ""), kernel.filename, kernel.ir_args)


def _stage_finding(kernel: CompiledKernel) -> Finding:
    stopped = kernel.stopped or {}
    return Finding(
        STAGE_NEEDS.code,
        Severity.INFO,
        {
            "kernel": kernel.name,
            "reached": ", ".join(kernel.reached) or "no stage",
            "stage": stopped.get("stage", "?"),
            "reason": stopped.get("reason", ""),
            "message": stopped.get("message", "")[:400],
        },
        kernel=kernel.name,
        evidence=(ArtefactRef("log", kernel.name, excerpt=stopped.get("message", "")[:2000]),),
    )


def _line_rows(view: LinalgView, src_lines: list[str]) -> dict[str, Any]:
    rows: dict[int, dict[str, Any]] = {}
    for t in view.transfers:
        rows.setdefault(t.line, {"transfers": [], "tiles": []})["transfers"].append(t.to_json())
    for tile in view.tiles:
        if tile.line is not None:
            rows.setdefault(tile.line, {"transfers": [], "tiles": []})["tiles"].append(
                {"shape": list(tile.shape), "dtype": tile.dtype, "bytes": tile.bytes}
            )
    return {
        str(line): {**row, "code": src_lines[line - 1].strip() if 0 < line <= len(src_lines) else ""}
        for line, row in sorted(rows.items())
    }


def _ref(kernel: CompiledKernel, ir_lines: Sequence[int], limit: int = 8) -> ArtefactRef:
    text = kernel.stages.get("ttadapter", "")
    shown = sorted(set(ir_lines))
    return ArtefactRef(
        "linalg",
        kernel.name,
        tuple(shown),
        excerpt(text, shown, limit=limit),
        name=f"{kernel.name}.ttadapter",
    )


def npu_findings(
    kernel: CompiledKernel,
    view: LinalgView,
    entry: sol.PeakEntry | None,
    src_lines: list[str],
    device: str = "",
) -> list[Finding]:
    """Every tier-2 finding of one kernel compiled for an npu target (tier 3 reads them too)."""
    found: list[Finding] = []
    cores = entry.ascend if entry is not None else None
    align = cores.ub_align_bytes if cores else 32
    seen: set[tuple[str, int, str]] = set()
    masks = _ttir_masks(kernel)
    for t in view.transfers:
        key = (t.mode, t.line, t.what)
        if key in seen:
            continue
        seen.add(key)
        code = src_lines[t.line - 1].strip() if 0 < t.line <= len(src_lines) else ""
        if t.mode == "discrete":
            why = {
                "gather": "read from memory (a gather: no stride relates one element's address to the next)",
                "index math": "computed with % or // of the block's range, which no stride expresses",
            }.get(t.via, "not an affine function of the block's range")
            found.append(
                Finding(
                    DISCRETE.code,
                    Severity.HIGH,
                    {
                        "line": t.line,
                        "what": t.what,
                        "count": math.prod(t.shape) if t.shape else "?",
                        "why": why,
                        "via": t.via,
                        "arg": t.arg,
                        "code": code,
                    },  # fmt: skip
                    lines=(t.line,),
                    kernel=kernel.name,
                    evidence=(_ref(kernel, t.ir_lines),),
                    family_override=None if t.via == "index math" else Family.NONE,
                )
            )
        elif t.mode == "select":
            found.append(
                Finding(
                    MASK_SELECT.code,
                    Severity.MEDIUM,
                    {
                        "line": t.line,
                        "what": t.what,
                        "count": math.prod(t.shape),
                        "arg": t.arg,
                        "code": code,
                        "why": masks.get(t.line) or "it is not of the form offsets < bound",
                    },  # fmt: skip
                    lines=(t.line,),
                    kernel=kernel.name,
                    evidence=(_ref(kernel, [*t.ir_lines, *_select_lines(view, t.line)]),),
                )
            )
        if t.mode in ("block", "select") and t.inner_stride != "1" and len(t.shape) >= 1 and t.shape[-1] > 1:
            width = _TYPE_BYTES.get(t.dtype, 4)
            arg = kernel.arg(t.inner_stride)
            stride = f"`{t.inner_stride}`" + (
                f" (= {arg.value})" if arg is not None and arg.value is not None else ""
            )
            if t.inner_stride == "?":
                stride = "a computed value"
            elif t.inner_stride.lstrip("-").isdigit():
                stride = t.inner_stride
            found.append(
                Finding(
                    STRIDED.code,
                    Severity.HIGH,
                    {
                        "line": t.line,
                        "what": t.what,
                        "shape": "x".join(map(str, t.shape)),
                        "dtype": t.dtype,
                        "stride": stride,
                        "stride_arg": t.inner_stride,
                        "align": align,
                        "per_block": max(1, align // width),
                        "arg": t.arg,
                        "code": code,
                    },  # fmt: skip
                    lines=(t.line,),
                    kernel=kernel.name,
                    evidence=(_ref(kernel, t.ir_lines),),
                )
            )
    found.extend(_tile_findings(kernel, view, entry, align, device))
    grid = _grid_finding(kernel, view, entry, device)
    if grid is not None:
        found.append(grid)
    return found


def _select_lines(view: LinalgView, line: int) -> list[int]:
    if view.func is None:
        return []
    return [o.ir_line for o in view.func.ops if o.line == line and o.name == "arith.select"]


def _ttir_masks(kernel: CompiledKernel) -> dict[int, str]:
    """Source line -> the integer ops a load's mask goes through, for masks that are not bounds."""
    text = kernel.stages.get("ttir", "")
    if not text:
        return {}
    func = parse_mlir(text, kernel.filename)
    defs = func.defs()
    out: dict[int, str] = {}
    for op in func.ops:
        if op.name != "tt.load" or op.line is None or len(op.operands) < 2:
            continue
        if not access_pattern(func, op).has_mask:
            continue
        names: set[str] = set()
        stack, seen = [op.operands[1]], set()
        while stack:
            v = stack.pop().split("#")[0]
            if v in seen or v not in defs:
                continue
            seen.add(v)
            d = defs[v]
            if (
                d.name in _INDEX_MATH
                or (d.name == "arith.cmpi" and " eq," in d.text)
                or d.name == "arith.xori"
            ):
                names.add(d.name.removeprefix("arith.") + (" eq" if d.name == "arith.cmpi" else ""))
            stack.extend(d.operands)
        if names:
            out[op.line] = "it goes through " + ", ".join(sorted(names))
    return out


def _tile_findings(
    kernel: CompiledKernel, view: LinalgView, entry: sol.PeakEntry | None, align: int, device: str
) -> list[Finding]:
    found: list[Finding] = []
    cores = entry.ascend if entry is not None else None
    tiles = view.tiles
    if cores is not None and tiles:
        need = sum(t.bytes for t in tiles)
        if need > cores.ub_bytes:
            biggest = sorted(tiles, key=lambda t: -t.bytes)
            found.append(
                Finding(
                    UB_OVERFLOW.code,
                    Severity.HIGH,
                    {
                        "kernel": kernel.name,
                        "need": need,
                        "ub": cores.ub_bytes,
                        "device": device or entry.spec.name,
                        "percent": round(100 * need / cores.ub_bytes),
                        "tiles": ", ".join(f"{'x'.join(map(str, t.shape))} {t.dtype}" for t in biggest[:4]),
                        "tile_lines": sorted({t.line for t in tiles if t.line}),
                    },  # fmt: skip
                    lines=tuple(sorted({t.line for t in tiles if t.line})),
                    kernel=kernel.name,
                    evidence=(_ref(kernel, [t.ir_line for t in biggest]),),
                )
            )
    reported: set[int] = set()
    for t in tiles:
        if t.line is None or t.line in reported or not t.shape or t.row_bytes % align == 0:
            continue
        reported.add(t.line)
        padded = -(-t.row_bytes // align) * align
        found.append(
            Finding(
                UB_UNALIGNED.code,
                Severity.MEDIUM if len(t.shape) > 1 else Severity.LOW,
                {
                    "line": t.line,
                    "shape": "x".join(map(str, t.shape)),
                    "dtype": t.dtype,
                    "row_bytes": t.row_bytes,
                    "align": align,
                    "padded": padded,
                },  # fmt: skip
                lines=(t.line,),
                kernel=kernel.name,
                evidence=(_ref(kernel, [t.ir_line]),),
            )
        )
    return found


def _grid_finding(
    kernel: CompiledKernel, view: LinalgView, entry: sol.PeakEntry | None, device: str
) -> Finding | None:
    if entry is None or entry.ascend is None:
        return None
    cores = entry.ascend
    cube = view.mix_mode in ("aic", "mix")
    n_cores = cores.cube_cores if cube else cores.vector_cores
    programs = math.prod(kernel.grid)
    if programs > cores.max_grid:
        severity, advice = (
            Severity.HIGH,
            (
                f"triton-ascend refuses a grid of more than {cores.max_grid} programs at launch; loop over blocks "
                "inside the kernel"
            ),
        )
    elif programs > GRID_ROUNDS_LOW * n_cores:
        severity, advice = (
            Severity.LOW,
            (
                "each program is dispatched to a core on its own: a grid of the core count with a loop over blocks "
                "inside the kernel avoids the repeated dispatch"
            ),
        )
    else:
        return None
    return Finding(
        GRID.code,
        severity,
        {
            "kernel": kernel.name,
            "programs": programs,
            "cores": n_cores,
            "core_kind": "cube" if cube else "vector",
            "device": device or entry.spec.name,
            "waves": math.ceil(programs / n_cores),
            "advice": advice,
            "grid": list(kernel.grid),
        },  # fmt: skip
        lines=(kernel.def_line,) if kernel.def_line else (),
        kernel=kernel.name,
        evidence=(
            ArtefactRef(
                "log", kernel.name, excerpt=f"grid {list(kernel.grid)}, mix_mode {view.mix_mode or '?'}"
            ),
        ),
    )


# ---------------------------------------------------------------------------------------------
# Tier 3

# finding code -> (the op a pass must leave at the finding's line, what it became)
_SIGNATURES = {
    DISCRETE.code: ("scf.for", "a loop of one-element accesses"),
    MASK_SELECT.code: ("arith.select", "a full-block load followed by a select"),
    STRIDED.code: ("memref.reinterpret_cast", "a strided block view of the argument"),
}


def run_tier3_npu(result: CompileResult, source: str, *, prior: Sequence[Finding] = ()) -> TierResult:
    """Tier 3 for an npu target: what each pass did, and which adapter pass decided the lowering
    of each access tier 2 flagged (from the IR after each pass). No counterfactual recompile runs
    (the hints and configs they test are CUDA's), so `explains` stays False."""
    from diagnosis.engine.tier3 import _pass_summary, pass_effects

    t0 = time.perf_counter()
    out = TierResult(tier=Tier.COMPILER)
    src_lines = source.splitlines()
    entry = device_entry(result.arch)
    data: dict[str, Any] = {"kernels": {}, "counterfactuals": [], "prior": sorted({f.code for f in prior})}
    for kernel in result.kernels:
        if kernel.error:
            out.notes.append(
                f"{kernel.name}: compile failed, nothing to analyse: {kernel.error.splitlines()[0]}"
            )
            continue
        passes = pass_effects(kernel.pass_dumps)
        basis = npu_findings(kernel, kernel_view(kernel), entry, src_lines, result.arch)
        data["kernels"][kernel.name] = {"passes": passes, "tier2": [f.code for f in basis]}
        if not kernel.pass_dumps:
            out.notes.append(f"{kernel.name}: compiled without pass dumps; no pass to attribute")
            continue
        out.findings.append(_pass_summary(kernel, passes))
        for dump in kernel.pass_dumps:
            if dump.text:
                out.artefacts.append(
                    Artefact("pass_dump", f"{kernel.name}/{dump.index:02d}-{dump.name}", dump.text)
                )
        for finding in basis:
            explained = _lowering(kernel, finding)
            if explained is not None:
                out.findings.append(explained)
    out.data = data
    causes = [f for f in out.findings if f.code == LOWERED_BY.code]
    out.localizes = any(f.lines for f in causes)
    families = {f.family for f in causes}
    out.narrows = len(families) == 1 and Family.NONE not in families
    out.explains = False
    out.notes.append("npu target: no counterfactual recompile (tier 3 attributes the lowering to passes)")
    out.wall_s = time.perf_counter() - t0
    return out


def _lowering(kernel: CompiledKernel, finding: Finding) -> Finding | None:
    signature = _SIGNATURES.get(finding.code)
    if signature is None or not finding.lines:
        return None
    op_name, result = signature
    line = finding.lines[0]
    for dump in kernel.pass_dumps:
        if not dump.text or dump.name == "(input)":
            continue
        hits = [o for o in parse_mlir(dump.text, kernel.filename).ops if o.line == line and o.name == op_name]
        if not hits:
            continue
        ref = ArtefactRef(
            "pass_dump",
            kernel.name,
            tuple(o.ir_line for o in hits[:6]),
            excerpt(dump.text, [o.ir_line for o in hits], limit=6),
            name=f"{kernel.name}/{dump.index:02d}-{dump.name}",
        )
        return Finding(
            LOWERED_BY.code,
            finding.severity,
            {
                "line": line,
                "pass_name": dump.name,
                "what": finding.args.get("what", "access"),
                "result": result,
                "cause": finding.code,
            },  # fmt: skip
            lines=finding.lines,
            kernel=kernel.name,
            evidence=(ref, *finding.evidence),
            family_override=finding.family,
        )
    return None


__all__ = ["read_linalg", "run_tier2_npu", "run_tier3_npu", "npu_findings", "Transfer", "Tile"]
