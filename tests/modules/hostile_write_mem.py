"""Hostile: overwrites a value in the worker's memory through /proc/<pid>/mem."""

import json
import re
import sys

TARGETS = {}  # filled in by tests/runner/test_hostile.py

report = {"written": False}
try:
    with (
        open(f"/proc/{TARGETS['decoy_pid']}/maps") as maps,
        open(f"/proc/{TARGETS['decoy_pid']}/mem", "r+b", buffering=0) as mem,
    ):
        for line in maps:
            start, end = (int(h, 16) for h in line.split()[0].split("-"))
            if "rw" not in line.split()[1] or end - start > 1 << 28:
                continue
            try:
                mem.seek(start)
                match = re.search(rb"WORKERMEMCANARY-[0-9a-f]{32}", mem.read(end - start))
            except OSError:
                continue
            if match:
                mem.seek(start + match.start() + 16)  # the secret after its prefix
                mem.write(b"0" * 32)
                report["written"] = True
                break
except OSError as exc:
    report["error"] = exc.errno
print("HOSTILE " + json.dumps(report), file=sys.stderr, flush=True)
raise RuntimeError("the attack is over")
