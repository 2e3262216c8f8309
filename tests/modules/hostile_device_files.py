"""Hostile: opens the host's raw device files (memory, disks, kernel log); on a GPU node it first
starts CUDA, so the attack runs beside a live device context."""

import glob
import json
import os
import sys

import torch

report = {"cuda": torch.cuda.is_available()}
if report["cuda"]:
    torch.zeros(1, device="cuda")
targets = ["/dev/mem", "/dev/kmem", "/dev/port", "/dev/kmsg", "/dev/cpu/0/msr"]
targets += glob.glob("/dev/sd?") + glob.glob("/dev/nvme?n?") + glob.glob("/dev/vd?") + glob.glob("/dev/loop?")
opened, errors = [], {}
for path in targets:
    try:
        os.close(os.open(path, os.O_RDONLY))
        opened.append(path)
    except OSError as exc:
        errors[path] = exc.errno
report["opened"] = opened
report["dev"] = sorted(os.listdir("/dev"))
print("HOSTILE " + json.dumps(report), file=sys.stderr, flush=True)
raise RuntimeError("the attack is over")
