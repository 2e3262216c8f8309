"""Hostile: finds the child's saved response descriptor, writes garbage to it and exits."""

import os

for fd in range(3, 64):
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        continue
    if target.startswith("pipe:") and target != os.readlink("/proc/self/fd/2"):
        try:
            os.write(fd, b"this is not json\n" * 4)
        except OSError:
            pass
os._exit(0)
