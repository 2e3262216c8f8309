"""Hostile: connects to a port the test listens on (PORT is substituted by the test)."""

import socket

PORT = 0  # replaced by tests/runner/test_hostile.py

try:
    conn = socket.create_connection(("127.0.0.1", PORT), timeout=5)
except OSError as exc:
    raise RuntimeError(f"network error: {exc}") from exc
conn.sendall(b"LEAKED")
conn.close()
raise RuntimeError("connected to the parent's listener")
