"""Listening sockets that several processes share with ``SO_REUSEPORT``.

With ``SO_REUSEPORT`` (Linux 3.9+, the BSDs, macOS) each process binds its
own socket to the same address and port; Linux then spreads new connections
over the listening sockets by a hash of the connection's addresses. That is
how ``llmrt serve --workers N`` puts N gateway processes on one port without
a shared accept queue or a process that hands connections over.

A socket bound this way but not listening (`bind_reuseport` with
``listen=False``) takes no connections: the supervisor holds one to keep the
port (and to learn it when asked for port 0) while its workers come and go.
"""

from __future__ import annotations

import socket

import trio

__all__ = ["bind_reuseport", "open_reuseport_listeners", "reuseport_supported"]

#: Backlog of each listening socket (what `trio.open_tcp_listeners` uses on Linux).
_BACKLOG = 0xFFFF


def reuseport_supported() -> bool:
    """Whether this platform offers ``SO_REUSEPORT``."""
    return hasattr(socket, "SO_REUSEPORT")


def bind_reuseport(host: str, port: int, *, listen: bool) -> list[socket.socket]:
    """Sockets bound with ``SO_REUSEPORT`` to every address ``host`` resolves to.

    ``port=0`` binds the first address to a free port and the others to that
    same port. Raises `OSError` when binding fails (and closes what it bound),
    `RuntimeError` when the platform lacks ``SO_REUSEPORT``.
    """
    if not reuseport_supported():
        raise RuntimeError("this platform has no SO_REUSEPORT: run one process per port")
    infos = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE | socket.AI_ADDRCONFIG
    )
    bound: list[socket.socket] = []
    seen: set[tuple[int, str]] = set()
    try:
        for family, kind, proto, _, address in infos:
            if (family, str(address[0])) in seen:
                continue
            seen.add((family, str(address[0])))
            sock = socket.socket(family, kind, proto)
            bound.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:
                # Like trio.open_tcp_listeners: one socket per family.
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind((address[0], port, *address[2:]))
            if port == 0:
                port = int(sock.getsockname()[1])
            if listen:
                sock.listen(_BACKLOG)
    except BaseException:
        for sock in bound:
            sock.close()
        raise
    return bound


async def open_reuseport_listeners(host: str, port: int) -> list[trio.SocketListener]:
    """`trio.SocketListener`s on ``host``:``port`` that other processes may share."""
    return [
        trio.SocketListener(trio.socket.from_stdlib_socket(sock))
        for sock in bind_reuseport(host, port, listen=True)
    ]
