"""Which lines of each compiled stage came from which line of the uploaded file, for the viewer.

The way tritonparse's IR code view maps stages: every stage carries source locations
(TTIR/TTGIR `loc(#locN)`, LLVM IR `!dbg !N` -> `!DILocation`, PTX `.loc`, SASS `//## File`
markers of `nvdisasm -c -g`), so each stage's lines can be keyed by the Python line they came
from, and one Python line shows its lines in every stage side by side. Code inlined from
Triton's own library (`tl.sum` is `triton/language/standard.py`) is attributed to the user's
line that called it: MLIR call sites and LLVM `inlinedAt` chains say so directly; PTX prints the
chain in its `.loc` comments; SASS markers carry no chain, so a SASS line in a library file is
attributed through the PTX's chains for that library line (`via` says so).

Also here: the per-line chips of what a line became (from the tier-2 table,
`diagnosis.engine.ir.line_table`) and line diffs of consecutive pass dumps. Plain Python.
"""

from __future__ import annotations

import difflib
import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from diagnosis.engine.ir import (
    _INLINED_AT,
    _PTX_FILE,
    _PTX_LOC,
    _SASS_FILE,
    _SASS_INSTR,
    ATOMIC,
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
    LineStats,
    LocResolver,
    line_table,
    parse_amdgcn,
    parse_mlir,
    parse_ptx,
)
from diagnosis.engine.ir import _trailing_loc as _split_loc

# Pipeline order of the stages a kernel has (amdgcn stands where ptx does on AMD targets)
STAGES = ("ttir", "ttgir", "llir", "ptx", "amdgcn", "sass")
MLIR_STAGES = frozenset({"ttir", "ttgir", "linalg", "pass_dump"})


def same_file(a: str, b: str) -> bool:
    """Stored text names the module by a scrubbed relative name (diagnosis.engine.paths) or, in
    LLVM's `!DIFile`, by base name and directory apart: the base names decide."""
    return bool(a) and bool(b) and os.path.basename(a) == os.path.basename(b)


@dataclass(frozen=True)
class StageMap:
    """One stage's text keyed by source line."""

    stage: str
    lines: tuple[str, ...]  # the stage's text, line by line (index 0 is line 1)
    by_source: dict[int, tuple[int, ...]] = field(default_factory=dict, hash=False)  # py line -> stage lines
    via: dict[int, str] = field(
        default_factory=dict, hash=False
    )  # stage line -> library file:line it came through

    def source_lines(self) -> set[int]:
        return set(self.by_source)


# --- the kernel's own file ----------------------------------------------------------------


def kernel_filename(stages: Mapping[str, str]) -> str:
    """The file the kernel was compiled from, as the stored stages name it.

    MLIR call-site chains end in the kernel's file (innermost frame first, so the outermost is
    last): the commonest outermost file is the kernel's. PTX's `.file 1` is the fallback.
    """
    for stage in ("ttir", "ttgir"):
        text = stages.get(stage)
        if not text:
            continue
        locs = LocResolver(text)
        counts: Counter[str] = Counter()
        for raw in text.splitlines():
            loc = _loc_of(raw)
            if loc:
                frames = locs.frames(loc)
                if frames:
                    counts[frames[-1][0]] += 1
        if counts:
            return counts.most_common(1)[0][0]
    ptx = stages.get("ptx") or stages.get("amdgcn") or ""
    files = {m.group(1): (os.path.join(m.group(2), m.group(3)) if m.group(3) else m.group(2))
             for m in _PTX_FILE.finditer(ptx)}  # fmt: skip
    return files.get("1", "")


def _loc_of(raw: str) -> str:
    return _split_loc(raw)[1] if " loc(" in raw else ""


# --- MLIR -------------------------------------------------------------------------------------


def map_mlir(stage: str, text: str, filename: str) -> StageMap:
    """Every line that ends in a location, keyed by the user's line it resolves to (the
    innermost frame in the user's file: a call into triton/language resolves to its caller)."""
    locs = LocResolver(text)
    by: dict[int, list[int]] = {}
    lines = text.splitlines()
    # a region op (`%s = "tt.reduce"(%x) ({`, `scf.for ... {`) prints its location after the
    # brace that closes it: the opening line gets the closer's line
    open_lines: list[tuple[int, bool]] = []

    def add(loc: str, n: int) -> bool:
        line = next((ln for f, ln in locs.frames(loc) if same_file(f, filename)), None)
        if line is not None:
            by.setdefault(line, []).append(n)
        return line is not None

    for n, raw in enumerate(lines, 1):
        if raw.startswith("#loc"):
            continue
        stripped = raw.strip()
        loc = _loc_of(raw)
        mapped = add(loc, n) if loc else False
        if stripped.startswith("}") and open_lines:
            opener, opener_mapped = open_lines.pop()
            if loc and not opener_mapped:
                add(loc, opener)
        if stripped.endswith("{"):
            open_lines.append((n, mapped))
    return StageMap(stage, tuple(lines), {k: tuple(sorted(v)) for k, v in sorted(by.items())})


# --- LLVM IR ----------------------------------------------------------------------------------

# `!14 = !DILocation(line: 170, column: 27, scope: !15, inlinedAt: !17)`
# `!15 = distinct !DILexicalBlockFile(scope: !4, file: !16, discriminator: 0)`
# `!1 = !DIFile(filename: "softmax_warps.py", directory: "tests/kernels")`
_LL_META = re.compile(r"^!(\d+) = (?:distinct )?!(\w+)\((.*)\)\s*$")
_LL_FIELD = re.compile(r'(\w+): ("(?:[^"\\]|\\.)*"|[^,()]+)')
# `  %9 = and i32 %8, 511, !dbg !8` / `define ptx_kernel void @k(...) #0 !dbg !4 {`
_LL_DBG = re.compile(r"!dbg !(\d+)")


def map_llir(text: str, filename: str) -> StageMap:
    lines = text.splitlines()
    meta: dict[str, tuple[str, dict[str, str]]] = {}
    for raw in lines:
        m = _LL_META.match(raw)
        if m:
            fields = {k: v.strip().strip('"') for k, v in _LL_FIELD.findall(m.group(3))}
            meta[m.group(1)] = (m.group(2), fields)

    def file_of(node_id: str, depth: int = 0) -> str:
        kind, fields = meta.get(node_id, ("", {}))
        if kind == "DIFile":
            return os.path.join(fields.get("directory", ""), fields.get("filename", ""))
        ref = fields.get("file") or (fields.get("scope") if depth < 20 else None)
        return file_of(ref.lstrip("!"), depth + 1) if ref else ""

    cache: dict[str, int | None] = {}

    def user_line(node_id: str, depth: int = 0) -> int | None:
        if node_id in cache or depth > 50:
            return cache.get(node_id)
        kind, fields = meta.get(node_id, ("", {}))
        out: int | None = None
        if kind == "DILocation":
            scope = fields.get("scope", "").lstrip("!")
            if same_file(file_of(scope), filename) and fields.get("line", "").isdigit():
                out = int(fields["line"])
            elif fields.get("inlinedAt"):
                out = user_line(fields["inlinedAt"].lstrip("!"), depth + 1)
        elif kind == "DISubprogram" and fields.get("line", "").isdigit():
            out = int(fields["line"]) if same_file(file_of(node_id), filename) else None
        cache[node_id] = out
        return out

    by: dict[int, list[int]] = {}
    for n, raw in enumerate(lines, 1):
        if raw.startswith("!"):
            continue
        m = _LL_DBG.search(raw)
        if m:
            line = user_line(m.group(1))
            if line is not None:
                by.setdefault(line, []).append(n)
    return StageMap("llir", tuple(lines), {k: tuple(v) for k, v in sorted(by.items())})


# --- PTX, AMDGCN, SASS ------------------------------------------------------------------------


def map_ptx(text: str, filename: str, stage: str = "ptx") -> StageMap:
    parse = parse_amdgcn if stage == "amdgcn" else parse_ptx
    by: dict[int, list[int]] = {}
    for ins in parse(text, filename):
        if ins.line is not None:
            by.setdefault(ins.line, []).append(ins.asm_line)
    return StageMap(stage, tuple(text.splitlines()), {k: tuple(v) for k, v in sorted(by.items())})


def ptx_inlined(ptx: str, filename: str) -> dict[tuple[str, int], set[int]]:
    """(library file base name, line) -> the user's lines that inlined it, from PTX `.loc`
    comments: `.loc 2 170 27 // standard.py:170:27 @[ standard.py:191:40 @[ k.py:18:19 ] ]`."""
    files = {m.group(1): (os.path.join(m.group(2), m.group(3)) if m.group(3) else m.group(2))
             for m in _PTX_FILE.finditer(ptx)}  # fmt: skip
    base = os.path.basename(filename)
    out: dict[tuple[str, int], set[int]] = {}
    for raw in ptx.splitlines():
        m = _PTX_LOC.match(raw)
        if not m:
            continue
        path = files.get(m.group(1), "")
        if same_file(path, filename):
            continue
        user = next((int(ln) for f, ln in _INLINED_AT.findall(m.group(4)) if f == base), None)
        if user is not None:
            out.setdefault((os.path.basename(path), int(m.group(2))), set()).add(user)
    return out


def map_sass(text: str, filename: str, inlined: Mapping[tuple[str, int], set[int]] | None = None) -> StageMap:
    """SASS instructions under `//## File "...", line N`; a library file's line goes to every
    user line the PTX says inlined it (`via` names the library line)."""
    inlined = inlined or {}
    by: dict[int, list[int]] = {}
    via: dict[int, str] = {}
    current: tuple[int, ...] = ()
    through = ""
    for n, raw in enumerate(text.splitlines(), 1):
        m = _SASS_FILE.match(raw)
        if m:
            path, line = m.group(1), int(m.group(2))
            if same_file(path, filename):
                current, through = (line,), ""
            else:
                current = tuple(sorted(inlined.get((os.path.basename(path), line), ())))
                through = f"{path}:{line}"
            continue
        if current and _SASS_INSTR.match(raw):
            for line in current:
                by.setdefault(line, []).append(n)
            if through:
                via[n] = through
    return StageMap("sass", tuple(text.splitlines()), {k: tuple(v) for k, v in sorted(by.items())}, via)


def map_stages(stages: Mapping[str, str], filename: str | None = None) -> dict[str, StageMap]:
    """Every stage present, in pipeline order, keyed by source line."""
    filename = filename or kernel_filename(stages)
    out: dict[str, StageMap] = {}
    for stage in STAGES:
        text = stages.get(stage)
        if not text:
            continue
        if stage in ("ttir", "ttgir"):
            out[stage] = map_mlir(stage, text, filename)
        elif stage == "llir":
            out[stage] = map_llir(text, filename)
        elif stage in ("ptx", "amdgcn"):
            out[stage] = map_ptx(text, filename, stage)
        elif stage == "sass":
            out[stage] = map_sass(text, filename, ptx_inlined(stages.get("ptx", ""), filename))
    return out


# --- what each line became (the tier-2 table as chips) ---------------------------------------


@dataclass(frozen=True)
class Chip:
    """One fact about a line: `label` short enough for the margin, `title` the whole of it."""

    kind: str  # load, store, mma, async, layout, spill, smem, atomic, fma: a CSS class suffix
    label: str
    title: str


def _widths(row: LineStats, cat: str) -> str:
    widths = sorted(set(row.widths.get(cat, [])))
    return "/".join(str(w) for w in widths)


def _ops(row: LineStats, cat: str) -> str:
    return ", ".join(f"{op} ×{n}" for op, n in sorted(row.asm.get(cat, {}).items()))


def line_chips(table: Mapping[int, LineStats]) -> dict[int, list[Chip]]:
    """Chips per source line: global loads and stores with their vector width, MMA/wgmma,
    async copies and TMA, layout conversions (and whether they go through shared memory),
    spills, shared-memory traffic, atomics; FMA only where a dot was lowered to it."""
    out: dict[int, list[Chip]] = {}
    for line, row in table.items():
        chips: list[Chip] = []
        for cat, kind, word in ((GLOBAL_LOAD, "load", "load"), (GLOBAL_STORE, "store", "store")):
            n = row.count(cat)
            if n:
                chips.append(
                    Chip(kind, f"{word} {_widths(row, cat)}-bit ×{n}", f"global {word}s: {_ops(row, cat)}")
                )
        for cat, kind, word in (
            (WGMMA, "mma", "wgmma"),
            (MMA, "mma", "mma"),
            (CP_ASYNC, "async", "cp.async"),
            (TMA, "async", "TMA"),
            (ATOMIC, "atomic", "atomic"),
        ):
            n = row.count(cat) or row.sass.get(cat, 0)
            if n:
                chips.append(Chip(kind, f"{word} ×{n}", _ops(row, cat) or f"{word}: {n} SASS instructions"))
        converts = row.ir.get("ttg.convert_layout", 0)
        smem = row.count(SHARED_STORE) + row.count(SHARED_LOAD)
        if converts:
            where = "through shared memory" if smem else "in registers"
            loop = (
                f", {row.loop_ir.get('ttg.convert_layout', 0)} inside a loop"
                if row.loop_ir.get("ttg.convert_layout")
                else ""
            )
            chips.append(Chip("layout", f"convert_layout ×{converts}", f"layout conversions {where}{loop}"))
        elif smem:
            chips.append(
                Chip(
                    "smem",
                    f"smem ×{smem}",
                    f"shared memory: {_ops(row, SHARED_STORE)} {_ops(row, SHARED_LOAD)}".strip(),
                )
            )
        spills = row.count(LOCAL) or row.sass.get(LOCAL, 0)
        if spills:
            chips.append(
                Chip(
                    "spill",
                    f"spill ×{spills}",
                    f"local-memory (spill) traffic: {_ops(row, LOCAL) or f'{spills} STL/LDL'}",
                )
            )
        dot = any(row.ir.get(op) for op in ("tt.dot", "ttng.warp_group_dot"))
        if dot and row.count(FMA) and not (row.count(MMA) or row.count(WGMMA)):
            chips.append(
                Chip("fma", f"FMA ×{row.count(FMA)}", "the dot runs on FMA: no tensor-core instruction")
            )
        if chips:
            out[line] = chips
    return out


def chips_for(stages: Mapping[str, str], filename: str | None = None) -> dict[int, list[Chip]]:
    """The chips of one kernel's stored stages (the tier-2 table rebuilt from its text)."""
    filename = filename or kernel_filename(stages)
    kernel = CompiledKernel(
        name="", def_line=0, filename=filename, num_warps=4, num_stages=0, grid=(1, 1, 1), args=(),
        stages={k: v for k, v in stages.items() if k in STAGES},
    )  # fmt: skip
    return line_chips(line_table(kernel))


# --- pass dumps -------------------------------------------------------------------------------


def strip_locs(line: str) -> str:
    """`%x = tt.load %p loc(#loc32)` -> `%x = tt.load %p`: every ` loc(...)`, parentheses balanced."""
    out, i = [], 0
    while True:
        j = line.find(" loc(", i)
        if j == -1:
            out.append(line[i:])
            return "".join(out).rstrip()
        out.append(line[i:j])
        depth, k = 0, j + 4
        while k < len(line):
            if line[k] == "(":
                depth += 1
            elif line[k] == ")":
                depth -= 1
                if depth == 0:
                    break
            k += 1
        i = k + 1


@dataclass(frozen=True)
class DiffRow:
    kind: str  # ctx, del, add, gap
    old: int | None  # line in the IR before the pass
    new: int | None  # line in the IR after it
    text: str


def ir_diff(before: str, after: str, context: int = 3) -> list[DiffRow]:
    """What a pass changed, line by line, with each side's own line numbers. Location aliases
    (`#locN = loc(...)`) and ` loc(...)` suffixes are left out of the comparison: a pass that
    renumbers locations has not changed the program."""

    def norm(text: str) -> tuple[list[int], list[str]]:
        nums, body = [], []
        for n, raw in enumerate(text.splitlines(), 1):
            if raw.startswith("#loc"):
                continue
            nums.append(n)
            body.append(strip_locs(raw))
        return nums, body

    a_nums, a = norm(before)
    b_nums, b = norm(after)
    rows: list[DiffRow] = []
    for group in difflib.SequenceMatcher(None, a, b, autojunk=False).get_grouped_opcodes(context):
        if rows:
            rows.append(DiffRow("gap", None, None, "…"))
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                rows += [
                    DiffRow("ctx", a_nums[i], b_nums[j], a[i])
                    for i, j in zip(range(i1, i2), range(j1, j2), strict=True)
                ]
                continue
            rows += [DiffRow("del", a_nums[i], None, a[i]) for i in range(i1, i2)]
            rows += [DiffRow("add", None, b_nums[j], b[j]) for j in range(j1, j2)]
    return rows


def op_counts(text: str) -> Counter[str]:
    return Counter(op.name for op in parse_mlir(text).ops)


def op_delta(before: str, after: str) -> dict[str, int]:
    """Operation counts after minus before, changed ones only, by name."""
    a, b = op_counts(before), op_counts(after)
    return {k: b[k] - a[k] for k in sorted(set(a) | set(b)) if b[k] != a[k]}


def pass_steps(names: Iterable[str]) -> list[tuple[int, str]]:
    """`kernel/30-TritonGPUPipeline` artefact names -> (30, 'TritonGPUPipeline'), in pass order."""
    out = []
    for name in names:
        tail = name.rsplit("/", 1)[-1]
        head, _, pass_name = tail.partition("-")
        if head.isdigit():
            out.append((int(head), pass_name))
    return sorted(out)
