"""Per-job caps on memory and tasks for the whole process tree of a job, through cgroups.

`JobCgroup.create(name, memory_bytes=..., tasks=...)` makes one cgroup per job under the
worker's own cgroup (or under KERNELOPT_SANDBOX_CGROUP, a delegated cgroup v2 directory or a
v1 path relative to each controller's mount): cgroup v2 where the memory and pids controllers
can be enabled there, else the v1 `memory` and `pids` hierarchies. The sandbox's launcher
writes its own pid into `procs_files()` before it starts bubblewrap, so everything of the job,
forked or setsid'd, is inside from its first instruction and counted together. Each cap that
no cgroup can carry is reported as missing (`memory_status`, `tasks_status`), and the sandbox
falls back to per-process RLIMIT_AS and per-uid RLIMIT_NPROC (one uid per job slot).

After the job: `oom_kills()` says whether the kernel killed a process of the job for the
memory cap, `kill()` ends whatever is left (v2: cgroup.kill; v1: SIGKILL to each member until
none is left) and `remove()` deletes the directories. `sweep()` removes the empty job cgroups
that a killed worker left behind.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

PREFIX = "kernelopt-job-"
# the jobs' parent under a cgroup v2 root when the worker's own cgroup cannot delegate
FALLBACK = "/kernelopt-jobs"
GiB = 1 << 30


def _gib(n: int) -> str:
    return f"{n / GiB:.1f} GiB"


@dataclass(frozen=True)
class _Hierarchy:
    version: int  # 1 or 2
    mount: Path
    own: str  # this process's cgroup in it, "/..."
    controllers: frozenset[str]


def _hierarchies() -> list[_Hierarchy]:
    """The cgroup hierarchies this process is in, with their mount points (v2 first)."""
    try:
        own_lines = Path("/proc/self/cgroup").read_text().splitlines()
        mountinfo = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    own: dict[str, str] = {}  # "0" for v2, else the controller list of a v1 hierarchy
    for line in own_lines:
        hid, controllers, path = line.split(":", 2)
        own["" if hid == "0" else controllers] = path
    found: list[_Hierarchy] = []
    for line in mountinfo:
        # 36 25 0:31 / /sys/fs/cgroup/memory rw,nosuid,... shared:14 - cgroup cgroup rw,memory
        left, _, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if len(fields) < 5 or len(rest) < 3 or fields[3] != "/":
            continue  # a bind of a sub-tree: not a place to resolve our own path from
        mount, fstype, options = Path(fields[4]), rest[0], set(rest[2].split(","))
        if fstype == "cgroup2" and "" in own:
            try:
                controllers = frozenset(
                    (mount / own[""].lstrip("/") / "cgroup.controllers").read_text().split()
                )
            except OSError:
                controllers = frozenset()
            found.append(_Hierarchy(2, mount, own[""], controllers))
        elif fstype == "cgroup":
            for key, path in own.items():
                if key and set(key.split(",")) <= options:
                    found.append(_Hierarchy(1, mount, path, frozenset(key.split(","))))
    found.sort(key=lambda h: h.version != 2)
    return found


def _write(path: Path, value: str) -> None:
    with open(path, "w") as fh:
        fh.write(value)


def _read_keyed(path: Path) -> dict[str, int]:
    """`key value` lines (memory.events, pids.events, memory.oom_control) as a dict."""
    try:
        text = path.read_text()
    except OSError:
        return {}
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if value.strip().lstrip("-").isdigit():
            out[key] = int(value)
    return out


@dataclass
class JobCgroup:
    """The cgroup directories of one job; see the module docstring."""

    memory_dir: Path | None = None
    pids_dir: Path | None = None
    memory_version: int = 0
    pids_version: int = 0
    memory_status: str = "not capped per job (no cgroup)"
    tasks_status: str = "not capped per job (no cgroup)"
    created: list[Path] = field(default_factory=list)

    @classmethod
    def create(cls, name: str, *, memory_bytes: int | None, tasks: int | None) -> JobCgroup:
        """Make the job's cgroups; never raises (a cap that cannot be set is reported missing)."""
        group = cls()
        reasons: dict[str, str] = {}
        base = os.environ.get("KERNELOPT_SANDBOX_CGROUP", "").strip()
        for hierarchy in _hierarchies():
            wanted = {c for c in ("memory", "pids") if c in hierarchy.controllers}
            wanted -= {c for c in ("memory", "pids") if getattr(group, f"{c}_dir") is not None}
            if not wanted:
                continue
            parent = hierarchy.mount / (base or hierarchy.own).lstrip("/")
            if hierarchy.version == 2:
                enabled = group._enable_v2(parent, wanted, reasons)
                if enabled != wanted and not base:
                    # The worker's own cgroup holds processes, so it cannot have controlled
                    # children (EBUSY). A cgroup of our own under the hierarchy's root is empty
                    # and can: the root is exempt from the "no internal processes" rule.
                    fallback = hierarchy.mount / FALLBACK.lstrip("/")
                    try:
                        fallback.mkdir(mode=0o755, exist_ok=True)
                    except OSError as exc:
                        for c in wanted - enabled:
                            reasons[c] += f"; cannot create {fallback} ({exc.strerror})"
                    else:
                        retry = group._enable_v2(fallback, wanted, reasons, root=hierarchy.mount)
                        if retry == wanted:
                            parent, enabled = fallback, retry
                wanted = enabled
                if not wanted:
                    continue
            path = parent / name
            try:
                path.mkdir(mode=0o755)
            except OSError as exc:
                for c in wanted:
                    reasons[c] = f"cgroup v{hierarchy.version}: cannot create {path} ({exc.strerror})"
                continue
            group.created.append(path)
            for controller in sorted(wanted):
                error = _limit(hierarchy.version, controller, path, memory_bytes, tasks)
                if error:
                    reasons[controller] = f"cgroup v{hierarchy.version}: {error}"
                    continue
                setattr(group, f"{controller}_dir", path)
                setattr(group, f"{controller}_version", hierarchy.version)
        if group.memory_dir is not None:
            cap = f"{_gib(memory_bytes)} for the job" if memory_bytes else "no cap"
            group.memory_status = f"cgroup v{group.memory_version} ({cap})"
        elif "memory" in reasons:
            group.memory_status = f"not capped per job ({reasons['memory']})"
        if group.pids_dir is not None:
            cap = f"{tasks} tasks for the job" if tasks else "no cap"
            group.tasks_status = f"cgroup v{group.pids_version} pids ({cap})"
        elif "pids" in reasons:
            group.tasks_status = f"not capped per job ({reasons['pids']})"
        for path in list(group.created):  # a directory that carries no cap is not kept
            if path not in (group.memory_dir, group.pids_dir):
                _rmdir(path)
                group.created.remove(path)
        return group

    @staticmethod
    def _enable_v2(
        parent: Path, wanted: set[str], reasons: dict[str, str], root: Path | None = None
    ) -> set[str]:
        """The controllers of `wanted` that children of `parent` can have (enabling them if need be;
        with `root`, first in the root's subtree_control, so that `parent` has them at all)."""
        if root is not None:
            try:
                _write(root / "cgroup.subtree_control", " ".join(f"+{c}" for c in sorted(wanted)))
            except OSError as exc:
                for c in wanted:
                    reasons[c] = f"cgroup v2: cannot enable {c} under {root} ({exc.strerror})"
                return set()
        try:
            enabled = set((parent / "cgroup.subtree_control").read_text().split())
        except OSError as exc:
            for c in wanted:
                reasons[c] = f"cgroup v2: cannot read {parent}/cgroup.subtree_control ({exc.strerror})"
            return set()
        missing = wanted - enabled
        if missing:
            try:
                _write(parent / "cgroup.subtree_control", " ".join(f"+{c}" for c in sorted(missing)))
            except OSError as exc:
                # EBUSY: the worker's own cgroup has processes, so it cannot have controlled
                # children (cgroup v2's "no internal processes" rule). KERNELOPT_SANDBOX_CGROUP
                # names a delegated, empty cgroup to use instead.
                for c in missing:
                    reasons[c] = f"cgroup v2: cannot enable {c} under {parent} ({exc.strerror})"
                return wanted - missing
        return wanted

    # -- what the launcher joins

    def procs_files(self) -> list[str]:
        dirs = {d for d in (self.memory_dir, self.pids_dir) if d is not None}
        return sorted(str(d / "cgroup.procs") for d in dirs)

    @property
    def isolated(self) -> bool:
        return bool(self.created)

    # -- after the job

    def oom_kills(self) -> int:
        """Processes of the job the kernel killed for the memory cap."""
        if self.memory_dir is None:
            return 0
        if self.memory_version == 2:
            return _read_keyed(self.memory_dir / "memory.events").get("oom_kill", 0)
        return _read_keyed(self.memory_dir / "memory.oom_control").get("oom_kill", 0)

    def tasks_refused(self) -> int:
        """fork()/clone() calls refused at the task cap."""
        if self.pids_dir is None:
            return 0
        return _read_keyed(self.pids_dir / "pids.events").get("max", 0)

    def peak_memory(self) -> int | None:
        if self.memory_dir is None:
            return None
        name = "memory.peak" if self.memory_version == 2 else "memory.max_usage_in_bytes"
        try:
            return int((self.memory_dir / name).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def members(self) -> set[int]:
        pids: set[int] = set()
        for procs in self.procs_files():
            try:
                pids.update(int(p) for p in Path(procs).read_text().split())
            except (OSError, ValueError):
                pass
        return pids

    def kill(self, timeout: float = 5.0) -> bool:
        """SIGKILL every process of the job; True when none is left."""
        for path in self.created:
            if (path / "cgroup.kill").exists():
                try:
                    _write(path / "cgroup.kill", "1")
                except OSError:
                    pass
        deadline = time.monotonic() + timeout
        while True:
            left = self.members()
            if not left:
                return True
            if time.monotonic() > deadline:
                return False
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.02)

    def remove(self) -> None:
        for path in self.created:
            _rmdir(path)
        self.created.clear()


def _limit(version: int, controller: str, path: Path, memory_bytes: int | None, tasks: int | None) -> str:
    """Write one cap; '' when done, else why not."""
    try:
        if controller == "memory" and memory_bytes:
            if version == 2:
                _write(path / "memory.max", str(memory_bytes))
                for name, value in (("memory.swap.max", "0"), ("memory.oom.group", "1")):
                    if (path / name).exists():
                        _write(path / name, value)  # no swapping past the cap; an OOM ends the job
            else:
                _write(path / "memory.limit_in_bytes", str(memory_bytes))
                memsw = path / "memory.memsw.limit_in_bytes"
                if memsw.exists():
                    try:
                        _write(memsw, str(memory_bytes))  # RAM + swap: no swapping past the cap
                    except OSError:
                        pass  # swap accounting off: the RAM cap alone holds
        elif controller == "pids" and tasks:
            _write(path / "pids.max", str(tasks))
    except OSError as exc:
        return f"cannot set the {controller} cap in {path} ({exc.strerror})"
    return ""


def _rmdir(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:
        pass


def sweep() -> list[str]:
    """End and remove the job cgroups of dead workers (killed mid-job); returns their paths.

    A job cgroup's name carries its worker's pid. What is left in one whose worker is gone
    (a grandchild of a job without a PID namespace) is killed, then the directory removed;
    one that is not empty yet stays for the next sweep.
    """
    base = os.environ.get("KERNELOPT_SANDBOX_CGROUP", "").strip()
    removed: list[str] = []
    for hierarchy in _hierarchies():
        parents = [hierarchy.mount / (base or hierarchy.own).lstrip("/")]
        if hierarchy.version == 2 and not base:
            parents.append(hierarchy.mount / FALLBACK.lstrip("/"))
        entries: list[Path] = []
        for parent in parents:
            try:
                entries += list(parent.iterdir())
            except OSError:
                continue
        for path in entries:
            if not path.name.startswith(PREFIX) or not path.is_dir():
                continue
            pid_text = path.name[len(PREFIX) :].split("-", 1)[0]
            if not pid_text.isdigit() or _alive(int(pid_text)):
                continue
            JobCgroup(created=[path], memory_dir=path).kill(timeout=1.0)
            try:
                path.rmdir()
                removed.append(str(path))
            except OSError:
                pass
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
