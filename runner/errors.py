"""Error kinds of sandboxed jobs and the exceptions that carry them.

Standard library only: the child (`python -m runner.child`) and the worker both import it.
A job that fails ends as `JobError(kind, message, line, traceback, stderr_tail)`; `kind` is one
of `KINDS` below and is stable (tests, the database and the pages key on it). The message is
for people and may change.
"""

from __future__ import annotations

# kind -> when it happens. The order groups them: loading, gate, runtime, sandbox.
KINDS: dict[str, str] = {
    "bad_request": "the job request itself is malformed (unknown job, device, fields)",
    "syntax_error": "the module does not parse",
    "import_error": "importing the module raised",
    "missing_name": "a required name (Model, ModelNew, get_inputs, get_init_inputs) is missing",
    "bad_inputs": "get_inputs / get_input_cases / get_verify_inputs / get_init_inputs raised or "
    "returned something unusable",
    "no_checkable_case": "no input case is small enough to check on this device (cpu: the interpreter)",
    "state_dict_mismatch": "ModelNew cannot take Model's state dict",
    "compile_error": "Triton could not compile a kernel of the module",
    "compile_timeout": "a kernel's compile ran past the job's bound (options.compile_timeout_s) and was stopped",
    "exception": "user code raised while running (forward, constructor, sys.exit, ...)",
    "shape_mismatch": "ModelNew's output has another structure or shape than Model's",
    "dtype_mismatch": "ModelNew's output has another dtype than Model's",
    "type_mismatch": "ModelNew returned something other than a plain torch.Tensor where Model returns one "
    "(a subclass, an object posing as a tensor, a number)",
    "device_mismatch": "ModelNew's output is on another device than the job's",
    "nan_mismatch": "NaN or Inf where the reference has none, or the other way round",
    "incorrect": "the output differs from the reference beyond the dtype's tolerance",
    "no_triton_launch": "ModelNew.forward launched no Triton kernel",
    "constant_output": "ModelNew's output did not change when its input changed",
    "launch_independent": "ModelNew's output did not change when what its Triton kernels wrote was "
    "perturbed (a decoy launch beside another computation)",
    "device_error": "the device failed or is missing (CUDA error, illegal address, no torch_npu)",
    "oom": "out of memory (host or device), including the address-space limit",
    "timeout": "the job ran past its wall-clock or CPU-time limit and was killed",
    "crashed": "the child died without answering (signal, os._exit, interpreter abort)",
    "bad_output": "the child's stdout was not one job response (garbage, or over the size cap), or "
    "the verify job did not hand back the tensor data of a run",
    "unavailable": "the job is not available here (e.g. no ahead-of-time compile for this target)",
    "sandbox_error": "the sandbox could not start the child (bad interpreter path, ...)",
}

# Kinds that mean "the candidate is wrong", as opposed to "it could not be judged".
GATE_KINDS = frozenset(
    {
        "shape_mismatch",
        "dtype_mismatch",
        "type_mismatch",
        "device_mismatch",
        "nan_mismatch",
        "incorrect",
        "no_triton_launch",
        "constant_output",
        "launch_independent",
    }
)


class RunnerError(Exception):
    """Base of the runner's exceptions: carries a stable `kind` and the module line when known."""

    kind = "exception"

    def __init__(self, message: str, *, kind: str | None = None, line: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if kind is not None:
            self.kind = kind
        if self.kind not in KINDS:
            raise ValueError(f"unknown error kind {self.kind!r}")
        self.line = line


class JobFailed(RunnerError):
    """Raised inside the child to end the job with a named failure (a gate failure, bad inputs).

    `result` is the partial result to send back anyway (e.g. the cases checked so far).
    """

    def __init__(
        self, kind: str, message: str, *, line: int | None = None, result: dict | None = None
    ) -> None:
        super().__init__(message, kind=kind, line=line)
        self.result = result


class BadTensorData(RunnerError):
    """A tensor data file (runner.tensordata) that does not follow the format or is over its cap:
    whatever a job hands back that way is refused, never half-read."""

    kind = "bad_output"


class DeviceUnavailable(RunnerError):
    """The requested device cannot be used in this interpreter (no GPU, no torch_npu)."""

    kind = "device_error"


class SandboxError(RunnerError):
    """The parent could not start or talk to the child; the job did not run."""

    kind = "sandbox_error"


class RunFailed(Exception):
    """A run that cannot succeed, whatever worker tries it (bad configuration, an unknown
    proposer): no job ran, so it has no job kind. Stored as the run's error with status
    `failed`; never retried."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def classify_exception(exc: BaseException) -> str:
    """The error kind for an exception raised by user code, without importing torch or triton.

    Names and messages are matched because the child must classify errors of whichever torch
    and Triton build it runs on (CUDA, ROCm, torch_npu).
    """
    name = type(exc).__name__
    text = str(exc)
    lowered = text.lower()
    if name == "CompileTimeout":  # runner.childlib.compile_bound's; an OutOfResources by type
        return "compile_timeout"
    if isinstance(exc, MemoryError) or name == "OutOfMemoryError":
        return "oom"
    if (
        "out of memory" in lowered
        or "can't allocate memory" in lowered
        or "cannot allocate memory" in lowered
    ):
        return "oom"
    if name in (
        "CompilationError",
        "CompileTimeAssertionFailure",
        "UnsupportedLanguageConstruct",
        "OutOfResources",
        "PTXASError",
    ):
        return "compile_error"
    if name == "AcceleratorError" or any(
        marker in text
        for marker in (
            "CUDA error",
            "CUDA driver error",
            "illegal memory access",
            "device-side assert",
            "HIP error",
            "ACL error",
            "NPU error",
            "Triton Error [CUDA]",
        )
    ):
        return "device_error"
    return "exception"
