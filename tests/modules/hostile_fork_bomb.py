"""Hostile: forks as many sleeping processes as it can (bounded at 600 here)."""

import json
import os
import signal
import sys
import time

forked, error = [], None
for _ in range(600):
    try:
        pid = os.fork()
    except OSError as exc:
        error = exc.errno
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    forked.append(pid)
for pid in forked:
    os.kill(pid, signal.SIGKILL)
for pid in forked:
    os.waitpid(pid, 0)
print("HOSTILE " + json.dumps({"forked": len(forked), "error": error}), file=sys.stderr, flush=True)
raise RuntimeError("the attack is over")
