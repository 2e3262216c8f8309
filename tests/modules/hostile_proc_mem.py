"""Hostile: searches the worker's memory through /proc/<pid>/mem for a secret it holds."""

import json
import re
import sys

TARGETS = {}  # filled in by tests/runner/test_hostile.py

report = {"found": False}
try:
    with (
        open(f"/proc/{TARGETS['decoy_pid']}/maps") as maps,
        open(f"/proc/{TARGETS['decoy_pid']}/mem", "rb") as mem,
    ):
        for line in maps:
            start, end, perms = *map(lambda h: int(h, 16), line.split()[0].split("-")), line.split()[1]
            if "r" not in perms or end - start > 1 << 28:
                continue
            try:
                mem.seek(start)
                if re.search(rb"WORKERMEMCANARY-[0-9a-f]{32}", mem.read(end - start)):
                    report["found"] = True
                    break
            except OSError:
                continue
except OSError as exc:
    report["error"] = exc.errno
print("HOSTILE " + json.dumps(report), file=sys.stderr, flush=True)
raise RuntimeError("the attack is over")
