"""Hostile: reads the worker's environment through /proc/<pid>/environ (and every other's)."""

import json
import os
import sys

TARGETS = {}  # filled in by tests/runner/test_hostile.py: pids and the canary values

found, errors = [], {}
pids = {TARGETS["worker_pid"], TARGETS["decoy_pid"], os.getppid()}
pids |= {int(p) for p in os.listdir("/proc") if p.isdigit()}
for pid in sorted(pids):
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            text = fh.read().decode(errors="replace")
    except OSError as exc:
        errors[pid] = exc.errno
        continue
    found += [value for value in TARGETS["canaries"] if value in text]
# the canary values themselves would be the leak: report only how many were found
print("HOSTILE " + json.dumps({"found": len(set(found)), "errors": errors}), file=sys.stderr, flush=True)
raise RuntimeError("the attack is over")
