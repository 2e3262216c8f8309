"""Hostile: three forked children hold more memory together than the job may (each alone fits).

Each child says on a pipe when every page of its share is resident; the parent waits for the
three (up to 45 s, within the job's 60 s quick phase) rather than for a fixed time, so a loaded
machine that reclaims slowly still reaches the cap before the attack gives up; it stops waiting
as soon as a child has ended (under cgroup v1 the cap kills one child, not the job)."""

import json
import os
import select
import signal
import sys
import time

TARGETS = {}  # filled in by tests/runner/test_hostile.py: megabytes per child
megabytes = TARGETS["megabytes"]
ready_r, ready_w = os.pipe()
children = []
for _ in range(3):
    pid = os.fork()
    if pid == 0:
        os.close(ready_r)
        held = bytearray(megabytes << 20)
        for offset in range(0, len(held), 4096):  # touch every page: resident, not just reserved
            held[offset] = 1
        os.write(ready_w, b"+")
        time.sleep(60)
        os._exit(0)
    children.append(pid)
os.close(ready_w)


def any_ended() -> bool:
    """Whether a child has ended (the cap's kill), without reaping it: the report below says how."""
    return any(os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) for pid in children)


ready = 0
deadline = time.monotonic() + 45
while ready < 3 and (left := deadline - time.monotonic()) > 0:
    if not select.select([ready_r], [], [], min(left, 0.25))[0]:
        if any_ended():  # a share was killed: the three can no longer hold it together
            break
        continue
    chunk = os.read(ready_r, 3)
    if not chunk:  # every child is gone
        break
    ready += len(chunk)
statuses = []
for pid in children:
    done, status = os.waitpid(pid, os.WNOHANG)
    statuses.append("holding" if done == 0 else f"ended ({os.waitstatus_to_exitcode(status)})")
    if done == 0:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
print(
    "HOSTILE " + json.dumps({"children": statuses, "ready": ready, "megabytes_each": megabytes}),
    file=sys.stderr,
    flush=True,
)
raise RuntimeError("the attack is over")
