"""Hostile: starts a long-lived grandchild at import, then never finishes importing."""

import subprocess
import sys

child = subprocess.Popen(["sleep", "300"])
print(f"GRANDCHILD_PID={child.pid}", file=sys.stderr, flush=True)
while True:
    pass
