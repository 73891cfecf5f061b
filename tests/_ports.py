"""Loopback ports for servers that cannot be asked for port 0 (redis-server, nginx).

`free_port` binds and closes, but not in the kernel's ephemeral range, where
every ``bind(port 0)`` of the suite (gateways, upstreams, CLI processes) is
served, and not in another pytest-xdist worker's share: each worker
(``$PYTEST_XDIST_WORKER`` ``gwN`` of ``$PYTEST_XDIST_WORKER_COUNT``) draws
from its own slice of the ports below that range. So a port a test picked
cannot be taken before its server binds it by anything else of the same run,
and a "nothing listens here" port stays refused for the test's duration.
"""

from __future__ import annotations

import os
import random
import socket

#: The lowest port handed out; below it are the well-known and common service ports.
LOWEST = 20000


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def worker_slice() -> range:
    """The ports this process draws from: its xdist worker's share below the ephemeral range."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    index = int(worker) if worker.isdigit() else 0
    width = (_ephemeral_low() - LOWEST) // max(count, 1)
    if width < 50:  # an unusual port range: the kernel's choice, bound and closed
        return range(0)
    start = LOWEST + index * width
    return range(start, start + width)


def free_port() -> int:
    """A loopback port nothing listened on a moment ago, from this worker's slice."""
    ports = worker_slice()
    if not ports:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])
    first = random.randrange(len(ports))
    for i in range(len(ports)):
        port = ports[(first + i) % len(ports)]
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free loopback port in {ports}")
