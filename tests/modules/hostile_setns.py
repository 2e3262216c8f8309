"""Hostile: enters the worker's network namespace with setns and connects to its services."""

import ctypes
import json
import os
import socket
import sys

TARGETS = {}  # filled in by tests/runner/test_hostile.py: the worker's pid and a port it listens on
CLONE_NEWNET = 0x40000000
libc = ctypes.CDLL(None, use_errno=True)
report = {}


def setns(path):
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        return exc.errno
    try:
        return 0 if libc.setns(fd, CLONE_NEWNET) == 0 else ctypes.get_errno()
    finally:
        os.close(fd)


report["setns_self"] = setns("/proc/self/ns/net")  # refused by the filter, whatever the namespace
report["setns_worker"] = setns(f"/proc/{TARGETS['worker_pid']}/ns/net")
try:
    with socket.create_connection(("127.0.0.1", TARGETS["port"]), timeout=3) as conn:
        conn.sendall(b"SETNS-LEAK")
        report["connected"] = True
except OSError as exc:
    report["connected"] = False
    report["connect_error"] = exc.errno
print("HOSTILE " + json.dumps(report), file=sys.stderr, flush=True)
raise RuntimeError("the attack is over")
