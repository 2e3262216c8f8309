"""Hostile: kernel module loading and removal (with a junk image and a made-up name)."""

import ctypes
import json
import os
import sys
import tempfile

SYS_INIT_MODULE, SYS_DELETE_MODULE, SYS_FINIT_MODULE = 175, 176, 313  # x86_64
libc = ctypes.CDLL(None, use_errno=True)
report = {}
junk = b"\x7fELF" + b"\0" * 60  # not a module: the kernel refuses it if it gets that far
with tempfile.NamedTemporaryFile() as image:
    image.write(junk)
    image.flush()
    fd = os.open(image.name, os.O_RDONLY)
    report["finit_module"] = 0 if libc.syscall(SYS_FINIT_MODULE, fd, b"", 0) == 0 else ctypes.get_errno()
    os.close(fd)
report["init_module"] = 0 if libc.syscall(SYS_INIT_MODULE, junk, len(junk), b"") == 0 else ctypes.get_errno()
report["delete_module"] = (
    0 if libc.syscall(SYS_DELETE_MODULE, b"kernelopt_no_such_module", 0o4000) == 0 else ctypes.get_errno()
)
print("HOSTILE " + json.dumps(report), file=sys.stderr, flush=True)
raise RuntimeError("the attack is over")
