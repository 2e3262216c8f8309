"""Finding a job's processes from the host: by a token in their command line.

A job with a PID namespace and a fresh /proc cannot tell its host pids, so hostile modules put
a unique token into the command line of what they start, print it, and the tests look for it.
"""

from __future__ import annotations

import os
import re
import time


def token_of(text: str) -> str:
    match = re.search(r"GRANDCHILD_TOKEN=(\S+)", text)
    assert match, text[-800:]
    return match.group(1)


def living(token: str) -> list[int]:
    """Pids of live (not zombie) processes whose command line holds `token`."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                if token.encode() not in fh.read():
                    continue
            with open(f"/proc/{name}/stat") as fh:
                if fh.read().rsplit(")", 1)[-1].split()[0] == "Z":
                    continue
        except OSError:
            continue
        found.append(int(name))
    return found


def gone(token: str, timeout: float = 5.0) -> bool:
    """True once no process holds `token` (a SIGKILLed process takes a moment to exit)."""
    deadline = time.monotonic() + timeout
    while living(token):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
