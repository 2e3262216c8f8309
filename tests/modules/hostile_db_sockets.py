"""Hostile: connects to PostgreSQL and MariaDB over their Unix sockets (no network needed)."""

import json
import socket
import struct
import sys

SOCKETS = {
    "postgres": ["/var/run/postgresql/.s.PGSQL.5432", "/run/postgresql/.s.PGSQL.5432"],
    "mariadb": ["/run/mysqld/mysqld.sock", "/var/run/mysqld/mysqld.sock"],
}
report = {}


def postgres(conn):
    """A startup message as the superuser; trust authentication answers AuthenticationOk."""
    body = struct.pack("!i", 196608) + b"user\0postgres\0database\0postgres\0\0"
    conn.sendall(struct.pack("!i", len(body) + 4) + body)
    kind, _, code = struct.unpack("!cii", conn.recv(9)[:9])
    return "authenticated as postgres" if kind == b"R" and code == 0 else f"answered {kind!r}"


def mariadb(conn):
    version = conn.recv(256)[5:].split(b"\0", 1)[0].decode(errors="replace")
    return f"greeting from {version}"


for name, paths in SOCKETS.items():
    outcomes = []
    for path in paths:
        try:
            with socket.socket(socket.AF_UNIX) as conn:
                conn.settimeout(3)
                conn.connect(path)
                outcomes.append((postgres if name == "postgres" else mariadb)(conn))
        except OSError as exc:
            outcomes.append(exc.errno)
    report[name] = outcomes
print("HOSTILE " + json.dumps(report), file=sys.stderr, flush=True)
raise RuntimeError("the attack is over")
