"""Hostile: tries to kill a process of the worker's user (DECOY_PID is substituted by the test)."""

import os
import signal

DECOY_PID = 0  # replaced by tests/runner/test_sandbox.py

try:
    os.kill(DECOY_PID, signal.SIGKILL)
except OSError as exc:
    raise RuntimeError(f"kill failed: {exc}") from exc
raise RuntimeError("killed the decoy")
