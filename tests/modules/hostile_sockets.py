"""Hostile: new sockets of the families a kernel job never needs (IP, netlink, raw packets)."""

import json
import socket
import sys

FAMILIES = {
    "AF_INET": (socket.AF_INET, socket.SOCK_STREAM, 0),
    "AF_INET6": (socket.AF_INET6, socket.SOCK_STREAM, 0),
    "AF_NETLINK": (socket.AF_NETLINK, socket.SOCK_RAW, 0),  # NETLINK_ROUTE: the host's interfaces
    "AF_PACKET": (socket.AF_PACKET, socket.SOCK_RAW, 0),
}
report = {}
for name, args in FAMILIES.items():
    try:
        socket.socket(*args).close()
        report[name] = 0
    except OSError as exc:
        report[name] = exc.errno
print("HOSTILE " + json.dumps(report), file=sys.stderr, flush=True)
raise RuntimeError("the attack is over")
