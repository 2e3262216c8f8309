"""Hostile: plants a .pth in the interpreter's site-packages (run by every later Python) and a
sitecustomize.py beside the project's code."""

import json
import os
import site
import sys
import sysconfig

TARGETS = {}  # filled in by tests/runner/test_hostile.py: a unique file name, the project root
name = TARGETS["name"]
folders = {*site.getsitepackages(), sysconfig.get_paths()["purelib"], sys.prefix, sys.base_prefix}
report = {"planted": [], "errors": {}}
for folder in sorted(folders):
    path = os.path.join(folder, name + ".pth")
    try:
        with open(path, "w") as fh:
            fh.write("/nonexistent/kernelopt-hostile-pth\n")  # harmless should it land
        report["planted"].append(path)
    except OSError as exc:
        report["errors"][path] = exc.errno
for folder in (TARGETS["root"], os.path.join(TARGETS["root"], "runner")):
    path = os.path.join(folder, name + ".py")
    try:
        with open(path, "w") as fh:
            fh.write("# hostile\n")
        report["planted"].append(path)
    except OSError as exc:
        report["errors"][path] = exc.errno
print("HOSTILE " + json.dumps(report), file=sys.stderr, flush=True)
raise RuntimeError("the attack is over")
