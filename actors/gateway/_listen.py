"""Listening sockets that several processes share with ``SO_REUSEPORT``.

With ``SO_REUSEPORT`` (Linux 3.9+, the BSDs, macOS) each process binds its
own socket to the same address and port; Linux then spreads new connections
over the listening sockets by a hash of the connection's addresses. That is
how ``llmrt serve --workers N`` puts N gateway processes on one port without
a shared accept queue or a process that hands connections over.

A socket bound this way but not listening (`bind_reuseport` with
``listen=False``) takes no connections: the supervisor holds one to keep the
port (and to learn it when asked for port 0) while its workers come and go.

`serve_accepting` is the gateway's accept loop, in place of
`trio.serve_listeners`, which logs every ``EMFILE`` with a traceback and
retries every 100 ms for as long as the process is out of descriptors (ten
tracebacks a second under a connection flood). Here a capacity error is
handed to the caller once per failure (who logs it at a bounded rate and
frees a descriptor if it can), and accepting pauses, longer while the errors
go on, from `ACCEPT_PAUSE` up to `ACCEPT_PAUSE_MAX`; the first accept that
succeeds resets the pause.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Callable, Sequence
from typing import Final, NoReturn

import trio

__all__ = [
    "ACCEPT_PAUSE",
    "ACCEPT_PAUSE_MAX",
    "CAPACITY_ERRNOS",
    "bind_reuseport",
    "open_reuseport_listeners",
    "reuseport_supported",
    "serve_accepting",
]

#: accept(2) errors that say the process or the system is out of descriptors
#: or kernel memory: temporary, the listener is fine (trio's list).
CAPACITY_ERRNOS: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
#: The first pause after a capacity error, and the longest (it doubles meanwhile).
ACCEPT_PAUSE: Final = 0.02
ACCEPT_PAUSE_MAX: Final = 0.5

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


async def _accept_loop(
    listener: trio.SocketListener,
    on_stream: Callable[[trio.SocketStream], None],
    on_capacity: Callable[[OSError, float], None],
) -> NoReturn:
    async with listener:
        pause = ACCEPT_PAUSE
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:
                if exc.errno not in CAPACITY_ERRNOS:
                    raise
                on_capacity(exc, pause)
                await trio.sleep(pause)
                pause = min(pause * 2, ACCEPT_PAUSE_MAX)
            else:
                pause = ACCEPT_PAUSE
                on_stream(stream)


async def serve_accepting(
    listeners: Sequence[trio.SocketListener],
    on_stream: Callable[[trio.SocketStream], None],
    on_capacity: Callable[[OSError, float], None],
    *,
    task_status: trio.TaskStatus[list[trio.SocketListener]] = trio.TASK_STATUS_IGNORED,
) -> NoReturn:
    """Accept on every listener until cancelled; closes them when it ends.

    ``on_stream(stream)`` gets each accepted connection and owns it from then
    on (it must not block: it starts a task for it or closes it).
    ``on_capacity(error, pause)`` is told of each capacity error (`CAPACITY_ERRNOS`)
    before accepting pauses ``pause`` seconds. Any other `OSError` of accept
    propagates. Calls ``task_status.started(listeners)`` at once.
    """
    async with trio.open_nursery() as nursery:
        for listener in listeners:
            nursery.start_soon(_accept_loop, listener, on_stream, on_capacity)
        task_status.started(list(listeners))
    raise AssertionError("an accept loop ended")  # pragma: no cover
