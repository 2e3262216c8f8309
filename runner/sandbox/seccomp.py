"""The seccomp filter of a sandbox child: what a kernel job never needs is refused with EPERM.

The program is compiled by libseccomp (`libseccomp.so.2`, through ctypes: libseccomp's own
Python bindings are packaged for the system interpreter only, and this needs four functions),
then handed to bubblewrap (`--seccomp FD`), which installs it right before it starts the
child's first process; every process of the job inherits it. libseccomp knows the syscall
numbers of each architecture and makes the filter refuse calls through a foreign ABI (i386,
x32), which a hand-written BPF table would have to get right by itself.

Refused (EPERM unless said): tracing and reading other processes (ptrace,
process_vm_readv/writev, process_madvise, pidfd_getfd, kcmp); namespaces (setns, unshare, clone
with a CLONE_NEW* flag; clone3 answers ENOSYS, so the C library falls back to clone, whose
flags the filter can read); mounts (mount, umount2, pivot_root, chroot, the new mount API);
kernel modules, kexec, bpf, perf_event_open, userfaultfd, io_uring, the kernel keyring
(keyctl, add_key, request_key), clock and host settings, swap, reboot, raw port I/O, file
handles (open_by_handle_at); and socket() for every family but AF_UNIX (AF_INET and AF_INET6
too where the job asks for them: ncu talks to its target over loopback, inside the job's own
network namespace).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import os
import socket

SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_ACT_KILL_PROCESS = 0x80000000
SCMP_FLTATR_ACT_BADARCH = 2


def _errno_action(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)  # SCMP_ACT_ERRNO(code)


SCMP_CMP_NE, SCMP_CMP_EQ, SCMP_CMP_GE, SCMP_CMP_MASKED_EQ = 1, 4, 5, 7

DENIED_SYSCALLS = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "process_madvise",
    "pidfd_getfd",
    "kcmp",
    "setns",
    "unshare",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "move_mount",
    "open_tree",
    "mount_setattr",
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "keyctl",
    "add_key",
    "request_key",
    "name_to_handle_at",
    "open_by_handle_at",
    "reboot",
    "swapon",
    "swapoff",
    "syslog",
    "acct",
    "quotactl",
    "quotactl_fd",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "sethostname",
    "setdomainname",
    "iopl",
    "ioperm",
    "vhangup",
    "uselib",
    "_sysctl",
    "lookup_dcookie",
    "nfsservctl",
)
# clone(2)'s first argument carries these; any one of them means a new namespace.
CLONE_NAMESPACE_FLAGS = (
    0x00020000,  # CLONE_NEWNS
    0x02000000,  # CLONE_NEWCGROUP
    0x04000000,  # CLONE_NEWUTS
    0x08000000,  # CLONE_NEWIPC
    0x10000000,  # CLONE_NEWUSER
    0x20000000,  # CLONE_NEWPID
    0x40000000,  # CLONE_NEWNET
)
# Linux's address families run from 0 to AF_MAX - 1 (46 on 6.x); anything above is refused too.
AF_LIMIT = 64


class SeccompUnavailable(Exception):
    """libseccomp cannot be loaded or refused to build the program; the reason is the message."""


class _ArgCmp(ctypes.Structure):
    _fields_ = [
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    ]


@functools.lru_cache(maxsize=1)
def _libseccomp() -> ctypes.CDLL:
    # KERNELOPT_LIBSECCOMP: a libseccomp.so.2 unpacked from a .deb on a node without it
    name = os.environ.get("KERNELOPT_LIBSECCOMP") or ctypes.util.find_library("seccomp") or "libseccomp.so.2"
    try:
        lib = ctypes.CDLL(name, use_errno=True)
    except OSError as exc:
        raise SeccompUnavailable(f"libseccomp not found ({exc})") from exc
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_syscall_resolve_name.restype = ctypes.c_int
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.restype = ctypes.c_int
    lib.seccomp_rule_add_array.argtypes = [
        ctypes.c_void_p,
        ctypes.c_uint32,
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.POINTER(_ArgCmp),
    ]
    lib.seccomp_attr_set.restype = ctypes.c_int
    lib.seccomp_attr_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
    lib.seccomp_export_bpf.restype = ctypes.c_int
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    return lib


@functools.lru_cache(maxsize=4)
def program(*, allow_inet: bool = False) -> tuple[bytes, int]:
    """(the BPF program as bubblewrap reads it, the number of rules) for this machine's ABI.

    Raises SeccompUnavailable when libseccomp is missing or fails; cached per process.
    """
    lib = _libseccomp()
    ctx = lib.seccomp_init(SCMP_ACT_ALLOW)
    if not ctx:
        raise SeccompUnavailable("seccomp_init failed")
    rules = 0

    def add(name: str, action: int, *conditions: tuple[int, int, int, int]) -> None:
        nonlocal rules
        number = lib.seccomp_syscall_resolve_name(name.encode())
        if number < 0:  # not a syscall of this architecture (e.g. _sysctl on arm64)
            return
        array = (_ArgCmp * max(1, len(conditions)))(*[_ArgCmp(*c) for c in conditions])
        rc = lib.seccomp_rule_add_array(ctx, action, number, len(conditions), array)
        if rc < 0:
            raise SeccompUnavailable(f"seccomp_rule_add({name}) failed: {os.strerror(-rc)}")
        rules += 1

    try:
        # a call through another ABI (i386's int 0x80, x32 numbers) ends the whole process:
        # libseccomp's default kills only the calling thread, which left torch's threads
        # running a process that would never answer
        rc = lib.seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS)
        if rc < 0:
            raise SeccompUnavailable(f"seccomp_attr_set(ACT_BADARCH) failed: {os.strerror(-rc)}")
        refuse = _errno_action(errno.EPERM)
        for name in DENIED_SYSCALLS:
            add(name, refuse)
        add("clone3", _errno_action(errno.ENOSYS))
        for flag in CLONE_NAMESPACE_FLAGS:
            add("clone", refuse, (0, SCMP_CMP_MASKED_EQ, flag, flag))
        allowed = {socket.AF_UNIX} | ({socket.AF_INET, socket.AF_INET6} if allow_inet else set())
        for family in range(AF_LIMIT):
            if family not in allowed:
                add("socket", refuse, (0, SCMP_CMP_EQ, family, 0))
        add("socket", refuse, (0, SCMP_CMP_GE, AF_LIMIT, 0))
        fd = os.memfd_create("kernelopt-seccomp", os.MFD_CLOEXEC)
        try:
            rc = lib.seccomp_export_bpf(ctx, fd)
            if rc < 0:
                raise SeccompUnavailable(f"seccomp_export_bpf failed: {os.strerror(-rc)}")
            os.lseek(fd, 0, os.SEEK_SET)
            chunks = []
            while chunk := os.read(fd, 1 << 16):
                chunks.append(chunk)
        finally:
            os.close(fd)
    finally:
        lib.seccomp_release(ctx)
    return b"".join(chunks), rules
