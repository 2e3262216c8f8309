"""Hostile: leaves behind a grandchild in its own session (out of reach of the group kill)."""

import subprocess
import sys

CODE = (
    "import os, sys, time\n"
    "print(os.readlink('/proc/self'), flush=True)\n"  # the pid as the worker's /proc sees it
    "time.sleep(300)\n"
)
escaped = subprocess.Popen(
    [sys.executable, "-c", CODE], stdout=subprocess.PIPE, text=True, start_new_session=True
)
print(f"ESCAPED_PID={escaped.stdout.readline().strip()}", file=sys.stderr, flush=True)
raise RuntimeError("left a grandchild behind")
