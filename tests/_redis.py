"""A real ``redis-server`` for the routing tests, on a free loopback port (never a fake).

`RedisServer.start()` runs the Debian package's binary with no persistence
(``--save ""``, no AOF) and waits until it answers ``PING``; `stop` ends it
(SIGKILL: what an outage looks like to a client), `restart` starts it again
on the same port, empty. Every wait is bounded. The port is from this
pytest-xdist worker's own slice (`_ports.free_port`).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time

import attrs
from _ports import free_port

#: How long a redis-server may take to answer its first PING (a loaded machine).
STARTUP = 20.0


def redis_binary() -> str:
    found = shutil.which("redis-server") or (
        "/usr/bin/redis-server" if shutil.which("/usr/bin/redis-server") else None
    )
    if found is None:
        raise RuntimeError(
            "the routing tests need redis-server (Debian's package `redis-server`; "
            "scripts/test installs it)"
        )
    return found


def _ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


@attrs.define(eq=False)
class RedisServer:
    port: int = attrs.field(factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, *, fresh_port_on_conflict: bool = True) -> RedisServer:
        """Run it and wait for PING; a port taken meanwhile (redis exits) is retried on another."""
        for _ in range(5):
            if self._start():
                return self
            if not fresh_port_on_conflict:
                break
            self.port = free_port()
        raise RuntimeError(f"redis-server exited at start (port {self.port})")

    def _start(self) -> bool:
        self.proc = subprocess.Popen(
            [
                redis_binary(),
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--protected-mode",
                "yes",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + STARTUP
        while not _ping(self.port):
            if self.proc.poll() is not None:
                self.proc = None
                return False
            if time.monotonic() > deadline:
                raise RuntimeError("redis-server did not answer PING in time")
            time.sleep(0.02)
        return True

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start(fresh_port_on_conflict=False)
