"""The `compile` job: compile every kernel that ModelNew launches, ahead of time, for a named
target, and return each stage's text, per-pass IR dumps and resource usage (tiers 2 and 3).

Runs inside the sandbox child: imports only the standard library, torch, triton, numpy and
runner.childlib / runner.errors / runner.protocol. Nothing is executed on a device: launches are captured on CPU with the JIT's
exact specialization (runner.childlib.launches) and recompiled with `triton.compile`; an npu
target (`npu:Ascend910B3`) needs triton-ascend's interpreter and compiles stage by stage there
(runner.childlib.ascend), keeping what it reaches without CANN and naming the stage that needs it.

Options (`JobRequest.options`):
  inputs:        "cases" (default: request.cases, or case 0) or "verify" (get_verify_inputs()[0])
  pass_dumps:    bool, default False: MLIR IR before every pass (tier 3)
  sass:          true / false / "auto" (default): disassemble the cubin with line markers;
                 "auto" does it for a version's own compile (no overrides: the SASS is kept as
                 evidence of every diagnosed version) and, for a counterfactual, only when
                 ptxas reports spills (nvdisasm costs ~0.5 s a kernel)
  pass_dump_max_bytes: per-kernel cap on stored dump text (default 2 MB)
  overrides:     counterfactual changes applied before compiling:
                 {"divisibility": [argname, ...], "num_stages": int, "num_warps": int,
                  "source": path of an alternative module compiled instead}
  kernels:       optional list of kernel names to compile (default: all launched)
"""

from __future__ import annotations

import contextlib
import io
import itertools
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import triton

from runner.childlib import module as modlib
from runner.childlib.hostile import load, user_call
from runner.childlib.launches import Launch, parse_target, record_launches
from runner.childlib.phases import watched
from runner.errors import JobFailed
from runner.protocol import JobRequest

TRITON_VERSION = triton.__version__
IS_TRITON_ASCEND = "ascend" in getattr(getattr(triton, "backends", None), "backends", {})
DEFAULT_DUMP_CAP = 2_000_000
_module_ids = itertools.count()

# `// -----// IR Dump Before TritonGPUPipeline (tritongpu-pipeline) ('builtin.module' operation) //----- //`
# `// -----// IR Dump Before TritonToLinalg (triton-to-linalg) //----- //` (triton-adapter-opt: no scope)
_DUMP_HEADER = re.compile(
    r"^// -----// IR Dump Before (\S+)(?: \(([^)]*)\))?(?: \('([^']*)' operation[^)]*\))? //----- //[^\n]*$",
    re.M,
)
# `    %x_5 = tt.load %x_4, %mask_3 : tensor<1024x!tt.ptr<f32>, #blocked> loc(#loc25)`
# `    "tt.reduce"(%3) <{axis = 0 : i32}> ({` (generic form)
_OP_NAME = re.compile(r"^\s*(?:%[^=]+=\s*)?\"?([a-z_][a-z0-9_]*\.[a-z0-9_.]+)\"?[\s(<{]", re.M)
# `ptxas info    : Used 26 registers, used 0 barriers`
_PTXAS_REGS = re.compile(r"Used (\d+) registers")
# `    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads`
_PTXAS_SPILLS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
# `    .vgpr_count:     40` (AMDGPU metadata in the amdgcn text)
_AMD_META = re.compile(
    r"^\s*\.(vgpr_count|sgpr_count|vgpr_spill_count|sgpr_spill_count|agpr_count|"
    r"group_segment_fixed_size|private_segment_fixed_size):\s+(\d+)",
    re.M,
)
# `; Occupancy: 8`
_AMD_OCCUPANCY = re.compile(r";\s*Occupancy:\s*(\d+)")


def compile_job(request: JobRequest) -> dict[str, Any]:
    """Capture ModelNew's launches on CPU and compile each distinct one for request.target."""
    t0 = time.perf_counter()
    options = dict(request.options or {})
    overrides = dict(options.get("overrides") or {})
    path = overrides.get("source") or request.module
    target = parse_target(request.target)
    _check_toolchain(target, request.target)
    notes: list[str] = []

    with watched("import"):
        module = load(path, f"kernelopt_compile_{next(_module_ids)}")
    launches, captured_on = _capture(module, request, options, target, notes)
    t_capture = time.perf_counter() - t0

    names = {a.name for launch in launches for a in launch.args}
    unknown = [n for n in overrides.get("divisibility") or [] if n not in names]
    if unknown:
        raise JobFailed("bad_request", f"overrides.divisibility names no kernel argument: {unknown}")
    unique: dict[tuple, Launch] = {}
    for launch in launches:
        unique.setdefault(launch.key, launch)
    wanted = options.get("kernels")
    kernels = []
    for launch in unique.values():
        if wanted and launch.kernel not in wanted:
            continue
        kernels.append(_compile_launch(launch, target, overrides, options))
    return {
        "target": request.target or "sm_90",
        "backend": target.backend,
        "arch": str(target.arch),
        "triton_version": TRITON_VERSION,
        "module": path,
        "overrides": overrides,
        "launches": len(launches),
        "kernels": kernels,
        "capture_s": round(t_capture, 4),
        "captured_on": captured_on,
        "total_s": round(time.perf_counter() - t0, 4),
        "notes": notes,
    }


def _check_toolchain(target: Any, text: str | None) -> None:
    """An npu target needs triton-ascend and every other target CUDA/ROCm triton; they cannot
    share one environment (triton-ascend replaces the `triton` package), so a job sent to the
    wrong interpreter says which one it needs instead of failing inside make_backend."""
    if target.backend == "npu" and not IS_TRITON_ASCEND:
        raise JobFailed(
            "unavailable",
            f"target {text} needs triton-ascend; this interpreter ({sys.executable}) has triton "
            f"{TRITON_VERSION}: set KERNELOPT_PYTHON_NPU to a python with triton-ascend (make ascend)",
        )
    if target.backend != "npu" and IS_TRITON_ASCEND:
        raise JobFailed(
            "unavailable",
            f"target {text or 'sm_90'} needs CUDA/ROCm triton; this interpreter ({sys.executable}) "
            f"has triton-ascend {TRITON_VERSION}",
        )


def _capture(
    module: Any, request: JobRequest, options: dict, target: Any, notes: list[str]
) -> tuple[list[Launch], str]:
    """The launches ModelNew.forward makes on the requested cases, captured without running them.

    Inputs and models go on the meta device first: shapes, strides and dtypes are all a capture
    reads (a meta tensor's address is 0, as aligned as a device allocation), and drawing the
    timed cases on the CPU can outlast the inputs phase (flag_gems' embedding: five tables of
    up to 1 GB, killed after 40 s, so tiers 2 and 3 had nothing). A module whose inputs or
    forward need values (`.item()`, `nonzero`, a CPU-only factory) or that launches nothing
    there is captured again on the CPU, as before. Returns the launches and where they were
    captured ("meta" or "cpu")."""
    import torch

    try:
        with torch.device("meta"):
            return _capture_cases(module, request, options, target, [], on_meta=True), "meta"
    except Exception:  # noqa: BLE001 - anything the meta run cannot do, the CPU run does or says
        pass
    return _capture_cases(module, request, options, target, notes, on_meta=False), "cpu"


def _capture_cases(
    module: Any, request: JobRequest, options: dict, target: Any, notes: list[str], *, on_meta: bool
) -> list[Launch]:
    import torch

    paths = [module.__file__]
    if options.get("inputs") == "verify":
        with watched("inputs"):
            verify = user_call(lambda: modlib.verify_cases(module), what="get_verify_inputs()", paths=paths)
        if not verify:
            raise JobFailed("bad_inputs", "options.inputs='verify' but the module has no get_verify_inputs()")
        cases = [(None, verify[0])]
    else:
        with watched("inputs"):
            all_cases = user_call(
                lambda: modlib.input_cases(module), what="get_input_cases()/get_inputs()", paths=paths
            )
        indices = request.cases if request.cases else [0]
        bad = [i for i in indices if not 0 <= i < len(all_cases)]
        if bad:
            raise JobFailed("bad_inputs", f"case indices {bad} out of range (module has {len(all_cases)})")
        cases = [(i, all_cases[i]) for i in indices]
    seed = request.seeds[0] if request.seeds else 0
    _, new = user_call(
        lambda: modlib.build_models(module, seed, "meta" if on_meta else "cpu"), what="building the models",
        paths=paths,
    )  # fmt: skip
    launches: list[Launch] = []
    with torch.no_grad(), record_launches(execute=False, target=target) as rec:
        for index, inputs in cases:
            rec.case = index
            try:
                new(*inputs)
            except Exception as exc:  # outputs are garbage during capture; later code may choke on them
                if on_meta:  # a value the meta run cannot give: the cpu run will
                    raise
                line = modlib._user_line(exc, module.__file__)
                if not rec.launches:
                    raise JobFailed(
                        "exception",
                        f"ModelNew.forward raised {type(exc).__name__} before launching any kernel: {exc}",
                        line=line,
                    ) from exc
                notes.append(
                    f"forward raised {type(exc).__name__} after {len(rec.launches)} launch(es) "
                    f"(line {line}); kept the launches recorded so far"
                )
        launches = list(rec.launches)
    if not launches:
        raise JobFailed("no_triton_launch", "ModelNew.forward launched no Triton kernel")
    return launches


def _param_index(launch: Launch, name: str) -> int:
    for i, arg in enumerate(launch.args):
        if arg.name == name:
            return i
    raise JobFailed("bad_request", f"kernel {launch.kernel} has no argument {name!r}")


def _apply_overrides(launch: Launch, overrides: dict) -> tuple[dict, dict, list[str]]:
    attrs = {k: [list(a) for a in v] for k, v in launch.attrs.items()}
    copts = dict(launch.compile_options)
    applied = []
    for name in overrides.get("divisibility") or []:
        if not any(a.name == name for a in launch.args):
            continue  # another kernel's argument
        idx = _param_index(launch, name)
        arg = launch.args[idx]
        if arg.kind == "constexpr":
            continue  # already a constant
        entry = [a for a in attrs.get((idx,), []) if a[0] != "tt.divisibility"]
        attrs[(idx,)] = entry + [["tt.divisibility", 16]]
        applied.append(f"divisibility:{name}")
    for key in ("num_stages", "num_warps"):
        if overrides.get(key) is not None:
            copts[key] = int(overrides[key])
            applied.append(f"{key}={copts[key]}")
    return attrs, copts, applied


def _compile_launch(launch: Launch, target: Any, overrides: dict, options: dict) -> dict[str, Any]:
    from triton.compiler import ASTSource

    record: dict[str, Any] = {
        "name": launch.kernel,
        "def_line": launch.def_line,
        "filename": launch.filename,
        "launch": launch.to_json(),
        "stages": {},
        "pass_dumps": [],
        "dumps_dropped": [],
        "resources": {},
        "compile_s": None,
        "error": None,
        "applied": [],
    }
    try:
        attrs, copts, applied = _apply_overrides(launch, overrides)
    except JobFailed as exc:
        record["error"] = exc.message
        return record
    record["applied"] = applied
    record["num_warps"] = copts.get("num_warps")
    record["num_stages"] = copts.get("num_stages")
    want_dumps = bool(options.get("pass_dumps"))
    if target.backend == "npu":
        from runner.childlib import ascend

        cap = int(options.get("pass_dump_max_bytes", DEFAULT_DUMP_CAP))
        ascend.compile_into(record, launch, target, attrs, copts, want_dumps=want_dumps, dump_cap=cap)
        return record
    src = ASTSource(launch.jit, launch.signature, launch.constexprs, attrs)
    t0 = time.perf_counter()
    with _compile_env(want_dumps, target) as captured:
        try:
            kernel = triton.compile(src, target=target, options=copts)
        except Exception as exc:  # the user's kernel failed to compile: that is the evidence
            kernel = None
            record["error"] = f"{type(exc).__name__}: {_first_lines(str(exc), 40)}"
    record["compile_s"] = round(time.perf_counter() - t0, 4)
    stderr_text, stdout_text = captured["stderr"], captured["stdout"]
    if want_dumps:
        dumps, dropped = split_pass_dumps(
            stderr_text, int(options.get("pass_dump_max_bytes", DEFAULT_DUMP_CAP))
        )
        record["pass_dumps"], record["dumps_dropped"] = dumps, dropped
    if kernel is None:
        record["log_tail"] = _strip_dumps(stderr_text)[-4000:]
        return record
    asm = kernel.asm
    for stage, text in asm.items():
        if isinstance(text, str) and stage != "source":
            record["stages"][stage] = text
    metadata = kernel.metadata
    record["num_warps"] = metadata.num_warps
    record["num_stages"] = getattr(metadata, "num_stages", record["num_stages"])
    resources: dict[str, Any] = {"shared": int(getattr(metadata, "shared", 0) or 0)}
    if target.backend == "cuda":
        t1 = time.perf_counter()
        resources.update(_ptxas_resources(stdout_text, asm.get("ptx", ""), target))
        want_sass = options.get("sass", "auto")
        if want_sass == "auto":
            # nvdisasm costs ~0.5 s a kernel, more than the compile itself. A version's own
            # compile keeps its SASS (the evidence viewer shows it for every source line); a
            # counterfactual recompile is only compared, so it pays for SASS only when ptxas
            # spilled (its per-line STL/LDL are what the spill finding cites).
            want_sass = not overrides or bool(resources.get("spills_store") or resources.get("spills_load"))
        if want_sass and isinstance(asm.get("cubin"), bytes):
            sass = _disassemble(asm["cubin"])
            if sass:
                record["stages"]["sass"] = sass
        record["tools_s"] = round(time.perf_counter() - t1, 4)
    elif target.backend == "hip":
        resources.update(_amd_resources(asm.get("amdgcn", "")))
    record["resources"] = resources
    return record


@contextlib.contextmanager
def _compile_env(pass_dumps: bool, target: Any) -> Iterator[dict[str, str]]:
    """Force a real compile and capture what it prints.

    MLIR_ENABLE_DUMP is read by libtriton at each pass-manager setup (checked: the second
    compile in a process dumps too), and the dumps go to file descriptor 2, so the fd is
    redirected, not just sys.stderr. Fd 1 is redirected as well: the child's stdout carries
    the JSON response and must not receive compiler chatter.
    """
    from triton import knobs

    captured = {"stderr": "", "stdout": ""}
    old_dump = os.environ.get("MLIR_ENABLE_DUMP")
    with tempfile.TemporaryFile(mode="w+b") as err_file, knobs.compilation.scope(), knobs.nvidia.scope():
        knobs.compilation.always_compile = True
        if hasattr(knobs.nvidia, "dump_ptxas_log"):
            knobs.nvidia.dump_ptxas_log = True  # printed through Python's print: caught below
        if pass_dumps:
            os.environ["MLIR_ENABLE_DUMP"] = "1"
        else:
            os.environ.pop("MLIR_ENABLE_DUMP", None)
        sys.stdout.flush()
        sys.stderr.flush()
        saved = os.dup(1), os.dup(2)
        os.dup2(err_file.fileno(), 1)
        os.dup2(err_file.fileno(), 2)
        py_out = io.StringIO()
        try:
            with contextlib.redirect_stdout(py_out), _no_dumps_in_llvm_stage(target if pass_dumps else None):
                yield captured
        finally:
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            if old_dump is None:
                os.environ.pop("MLIR_ENABLE_DUMP", None)
            else:
                os.environ["MLIR_ENABLE_DUMP"] = old_dump
            err_file.seek(0)
            captured["stderr"] = err_file.read().decode("utf-8", errors="replace")
            captured["stdout"] = py_out.getvalue()


@contextlib.contextmanager
def _no_dumps_in_llvm_stage(target: Any) -> Iterator[None]:
    """Keep MLIR dumps to the TTIR/TTGIR passes.

    After ConvertTritonGPUToLLVM every dump is the LLVM dialect, about a megabyte per pass for
    a matmul; printing those made a dumped compile ten times slower than a plain one, and
    tier 3 reads none of them. The backend's make_llir runs with the variable unset.
    """
    if target is None:
        yield
        return
    from runner.childlib.launches import _backend

    cls = type(_backend(target))
    orig = cls.__dict__.get("make_llir")
    if orig is None:
        yield
        return

    func = orig.__func__ if isinstance(orig, staticmethod) else orig

    def make_llir(*args, **kwargs):
        saved = os.environ.pop("MLIR_ENABLE_DUMP", None)
        try:
            return func(*args, **kwargs)
        finally:
            if saved is not None:
                os.environ["MLIR_ENABLE_DUMP"] = saved

    # AMD's make_llir is a staticmethod, NVIDIA's a method: keep the kind.
    cls.make_llir = staticmethod(make_llir) if isinstance(orig, staticmethod) else make_llir
    try:
        yield
    finally:
        cls.make_llir = orig


def split_pass_dumps(text: str, max_bytes: int = DEFAULT_DUMP_CAP) -> tuple[list[dict], list[str]]:
    """Turn MLIR_ENABLE_DUMP output (IR *before* each pass) into IR *after* each pass.

    Entry i says what pass i did: `changed` compares the dump before pass i with the one
    before pass i+1; the text kept is the IR after the pass, only where it changed and while
    the kernel's budget lasts. The last pass of the pipeline has no following dump
    (changed=None). Returns (dumps, notes on what was dropped).
    """
    heads = list(_DUMP_HEADER.finditer(text))
    bodies = []
    for i, head in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
        body = text[head.end() : end].strip("\n")
        if i + 1 == len(heads):
            body = _strip_trailing_noise(body)
        bodies.append(body)
    dumps: list[dict] = []
    dropped: list[str] = []
    budget = max_bytes
    if bodies:
        first = {
            "index": 0,
            "pass": "(input)",
            "arg": "",
            "scope": heads[0].group(3) or "",
            "changed": True,
            "ops": op_counts(bodies[0]),
            "text": None,
        }
        if len(bodies[0]) <= budget:
            first["text"] = bodies[0]
            budget -= len(bodies[0])
        else:
            dropped.append("(input)")
        dumps.append(first)
    unchanged = 0
    for i, head in enumerate(heads):
        after = bodies[i + 1] if i + 1 < len(bodies) else None
        changed = None if after is None else after != bodies[i]
        entry = {
            "index": i + 1,
            "pass": head.group(1),
            "arg": head.group(2) or "",
            "scope": head.group(3) or "",
            "changed": changed,
            "ops": op_counts(after) if after is not None else {},
            "text": None,
        }
        if changed:
            if len(after) <= budget:
                entry["text"] = after
                budget -= len(after)
            else:
                dropped.append(head.group(1))
        elif changed is False:
            unchanged += 1
        dumps.append(entry)
    notes = []
    if unchanged:
        notes.append(f"{unchanged} passes left the IR unchanged: no text kept for them")
    if dropped:
        notes.append(f"text over the {max_bytes}-byte cap dropped for: {', '.join(dropped)}")
    return dumps, notes


def op_counts(ir: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for match in _OP_NAME.finditer(ir):
        name = match.group(1)
        counts[name] = counts.get(name, 0) + 1
    return counts


def _strip_trailing_noise(body: str) -> str:
    """After the last dump, stderr may hold unrelated output; the module ends at its last `}`."""
    end = body.rfind("\n}")
    if end == -1:
        return body
    tail_end = body.find("\n", end + 2)
    # keep the `#locN = ...` alias lines that MLIR prints after the module
    rest = body[end + 2 :] if tail_end == -1 else body[end + 2 :]
    keep = [ln for ln in rest.splitlines() if ln.startswith("#loc") or not ln.strip()]
    return body[: end + 2] + ("\n" + "\n".join(keep) if keep else "")


def _strip_dumps(text: str) -> str:
    first = _DUMP_HEADER.search(text)
    return text if first is None else text[: first.start()]


def _first_lines(text: str, n: int) -> str:
    lines = text.splitlines()
    return "\n".join(lines[:n]) + (f"\n... ({len(lines) - n} more lines)" if len(lines) > n else "")


def _nvidia_tool(name: str) -> str | None:
    from triton import knobs

    try:
        tool = getattr(knobs.nvidia, name)
        path = tool.path if tool is not None else None
    except (AttributeError, RuntimeError):
        path = None
    return path or shutil.which(name)


def _ptxas_resources(log: str, ptx: str, target: Any) -> dict[str, Any]:
    """Registers and spills from the ptxas -v log of the compile; run ptxas -v when it is missing."""
    if not _PTXAS_REGS.search(log) and ptx:
        ptxas = _nvidia_tool("ptxas")
        if ptxas:
            arch = f"sm_{target.arch}a" if target.arch == 90 else f"sm_{target.arch}"
            with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
                f.write(ptx)
            try:
                proc = subprocess.run(
                    [ptxas, "-v", f"--gpu-name={arch}", f.name, "-o", os.devnull],
                    capture_output=True,
                    text=True,
                    timeout=120,
                )
                log = proc.stdout + proc.stderr
            finally:
                os.unlink(f.name)
    out: dict[str, Any] = {"ptxas_log": log.strip()[-2000:]}
    regs = _PTXAS_REGS.search(log)
    spills = _PTXAS_SPILLS.search(log)
    if regs:
        out["registers"] = int(regs.group(1))
    if spills:
        out["stack"], out["spills_store"], out["spills_load"] = (int(g) for g in spills.groups())
    return out


def _disassemble(cubin: bytes) -> str | None:
    """SASS with `//## File "...", line N` markers (nvdisasm -c -g); cuobjdump -sass as fallback."""
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(cubin)
    try:
        for tool, args in (("nvdisasm", ["-c", "-g"]), ("cuobjdump", ["-sass"])):
            path = _nvidia_tool(tool)
            if not path:
                continue
            proc = subprocess.run([path, *args, f.name], capture_output=True, text=True, timeout=120)
            if proc.returncode == 0 and proc.stdout:
                return proc.stdout
        return None
    finally:
        os.unlink(f.name)


def _amd_resources(amdgcn: str) -> dict[str, Any]:
    meta = {m.group(1): int(m.group(2)) for m in _AMD_META.finditer(amdgcn)}
    out: dict[str, Any] = {}
    if "vgpr_count" in meta:
        out["registers"] = meta["vgpr_count"]
        out["vgpr"] = meta["vgpr_count"]
    if "sgpr_count" in meta:
        out["sgpr"] = meta["sgpr_count"]
    if "agpr_count" in meta:
        out["agpr"] = meta["agpr_count"]
    out["spills_store"] = meta.get("vgpr_spill_count", 0) + meta.get("sgpr_spill_count", 0)
    out["vgpr_spill"] = meta.get("vgpr_spill_count", 0)
    out["sgpr_spill"] = meta.get("sgpr_spill_count", 0)
    out["stack"] = meta.get("private_segment_fixed_size", 0)
    if "group_segment_fixed_size" in meta:
        out["lds"] = meta["group_segment_fixed_size"]
    occ = _AMD_OCCUPANCY.search(amdgcn)
    if occ:
        out["occupancy_waves_per_simd"] = int(occ.group(1))
    return out
