"""Hostile: three forked children hold more memory together than the job may (each alone fits)."""

import json
import os
import signal
import sys
import time

TARGETS = {}  # filled in by tests/runner/test_hostile.py: megabytes per child
megabytes = TARGETS["megabytes"]
children = []
for _ in range(3):
    pid = os.fork()
    if pid == 0:
        held = bytearray(megabytes << 20)
        for offset in range(0, len(held), 4096):  # touch every page: resident, not just reserved
            held[offset] = 1
        time.sleep(30)
        os._exit(0)
    children.append(pid)
time.sleep(10)  # by now all three hold their share, unless something stopped them
statuses = []
for pid in children:
    done, status = os.waitpid(pid, os.WNOHANG)
    statuses.append("holding" if done == 0 else f"ended ({os.waitstatus_to_exitcode(status)})")
    if done == 0:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
print(
    "HOSTILE " + json.dumps({"children": statuses, "megabytes_each": megabytes}), file=sys.stderr, flush=True
)
raise RuntimeError("the attack is over")
