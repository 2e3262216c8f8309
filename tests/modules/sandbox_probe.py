"""Probe: reports what the sandbox child sees and holds, as one `PROBE {json}` line on stderr.

SECRET_FILE is substituted by tests/runner/test_sandbox.py (a root-owned 0600 file bound in).
"""

import json
import os
import socket
import sys

SECRET_FILE = ""

facts = {"resuid": os.getresuid(), "resgid": os.getresgid(), "groups": os.getgroups()}
with open("/proc/self/status") as fh:
    for line in fh:
        key, _, value = line.partition(":")
        if key in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp", "NSpid"):
            facts[key] = value.strip()
facts["pids"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
facts["root"] = sorted(os.listdir("/"))
facts["etc"] = sorted(os.listdir("/etc"))
facts["tmp"] = sorted(os.listdir("/tmp"))
facts["cwd"] = os.getcwd()
facts["hostname"] = socket.gethostname()
facts["fds"] = {}
for fd in os.listdir("/proc/self/fd"):
    try:
        facts["fds"][fd] = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        pass
facts["umask"] = os.umask(0o077)
facts["home_mode"] = oct(os.stat(os.environ["HOME"]).st_mode & 0o777)
try:
    with open(SECRET_FILE) as fh:
        facts["secret"] = fh.read()
except OSError as exc:
    facts["secret"] = exc.errno
try:
    with open(__file__, "a") as fh:
        fh.write("# tampered\n")
    facts["own_module"] = "written"
except OSError as exc:
    facts["own_module"] = exc.errno
print("PROBE " + json.dumps(facts), file=sys.stderr, flush=True)
raise RuntimeError("probe done")
