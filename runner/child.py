"""The sandbox child: `python -m runner.child` runs ONE job on one uploaded module.

It reads one `JobRequest` (JSON) on stdin and writes one `JobResponse` (JSON) on stdout;
nothing else reaches stdout (user prints go to stderr, see `hostile.protect_stdout`). It imports
only the standard library, torch, triton, numpy, `runner.*` child modules and the pure
`diagnosis.engine` modules `profile`, `devices` and `errors`, so it runs on a stock
accelerator image and never touches Django, the database, the broker or the network. The limits around it (time, memory, environment,
network) are set by `runner.sandbox`, which starts it.

For ncu, which must start the program it profiles, `--request PATH --response PATH` read and
write files instead of stdin/stdout. `--phase-fd N` is the sandbox's phase pipe: the child says
there when the module's import and its get_inputs()-style calls start and end, and the parent
kills a job that hangs in one (runner.sandbox: `Limits.quick_s`).

Jobs: validate, capture, reference and verify (the two halves of the verification gate, see
runner/childlib/verify.py), time, profile, compile (the last dispatched to
`runner.childlib.compile.compile_job`, imported only when asked for).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
import traceback
import types
from typing import Any

from diagnosis.engine import devices
from runner.childlib.hostile import load, numel_of, protect_stdout, seeded_inputs, user_call, write_all
from runner.childlib.phases import phase, report_to, snapshot, watched
from runner.errors import JobFailed, RunnerError, classify_exception
from runner.protocol import JobError, JobRequest, JobResponse

OPTIONAL_NAMES = ("get_input_cases", "get_verify_inputs")
TRACEBACK_LIMIT = 8000
# Jobs that run (or record) kernels on cpu go through the Triton interpreter; the compile job
# compiles ahead of time and needs real JITFunctions, so it never interprets.
INTERPRETED_JOBS = frozenset({"validate", "capture", "reference", "verify", "time", "profile"})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runner.child", description=__doc__.splitlines()[0])
    parser.add_argument("--request", help="read the request from this file instead of stdin")
    parser.add_argument("--response", help="write the response to this file instead of stdout")
    parser.add_argument("--phase-fd", type=int, help="announce the phases with a quick deadline here")
    args = parser.parse_args(argv)
    started = time.monotonic()
    if args.phase_fd is not None:
        os.set_inheritable(args.phase_fd, False)  # the module's subprocesses get no copy
        report_to(args.phase_fd)
    if args.request:
        with open(args.request, encoding="utf-8") as fh:
            text = fh.read()
    else:
        text = sys.stdin.read()
    response_fd = protect_stdout()
    response = handle(text)
    response.elapsed_s = round(time.monotonic() - started, 3)
    response.phases = snapshot()
    data = (response.dumps() + "\n").encode()
    if args.response:
        with open(args.response, "wb") as fh:
            fh.write(data)
    else:
        write_all(response_fd, data)
    sys.stderr.flush()
    # Skip interpreter teardown: user threads, atexit hooks or a broken CUDA context must not
    # hang or crash the process after the answer is out.
    os._exit(0)


def handle(text: str) -> JobResponse:
    """One request text -> one response; never raises."""
    try:
        req = JobRequest.loads(text)
    except (ValueError, TypeError) as exc:
        return JobResponse(ok=False, job="?", error=JobError("bad_request", f"bad job request: {exc}"))
    _set_interpreter(req)
    try:
        return JobResponse(ok=True, job=req.job, result=run(req))
    except JobFailed as exc:
        return JobResponse(
            ok=False, job=req.job, result=exc.result, error=_error(exc.kind, exc.message, exc.line, exc)
        )
    except RunnerError as exc:
        return JobResponse(ok=False, job=req.job, error=_error(exc.kind, exc.message, exc.line, exc))
    except BaseException as exc:  # a bug of ours, or user code reached outside user_call
        kind = classify_exception(exc)
        return JobResponse(
            ok=False, job=req.job, error=_error(kind, f"{type(exc).__name__}: {exc}", None, exc)
        )


def _set_interpreter(req: JobRequest) -> None:
    """TRITON_INTERPRET must be decided before triton is first imported (it is read at import).
    A kind without an accelerator runs its kernels through the interpreter."""
    if not devices.get(req.device).accelerator and req.job in INTERPRETED_JOBS:
        os.environ["TRITON_INTERPRET"] = "1"
    else:
        os.environ.pop("TRITON_INTERPRET", None)


def _import_libraries(req: JobRequest) -> None:
    """torch and triton, then tensordata's capture. The collector is off meanwhile: the imports
    allocate millions of objects and leave no garbage cycles, and collecting while they run
    took a quarter of every job's start (`import torch, triton`: 1.58 s with it, 1.24 s
    without, median of three on this project's 2-core CI machine). Those objects are then
    frozen (moved out of the generations the collector scans): they live as long as the job,
    and each full collection the upload's code or the gate sets off would otherwise walk all
    of them again (the gate on CPU, a reference and a verify job: 2.76 -> 2.43 s)."""
    gc.disable()
    try:
        if req.device == "npu":  # torch loads torch_npu inside `import torch`: say what it lacks
            from runner.backends.npu import import_torch

            import_torch()
        import torch  # noqa: F401
        import triton  # noqa: F401

        from runner import tensordata

        tensordata.capture()  # before any upload is imported: see runner.tensordata
    finally:
        gc.freeze()
        gc.enable()


def _error(kind: str, message: str, line: int | None, exc: BaseException) -> JobError:
    cause = exc.__cause__ or exc
    text = "".join(traceback.format_exception(type(cause), cause, cause.__traceback__))
    if len(text) > TRACEBACK_LIMIT:
        text = "...\n" + text[-TRACEBACK_LIMIT:]
    return JobError(kind=kind, message=message, line=line, traceback=text)


def run(req: JobRequest) -> dict[str, Any]:
    with phase("import"):  # the libraries every job needs, counted apart from the upload's import
        _import_libraries(req)
    if req.job == "compile":
        from runner.childlib.compile import compile_job  # only this job pays for its imports

        with phase("compile"):
            return compile_job(req)

    from runner.backends import get_backend

    with phase("load"), watched("import"):
        module = load(req.module, "kernelopt_parent")
    if req.job == "validate":  # needs no device: builds on cpu, runs nothing
        return validate_job(req, module)
    backend = get_backend(req.device)
    if req.job == "capture":
        from runner.childlib.profiling import capture_job

        return capture_job(req, backend, module)
    if req.job == "profile":
        from runner.childlib.profiling import profile_job

        return profile_job(req, backend, module)
    if req.job == "reference":  # the gate's reference half: no candidate is ever loaded here
        from runner.childlib.reference import reference_job

        return reference_job(req, backend, module)
    with phase("load"), watched("import"):
        candidate = load(req.candidate, "kernelopt_candidate") if req.candidate else None
    if req.job == "verify":
        from runner.childlib.verify import verify_job

        return verify_job(req, backend, module, candidate or module)
    if req.job == "time":
        from runner.childlib.timing import time_cases

        return time_cases(req, backend, module, candidate)
    raise JobFailed("bad_request", f"unknown job {req.job!r}")


def validate_job(req: JobRequest, module: types.ModuleType) -> dict[str, Any]:
    """Import, build both models, draw the inputs; run nothing else."""
    from triton.runtime.jit import KernelInterface

    from runner.childlib.module import REQUIRED, build_models

    paths = [req.module]
    kernels = sorted(name for name, obj in vars(module).items() if isinstance(obj, KernelInterface))
    if not kernels:
        raise JobFailed("missing_name", "the module defines no @triton.jit kernel")
    seed = req.seeds[0] if req.seeds else 0
    timed, extra = seeded_inputs(module, seed, paths)
    ref, _ = user_call(
        lambda: build_models(module, seed, "cpu"), what="building Model / ModelNew", paths=paths
    )
    params = [
        {"name": name, "shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch.")}
        for name, t in ref.state_dict().items()
    ]
    return {
        "names": [n for n in (*REQUIRED, *OPTIONAL_NAMES) if hasattr(module, n)],
        "kernels": kernels,
        "input_cases": len(timed),
        "verify_cases": len(extra),
        "case_numel": [numel_of(c) for c in timed],
        "verify_numel": [numel_of(c) for c in extra],
        "parameters": params,
        "num_parameters": sum(p.numel() for p in ref.parameters()),
    }


if __name__ == "__main__":
    sys.exit(main())
