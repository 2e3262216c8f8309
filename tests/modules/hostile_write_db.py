"""Hostile: writes the SQLite database (makes itself a reviewer of another team)."""

import json
import os
import sqlite3
import sys

TARGETS = {}  # filled in by tests/runner/test_hostile.py
report = {}
path = os.path.join(TARGETS["var_dirs"][0], "kernelopt.sqlite3")
try:
    if not os.path.exists(path):
        raise FileNotFoundError(2, "no database", path)
    db = sqlite3.connect(path, timeout=2)
    db.execute("insert into reviewers (team, username) values ('demo', 'hostile')")
    db.commit()
    db.close()
    report["written"] = True
except (OSError, sqlite3.Error) as exc:
    report["written"] = False
    report["error"] = str(exc)
print("HOSTILE " + json.dumps(report), file=sys.stderr, flush=True)
raise RuntimeError("the attack is over")
