"""Hostile: reads the generated secret key and the SQLite database under var/."""

import json
import os
import sys

TARGETS = {}  # filled in by tests/runner/test_hostile.py: the deployment's var/ and the project's
report = {}
for folder in TARGETS["var_dirs"]:
    for name in ("secret_key", "kernelopt.sqlite3"):
        path = os.path.join(folder, name)
        try:
            with open(path, "rb") as fh:
                data = fh.read()
            report[path] = f"read {len(data)} bytes"
        except OSError as exc:
            report[path] = exc.errno
print("HOSTILE " + json.dumps(report), file=sys.stderr, flush=True)
raise RuntimeError("the attack is over")
