"""Hostile: leaves behind a grandchild in its own session (out of reach of the group kill)."""

import os
import subprocess
import sys
import time

# Found on the host by the token in its command line (the job may have a PID namespace).
TOKEN = f"kernelopt-grandchild-{os.getpid()}-{time.time_ns()}"
CODE = "import time\nprint('started', flush=True)\ntime.sleep(300)\n"
escaped = subprocess.Popen(
    [sys.executable, "-c", CODE, TOKEN], stdout=subprocess.PIPE, text=True, start_new_session=True
)
escaped.stdout.readline()
print(f"GRANDCHILD_TOKEN={TOKEN}", file=sys.stderr, flush=True)
raise RuntimeError("left a grandchild behind")
