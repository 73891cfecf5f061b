"""`ClientPool`: upstream clients kept per endpoint, for code that asks many endpoints now and then.

An adapter talks to one endpoint and holds one client for it. Model
discovery asks whichever endpoint a request names (a route's, a namespace's
default, or, with ``discover_any_url``, any URL), and used to open a client,
hence a new TCP (and TLS) connection, per ask: a client asking in a loop
opened thousands of upstream connections. A pool keeps one client per base
URL, whose connections are reused between asks.

Bounded: at most ``max_clients`` base URLs are kept, the least recently used
idle one closed to make room; when all are busy, an ask gets a client of its
own that is closed after it (the old behaviour, for the overflow only). Each
client keeps few idle connections (`POOL_LIMITS`).
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final

import attrs
import httpx
import trio

from ._exchange import Upstream
from ._http import make_client

__all__ = ["ClientPool", "MAX_CLIENTS", "POOL_LIMITS"]

#: Base URLs whose clients are kept.
MAX_CLIENTS: Final = 16
#: Each kept client's connections: a few, idle ones closed after 30 s.
POOL_LIMITS: Final = httpx.Limits(
    max_connections=32, max_keepalive_connections=4, keepalive_expiry=30.0
)
#: Bound on closing a client (its idle sockets).
_CLOSE_SECONDS: Final = 5.0


@attrs.define(eq=False)
class ClientPool:
    """Clients by base URL (`make_client`'s), opened on first use. `aclose` closes them all."""

    timeout: httpx.Timeout
    transport: httpx.AsyncBaseTransport | None = attrs.field(default=None, repr=False)
    ssl_context: ssl.SSLContext | None = attrs.field(default=None, repr=False)
    max_clients: int = MAX_CLIENTS
    #: Least recently used first.
    _clients: dict[str, Upstream] = attrs.field(factory=dict, init=False, repr=False)
    #: Asks in progress per kept base URL.
    _busy: dict[str, int] = attrs.field(factory=dict, init=False, repr=False)

    def __len__(self) -> int:
        return len(self._clients)

    def _open(self, base_url: str) -> Upstream:
        return make_client(
            base_url,
            timeout=self.timeout,
            limits=POOL_LIMITS,
            transport=self.transport,
            ssl_context=self.ssl_context,
        )

    @asynccontextmanager
    async def client(self, base_url: str) -> AsyncIterator[Upstream]:
        """A client for ``base_url``: the kept one, a new kept one, or (all busy) a passing one."""
        client = self._clients.pop(base_url, None)
        if client is None and len(self._clients) >= self.max_clients:
            idle = next((url for url in self._clients if not self._busy.get(url)), None)
            if idle is not None:
                await _close(self._clients.pop(idle))
        if client is None and len(self._clients) >= self.max_clients:
            transient = self._open(base_url)
            try:
                yield transient
            finally:
                await _close(transient)
            return
        if client is None:
            client = self._open(base_url)
        self._clients[base_url] = client  # now the most recently used
        self._busy[base_url] = self._busy.get(base_url, 0) + 1
        try:
            yield client
        finally:
            left = self._busy.pop(base_url) - 1
            if left:
                self._busy[base_url] = left

    async def aclose(self) -> None:
        """Close every kept client (a later ask opens a new one). Bounded; a checkpoint."""
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await _close(client)


async def _close(client: Upstream) -> None:
    with trio.move_on_after(_CLOSE_SECONDS, shield=True):
        await client.aclose()
