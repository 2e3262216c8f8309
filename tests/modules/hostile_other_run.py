"""Hostile: tampers with the module files of other runs under /tmp/kernelopt-loop-*."""

import glob
import json
import os
import sys

TARGETS = {}  # filled in by tests/runner/test_hostile.py: where the runs' directories are
report = {"seen": [], "tampered": []}
for path in glob.glob(TARGETS["runs"]):
    if os.path.abspath(path) == os.path.abspath(__file__):
        continue
    report["seen"].append(path)
    try:
        with open(path, "a") as fh:
            fh.write("\nraise SystemExit('tampered by another run')\n")
        report["tampered"].append(path)
    except OSError as exc:
        report.setdefault("errors", {})[path] = exc.errno
print("HOSTILE " + json.dumps(report), file=sys.stderr, flush=True)
raise RuntimeError("the attack is over")
