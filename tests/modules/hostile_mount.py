"""Hostile: mounts a file system (here a tmpfs over a directory of its own home)."""

import ctypes
import json
import sys
import tempfile

libc = ctypes.CDLL(None, use_errno=True)
target = tempfile.mkdtemp()
report = {}
if libc.mount(b"none", target.encode(), b"tmpfs", 0, None) == 0:
    report["mount"] = 0
    libc.umount2(target.encode(), 0)
else:
    report["mount"] = ctypes.get_errno()
print("HOSTILE " + json.dumps(report), file=sys.stderr, flush=True)
raise RuntimeError("the attack is over")
