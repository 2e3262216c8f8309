"""Hostile: floods the child's saved response descriptor (the stdout cap must stop it)."""

import os

chunk = b"x" * 65536
for fd in range(3, 64):
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        continue
    if target.startswith("pipe:") and target != os.readlink("/proc/self/fd/2"):
        try:
            while True:
                os.write(fd, chunk)
        except OSError:
            pass
