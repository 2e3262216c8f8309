"""Hostile: mount(2) through the x32 system call numbers, past a filter that checks only x86_64's.

Null arguments: where the call gets through it fails with EFAULT and mounts nothing.
"""

import ctypes
import sys

X32_SYSCALL_BIT, SYS_MOUNT = 0x40000000, 165
libc = ctypes.CDLL(None, use_errno=True)
result = libc.syscall(X32_SYSCALL_BIT | SYS_MOUNT, None, None, None, 0, None)
print(f'HOSTILE {{"x32_mount": {0 if result == 0 else ctypes.get_errno()}}}', file=sys.stderr, flush=True)
raise RuntimeError("the attack is over")
