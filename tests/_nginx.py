"""A real nginx in front of gateways, on loopback, for tests and ``bench_scaleout``.

nginx is the distribution's package (``apt-get install -y nginx``; ``.ci/run``
installs it when missing). It runs in the foreground (``daemon off``) with
every path in a scratch directory and listens on 127.0.0.1 only. nginx
cannot listen on port 0, so a free port is picked by binding and closing a
socket (`_ports.free_port`: outside the kernel's ephemeral range, in this
pytest-xdist worker's own slice), and a start that finds it taken meanwhile
is retried on another.

The ``location`` block is the one ``docs/deploy.md`` recommends.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import trio
from _ports import free_port

#: Where Debian's package puts the binary (``/usr/sbin`` is not always on PATH).
DEBIAN_NGINX = "/usr/sbin/nginx"

CONFIG = """\
worker_processes 1;
daemon off;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
worker_rlimit_nofile 8192;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {dir}/client_body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;

    map $http_upgrade $connection_upgrade {{
        default upgrade;
        ''      close;
    }}
    upstream llmrt {{
{servers}
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://llmrt;
            proxy_http_version 1.1;
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection $connection_upgrade;
            proxy_set_header Host $host;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_buffering off;
            proxy_connect_timeout 5s;
            proxy_read_timeout 120s;
            proxy_send_timeout 120s;
        }}
    }}
    server {{
        listen 127.0.0.1:{status_port};
        location = /status {{ stub_status; }}
    }}
}}
"""


def find_nginx() -> str:
    """The nginx binary; `RuntimeError` naming the package when it is missing."""
    found = shutil.which("nginx") or (DEBIAN_NGINX if os.access(DEBIAN_NGINX, os.X_OK) else None)
    if found is None:
        raise RuntimeError("nginx is not installed: apt-get install -y nginx (.ci/run does)")
    return found


@attrs.frozen
class Nginx:
    port: int
    status_port: int
    proc: trio.Process
    directory: Path

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/"

    def error_log(self) -> str:
        try:
            return (self.directory / "error.log").read_text()
        except OSError:
            return ""


async def _wait_listening(proc: trio.Process, port: int) -> bool:
    """Whether nginx accepts on ``port``; False when it exited (e.g. the port was taken)."""
    with trio.fail_after(15):
        while proc.returncode is None and proc.poll() is None:
            try:
                stream = await trio.open_tcp_stream("127.0.0.1", port)
            except OSError:
                await trio.sleep(0.02)
                continue
            await stream.aclose()
            return True
    return False


@asynccontextmanager
async def running_nginx(upstreams: Sequence[int], directory: Path) -> AsyncIterator[Nginx]:
    """nginx proxying websockets (and plain HTTP) to gateways on 127.0.0.1:``upstreams``."""
    binary = find_nginx()
    servers = "\n".join(f"        server 127.0.0.1:{port};" for port in upstreams)
    for _ in range(5):
        port, status_port = free_port(), free_port()
        conf = directory / "nginx.conf"
        conf.write_text(
            CONFIG.format(dir=directory, servers=servers, port=port, status_port=status_port)
        )
        command = [
            binary,
            "-p",
            str(directory),
            "-c",
            str(conf),
            "-e",
            str(directory / "error.log"),
        ]
        proc = await trio.lowlevel.open_process(command, stderr=subprocess.DEVNULL)
        nginx = Nginx(port, status_port, proc, directory)
        try:
            if await _wait_listening(proc, port):
                yield nginx
                return
            if "Address already in use" not in nginx.error_log():
                raise RuntimeError(f"nginx did not start: {nginx.error_log()}")
        finally:
            with trio.CancelScope(shield=True):
                if proc.returncode is None:
                    proc.terminate()  # SIGTERM: nginx's fast shutdown
                    with trio.move_on_after(10):
                        await proc.wait()
                    if proc.returncode is None:
                        proc.kill()
                        await proc.wait()
    raise RuntimeError("nginx found no free port in 5 tries")


async def active_connections(nginx: Nginx) -> int:
    """nginx's open client connections (``stub_status``), this request included."""
    stream = await trio.open_tcp_stream("127.0.0.1", nginx.status_port)
    async with stream:
        await stream.send_all(b"GET /status HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        data = bytearray()
        while chunk := await stream.receive_some(4096):
            data += chunk
    for line in bytes(data).decode().splitlines():
        if line.startswith("Active connections:"):
            return int(line.split(":")[1])
    raise AssertionError(f"no stub_status in {bytes(data)!r}")
