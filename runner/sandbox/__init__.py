"""Run one job in a sandboxed child process and always come back with a `JobResponse`.

`run_job(request, limits=...)` starts `python -m runner.child` inside bubblewrap and feeds it
the request. What holds, in order of the process chain:

  worker -> `exec.py launch` (joins the job's cgroups, sets rlimits, dies with the worker)
         -> bwrap (root, no user namespace: makes the namespaces and the file system, installs
            the seccomp filter, keeps only CAP_SETUID/SETGID/SETPCAP)
         -> `exec.py drop` (pid 2 of the job: becomes the job slot's uid with no capability)
         -> `python -m runner.child` (the job)

* **An unprivileged child.** A root worker runs each job as a uid of its own (one per
  concurrent job slot, `KERNELOPT_SANDBOX_UID_BASE` + slot, see `workdirs`): a real,
  unprivileged uid in the host's sense, so a root-owned 0600 file is unreadable even where one
  is visible. Capabilities: none (effective, permitted, inheritable, ambient and bounding sets
  empty), no_new_privs set, a seccomp filter (`seccomp`: no ptrace, setns, unshare, mount,
  kernel modules, bpf, keyring, sockets other than AF_UNIX...; AF_UNIX reaches nothing: no
  host socket file is in the job's file system, and abstract sockets belong to its network
  namespace). The response's `user` and
  `seccomp` say what the child's own /proc/self/status showed before it ran anything.
  Why bubblewrap as root without a user namespace: started as root with `--unshare-user
  --uid N` it maps the job to the outer root (files of root stay readable); started as the
  unprivileged uid it cannot reach what must be bound in (pyenv's interpreter under /root,
  the per-run directories, mode 0700; bubblewrap 0.8's `--ro-bind-fd` resolves the path of
  the descriptor again and fails the same way) and would need unprivileged user namespaces
  on every node. So bubblewrap (a kept tool) does namespaces, mounts and the seccomp install as root,
  and a twenty-line step inside switches to the slot's uid before the child starts. A worker
  that is not root runs bubblewrap in a user namespace of its own instead; the child then has
  the worker's uid, no capability, and `user` says so.
* **Namespaces:** mount, PID, network, IPC, UTS and cgroup. The network namespace has only a
  loopback device: connect() to any address of the host fails. The PID namespace (with a
  fresh /proc) hides every process of the host: the worker has no pid the child can name,
  and everything the job starts dies with it. For cuda and npu jobs it is on too unless
  `KERNELOPT_SANDBOX_PID_NAMESPACE=cpu` (CUDA failed with error 304 inside a PID namespace on
  the H200 when the worker's /proc stayed mounted; tests/gpu/test_sandbox_gpu.py decides
  whether it starts with a fresh /proc). `Limits(processes="on"|"off")` overrides per job.
* **Its own file system** (`bwrap`): read-only /usr, interpreter prefixes and the project's
  `runner/` and `diagnosis/engine/`, a minimal /etc, a fresh /proc, tmpfs /tmp, the job's home
  and the run's Triton cache read-write, copies of the module files; no /run, /var, homes,
  database files, `var/`, or other runs' directories.
* **Caps per job** (`cgroups`): memory (`Limits.memory_bytes`) and tasks (`Limits.pids`,
  threads included) for the whole process tree, through a cgroup per job (v2 where it can be
  written, else v1 memory + pids); without one, RLIMIT_NPROC for the slot's uid and RLIMIT_AS
  per process (cpu). Also RLIMIT_CPU, RLIMIT_NOFILE, RLIMIT_FSIZE, RLIMIT_CORE=0, and RLIMIT_AS
  on cpu only (a CUDA or NPU context reserves tens to hundreds of GB of address space). The
  response's `memory` and `tasks` say which applied; an OOM kill in the job's cgroup is `oom`.
* **Time:** the wall clock kills the whole tree (bubblewrap's process group, then everything in
  the job's cgroup, then every process of the slot's uid). The user module's import and its
  get_inputs()-style calls are announced by the child on a pipe (`--phase-fd`), and the parent
  kills the job when one runs past `Limits.quick_s` (40 s), so a module that hangs there is
  answered in well under a minute while compile and timing keep the job's wall limit. The
  child could lie on that pipe; it would gain at most the wall limit it has anyway.
* **A scrubbed environment:** PATH, LANG/LC_*, TZ, the CUDA / ROCm / NVIDIA / Ascend variables a
  device stack needs, and nothing else: no DATABASE_URL, BROKER_URL, SECRET_KEY, *_API_KEY,
  OPENAI_*, AWS_*, and no variable whose name looks like a credential even if allowed.
* **A worker that keeps no secret within reach:** `make_non_dumpable()` (called at the first
  job and when the worker's actors load) sets PR_SET_DUMPABLE 0, so not even a process of the
  worker's own uid can read its /proc/<pid>/environ or mem or ptrace it.
* **Private per-run directories** (`workdirs`): the job's home is `/tmp/kernelopt-job-*/home`,
  removed afterwards; the run's directory (`/tmp/kernelopt-loop-*`) is made 0700 and claimed
  with a lock, and the stale-run sweep removes those no live worker holds.

`KERNELOPT_SANDBOX=none` runs the child without bubblewrap (development only: every field
then says `not isolated`); a missing bubblewrap is a `sandbox_error`, never a silent fallback.

What it does not isolate: the GPU itself (every /dev/nvidia* of the node is bound in, so a
job may open a GPU that CUDA_VISIBLE_DEVICES hides; another job's device memory on a shared
device; device memory is capped by the device, not by the cgroup), the run's Triton cache between the
jobs of that run (they share it read-write), CPU time shares beyond RLIMIT_CPU (no cpu
controller), and kernel bugs reachable through the syscalls the filter allows.

Outcomes: stdout must be exactly one JSON response; garbage or more than
`limits.stdout_bytes` is `bad_output`; a wall-clock or quick-phase kill is `timeout`; SIGXCPU
is `timeout`; SIGSEGV/SIGBUS/SIGILL/SIGABRT/SIGFPE or an exit without an answer is `crashed`;
an OOM kill in the job's cgroup, or a SIGKILL that was not ours, is `oom`; bubblewrap or a
sandbox step failing before the child started is `sandbox_error`. The tail of stderr rides
along in `JobError.stderr_tail`. Nothing here raises for anything the child does.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import json
import logging
import os
import re
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from runner.protocol import JobError, JobRequest, JobResponse
from runner.sandbox import bwrap, cgroups, seccomp, workdirs
from runner.sandbox.bwrap import ROOT, SandboxSetupError

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

# What a child announces on its phase pipe, and how a kill at that phase's deadline reads.
QUICK_PHASES = {
    "import": "importing the module",
    "inputs": "get_inputs() / get_input_cases() / get_verify_inputs()",
}


@dataclass(frozen=True)
class Limits:
    """Limits of one child. `for_job` gives the defaults per job and device."""

    wall_s: float = 300.0
    cpu_s: float | None = None  # None: 4 x wall + 10 (torch and the interpreter use several threads)
    address_space_bytes: int | None = 8 * GiB  # per process, applied on cpu only (module docstring)
    memory_bytes: int | None = 8 * GiB  # the whole job's memory (cgroup); None: no cap
    # the whole job's tasks, threads included (cgroup pids, else RLIMIT_NPROC of its uid); torch
    # starts a thread per core, so a 128-core node needs more than a laptop
    pids: int = max(1024, 8 * (os.cpu_count() or 1))
    nofile: int = 1024
    # one file: the gate's hand-off holds a case's inputs or outputs, which may be as large as
    # the tensors the job holds in memory (a 128k-token bf16 embedding table is 1.05 GB)
    fsize_bytes: int = 8 * GiB
    stdout_bytes: int = 64 * MiB
    stderr_bytes: int = 64 * 1024  # the tail kept
    quick_s: float = 40.0  # the module's import and each get_inputs()-style call (see the docstring)
    processes: str = "auto"  # PID namespace: auto (see the docstring), on, off

    # job -> (cpu wall seconds, device wall seconds)
    DEFAULT_WALL = {
        "validate": (60.0, 120.0),
        "capture": (120.0, 180.0),
        "verify": (300.0, 600.0),
        "time": (60.0, 600.0),
        "profile": (120.0, 600.0),
        "compile": (300.0, 300.0),
    }
    DEVICE_MEMORY_BYTES = 32 * GiB  # host memory of a cuda / npu job (pinned buffers, the runtime)

    @classmethod
    def for_job(cls, job: str, device: str, **overrides: object) -> Limits:
        cpu_wall, device_wall = cls.DEFAULT_WALL.get(job, (300.0, 600.0))
        if device == "cpu":
            base = cls(wall_s=cpu_wall)
        else:
            base = cls(
                wall_s=device_wall, memory_bytes=cls.DEVICE_MEMORY_BYTES, fsize_bytes=cls.DEVICE_MEMORY_BYTES
            )
        return replace(base, **overrides) if overrides else base  # type: ignore[arg-type]

    @property
    def cpu_seconds(self) -> int:
        return int(self.cpu_s if self.cpu_s is not None else 4 * self.wall_s + 10)


@dataclass
class SandboxResponse(JobResponse):
    """A JobResponse plus what the sandbox saw from outside the child (see the module docstring)."""

    network: str = "not isolated"  # 'isolated' or 'not isolated (<reason>)'
    processes: str = "not isolated"  # PID namespace: 'isolated' or 'not isolated (<reason>)'
    user: str = "not isolated"  # 'uid N (job slot K), no capabilities', ...
    filesystem: str = "not isolated"  # 'private (bubblewrap)' or 'not isolated (<reason>)'
    seccomp: str = "not applied"  # 'filter (N rules)' or 'not applied (<reason>)'
    memory: str = "not capped per job"  # 'cgroup v1 (8.0 GiB for the job)', 'RLIMIT_AS ...'
    tasks: str = "not capped per job"  # 'cgroup v1 pids (1024 tasks for the job)', 'RLIMIT_NPROC ...'
    peak_memory_bytes: int | None = None  # the job's peak (cgroup), when known
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
            "USER": "kernelopt-job",
            "LOGNAME": "kernelopt-job",
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


PR_SET_DUMPABLE = 4


def make_non_dumpable() -> bool:
    """PR_SET_DUMPABLE 0 for this process: its /proc/<pid>/environ, mem, fd and maps become
    root's, ptrace is refused, and no core file is written. True when it took effect."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        return False


def pid_namespace_for(request: JobRequest, limits: Limits) -> bool:
    if limits.processes in ("on", "off"):
        return limits.processes == "on"
    if request.device == "cpu":
        return True
    return os.environ.get("KERNELOPT_SANDBOX_PID_NAMESPACE", "on").strip().lower() != "cpu"


def sys_mode(device: str) -> str:
    mode = os.environ.get("KERNELOPT_SANDBOX_SYS", "auto").strip().lower() or "auto"
    if mode not in ("auto", "none", "devices", "all"):
        raise SandboxSetupError(f"KERNELOPT_SANDBOX_SYS must be auto, none, devices or all, not {mode!r}")
    return ("none" if device == "cpu" else "devices") if mode == "auto" else mode


def rlimits_for(request: JobRequest, limits: Limits, *, own_uid: bool) -> dict[str, int]:
    """The rlimits the launcher sets; `own_uid`: the job runs as a slot's uid of its own."""
    rlimits = {
        "RLIMIT_CPU": limits.cpu_seconds,
        "RLIMIT_NOFILE": limits.nofile,
        "RLIMIT_FSIZE": limits.fsize_bytes,
        "RLIMIT_CORE": 0,  # no core files of user code in the job directory
    }
    if request.device == "cpu" and limits.address_space_bytes:
        rlimits["RLIMIT_AS"] = limits.address_space_bytes
    if own_uid:
        # the slot's uid runs this job alone, so its task count is the job's (root ignores the
        # limit: it binds from the drop to the slot's uid on)
        rlimits["RLIMIT_NPROC"] = limits.pids
    return rlimits


_job_numbers = itertools.count()


def run_job(
    request: JobRequest,
    *,
    limits: Limits | None = None,
    python: str | None = None,
    workdir: str | os.PathLike[str] | None = None,
    triton_cache_dir: str | os.PathLike[str] | None = None,
) -> SandboxResponse:
    """Run `request` in a sandboxed child; never raises for anything the child does.

    workdir: the child's HOME/TMPDIR/cwd (kept); by default a fresh directory that is removed
    afterwards. triton_cache_dir: share compiled kernels between the jobs of one run.
    """
    limits = limits or Limits.for_job(request.job, request.device)
    python = python or child_python(request.device)
    make_non_dumpable()
    started = time.monotonic()
    try:
        with _Job(request, limits, python, workdir, triton_cache_dir) as job:
            return job.run()
    except (SandboxSetupError, OSError, ValueError) as exc:
        return _failure(request, "sandbox_error", f"the sandbox could not be set up: {exc}", "", None,
                        time.monotonic() - started)  # fmt: skip


class _Job:
    """One job's sandbox: its slot, directories, cgroup and command; cleaned up on exit."""

    def __init__(
        self,
        request: JobRequest,
        limits: Limits,
        python: str,
        workdir: str | os.PathLike[str] | None,
        cache_dir: str | os.PathLike[str] | None,
    ) -> None:
        self.request, self.limits, self.python = request, limits, python
        self.workdir, self.cache_dir = workdir, cache_dir
        self.stack = contextlib.ExitStack()
        self.mode = os.environ.get("KERNELOPT_SANDBOX", "bwrap").strip().lower() or "bwrap"
        if self.mode not in ("bwrap", "none"):
            raise SandboxSetupError(f"KERNELOPT_SANDBOX must be bwrap or none, not {self.mode!r}")
        self.root = os.geteuid() == 0
        self.slot: workdirs.Slot | None = None
        self.cgroup: cgroups.JobCgroup | None = None

    def __enter__(self) -> _Job:
        self.stack.__enter__()
        try:
            self._prepare()
        except BaseException:
            self.stack.__exit__(*sys.exc_info())
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stack.__exit__(*exc)  # type: ignore[arg-type]

    # -- set-up

    def _prepare(self) -> None:
        if self.mode == "bwrap" and self.root:
            self.slot = self.stack.enter_context(workdirs.job_slot())
            workdirs.kill_uid(self.slot.uid)  # nothing of an earlier job of this slot runs on
            self.stack.callback(workdirs.kill_uid, self.slot.uid)
        job_root = Path(tempfile.mkdtemp(prefix="kernelopt-job-"))
        self.stack.callback(workdirs.remove_tree, job_root)
        self.stack.callback(workdirs.release, job_root)
        workdirs.claim(job_root)
        self.home = Path(self.workdir) if self.workdir is not None else job_root / "home"
        self.home.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.cache = Path(self.cache_dir) if self.cache_dir else self.home / "triton-cache"
        self.cache.mkdir(parents=True, exist_ok=True, mode=0o700)
        for path in (self.cache, self.request.module, self.request.candidate):
            run_dir = workdirs.run_dir_of(path) if path else None
            if run_dir is not None and run_dir != job_root:
                workdirs.claim(run_dir)
        if self.slot is not None:
            for tree in (self.home, self.cache):
                _chown_tree(tree, self.slot.uid, self.slot.gid)
        name = f"{cgroups.PREFIX}{os.getpid()}-{next(_job_numbers)}"
        self.cgroup = cgroups.JobCgroup.create(
            name, memory_bytes=self.limits.memory_bytes, tasks=self.limits.pids
        )
        self.stack.callback(self.cgroup.remove)

    # -- the command

    def _isolation(self, seccomp_status: str, pid_ns: bool) -> dict[str, str]:
        assert self.cgroup is not None
        memory, tasks = self.cgroup.memory_status, self.cgroup.tasks_status
        if (
            self.cgroup.memory_dir is None
            and self.request.device == "cpu"
            and self.limits.address_space_bytes
        ):
            memory = f"RLIMIT_AS per process ({self.limits.address_space_bytes / GiB:.1f} GiB); {memory}"
        if self.cgroup.pids_dir is None and self.slot is not None:
            tasks = f"RLIMIT_NPROC of the slot's uid ({self.limits.pids}); {tasks}"
        if self.mode == "none":
            off = "not isolated (KERNELOPT_SANDBOX=none)"
            return {"network": off, "processes": off, "user": off, "filesystem": off,
                    "seccomp": "not applied (KERNELOPT_SANDBOX=none)", "memory": memory, "tasks": tasks}  # fmt: skip
        return {
            "network": "isolated",
            "processes": "isolated" if pid_ns else "not isolated (disabled)",
            "user": "",  # filled from the drop step's report
            "filesystem": "private (bubblewrap)",
            "seccomp": seccomp_status,
            "memory": memory,
            "tasks": tasks,
        }

    def run(self) -> SandboxResponse:
        request, limits = self.request, self.limits
        env = scrubbed_env(request.device, request.job, str(self.home), str(self.cache))
        phase_r, phase_w = os.pipe()
        self.stack.callback(_close, phase_r)
        pass_fds = [phase_w]
        child = [self.python, "-m", "runner.child", "--phase-fd", str(phase_w)]
        pid_ns = pid_namespace_for(request, limits)
        seccomp_status = ""
        command = None
        if self.mode == "bwrap":
            tool = bwrap.bwrap_path()
            if tool is None:
                raise SandboxSetupError(
                    "bubblewrap (bwrap) is not installed: apt-get install bubblewrap, or set KERNELOPT_BWRAP"
                    " (KERNELOPT_SANDBOX=none runs jobs without isolation, for development only)"
                )
            interp = bwrap.interpreter(self.python)
            allow_inet = request.job == "profile" and bool(request.options.get("ncu"))
            seccomp_fd = None
            try:
                program, rules = seccomp.program(allow_inet=allow_inet)
            except seccomp.SeccompUnavailable as exc:
                seccomp_status = f"not applied ({exc})"
                _warn_once(f"sandbox: seccomp {seccomp_status}")
            else:
                seccomp_fd = _memfd("kernelopt-seccomp", program)
                pass_fds.append(seccomp_fd)
                seccomp_status = f"filter ({rules} rules{', AF_INET for ncu' if allow_inet else ''})"
            source = (request.options.get("overrides") or {}).get("source")  # a compile job's other file
            files = [p for p in (request.module, request.candidate, source) if isinstance(p, str) and p]
            command = bwrap.build(
                bwrap=tool, device=request.device, interp=interp, home=str(self.home), cache=str(self.cache),
                files=files, uid=self.slot.uid if self.slot else None, gid=self.slot.gid if self.slot else None,
                pid_namespace=pid_ns, seccomp_fd=seccomp_fd, env=env, sys_mode=sys_mode(request.device),
                tools=bwrap.ncu_paths() if allow_inet else (),
            )  # fmt: skip
            self.stack.callback(command.close)
            pass_fds += command.fds
            drop = {
                "uid": self.slot.uid if self.slot else None,
                "gid": self.slot.gid if self.slot else None,
                "keep_fds": [phase_w],
                "chdir": str(self.home),
                "seccomp": seccomp_fd is not None,
            }
            inner = [self.python, "-I", "-S", str(bwrap.EXEC), "drop", json.dumps(drop), "--", *child]
            program_argv = [*command.args, "--", *inner]
        else:
            program_argv = child
        launch = {
            "parent": os.getpid(),
            "cgroup_procs": self.cgroup.procs_files() if self.cgroup else [],
            "rlimits": rlimits_for(request, limits, own_uid=self.slot is not None),
        }
        argv = [
            sys.executable,
            "-I",
            "-S",
            str(bwrap.EXEC),
            "launch",
            json.dumps(launch),
            "--",
            *program_argv,
        ]
        isolation = self._isolation(seccomp_status, pid_ns)
        started = time.monotonic()
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=str(self.home),
                env=env,
                start_new_session=True,
                close_fds=True,
                pass_fds=pass_fds,
            )
        except OSError as exc:
            _close(phase_w)
            return _failure(
                request, "sandbox_error", f"cannot start the sandbox: {exc}", "", None, 0.0, isolation
            )
        finally:
            for fd in pass_fds[1:]:
                _close(fd)
            if command is not None:
                command.fds.clear()
        _close(phase_w)
        try:
            got = _communicate(proc, request.dumps().encode(), limits, phase_r)
        finally:
            self._end_tree(proc)
        wall = time.monotonic() - started
        return self._outcome(proc, got, wall, isolation)

    def _end_tree(self, proc: subprocess.Popen) -> None:
        """Whatever is left of the job dies: the process group, the cgroup, the slot's uid."""
        _kill_group(proc)
        if self.cgroup is not None and not self.cgroup.kill():
            logger.warning("sandbox: processes of job cgroup %s survived SIGKILL", self.cgroup.created)
        if self.slot is not None:
            workdirs.kill_uid(self.slot.uid)

    # -- the answer

    def _outcome(self, proc: subprocess.Popen, got: _Communicated, wall: float, isolation: dict[str, str]) -> SandboxResponse:  # fmt: skip
        request, limits = self.request, self.limits
        ready, marker_error = _marker(got.stderr_head)
        if self.mode == "bwrap":
            isolation["user"] = self._user(ready)
        stderr_tail = _strip_marker(got.stderr_tail)
        rc = proc.returncode
        oom_kills = self.cgroup.oom_kills() if self.cgroup else 0
        peak = self.cgroup.peak_memory() if self.cgroup else None
        refused = self.cgroup.tasks_refused() if self.cgroup else 0
        if refused:
            stderr_tail += f"\n[sandbox] {refused} fork()/clone() calls were refused at the job's cap of {limits.pids} tasks\n"  # fmt: skip
        for key in ("processes", "seccomp", "filesystem"):
            status = isolation.get(key, "")
            if status.startswith("not ") and "(disabled)" not in status:
                _warn_once(f"sandbox: {key} {status}")

        def failure(kind: str, message: str) -> SandboxResponse:
            return _failure(request, kind, message, stderr_tail, rc, wall, isolation, peak)

        if marker_error:
            return failure("sandbox_error", marker_error)
        if self.mode == "bwrap" and not ready and not got.timed_out:
            detail = stderr_tail.strip().splitlines()[-1:] or [f"exit status {rc}"]
            return failure("sandbox_error", f"the sandbox did not start the child: {detail[0]}")
        if got.quick_phase is not None:
            return failure(
                "timeout",
                f"{QUICK_PHASES.get(got.quick_phase, got.quick_phase)} did not finish within "
                f"{limits.quick_s:.0f} s; the job was killed (a hang there is answered early)",
            )
        if got.timed_out:
            return failure(
                "timeout",
                f"the job ran past its {limits.wall_s:.0f} s wall-clock limit and was killed with all its processes",
            )
        if got.overflow:
            return failure("bad_output", f"the child wrote more than {limits.stdout_bytes} bytes to stdout")
        if oom_kills:
            cap = f"{limits.memory_bytes / GiB:.1f} GiB" if limits.memory_bytes else "its"
            return failure(
                "oom",
                f"the job's processes together went over its memory cap ({cap}); "
                f"the kernel killed {oom_kills} of them",
            )
        signum = (
            -rc if rc is not None and rc < 0 else (rc - 128 if rc is not None and 128 < rc < 160 else None)
        )
        text = got.stdout.decode("utf-8", errors="replace").strip()
        if text:
            try:
                response = JobResponse.loads(text)
            except (ValueError, TypeError, KeyError) as exc:
                if signum:
                    return failure(*_signal_failure(signum))
                return failure(
                    "bad_output", f"the child's stdout is not one job response ({exc}): {text[:200]!r}"
                )
            if response.error is not None and not response.error.stderr_tail:
                response.error.stderr_tail = stderr_tail
            return SandboxResponse(
                **vars(response), **isolation, peak_memory_bytes=peak, returncode=rc, wall_s=round(wall, 3),
                stderr_tail=stderr_tail,
            )  # fmt: skip
        if signum:
            return failure(*_signal_failure(signum))
        return failure("crashed", f"the child exited with status {rc} without answering")

    def _user(self, ready: dict[str, str] | None) -> str:
        if ready is None:
            return "not isolated (no report from the sandbox)"
        caps = all(int(ready.get(k, "1"), 16) == 0 for k in ("capeff", "capprm", "capinh", "capamb"))
        what = "no capabilities" if caps else "capabilities left"
        if self.slot is not None:
            return f"uid {ready.get('uid')} (job slot {self.slot.index}), {what}"
        return f"uid {ready.get('uid')} (the worker's own: it is not root), {what}"


def _chown_tree(path: Path, uid: int, gid: int) -> None:
    """The job's uid owns its home and the run's cache (another slot may have written it before)."""
    os.lchown(path, uid, gid)
    os.chmod(path, 0o700)
    for folder, dirs, names in os.walk(path):
        for name in dirs + names:
            os.lchown(os.path.join(folder, name), uid, gid)


def _memfd(name: str, content: bytes) -> int:
    fd = os.memfd_create(name)
    os.write(fd, content)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _close(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)


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
    if signum == signal.SIGSYS:
        return "crashed", f"the child was killed by {name}: a system call the sandbox forbids (a foreign ABI)"
    return "crashed", f"the child was killed by {name}"


def _failure(
    request: JobRequest,
    kind: str,
    message: str,
    stderr_tail: str,
    rc: int | None,
    wall: float,
    isolation: Mapping[str, str] | None = None,
    peak: int | None = None,
) -> SandboxResponse:
    return SandboxResponse(
        ok=False,
        job=request.job,
        error=JobError(kind=kind, message=message, stderr_tail=stderr_tail),
        elapsed_s=round(wall, 3),
        **dict(isolation or {}),
        peak_memory_bytes=peak,
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


@dataclass
class _Communicated:
    stdout: bytes
    stderr_head: str
    stderr_tail: str
    timed_out: bool
    overflow: bool
    quick_phase: str | None  # the quick phase whose deadline killed the job


def _communicate(proc: subprocess.Popen, request: bytes, limits: Limits, phase_fd: int) -> _Communicated:
    """Feed stdin, read stdout (capped), stderr (head + tail) and the phase pipe until exit or a
    deadline (the wall clock, or `quick_s` into a quick phase). On a deadline or overflow the
    process group is killed (the caller ends the rest of the tree)."""
    assert proc.stdin and proc.stdout and proc.stderr
    deadline = time.monotonic() + limits.wall_s
    sel = selectors.DefaultSelector()
    os.set_blocking(proc.stdin.fileno(), False)
    sel.register(proc.stdin, selectors.EVENT_WRITE)
    sel.register(proc.stdout, selectors.EVENT_READ)
    sel.register(proc.stderr, selectors.EVENT_READ)
    sel.register(phase_fd, selectors.EVENT_READ)
    pending = memoryview(request)
    out = bytearray()
    err_head = bytearray()
    err_tail = bytearray()
    phase_buffer = bytearray()
    phase_read = 0
    quick: tuple[str, float] | None = None  # (phase, its deadline)
    quick_killed: str | None = None
    timed_out = overflow = False
    exited_at: float | None = None
    while sel.get_map():
        now = time.monotonic()
        if quick is not None and now >= quick[1]:
            quick_killed = quick[0]
            break
        remaining = min(deadline, quick[1] if quick else deadline) - now
        if now >= deadline:
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
            if key.fileobj == phase_fd:
                phase_read += len(chunk)
                if phase_read > 1 << 20:
                    sel.unregister(phase_fd)  # a flood is no report: the current phase stands
                    continue
                phase_buffer += chunk
                *lines, rest = phase_buffer.split(b"\n")
                phase_buffer = bytearray(rest)
                for line in lines:
                    event, _, name = line.decode("ascii", errors="replace").partition(" ")
                    if event == "enter" and name in QUICK_PHASES:
                        quick = (name, time.monotonic() + limits.quick_s)
                    elif event == "leave" and quick is not None and name == quick[0]:
                        quick = None
            elif key.fileobj is proc.stdout:
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
    if timed_out or overflow or quick_killed:
        _kill_group(proc)
    else:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        try:
            stream.close()
        except (OSError, ValueError):
            pass
    sel.close()
    tail = bytes(err_tail[-limits.stderr_bytes :]).decode("utf-8", errors="replace")
    head = bytes(err_head).decode("utf-8", errors="replace")
    return _Communicated(bytes(out), head, tail, timed_out, overflow, quick_killed)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:  # pragma: no cover - an unkillable (D-state) child
        pass


def _marker(head: str) -> tuple[dict[str, str] | None, str | None]:
    """(the drop step's report, an error of a sandbox step) from the first marker line."""
    for line in head.splitlines():
        if line.startswith(MARKER):
            value = line[len(MARKER) :].strip()
            if value.startswith("error "):
                return None, value[len("error ") :]
            if value.startswith("ready"):
                return dict(part.split("=", 1) for part in value.split()[1:] if "=" in part), None
    return None, None


def _strip_marker(text: str) -> str:
    return "".join(line for line in text.splitlines(keepends=True) if not line.startswith(MARKER))
