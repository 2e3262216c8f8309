"""Hostile: ptrace, to read or steer another process (here its own child, the easiest target)."""

import ctypes
import json
import os
import signal
import sys
import time

PTRACE_TRACEME, PTRACE_ATTACH, PTRACE_DETACH = 0, 16, 17
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
report = {}
target = os.fork()
if target == 0:
    time.sleep(30)
    os._exit(0)
if libc.ptrace(PTRACE_ATTACH, target, None, None) == 0:
    os.waitpid(target, 0)
    libc.ptrace(PTRACE_DETACH, target, None, None)
    report["attach"] = 0
else:
    report["attach"] = ctypes.get_errno()
os.kill(target, signal.SIGKILL)
os.waitpid(target, 0)
probe = os.fork()
if probe == 0:
    os._exit(0 if libc.ptrace(PTRACE_TRACEME, 0, None, None) == 0 else ctypes.get_errno())
report["traceme"] = os.waitstatus_to_exitcode(os.waitpid(probe, 0)[1])
print("HOSTILE " + json.dumps(report), file=sys.stderr, flush=True)
raise RuntimeError("the attack is over")
