"""Hostile: starts a long-lived grandchild at import, then never finishes importing."""

import subprocess
import sys

# The grandchild reports its pid as the worker's /proc sees it (the child may be in a PID namespace).
SLEEPER = "import os, time\nprint(os.readlink('/proc/self'), flush=True)\ntime.sleep(300)\n"
child = subprocess.Popen([sys.executable, "-S", "-c", SLEEPER], stdout=subprocess.PIPE, text=True)
print(f"GRANDCHILD_PID={child.stdout.readline().strip()}", file=sys.stderr, flush=True)
while True:
    pass
