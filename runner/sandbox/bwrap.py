"""The bubblewrap command line of one job: its namespaces and the file system it sees.

The child sees a root of its own (a tmpfs) holding only:
  /usr (read-only; /bin, /sbin, /lib* as the host has them: links into /usr or read-only binds),
  the interpreter's prefixes (sys.prefix, sys.base_prefix: the venv and the Python it was made
  from, read-only; found by asking that interpreter once), the project's `runner/` and
  `diagnosis/engine/` (read-only: all the child imports of the project),
  a minimal /etc (the loader's cache and config, alternatives, localtime, and a passwd, group,
  nsswitch.conf and hosts written for the job),
  the directories named by the device stack's variables (LD_LIBRARY_PATH, CUDA_HOME, ...),
  PATH entries outside home, state and runtime directories, KERNELOPT_SANDBOX_BIND and
  KERNELOPT_CHILD_PYTHONPATH (read-only),
  a fresh /proc, a minimal /dev (null, zero, random, ...), a tmpfs /tmp and /dev/shm,
  the device files of its device kind (cuda: /dev/nvidia*; npu: /dev/davinci* and the
  Ascend manager devices), /sys only on a device (KERNELOPT_SANDBOX_SYS),
  the job's home (read-write), the run's Triton cache (read-write), and copies of the job's
  module files at their own paths (read-only).
No /run or /var (so no database, broker or other service socket), no home directory, no
database file, no `var/`, no other run's directory.
"""

from __future__ import annotations

import functools
import glob
import json
import os
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
EXEC = Path(__file__).resolve().parent / "exec.py"
# What the child imports from the project (runner/child.py, runner/childlib, runner/backends,
# runner/protocol.py, runner/errors.py and diagnosis/engine/profile.py).
PROJECT_PATHS = ("runner", "diagnosis/__init__.py", "diagnosis/engine")
# Host directories never bound in because they were named by a variable or PATH entry:
# homes, state, runtime and service directories, and the project's root (its var/ holds the
# secret key and the SQLite database).
FORBIDDEN = ("/root", "/home", "/var", "/run", "/tmp", "/proc", "/sys", "/dev", "/etc", "/boot", "/srv", "/mnt", "/media")  # fmt: skip
# Files of /etc a job may see; the rest (shadow, keys, service configs) stays out.
ETC_FILES = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "alternatives",
    "localtime",
    "os-release",
    "gai.conf",
)
# Variables whose values are directories (or files) the device stack reads.
PATH_VARIABLES = ("LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "ROCM_PATH", "TOOLCHAIN_HOME",
                  "ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME", "ASCEND_OPP_PATH", "ASCEND_AICPU_PATH",
                  "TRITON_PTXAS_PATH", "TRITON_CUOBJDUMP_PATH", "TRITON_NVDISASM_PATH",
                  "TRITON_LIBCUDA_PATH", "PATH")  # fmt: skip
# What CUDA opens (the GPUs, the control and unified-memory devices, the MIG capability files)
# and Ascend's equivalents; no display (nvidia-modeset, dri) devices.
DEVICE_FILES = {
    "cuda": ("/dev/nvidia[0-9]*", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-caps"),
    "npu": ("/dev/davinci[0-9]*", "/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"),
}  # fmt: skip
# /sys for a device job (KERNELOPT_SANDBOX_SYS=devices, the default on cuda and npu): the
# device model the driver and NVML read (PCI topology, NUMA nodes, the driver module's
# parameters), not /sys/fs (cgroups), /sys/kernel or /sys/firmware.
SYS_DEVICES = ("/sys/devices", "/sys/bus", "/sys/class", "/sys/module", "/sys/dev")
TOP_LEVEL = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Where Nsight Compute lives besides the `ncu` launcher on PATH: on the H200 image `ncu` is
# /usr/local/cuda-13.0/bin/ncu, which looks for its nsight-compute directory under the toolkit
# or /opt/nvidia ("nsight-compute directory is not found under /usr/local/cuda-13.0/bin/../ or
# /opt/nvidia" inside a sandbox that bound /usr alone).
NCU_HOMES = ("/opt/nvidia",)


class SandboxSetupError(Exception):
    """The sandbox cannot be built for this job (no bubblewrap, a broken interpreter, ...)."""


def bwrap_path() -> str | None:
    return os.environ.get("KERNELOPT_BWRAP") or shutil.which("bwrap")


@dataclass(frozen=True)
class Interpreter:
    """What of the host the child's interpreter needs: its prefixes (venv and base)."""

    executable: str
    prefixes: tuple[str, ...]


PROBE = (
    "import json, sys, sysconfig\n"
    "p = sysconfig.get_paths()\n"
    "print(json.dumps({'prefixes': [sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix],"
    " 'include': [p.get('include'), p.get('platinclude')]}))\n"
)


@functools.lru_cache(maxsize=8)
def interpreter(python: str) -> Interpreter:
    """Ask `python` for its prefixes once per process (it may be another Python than ours)."""
    try:
        done = subprocess.run(
            [python, "-I", "-c", PROBE],
            capture_output=True,
            text=True,
            timeout=60,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxSetupError(f"cannot start the child's interpreter {python}: {exc}") from exc
    if done.returncode != 0:
        raise SandboxSetupError(f"the child's interpreter {python} failed: {done.stderr.strip()[-500:]}")
    data = json.loads(done.stdout)
    prefixes = [p for p in [*data["prefixes"], *data["include"]] if p]
    for prefix in prefixes:
        if os.path.realpath(prefix) in ("/", str(ROOT)):
            raise SandboxSetupError(f"the interpreter's prefix {prefix} would expose the whole tree")
    return Interpreter(python, tuple(dict.fromkeys(prefixes)))


def ncu_paths() -> list[str]:
    """What a profile job with hardware counters reads besides /usr: the install directory of the
    `ncu` on PATH (resolved through links) and Nsight Compute's own homes, where they exist."""
    found = []
    launcher = shutil.which("ncu")
    if launcher:
        real = os.path.realpath(launcher)
        found.append(os.path.dirname(os.path.dirname(real)))  # <install>/bin/ncu -> <install>
        toolkit = os.path.dirname(os.path.dirname(launcher))
        found += [os.path.realpath(p) for p in glob.glob(os.path.join(toolkit, "nsight-compute*"))]
    found += [p for p in NCU_HOMES if os.path.isdir(p)]
    return [p for p in dict.fromkeys(found) if os.path.isdir(p) and not _under(p, FORBIDDEN) and p != "/"]


def _under(path: str, parents: Iterable[str]) -> bool:
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in parents)


@dataclass
class Command:
    """A bubblewrap argument list being built; `fds` are the descriptors it reads (to pass on)."""

    args: list[str] = field(default_factory=list)
    fds: list[int] = field(default_factory=list)
    bound: list[str] = field(default_factory=list)
    made: set[str] = field(default_factory=lambda: {"/", "/tmp", "/dev", "/proc", "/etc"})

    def add(self, *args: str) -> None:
        self.args.extend(args)

    def covered(self, path: str) -> bool:
        return _under(path, self.bound)

    def _parents(self, dest: str) -> None:
        """Make dest's missing parents 0755: bubblewrap would copy the host's modes, and a 0700
        /root or /tmp/kernelopt-loop-* would keep the job's uid from reaching what is bound."""
        parts = Path(dest).parent.parts
        for i in range(2, len(parts) + 1):
            parent = str(Path(*parts[:i]))
            if parent in self.made or self.covered(parent):
                continue
            self.add("--perms", "0755", "--dir", parent)
            self.made.add(parent)

    def ro(self, path: str, dest: str | None = None) -> None:
        dest = dest or path
        if (
            not os.path.exists(path)
            or self.covered(dest)
            or (dest == path and self.covered(os.path.realpath(path)))
        ):
            return
        self._parents(dest)
        self.add("--ro-bind", path, dest)
        self.bound.append(dest)

    def rw(self, path: str) -> None:
        self._parents(path)
        self.add("--bind", path, path)
        self.bound.append(path)

    def dev(self, path: str) -> None:
        self._parents(path)
        self.add("--dev-bind", path, path)

    def symlink(self, target: str, dest: str) -> None:
        self.add("--symlink", target, dest)
        self.bound.append(dest)

    def data(self, dest: str, content: bytes, perms: str = "0444") -> None:
        """A read-only file with `content` at `dest`, copied in by bubblewrap from a memfd."""
        fd = os.memfd_create("kernelopt-sandbox-file")
        os.write(fd, content)
        os.lseek(fd, 0, os.SEEK_SET)
        self.fds.append(fd)
        self._parents(dest)
        self.add("--perms", perms, "--ro-bind-data", str(fd), dest)

    def close(self) -> None:
        for fd in self.fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds.clear()


def _passwd(uid: int, gid: int, home: str) -> tuple[bytes, bytes]:
    users = f"root:x:0:0:root:/nonexistent:/usr/sbin/nologin\nkernelopt-job:x:{uid}:{gid}:kernelopt job:{home}:/usr/sbin/nologin\n"  # fmt: skip
    groups = f"root:x:0:\nkernelopt-job:x:{gid}:\n"
    return users.encode(), groups.encode()


def _variable_paths(env: Mapping[str, str]) -> list[str]:
    """Existing directories (or files) named by the device stack's variables, less FORBIDDEN."""
    found: list[str] = []
    for name in PATH_VARIABLES:
        for item in env.get(name, "").split(os.pathsep):
            if item and os.path.isabs(item):
                found.append(item)
    out = []
    for path in found:
        real = os.path.normpath(path)
        if not os.path.exists(real) or _under(real, FORBIDDEN) or _under(real, [str(ROOT)]) or real == "/":
            continue
        out.append(real)
    return list(dict.fromkeys(out))


def build(
    *,
    bwrap: str,
    device: str,
    interp: Interpreter,
    home: str,
    cache: str,
    files: Iterable[str],
    uid: int | None,
    gid: int | None,
    pid_namespace: bool,
    seccomp_fd: int | None,
    env: Mapping[str, str],
    sys_mode: str,
    tools: Iterable[str] = (),
) -> Command:
    """The bubblewrap arguments (up to, not including, `--` and the command)."""
    cmd = Command([bwrap])
    cmd.add("--unshare-ipc", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try", "--die-with-parent")
    cmd.add("--hostname", "kernelopt-job")
    if pid_namespace:
        cmd.add("--unshare-pid")
    if uid is not None:
        # bubblewrap runs as root without a user namespace (a root-made one would map the job
        # to the outer root); the drop step needs these three to become `uid` with nothing left
        cmd.add("--cap-drop", "ALL")
        for cap in ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP"):
            cmd.add("--cap-add", cap)
    else:
        cmd.add("--unshare-user", "--disable-userns")
    # first the tmpfs: paths below /tmp (the job's home, a run's files) are bound after it
    cmd.add("--perms", "1777", "--tmpfs", "/tmp")
    cmd.add("--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", "/dev/shm")
    cmd.ro("/usr")
    for top in TOP_LEVEL:
        if os.path.islink(top):
            cmd.symlink(os.readlink(top), top)
        elif os.path.isdir(top):
            cmd.ro(top)
    passwd, group = _passwd(
        uid if uid is not None else os.getuid(), gid if gid is not None else os.getgid(), home
    )
    cmd.data("/etc/passwd", passwd)
    cmd.data("/etc/group", group)
    cmd.data("/etc/nsswitch.conf", b"passwd: files\ngroup: files\nhosts: files\n")
    cmd.data("/etc/hosts", b"127.0.0.1 localhost\n::1 localhost\n")
    for name in ETC_FILES:
        cmd.ro(f"/etc/{name}")
    for prefix in interp.prefixes:
        cmd.ro(prefix)
    for path in _variable_paths(env):
        cmd.ro(path)
    # named by the operator: bound as given (CANN's Python packages, a toolkit under /opt)
    for name in ("KERNELOPT_CHILD_PYTHONPATH", "KERNELOPT_SANDBOX_BIND"):
        for path in os.environ.get(name, "").split(os.pathsep):
            if path:
                cmd.ro(os.path.abspath(path))
    for path in tools:
        cmd.ro(path)
    for rel in PROJECT_PATHS:
        cmd.ro(str(ROOT / rel))
    for pattern in DEVICE_FILES.get(device, ()):
        for path in sorted(glob.glob(pattern)):
            cmd.dev(path)
    if device != "cpu" and sys_mode == "all":
        cmd.ro("/sys")
    elif device != "cpu" and sys_mode == "devices":
        for path in SYS_DEVICES:
            cmd.ro(path)
    cmd.rw(home)
    if not _under(cache, [home]):
        cmd.rw(cache)
    for path in dict.fromkeys(os.path.abspath(f) for f in files):
        try:
            content = Path(path).read_bytes()
        except OSError:
            continue  # the child reports the missing file as it always has
        cmd.data(path, content)
    if seccomp_fd is not None:
        cmd.add("--seccomp", str(seccomp_fd))
    cmd.add("--chdir", "/")  # the drop step enters the home: it is the job uid's, mode 0700
    return cmd
