"""Hostile: reads the host's password hashes."""

import json
import sys

report = {}
for path in ("/etc/shadow", "/etc/gshadow"):
    try:
        with open(path) as fh:
            report[path] = f"read {len(fh.read())} characters"
    except OSError as exc:
        report[path] = exc.errno
print("HOSTILE " + json.dumps(report), file=sys.stderr, flush=True)
raise RuntimeError("the attack is over")
