"""Run one job in a sandboxed child process and always come back with a `JobResponse`.

`run_job(request, limits=...)` starts `python -m runner.child` and feeds it the request. The
child runs:

* in a new session (its own process group), killed as a group at the wall-clock limit;
* under resource limits: RLIMIT_CPU (CPU seconds), RLIMIT_NOFILE, RLIMIT_FSIZE (largest file
  it may write), RLIMIT_NPROC, and RLIMIT_AS (address space) **on cpu only**: a CUDA or NPU
  context reserves tens to hundreds of GB of virtual address space, so there the device's own
  memory limit (an allocation error -> `oom`) and the wall clock bound the job;
* with a scrubbed environment: PATH, LANG/LC_*, TZ, the CUDA / ROCm / NVIDIA / Ascend
  variables a device stack needs (CUDA_VISIBLE_DEVICES, LD_LIBRARY_PATH, ASCEND_*, ...), and
  nothing else: no DATABASE_URL, BROKER_URL, SECRET_KEY, *_API_KEY, OPENAI_*, AWS_*, and no
  variable whose name looks like a credential even if it matched the allow list;
* with HOME, TMPDIR and the working directory set to its own temporary directory (removed
  afterwards) and TRITON_CACHE_DIR set there, or to a caller's per-run cache directory so the
  jobs of one run reuse compiles;
* in new network and PID namespaces where the kernel allows: a small trampoline
  (`python -m runner.sandbox --trampoline`, a fresh single-threaded process, unlike a
  `preexec_fn` in a threaded worker) calls unshare(CLONE_NEWNET|CLONE_NEWPID), or, without
  CAP_SYS_ADMIN, the same with CLONE_NEWUSER (mapping our own uid/gid), sets the limits and
  starts the child as pid 2 under a tiny init (see `_trampoline`). The network namespace has
  only a loopback device that is down, so every connect fails with ENETUNREACH, 127.0.0.1
  included. In the PID namespace the worker's processes have no pid, so the child cannot
  signal them, and everything it starts (setsid'd grandchildren too) dies when the job ends.
  The PID namespace is for cpu jobs only by default: on the H200 machines CUDA fails to
  initialise inside one (cudaGetDeviceCount: error 304, "OS call failed"; cause not
  established, probably the worker's /proc, still mounted, showing pids other than the
  driver's own), so cuda and npu jobs run with `processes="not isolated (disabled)"` and
  rely on the process-group kill.
  Where unshare is refused (some containers, gVisor) the job still runs, the response says
  `network` / `processes` = "not isolated (<reason>)" and a warning is logged once per
  process; `Limits(network="required")` makes a missing network namespace a `sandbox_error`.

Measured (root; Linux 6.18 here and on the H200 Firecracker machines, through
tests/runner/test_sandbox.py and test_hostile.py): secrets in the worker's environment never
reach the child; connect() to a port the worker listens on fails with ENETUNREACH; on cpu,
os.kill() of a worker-side process fails with ESRCH and a setsid'd grandchild is gone when
run_job returns; a 10 GB host allocation fails at RLIMIT_AS (`oom`). CUDA jobs run in the
network namespace (ncu included) and fail cleanly on an illegal address (`device_error`).

What it does not isolate: the file system (the child runs as the worker's user and can read
what that user can read, e.g. the repository, and write where it may, up to RLIMIT_FSIZE per
file), /proc (it can see, though on cpu not signal, other processes; cuda/npu jobs can
signal them), the GPU (another job's memory on a shared device), and CPU/memory shares
beyond the rlimits (no cgroups). RLIMIT_NPROC is not enforced for root. Use a container or a
dedicated user for those.

Outcomes: stdout must be exactly one JSON response; garbage or more than
`limits.stdout_bytes` is `bad_output`; a wall-clock kill is `timeout`; SIGXCPU is `timeout`;
SIGSEGV/SIGBUS/SIGILL/SIGABRT/SIGFPE or an exit without an answer is `crashed`; SIGKILL that
was not ours (the kernel's OOM killer) is `oom`. The tail of stderr rides along in
`JobError.stderr_tail`. Nothing here raises for anything the child does.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import re
import resource
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from runner.protocol import JobError, JobRequest, JobResponse

ROOT = Path(__file__).resolve().parent.parent
logger = logging.getLogger(__name__)
MARKER = "kernelopt-sandbox:"
GiB = 1 << 30
MiB = 1 << 20

# Exact names and prefixes passed through to the child; everything else is dropped.
ENV_ALLOW = frozenset(
    {
        "PATH",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TERM",
        "LD_LIBRARY_PATH",
        "CUDA_VISIBLE_DEVICES",
        "CUDA_DEVICE_ORDER",
        "CUDA_HOME",
        "CUDA_PATH",
        "CUDA_MODULE_LOADING",
        "CUDA_LAUNCH_BLOCKING",
        "HIP_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
        "ROCM_PATH",
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        # KINDS.md: keep NVLink multicast off on shared multi-GPU hosts, also in children.
        "NCCL_NVLS_ENABLE",
        "TORCH_SYMM_MEM_DISABLE_MULTICAST",
        "NVSHMEM_DISABLE_NVLS",
        "TRITON_PTXAS_PATH",
        "TRITON_CUOBJDUMP_PATH",
        "TRITON_NVDISASM_PATH",
        "TRITON_LIBCUDA_PATH",
        "TOOLCHAIN_HOME",
        "PYTORCH_NPU_ALLOC_CONF",
    }
)
ENV_ALLOW_PREFIXES = ("LC_", "NVIDIA_", "ASCEND_")
# Dropped even when allowed above: names that look like credentials.
ENV_DENY = re.compile(r"(KEY|SECRET|TOKEN|PASSWORD|PASSWD|CREDENTIAL|AUTH|COOKIE|SESSION|DSN)", re.IGNORECASE)

CLONE_NEWNET = 0x40000000
CLONE_NEWPID = 0x20000000
CLONE_NEWUSER = 0x10000000


@dataclass(frozen=True)
class Limits:
    """Limits of one child. `for_job` gives the defaults per job and device."""

    wall_s: float = 300.0
    cpu_s: float | None = None  # None: 4 x wall + 10 (torch and the interpreter use several threads)
    address_space_bytes: int | None = 8 * GiB  # applied on cpu only (see the module docstring)
    nofile: int = 1024
    fsize_bytes: int = 1 * GiB
    nproc: int = 4096  # counts every thread of the user, other jobs' too: keep it generous
    stdout_bytes: int = 64 * MiB
    stderr_bytes: int = 64 * 1024  # the tail kept
    network: str = "auto"  # auto: isolate where possible; required: fail if not possible; off
    processes: str = "auto"  # PID namespace: auto (cpu jobs, where possible), on (every device), off

    # job -> (cpu wall seconds, device wall seconds)
    DEFAULT_WALL = {
        "validate": (60.0, 120.0),
        "capture": (120.0, 180.0),
        "verify": (300.0, 600.0),
        "time": (60.0, 600.0),
        "profile": (120.0, 600.0),
        "compile": (300.0, 300.0),
    }

    @classmethod
    def for_job(cls, job: str, device: str, **overrides: object) -> Limits:
        cpu_wall, device_wall = cls.DEFAULT_WALL.get(job, (300.0, 600.0))
        base = cls(wall_s=cpu_wall if device == "cpu" else device_wall)
        return replace(base, **overrides) if overrides else base  # type: ignore[arg-type]

    @property
    def cpu_seconds(self) -> int:
        return int(self.cpu_s if self.cpu_s is not None else 4 * self.wall_s + 10)


@dataclass
class SandboxResponse(JobResponse):
    """A JobResponse plus what the sandbox saw from outside the child."""

    network: str = "not isolated"  # 'isolated' or 'not isolated (<reason>)'
    processes: str = "not isolated"  # PID namespace: 'isolated' or 'not isolated (<reason>)'
    returncode: int | None = None
    wall_s: float = 0.0  # wall-clock seconds of the child, start to exit (device time for accounting)
    stderr_tail: str = ""


ASCEND_VENV_PYTHON = ROOT / ".venv-ascend" / "bin" / "python"  # made by `make ascend`


def child_python(device: str) -> str:
    """The interpreter for a device's children: KERNELOPT_PYTHON_<DEVICE>, else KERNELOPT_PYTHON,
    else (npu) the repository's .venv-ascend where it exists, else this one. triton-ascend
    replaces the `triton` package, so npu children need their own environment."""
    chosen = os.environ.get(f"KERNELOPT_PYTHON_{device.upper()}") or os.environ.get("KERNELOPT_PYTHON")
    if chosen:
        return chosen
    if device == "npu" and ASCEND_VENV_PYTHON.exists():
        return str(ASCEND_VENV_PYTHON)
    return sys.executable


def scrubbed_env(
    device: str, job: str, home: str, cache_dir: str, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The child's whole environment (see the module docstring)."""
    source = os.environ if base is None else base
    env = {
        k: v
        for k, v in source.items()
        if (k in ENV_ALLOW or k.startswith(ENV_ALLOW_PREFIXES)) and not ENV_DENY.search(k)
    }
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    extra_path = source.get("KERNELOPT_CHILD_PYTHONPATH", "")  # e.g. CANN's python packages on NPU nodes
    env.update(
        {
            "HOME": home,
            "TMPDIR": home,
            "TRITON_CACHE_DIR": cache_dir,
            # @triton.autotune keeps its timings in that cache: the jobs of one run that share
            # it (a candidate's gate, its final check) reuse the choice instead of timing every
            # config again; a job with a cache of its own gains nothing and loses nothing
            "TRITON_CACHE_AUTOTUNING": "1",
            "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), extra_path) if p),
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONNOUSERSITE": "1",
            "PYTHONUNBUFFERED": "1",
            "PYTHONFAULTHANDLER": "1",  # a segfault prints the Python stack to stderr
        }
    )
    if device == "cpu" and job != "compile":
        env["TRITON_INTERPRET"] = "1"  # read when triton is imported: must be set before
    else:
        env.pop("TRITON_INTERPRET", None)
    return env


def run_job(
    request: JobRequest,
    *,
    limits: Limits | None = None,
    python: str | None = None,
    workdir: str | os.PathLike[str] | None = None,
    triton_cache_dir: str | os.PathLike[str] | None = None,
) -> SandboxResponse:
    """Run `request` in a sandboxed child; never raises for anything the child does.

    workdir: the child's HOME/TMPDIR/cwd (kept); by default a fresh temporary directory that is
    removed afterwards. triton_cache_dir: share compiled kernels between the jobs of one run.
    """
    limits = limits or Limits.for_job(request.job, request.device)
    python = python or child_python(request.device)
    own_dir = workdir is None
    home = Path(tempfile.mkdtemp(prefix="kernelopt-job-")) if own_dir else Path(workdir)  # type: ignore[arg-type]
    home.mkdir(parents=True, exist_ok=True)
    cache = Path(triton_cache_dir) if triton_cache_dir else home / "triton-cache"
    cache.mkdir(parents=True, exist_ok=True)
    try:
        return _run(request, limits, python, home, cache)
    finally:
        if own_dir:
            shutil.rmtree(home, ignore_errors=True)


def _trampoline_config(request: JobRequest, limits: Limits) -> dict:
    rlimits = {
        "RLIMIT_CPU": limits.cpu_seconds,
        "RLIMIT_NOFILE": limits.nofile,
        "RLIMIT_FSIZE": limits.fsize_bytes,
        "RLIMIT_NPROC": limits.nproc,
        "RLIMIT_CORE": 0,  # no core files of user code in the job directory
    }
    if request.device == "cpu" and limits.address_space_bytes:
        rlimits["RLIMIT_AS"] = limits.address_space_bytes
    processes = limits.processes
    if processes == "auto":
        # Measured on the H200 machines: inside a PID namespace (with the worker's /proc still
        # mounted) cudaGetDeviceCount fails with error 304 "OS call failed", so CUDA, and by
        # caution the NPU, get the network namespace only.
        processes = "on" if request.device == "cpu" else "off"
    # the worker's pid: the trampoline ends itself if that process is already gone
    return {"rlimits": rlimits, "network": limits.network, "processes": processes, "parent": os.getpid()}


def _run(request: JobRequest, limits: Limits, python: str, home: Path, cache: Path) -> SandboxResponse:
    env = scrubbed_env(request.device, request.job, str(home), str(cache))
    config = json.dumps(_trampoline_config(request, limits))
    argv = [python, "-m", "runner.sandbox", "--trampoline", config, "--", python, "-m", "runner.child"]
    env_with_root = dict(env)
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=str(home),
            env=env_with_root,
            start_new_session=True,
            close_fds=True,
        )
    except OSError as exc:
        return _failure(request, "sandbox_error", f"cannot start the child ({python}): {exc}", "", None, 0.0)

    stdout, stderr, timed_out, overflow = _communicate(proc, request.dumps().encode(), limits)
    wall = time.monotonic() - started
    head, tail = stderr
    network, processes, marker_error = _isolation_status(head)
    stderr_tail = _strip_marker(tail)
    rc = proc.returncode
    if any(
        status.startswith("not isolated") and "(disabled)" not in status for status in (network, processes)
    ):
        _warn_once(f"sandbox: network {network}, processes {processes}")

    def failure(kind: str, message: str) -> SandboxResponse:
        return _failure(request, kind, message, stderr_tail, rc, wall, network, processes)

    if marker_error:
        return failure("sandbox_error", marker_error)
    if timed_out:
        return failure(
            "timeout",
            f"the job ran past its {limits.wall_s:.0f} s wall-clock limit and was killed with its process group",
        )
    if overflow:
        return failure("bad_output", f"the child wrote more than {limits.stdout_bytes} bytes to stdout")
    text = stdout.decode("utf-8", errors="replace").strip()
    if text:
        try:
            response = JobResponse.loads(text)
        except (ValueError, TypeError, KeyError) as exc:
            if rc is not None and rc < 0:
                return failure(*_signal_failure(-rc))
            return failure(
                "bad_output", f"the child's stdout is not one job response ({exc}): {text[:200]!r}"
            )
        if response.error is not None and not response.error.stderr_tail:
            response.error.stderr_tail = stderr_tail
        return SandboxResponse(
            **vars(response),
            network=network,
            processes=processes,
            returncode=rc,
            wall_s=round(wall, 3),
            stderr_tail=stderr_tail,
        )
    if rc is not None and rc < 0:
        return failure(*_signal_failure(-rc))
    return failure("crashed", f"the child exited with status {rc} without answering")


def _signal_failure(signum: int) -> tuple[str, str]:
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    if signum == signal.SIGXCPU:
        return "timeout", f"the child used up its CPU-time limit ({name})"
    if signum == signal.SIGKILL:
        return "oom", f"the child was killed by {name}, most likely by the kernel's out-of-memory killer"
    if signum == signal.SIGXFSZ:
        return "crashed", f"the child wrote a file over its size limit ({name})"
    return "crashed", f"the child was killed by {name}"


def _failure(
    request: JobRequest,
    kind: str,
    message: str,
    stderr_tail: str,
    rc: int | None,
    wall: float,
    network: str = "not isolated",
    processes: str = "not isolated",
) -> SandboxResponse:
    return SandboxResponse(
        ok=False,
        job=request.job,
        error=JobError(kind=kind, message=message, stderr_tail=stderr_tail),
        elapsed_s=round(wall, 3),
        network=network,
        processes=processes,
        returncode=rc,
        wall_s=round(wall, 3),
        stderr_tail=stderr_tail,
    )


_warned: set[str] = set()


def _warn_once(message: str) -> None:
    """Log a weaker sandbox once per process (every job of a worker would say the same)."""
    if message not in _warned:
        _warned.add(message)
        logger.warning("%s", message)


def _communicate(
    proc: subprocess.Popen, request: bytes, limits: Limits
) -> tuple[bytes, tuple[str, str], bool, bool]:
    """Feed stdin, read stdout (capped) and stderr (head + tail) until exit or the deadline.

    Returns (stdout, (stderr head, stderr tail), timed_out, stdout_overflow). On timeout or
    overflow the whole process group is killed.
    """
    assert proc.stdin and proc.stdout and proc.stderr
    deadline = time.monotonic() + limits.wall_s
    sel = selectors.DefaultSelector()
    os.set_blocking(proc.stdin.fileno(), False)
    sel.register(proc.stdin, selectors.EVENT_WRITE)
    sel.register(proc.stdout, selectors.EVENT_READ)
    sel.register(proc.stderr, selectors.EVENT_READ)
    pending = memoryview(request)
    out = bytearray()
    err_head = bytearray()
    err_tail = bytearray()
    timed_out = overflow = False
    exited_at: float | None = None
    while sel.get_map():
        now = time.monotonic()
        remaining = deadline - now
        if remaining <= 0:
            timed_out = True
            break
        if exited_at is None and proc.poll() is not None:
            exited_at = now
        if exited_at is not None and now - exited_at > 1.0:
            break  # the child is gone; a grandchild still holds the pipes open
        for key, _ in sel.select(timeout=min(remaining, 0.25)):
            if key.fileobj is proc.stdin:
                try:
                    n = os.write(key.fd, pending[:65536])
                    pending = pending[n:]
                except (BrokenPipeError, BlockingIOError, OSError):
                    pending = pending[:0]
                if not pending:
                    sel.unregister(proc.stdin)
                    proc.stdin.close()
                continue
            chunk = os.read(key.fd, 1 << 16)
            if not chunk:
                sel.unregister(key.fileobj)
                continue
            if key.fileobj is proc.stdout:
                out += chunk
                if len(out) > limits.stdout_bytes:
                    overflow = True
            else:
                if len(err_head) < 4096:
                    err_head += chunk[: 4096 - len(err_head)]
                err_tail += chunk
                if len(err_tail) > 2 * limits.stderr_bytes:
                    del err_tail[: len(err_tail) - limits.stderr_bytes]
        if overflow:
            break
    if timed_out or overflow:
        _kill_group(proc)
    else:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
    _kill_group(proc)  # grandchildren left behind in the group die with the job
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        try:
            stream.close()
        except (OSError, ValueError):
            pass
    sel.close()
    tail = bytes(err_tail[-limits.stderr_bytes :]).decode("utf-8", errors="replace")
    return bytes(out), (bytes(err_head).decode("utf-8", errors="replace"), tail), timed_out, overflow


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:  # pragma: no cover - an unkillable (D-state) child
        pass


def _isolation_status(head: str) -> tuple[str, str, str | None]:
    """(network status, processes status, error) from the trampoline's first stderr line."""
    unknown = "not isolated (no report from the trampoline)"
    for line in head.splitlines():
        if line.startswith(MARKER):
            value = line[len(MARKER) :].strip()
            if value.startswith("error "):
                return "not isolated", unknown, value[len("error ") :]
            fields = dict(part.strip().split("=", 1) for part in value.split(";") if "=" in part)
            return fields.get("network", unknown), fields.get("processes", unknown), None
    return unknown, unknown, None


def _strip_marker(text: str) -> str:
    return "".join(line for line in text.splitlines(keepends=True) if not line.startswith(MARKER))


# ---------------------------------------------------------------- trampoline (runs in the child)


def _unshare(network: bool, processes: bool) -> tuple[str, str]:
    """Enter new network and/or PID namespaces; returns (network status, processes status).

    As root (CAP_SYS_ADMIN) a plain unshare works; otherwise a user namespace that maps our own
    uid and gid (files keep their owners) grants it where the kernel allows unprivileged ones.
    """
    flags = (CLONE_NEWNET if network else 0) | (CLONE_NEWPID if processes else 0)
    off = "not isolated (disabled)"
    if not flags:
        return off, off
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(flags) == 0:
        return ("isolated" if network else off), ("isolated" if processes else off)
    first = os.strerror(ctypes.get_errno())
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(CLONE_NEWUSER | flags) == 0:
        try:
            Path("/proc/self/setgroups").write_text("deny")
            Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
            Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")
        except OSError:
            pass
        return ("isolated" if network else off), ("isolated" if processes else off)
    second = os.strerror(ctypes.get_errno())
    failed = f"not isolated (unshare: {first}; user namespace: {second})"
    return (failed if network else off), (failed if processes else off)


def _set_rlimits(rlimits: dict[str, int]) -> None:
    for name, value in rlimits.items():
        res = getattr(resource, name)
        _, hard = resource.getrlimit(res)
        soft = int(value)
        if hard != resource.RLIM_INFINITY:
            soft = min(soft, hard)
        # CPU: the soft limit sends SIGXCPU (reported as timeout), the hard one 5 s later SIGKILL.
        new_hard = soft + 5 if name == "RLIMIT_CPU" else soft
        if hard != resource.RLIM_INFINITY:
            new_hard = min(new_hard, hard)
        resource.setrlimit(res, (soft, new_hard))


def _detach_stdio() -> None:
    """A waiting process keeps no pipe ends of the child's stdin/stdout open."""
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)


def _status_code(status: int) -> int:
    """A wait status as a shell-style code: the exit code, or 128 + the signal that killed it."""
    return 128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


PR_SET_PDEATHSIG = 1


def _die_with_parent(expected_parent: int | None) -> None:
    """SIGKILL this process when the process that started it dies (prctl PR_SET_PDEATHSIG).

    Why: the job runs in its own session, so a worker killed mid-run (the stale-run sweep
    re-queues its run) would otherwise leave the child running, or sleeping, holding GPU memory
    until its wall clock fires, beside the run's next attempt. The setting survives execve, so
    PROGRAM inherits it where there is no PID namespace; with one, init's death ends everything
    in the namespace. Linux only; elsewhere a no-op.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        return
    if expected_parent is not None and os.getppid() != expected_parent:
        os._exit(1)  # the worker died before the prctl took effect


def _trampoline(config_text: str, argv: list[str]) -> None:
    """Runs as `python -m runner.sandbox --trampoline CONFIG -- PROGRAM...` inside the new session.

    Without a PID namespace it sets the limits and execs PROGRAM. With one, the process tree is
        trampoline (worker's namespace)  ->  init (pid 1 of the new one)  ->  PROGRAM (pid 2)
    because the first process of a PID namespace is `init`, which ignores signals it has no
    handler for (SIGXCPU among them) and takes every process of the namespace with it when it
    exits: so PROGRAM is not init, gets ordinary signal semantics, and whatever it leaves
    behind (setsid'd grandchildren included) dies when the job ends. PROGRAM cannot signal the
    worker: the worker's pid does not exist in its namespace. The trampoline passes PROGRAM's
    fate on: its exit code, or death by the same signal.
    """
    config = json.loads(config_text)
    _die_with_parent(config.get("parent"))
    want_net = config.get("network", "auto") != "off"
    want_pid = config.get("processes", "auto") != "off"
    net, pids = _unshare(want_net, want_pid)
    if config.get("network") == "required" and net != "isolated":
        print(f"{MARKER} error network isolation required but {net}", file=sys.stderr, flush=True)
        os._exit(3)
    print(f"{MARKER} network={net}; processes={pids}", file=sys.stderr, flush=True)
    _set_rlimits(config.get("rlimits", {}))
    if pids != "isolated":
        os.execv(argv[0], argv)
    init = os.fork()
    if init == 0:  # pid 1 of the new namespace
        _die_with_parent(None)  # not inherited across fork: init dies with the trampoline
        program = os.fork()
        if program == 0:
            os.execv(argv[0], argv)
        _detach_stdio()
        while True:
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:  # pragma: no cover - PROGRAM already reaped
                os._exit(1)
            if pid == program:
                os._exit(_status_code(status))
    _detach_stdio()
    _, status = os.waitpid(init, 0)
    code = _status_code(status)
    if code > 128:  # die the way PROGRAM died, so the sandbox sees the signal
        import faulthandler

        faulthandler.disable()
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        signal.signal(code - 128, signal.SIG_DFL)
        os.kill(os.getpid(), code - 128)
    os._exit(code)


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "--trampoline" and sys.argv[3] == "--":
        _trampoline(sys.argv[2], sys.argv[4:])
    else:
        sys.exit("usage: python -m runner.sandbox --trampoline CONFIG -- PROGRAM ARGS...")
