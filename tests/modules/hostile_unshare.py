"""Hostile: new namespaces (a user namespace gives root inside it; a mount one, new mounts)."""

import ctypes
import json
import os
import sys

FLAGS = {"user": 0x10000000, "mount": 0x00020000, "net": 0x40000000}
libc = ctypes.CDLL(None, use_errno=True)
report = {}
for name, flag in FLAGS.items():
    pid = os.fork()  # each in a child: a success must not change this process
    if pid == 0:
        os._exit(0 if libc.unshare(flag) == 0 else ctypes.get_errno())
    report[name] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
print("HOSTILE " + json.dumps(report), file=sys.stderr, flush=True)
raise RuntimeError("the attack is over")
