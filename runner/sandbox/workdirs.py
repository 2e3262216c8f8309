"""Job slots (one unprivileged uid per concurrent job) and the per-run directories of a host.

Slots: a root worker runs each job as uid `KERNELOPT_SANDBOX_UID_BASE + slot` (default base
2000000000, `KERNELOPT_SANDBOX_SLOTS` = 64 slots), a uid no account uses, so per-uid limits
(RLIMIT_NPROC) count that job alone, and no job can signal or read another's files. A slot is
held by an exclusive flock on `<tmp>/kernelopt-slots-<euid>/slot-N.lock`, so the workers and
threads of one host never share one; the lock goes with the process that held it.

Run directories: `/tmp/kernelopt-loop-*` (made by the round loop for one run: its modules and
Triton cache) and `/tmp/kernelopt-job-*` (one job's home, made here). The process that uses
one holds a shared flock on `<dir>/.kernelopt-owner.lock` (`claim`), from its first job until
the directory is gone, and makes it private (0700, owned by the worker). `sweep_run_dirs`,
called by the stale-run sweep, removes those that no live process holds: what a worker
killed with SIGKILL left behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import signal
import stat
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

RUN_DIR_PREFIXES = ("kernelopt-loop-", "kernelopt-job-", "kernelopt-ref-")  # loop, job, gate store
LOCK_NAME = ".kernelopt-owner.lock"
DEFAULT_UID_BASE = 2_000_000_000
DEFAULT_SLOTS = 64


def _env_int(name: str, default: int) -> int:
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{name} must be an integer, not {text!r}") from None
    if value <= 0:
        raise ValueError(f"{name} must be positive, not {value}")
    return value


def _private_dir(path: Path) -> Path:
    """`path` as a directory of ours, mode 0700, not a symlink; created if missing."""
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        raise PermissionError(f"{path} is not a directory owned by uid {os.geteuid()}")
    if stat.S_IMODE(info.st_mode) != 0o700:
        os.chmod(path, 0o700)
    return path


# ---------------------------------------------------------------- slots


@dataclass(frozen=True)
class Slot:
    index: int
    uid: int
    gid: int


@contextlib.contextmanager
def job_slot() -> Iterator[Slot]:
    """Hold a free job slot for the duration of the block (blocks only when all are taken)."""
    base = _env_int("KERNELOPT_SANDBOX_UID_BASE", DEFAULT_UID_BASE)
    count = _env_int("KERNELOPT_SANDBOX_SLOTS", DEFAULT_SLOTS)
    folder = _private_dir(Path(tempfile.gettempdir()) / f"kernelopt-slots-{os.geteuid()}")
    fd, index = -1, -1
    for attempt in range(count + 1):
        # every slot once without waiting; then wait for one (the pid spreads the waiters)
        index = attempt if attempt < count else os.getpid() % count
        fd = os.open(
            folder / f"slot-{index}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600
        )
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (fcntl.LOCK_NB if attempt < count else 0))
            break
        except BlockingIOError:
            os.close(fd)
            fd = -1
    try:
        yield Slot(index, base + index, base + index)
    finally:
        os.close(fd)


def kill_uid(uid: int) -> int:
    """SIGKILL every process whose real uid is `uid` (what an earlier job of the slot left
    where neither a PID namespace nor a cgroup ended it); returns how many were signalled."""
    if uid == 0 or uid == os.geteuid():
        return 0
    killed = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status", "rb") as fh:
                real = next((line for line in fh if line.startswith(b"Uid:")), b"").split()
        except OSError:
            continue
        if len(real) > 1 and real[1] == str(uid).encode():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry.name), signal.SIGKILL)
                killed += 1
    return killed


# ---------------------------------------------------------------- run directories

_claims: dict[str, int] = {}
_claims_lock = threading.Lock()


def run_dir_of(path: str | os.PathLike[str]) -> Path | None:
    """The per-run directory (`<tmp>/kernelopt-loop-*` or `-job-*`) that holds `path`, if any."""
    tmp = Path(tempfile.gettempdir()).resolve()
    current = Path(os.path.abspath(path))
    for candidate in (current, *current.parents):
        if candidate.parent == tmp and candidate.name.startswith(RUN_DIR_PREFIXES):
            return candidate
    return None


def claim(directory: Path) -> None:
    """Mark `directory` as in use by this process (see the module docstring) and make it private."""
    key = str(directory)
    with _claims_lock:
        for held in [d for d in _claims if not os.path.isdir(d)]:  # runs that have ended
            os.close(_claims.pop(held))
        if key in _claims:
            return
        _private_dir(directory)
        fd = os.open(directory / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        fcntl.flock(fd, fcntl.LOCK_SH)
        _claims[key] = fd


def release(directory: Path) -> None:
    with _claims_lock:
        fd = _claims.pop(str(directory), None)
    if fd is not None:
        os.close(fd)


def remove_tree(path: Path) -> None:
    """rmtree that also gets through directories a job made unreadable (mode 000)."""

    def unlock(func, name, _exc):  # type: ignore[no-untyped-def]
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(name), 0o700)
            os.chmod(name, 0o700)
            func(name)

    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=unlock)
    else:
        shutil.rmtree(path, onerror=unlock)


def sweep_run_dirs(*, tmp: str | os.PathLike[str] | None = None, grace_s: float = 600.0) -> list[str]:
    """Remove the run directories of this host that no live process holds; returns their paths.

    Only directories owned by this process's uid and untouched for `grace_s` seconds are
    considered (a loop makes its directory a moment before its first job claims it).
    """
    folder = Path(tmp or tempfile.gettempdir())
    removed: list[str] = []
    now = time.time()
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        if not entry.name.startswith(RUN_DIR_PREFIXES):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or now - info.st_mtime < grace_s:
            continue
        path = Path(entry.path)
        if str(path) in _claims:
            continue
        try:
            fd = os.open(path / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue  # a live process holds it
        try:
            remove_tree(path)
            removed.append(str(path))
        finally:
            os.close(fd)
    if removed:
        logger.warning("removed %d run directories of dead workers: %s", len(removed), removed)
    return removed
