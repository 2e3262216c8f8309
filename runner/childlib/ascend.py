"""The compile job's npu branch: one captured launch compiled with triton-ascend, stage by stage.

Runs inside the sandbox child under triton-ascend 3.2 (.venv-ascend, `child_python('npu')`).
`triton.compile` cannot be used on a machine without CANN: it raises at the binary stage
(`npubin`, bishengir-compile) and keeps nothing of the stages before. So the backend's own stages
run one after the other here, the text of each is kept, and the first stage that cannot run
ends the compile with a named reason (`stopped`), not an exception: `needs_cann` where the
toolkit is missing (checked on CPU: "ASCEND_HOME_PATH is not set"), `compile_error` where the
kernel itself fails (the adapter refuses a pattern).

Stages on an npu target (triton-ascend 3.2.0): `ttir` (libtriton's TTIR passes), `ttadapter`
(the wheel's triton-adapter-opt lowers TTIR to linalg/memref/hivm), `npubin` (CANN). Per-pass
dumps: the TTIR passes print with MLIR_ENABLE_DUMP=1 to file descriptor 2, as in triton 3.6;
the adapter is a subprocess whose stderr the backend discards, so for its call the backend
module's `subprocess` is wrapped to add `--mlir-print-ir-before-all` and keep that stderr.
TRITON_DISABLE_LINE_INFO=0 makes the adapter print locations, so linalg ops carry source lines.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from runner.childlib.launches import Launch

# The binary stage and what it needs; `needs_cann` is the reason stored with the run.
CANN_MARKERS = ("ASCEND_HOME_PATH", "bishengir", "npuc", "ccec", "libascend", "libruntime", "CANN")
FINAL_DUMP_HEADER = "// -----// IR Dump Before (output) ('builtin.module' operation) //----- //"


def compile_into(
    record: dict[str, Any],
    launch: Launch,
    target: Any,
    attrs: dict,
    copts: dict,
    *,
    want_dumps: bool,
    dump_cap: int,
) -> None:
    """Fill the compile job's per-kernel `record` for one launch (see runner.childlib.compile)."""
    from triton._C.libtriton import ir
    from triton.compiler import ASTSource

    from runner.childlib.launches import _backend

    backend = _backend(target)
    options = backend.parse_options(dict(copts))
    record["num_warps"], record["num_stages"] = options.num_warps, options.num_stages
    # the TTIR of triton 3.2 names its arguments %arg0.. in signature order, constants left out
    record["ir_args"] = [name for name in launch.signature if name not in launch.constexprs]
    record["reached"], record["stopped"] = [], None
    src = ASTSource(launch.jit, launch.signature, launch.constexprs, _descriptor(backend, attrs))
    stages: dict[str, Any] = {}
    backend.add_stages(stages, options)
    record["pipeline"] = list(stages)
    adapter_log: list[str] = []
    t0 = time.perf_counter()
    with _captured(want_dumps) as out, _adapter_dumps(backend, want_dumps, adapter_log):
        context = ir.context()
        ir.load_dialects(context)
        backend.load_dialects(context)
        try:
            module = src.make_ir(
                options, backend.get_codegen_implementation(), backend.get_module_map(), context
            )
        except Exception as exc:  # the user's kernel does not compile: that is the evidence
            module = None
            record["error"] = f"{type(exc).__name__}: {_first_lines(str(exc), 40)}"
            record["stopped"] = {"stage": "ttir", "reason": "compile_error", "message": record["error"]}
        metadata = {"hash": src.hash(), "target": target, **options.__dict__}
        for ext, stage in stages.items() if module is not None else ():
            try:
                module = stage(module, metadata)
            except Exception as exc:  # every stage failure ends as a named reason, below
                record["stopped"] = _stop_reason(ext, exc)
                if record["stopped"]["reason"] == "compile_error":
                    record["error"] = f"{ext}: {record['stopped']['message']}"
                break
            record["reached"].append(ext)
            if isinstance(module, (bytes, bytearray)):  # the binary: only its size is evidence
                record["resources"]["binary_bytes"] = len(module)
            else:  # TTIR is an ir.module, the adapter's output already text
                record["stages"][ext] = str(module)
    record["compile_s"] = round(time.perf_counter() - t0, 4)
    if want_dumps:
        streams = [
            (out["stderr"], record["stages"].get("ttir")),
            ("\n".join(adapter_log), record["stages"].get("ttadapter")),
        ]
        record["pass_dumps"], record["dumps_dropped"] = _pass_dumps(streams, dump_cap)
    if record["error"]:
        record["log_tail"] = (out["stderr"] + out["stdout"])[-4000:]


def _pass_dumps(streams: list[tuple[str, str | None]], cap: int) -> tuple[list[dict], list[str]]:
    """IR after each pass of the TTIR pipeline, then of the adapter's, as one list.

    Each stream is (the \"IR Dump Before\" text, the stage's output): the output stands after
    the last pass as one more dump, so the last pass's effect is known too. The streams are
    split apart because the adapter reprints the TTIR it reads with other location aliases:
    compared across the seam, the last TTIR pass would look as if it changed the IR.
    """
    from runner.childlib.compile import _strip_trailing_noise, split_pass_dumps

    dumps: list[dict] = []
    notes: list[str] = []
    for n, (log, output) in enumerate(streams):
        if not log.strip():
            continue
        if output is not None:  # what the stages printed after the last dump is not IR
            log = f"{_strip_trailing_noise(log)}\n{FINAL_DUMP_HEADER}\n{output}\n"
        budget = cap - sum(len(d["text"] or "") for d in dumps)
        entries, dropped = split_pass_dumps(log, max(budget, 0))
        if output is not None and entries:
            entries = entries[:-1]  # the stage's output, already stored as the stage
            _unchanged_but_reprinted(entries)
        if n > 0:
            entries = [e for e in entries if e["pass"] != "(input)"]  # the previous stage's output
        for entry in entries:
            entry["index"] = len(dumps)
            dumps.append(entry)
        notes.extend(dropped)
    return dumps, notes


# ` loc(#loc12)` at the end of an op, and the `#loc12 = loc(...)` alias lines
_LOCS = re.compile(r"\s+loc\((?:[^()]|\([^()]*\))*\)\s*$|^#loc\d*\s*=.*$", re.M)


def _unchanged_but_reprinted(entries: list[dict]) -> None:
    """The stage's output is printed otherwise than the dumps (locations): a last pass whose
    IR differs from the one before it only there did not change it."""
    last = entries[-1] if entries else None
    before = next((e["text"] for e in reversed(entries[:-1]) if e["text"] is not None), None)
    if last is None or not last["changed"] or last["text"] is None or before is None:
        return
    if _LOCS.sub("", last["text"]).strip() == _LOCS.sub("", before).strip():
        last["changed"], last["text"] = False, None


def _descriptor(backend: Any, attrs: dict) -> Any:
    """The AttrsDescriptor of triton 3.2 for the record's `{(index,): [[name, value]]}` attributes."""
    from triton.backends.compiler import AttrsDescriptor

    empty = backend.get_attrs_descriptor([], [])
    props: dict[str, list[int]] = {name: [] for name in empty.property_values}
    for (index,), entries in attrs.items():
        for name, value in entries:
            if name in props and empty.property_values[name] == value:
                props[name].append(index)
    return AttrsDescriptor.from_dict({"arg_properties": props, "cls": type(empty).__name__})


def _stop_reason(stage: str, exc: BaseException) -> dict[str, str]:
    detail = getattr(exc, "stderr", None)
    text = detail.decode("utf-8", errors="replace") if isinstance(detail, bytes) else str(detail or "")
    text = (text.strip() or str(exc)).strip()
    message = f"{type(exc).__name__}: {_first_lines(text, 20)}"
    if stage != "ttadapter" and any(marker in text for marker in CANN_MARKERS):
        return {
            "stage": stage,
            "reason": "needs_cann",
            "message": f"the {stage} stage needs the CANN toolkit (bishengir-compile), not installed here: {message}",
        }
    return {"stage": stage, "reason": "compile_error", "message": message}


@contextlib.contextmanager
def _captured(want_dumps: bool) -> Iterator[dict[str, str]]:
    """Fds 1 and 2 to a file for the compile (MLIR dumps, the backend's prints), and the
    environment the stages read: dumps on or off, line info on."""
    captured = {"stderr": "", "stdout": ""}
    saved_env = {k: os.environ.get(k) for k in ("MLIR_ENABLE_DUMP", "TRITON_DISABLE_LINE_INFO")}
    os.environ["TRITON_DISABLE_LINE_INFO"] = "0"
    if want_dumps:
        os.environ["MLIR_ENABLE_DUMP"] = "1"
    else:
        os.environ.pop("MLIR_ENABLE_DUMP", None)
    with tempfile.TemporaryFile(mode="w+b") as err_file:
        sys.stdout.flush()
        sys.stderr.flush()
        saved = os.dup(1), os.dup(2)
        os.dup2(err_file.fileno(), 1)
        os.dup2(err_file.fileno(), 2)
        try:
            yield captured
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            for key, value in saved_env.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            err_file.seek(0)
            captured["stderr"] = err_file.read().decode("utf-8", errors="replace")


class _DumpingSubprocess:
    """Stands in for the `subprocess` module inside triton-ascend's compiler module: a run of
    triton-adapter-opt gets `--mlir-print-ir-before-all` and its stderr (the dumps) is kept."""

    def __init__(self, adapter: str, log: list[str]) -> None:
        self._adapter = adapter
        self._log = log

    def __getattr__(self, name: str) -> Any:
        return getattr(subprocess, name)

    def run(self, args: Any, *a: Any, **kw: Any) -> subprocess.CompletedProcess:
        is_adapter = isinstance(args, list) and args and os.path.basename(str(args[0])) == self._adapter
        if not is_adapter:
            return subprocess.run(args, *a, **kw)
        check = kw.pop("check", False)
        proc = subprocess.run([*args, "--mlir-print-ir-before-all"], *a, **kw)
        if isinstance(proc.stderr, (bytes, str)):
            err = (
                proc.stderr.decode("utf-8", errors="replace")
                if isinstance(proc.stderr, bytes)
                else proc.stderr
            )
            self._log.append(err)
        if check and proc.returncode != 0:
            # the error without the dumps around it: the same command once more, undumped
            return subprocess.run(args, *a, check=True, **kw)
        return proc


@contextlib.contextmanager
def _adapter_dumps(backend: Any, want_dumps: bool, log: list[str]) -> Iterator[None]:
    if not want_dumps:
        yield
        return
    # triton 3.2 loads each backend's compiler.py from its path under its own module object, not
    # the one `import triton.backends.ascend.compiler` gives: patch the globals its stages read.
    namespace = type(backend).add_stages.__globals__
    original = namespace["subprocess"]
    namespace["subprocess"] = _DumpingSubprocess("triton-adapter-opt", log)
    try:
        yield
    finally:
        namespace["subprocess"] = original


def _first_lines(text: str, n: int) -> str:
    lines = text.splitlines()
    return "\n".join(lines[:n]) + (f"\n... ({len(lines) - n} more lines)" if len(lines) > n else "")
