"""The two small steps around bubblewrap, run by path as `python -I -S exec.py STEP CONFIG -- ARGV`.

Standard library only, and run isolated (-I -S: no site, no environment, no script directory
on sys.path) so that nothing but this file runs before the exec.

* `launch` (on the host, as the worker's user, in the job's new session): ends itself with the
  worker (PR_SET_PDEATHSIG), joins the job's cgroups by writing its own pid into each
  `cgroup.procs` (so every process of the job is counted from the start), sets the job's
  rlimits, then execs ARGV (bubblewrap).
* `drop` (inside the sandbox, bubblewrap's command): as root with only CAP_SETUID,
  CAP_SETGID and CAP_SETPCAP left by bubblewrap, it empties the capability bounding set,
  switches to the job slot's uid and gid (no supplementary groups), clears the inheritable and
  ambient sets, sets no_new_privs and the parent-death signal again (a change of uid clears
  it), closes every descriptor but stdio and the ones it is told to keep, checks from
  /proc/self/status that no capability is left, and prints one line for the parent before it
  execs ARGV (the sandbox child). Without a uid (a worker that is not root runs bubblewrap in a
  user namespace of its own) it does the same minus the switch.

Each step reports failure as a `kernelopt-sandbox: error ...` line on stderr and exits with
status 125; `drop` reports success as `kernelopt-sandbox: ready key=value ...`.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import sys
from typing import Any, NoReturn

MARKER = "kernelopt-sandbox:"
PR_SET_PDEATHSIG = 1
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
MAX_FD = 1 << 20
STATUS_FIELDS = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp")


def fail(message: str) -> NoReturn:
    print(f"{MARKER} error {message}", file=sys.stderr, flush=True)
    os._exit(125)


def prctl(libc: ctypes.CDLL, *args: int) -> int:
    if libc.prctl(*[ctypes.c_ulong(a) for a in args] + [ctypes.c_ulong(0)] * (5 - len(args))) != 0:
        return ctypes.get_errno()
    return 0


def die_with_parent(libc: ctypes.CDLL, parent: int | None) -> None:
    prctl(libc, PR_SET_PDEATHSIG, signal.SIGKILL)
    if parent is not None and os.getppid() != parent:
        os._exit(1)  # the parent died before the prctl took effect


def launch(config: dict[str, Any], argv: list[str]) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    die_with_parent(libc, config.get("parent"))
    for procs in config.get("cgroup_procs", ()):
        try:
            with open(procs, "w") as fh:
                fh.write(str(os.getpid()))
        except OSError as exc:
            fail(f"cannot join the job's cgroup {procs}: {exc}")
    for name, value in config.get("rlimits", {}).items():
        res = getattr(resource, name)
        _, hard = resource.getrlimit(res)
        soft = int(value) if hard == resource.RLIM_INFINITY else min(int(value), hard)
        # CPU: the soft limit sends SIGXCPU (reported as timeout), the hard one 5 s later SIGKILL
        new_hard = soft + 5 if name == "RLIMIT_CPU" else soft
        if hard != resource.RLIM_INFINITY:
            new_hard = min(new_hard, hard)
        try:
            resource.setrlimit(res, (soft, new_hard))
        except (ValueError, OSError) as exc:
            fail(f"cannot set {name}: {exc}")
    try:
        os.execv(argv[0], argv)
    except OSError as exc:
        fail(f"cannot start {argv[0]}: {exc}")


class CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def status() -> dict[str, str]:
    seen: dict[str, str] = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key in STATUS_FIELDS:
                seen[key] = value.strip()
    return seen


def drop(config: dict[str, Any], argv: list[str]) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    parent = os.getppid()
    uid, gid = config.get("uid"), config.get("gid")
    if uid is not None:
        with open("/proc/sys/kernel/cap_last_cap") as fh:
            last = int(fh.read())
        for cap in range(last + 1):
            error = prctl(libc, PR_CAPBSET_DROP, cap)
            if error:
                fail(f"cannot drop capability {cap} from the bounding set: {os.strerror(error)}")
        try:
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
        except OSError as exc:
            fail(f"cannot switch to uid {uid} gid {gid}: {exc}")
    header, data = CapHeader(0x20080522, 0), (CapData * 2)()  # _LINUX_CAPABILITY_VERSION_3: all zero
    if libc.capset(ctypes.byref(header), data) != 0:
        fail(f"capset: {os.strerror(ctypes.get_errno())}")
    prctl(libc, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)  # EINVAL on kernels without ambient caps
    error = prctl(libc, PR_SET_NO_NEW_PRIVS, 1)
    if error:
        fail(f"no_new_privs: {os.strerror(error)}")
    die_with_parent(libc, parent)
    os.umask(0o077)
    if config.get("chdir"):
        try:
            os.chdir(config["chdir"])
        except OSError as exc:
            fail(f"cannot enter {config['chdir']}: {exc}")
    low = 3
    for fd in [*sorted(int(fd) for fd in config.get("keep_fds", ())), MAX_FD]:
        if fd >= low:
            os.closerange(low, fd)
            low = fd + 1
    seen = status()
    must_be_empty = ["CapInh", "CapPrm", "CapEff", "CapAmb"] + (["CapBnd"] if uid is not None else [])
    if any(int(seen.get(k, "0"), 16) for k in must_be_empty):
        fail(f"capabilities left after the drop: {seen}")
    if uid is not None and (os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid)):
        fail(f"the switch to uid {uid} did not hold: {os.getresuid()} {os.getresgid()}")
    if seen.get("NoNewPrivs") != "1":
        fail(f"no_new_privs is not set: {seen}")
    if config.get("seccomp") and seen.get("Seccomp") != "2":
        fail(f"the seccomp filter is not in place: {seen}")
    report = {
        "uid": os.getuid(),
        "gid": os.getgid(),
        "groups": ",".join(map(str, os.getgroups())) or "-",
        "pid": os.getpid(),
        **{k.lower(): v for k, v in seen.items()},
    }
    print(f"{MARKER} ready " + " ".join(f"{k}={v}" for k, v in report.items()), file=sys.stderr, flush=True)
    try:
        os.execv(argv[0], argv)
    except OSError as exc:
        fail(f"cannot start {argv[0]}: {exc}")


def main() -> None:
    if len(sys.argv) < 5 or sys.argv[1] not in ("launch", "drop") or sys.argv[3] != "--":
        fail("usage: exec.py launch|drop CONFIG -- PROGRAM ARGS...")
    config = json.loads(sys.argv[2])
    (launch if sys.argv[1] == "launch" else drop)(config, sys.argv[4:])


if __name__ == "__main__":
    main()
