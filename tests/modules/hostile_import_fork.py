"""Hostile: starts a long-lived grandchild at import, then never finishes importing."""

import os
import subprocess
import sys
import time

# The job may see only its own PID namespace, so the grandchild is found on the host by a token
# in its command line (tests/runner/test_sandbox.py scans /proc for it).
TOKEN = f"kernelopt-grandchild-{os.getpid()}-{time.time_ns()}"
SLEEPER = "import time\nprint('started', flush=True)\ntime.sleep(300)\n"
child = subprocess.Popen([sys.executable, "-S", "-c", SLEEPER, TOKEN], stdout=subprocess.PIPE, text=True)
child.stdout.readline()
print(f"GRANDCHILD_TOKEN={TOKEN}", file=sys.stderr, flush=True)
while True:
    pass
