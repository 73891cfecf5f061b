"""`TrioTransport`: an httpx transport speaking HTTP/1.1 over trio sockets, with an O(1) pool.

httpx stays the adapters' HTTP API (``httpx.MockTransport`` and httpx's
configuration keep working); this replaces httpcore underneath, for two
reasons measured on thousands of concurrent streams. httpcore's pool scans
every connection whenever a request starts or ends, which dominates CPU at
1,000+ streams; and its h11-based HTTP/1.1 stack costs several Python
objects and calls per HTTP chunk, which is per token for a provider that
sends each event as its own chunk.

The pool keeps, per origin (scheme, host, port), a stack of idle
connections: a request takes the most recently used one after two cheap
checks (idle for less than ``keepalive_expiry``; the socket not readable,
which for an idle connection means EOF or garbage). ``max_connections``
bounds the connections open at once across the pool, as in httpx; waiters
queue FIFO on a `trio.Semaphore`. ``max_keepalive_connections`` bounds the
idle connections; extra ones are closed. Nothing scans the pool on a
request's start or end.

A connection goes back to the pool only when its response body was read to
the end and the response allows keep-alive; a body closed early, a read that
failed, timed out or was cancelled closes the socket at once (no I/O, so
closing works under cancellation).

Out of scope (use httpx's own transport): HTTP/2, proxies, ``Expect:
100-continue``, Unix sockets, client certificates. A reused connection the
server closed at the same moment is not retried; the request fails with
`httpx.RemoteProtocolError`.
"""

from __future__ import annotations

import select
import ssl
from collections.abc import AsyncIterator, Callable
from typing import Final, cast

import attrs
import httpx
import trio

from ._h11lite import (
    Decoder,
    body_decoder,
    encode_chunk,
    parse_response_head,
    request_head,
)

__all__ = ["TrioTransport"]

#: The most bytes one network read asks for.
RECEIVE_BYTES: Final = 64 * 1024
#: The largest response head accepted.
MAX_HEAD_BYTES: Final = 64 * 1024
_DEFAULT_PORTS: Final = {b"http": 80, b"https": 443}

Origin = tuple[bytes, str, int]


def _is_readable(sock: trio.socket.SocketType) -> bool:
    # poll(), not select(): descriptors past 1023 are common with thousands of streams.
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN | select.POLLERR | select.POLLHUP)
    return bool(poller.poll(0))


@attrs.define(eq=False)
class _Connection:
    origin: Origin
    stream: trio.abc.Stream
    socket_stream: trio.SocketStream
    idle_since: float = 0.0
    closed: bool = False

    def close(self) -> None:
        """Close the socket now, without I/O (a TLS session ends without close_notify)."""
        if not self.closed:
            self.closed = True
            self.socket_stream.socket.close()


def _timeouts(request: httpx.Request) -> dict[str, float | None]:
    timeout = request.extensions.get("timeout")
    return timeout if isinstance(timeout, dict) else {}


class _ResponseStream(httpx.AsyncByteStream):
    """A response body: one `bytes` per network read; returns or closes its connection."""

    def __init__(
        self,
        transport: TrioTransport,
        conn: _Connection,
        decoder: Decoder,
        first: bytes,
        read_timeout: float | None,
        keep_alive: bool,
    ) -> None:
        self._transport = transport
        self._conn: _Connection | None = conn
        self._decoder = decoder
        self._first = first
        self._read_timeout = read_timeout
        self._keep_alive = keep_alive
        if decoder.done:
            self._finish()

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self

    async def __anext__(self) -> bytes:
        if self._first:
            first, self._first = self._first, b""
            return first
        decoder = self._decoder
        while not decoder.done:
            conn = self._conn
            if conn is None:
                raise httpx.ReadError("the response stream is closed")
            data = await self._transport._receive(conn, self._read_timeout, self._release_broken)
            if not data:
                try:
                    decoder.eof()
                except httpx.RemoteProtocolError:
                    self._release_broken()
                    raise
                self._finish()
                break
            try:
                payload = decoder.feed(data)
            except httpx.RemoteProtocolError:
                self._release_broken()
                raise
            if decoder.done:
                self._finish()
            if payload:
                return payload
        raise StopAsyncIteration

    def _finish(self) -> None:
        # The body is complete: the connection can serve the next request now.
        conn, self._conn = self._conn, None
        if conn is not None:
            reusable = self._keep_alive and not self._decoder.surplus
            self._transport._release(conn, reusable=reusable)

    def _release_broken(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            self._transport._release(conn, reusable=False)

    async def aclose(self) -> None:
        """Return the connection if the body was read to its end, else close it. A checkpoint."""
        self._release_broken()
        await trio.lowlevel.checkpoint()


class TrioTransport(httpx.AsyncBaseTransport):
    """HTTP/1.1 for ``http`` and ``https`` URLs over trio, for `httpx.AsyncClient(transport=...)`.

    ``limits`` are httpx's (``max_connections`` across the pool,
    ``max_keepalive_connections``, ``keepalive_expiry``); ``ssl_context``
    defaults to `ssl.create_default_context()` with ALPN ``http/1.1``.
    Per-request timeouts come from httpx's ``timeout`` extension.
    Requests raise httpx's exceptions: `httpx.ConnectError`, ``ReadError``,
    ``WriteError``, the ``*Timeout`` family, `httpx.RemoteProtocolError`,
    `httpx.UnsupportedProtocol` for another scheme.
    """

    def __init__(
        self,
        *,
        limits: httpx.Limits | None = None,
        ssl_context: ssl.SSLContext | None = None,
        max_head_bytes: int = MAX_HEAD_BYTES,
    ) -> None:
        limits = limits or httpx.Limits(
            max_connections=100, max_keepalive_connections=20, keepalive_expiry=5.0
        )
        self._max_connections = limits.max_connections
        self._max_idle = limits.max_keepalive_connections
        self._expiry = limits.keepalive_expiry
        self._ssl_context = ssl_context
        self._max_head_bytes = max_head_bytes
        self._slots = (
            trio.Semaphore(self._max_connections) if self._max_connections is not None else None
        )
        self._idle: dict[Origin, list[_Connection]] = {}
        self._idle_count = 0
        self._active: set[_Connection] = set()
        self._closed = False

    # ---- the pool ---------------------------------------------------------------------------

    def connection_counts(self) -> tuple[int, int]:
        """(open, of which idle) connections of the pool now. No I/O."""
        return len(self._active) + self._idle_count, self._idle_count

    def _take_idle(self, origin: Origin) -> _Connection | None:
        stack = self._idle.get(origin)
        if not stack:
            return None
        now = trio.current_time()
        while stack:
            conn = stack.pop()
            self._idle_count -= 1
            if self._expiry is not None and now - conn.idle_since > self._expiry:
                # The stack is ordered by age: everything under it expired too.
                conn.close()
                for older in stack:
                    older.close()
                self._idle_count -= len(stack)
                stack.clear()
                return None
            if _is_readable(conn.socket_stream.socket):
                conn.close()  # an idle socket that is readable holds EOF or garbage
                continue
            return conn
        return None

    def _evict_one_idle(self) -> None:
        for stack in self._idle.values():
            if stack:
                stack.pop(0).close()  # the oldest of that origin
                self._idle_count -= 1
                return

    async def _acquire_slot(self, limit: float | None) -> None:
        slots = self._slots
        if slots is None:
            await trio.lowlevel.checkpoint()
            return
        try:
            if limit is None:
                await slots.acquire()
            else:
                with trio.fail_after(limit):
                    await slots.acquire()
        except trio.TooSlowError:
            raise httpx.PoolTimeout("no connection became available in time") from None

    def _release_slot(self) -> None:
        if self._slots is not None:
            self._slots.release()

    def _release(self, conn: _Connection, *, reusable: bool) -> None:
        """Hand back ``conn`` after a response: to its idle stack, or closed. No I/O."""
        self._active.discard(conn)
        if (
            reusable
            and not conn.closed
            and not self._closed
            and (self._max_idle is None or self._idle_count < self._max_idle)
        ):
            conn.idle_since = trio.current_time()
            self._idle.setdefault(conn.origin, []).append(conn)
            self._idle_count += 1
        else:
            conn.close()
        self._release_slot()

    async def _connect(self, origin: Origin, limit: float | None) -> _Connection:
        scheme, host, port = origin
        try:
            with trio.fail_after(limit) if limit is not None else _no_timeout():
                socket_stream = await trio.open_tcp_stream(host, port)
                stream: trio.abc.Stream = socket_stream
                if scheme == b"https":
                    if self._ssl_context is None:
                        self._ssl_context = ssl.create_default_context()
                        self._ssl_context.set_alpn_protocols(["http/1.1"])
                    ssl_stream = trio.SSLStream(
                        socket_stream, self._ssl_context, server_hostname=host
                    )
                    try:
                        await ssl_stream.do_handshake()
                    except BaseException:
                        socket_stream.socket.close()
                        raise
                    stream = ssl_stream
        except trio.TooSlowError:
            raise httpx.ConnectTimeout(f"connecting to {host}:{port} timed out") from None
        except (OSError, trio.BrokenResourceError) as exc:
            raise httpx.ConnectError(f"cannot connect to {host}:{port}: {exc}") from None
        return _Connection(origin=origin, stream=stream, socket_stream=socket_stream)

    # ---- I/O --------------------------------------------------------------------------------

    async def _receive(
        self, conn: _Connection, limit: float | None, on_error: Callable[[], None]
    ) -> bytes:
        try:
            if limit is None:
                return cast(bytes, await conn.stream.receive_some(RECEIVE_BYTES))
            with trio.fail_after(limit):
                return cast(bytes, await conn.stream.receive_some(RECEIVE_BYTES))
        except trio.TooSlowError:
            on_error()
            raise httpx.ReadTimeout("the server sent nothing in time") from None
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            on_error()
            raise httpx.ReadError(f"reading the response failed: {exc!r}") from None
        except BaseException:
            on_error()  # cancelled mid-read: the connection's state is unknown
            raise

    async def _send(self, conn: _Connection, data: bytes, limit: float | None) -> None:
        try:
            with trio.fail_after(limit) if limit is not None else _no_timeout():
                await conn.stream.send_all(data)
        except trio.TooSlowError:
            raise httpx.WriteTimeout("sending the request timed out") from None
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise httpx.WriteError(f"sending the request failed: {exc!r}") from None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` and return its response with a streaming body. A checkpoint.

        Raises `httpx.UnsupportedProtocol`, ``PoolTimeout``, ``ConnectError``/
        ``ConnectTimeout``, ``WriteError``/``WriteTimeout``, ``ReadError``/
        ``ReadTimeout``, `httpx.RemoteProtocolError`, `httpx.LocalProtocolError`.
        """
        if self._closed:
            raise RuntimeError("the transport is closed")
        url = request.url
        scheme = url.raw_scheme
        if scheme not in _DEFAULT_PORTS:
            raise httpx.UnsupportedProtocol(f"TrioTransport does not speak {scheme!r} URLs")
        origin: Origin = (scheme, url.raw_host.decode("ascii"), url.port or _DEFAULT_PORTS[scheme])
        timeouts = _timeouts(request)
        method = request.method.encode("ascii")
        head = request_head(method, url.raw_path, request.headers.raw)
        chunked_body = any(
            k.lower() == b"transfer-encoding" and b"chunked" in v.lower()
            for k, v in request.headers.raw
        )

        await self._acquire_slot(timeouts.get("pool"))
        conn = self._take_idle(origin)
        try:
            if conn is None:
                if (
                    self._max_connections is not None
                    and len(self._active) + self._idle_count >= self._max_connections
                ):
                    self._evict_one_idle()
                conn = await self._connect(origin, timeouts.get("connect"))
        except BaseException:
            self._release_slot()
            raise
        self._active.add(conn)
        try:
            await self._write_request(conn, request, head, chunked_body, timeouts.get("write"))
            return await self._read_response(conn, method, timeouts.get("read"), request)
        except BaseException:
            self._release(conn, reusable=False)
            raise

    async def _write_request(
        self,
        conn: _Connection,
        request: httpx.Request,
        head: bytes,
        chunked: bool,
        limit: float | None,
    ) -> None:
        stream = request.stream
        if isinstance(stream, httpx.ByteStream) and not chunked:
            # The common case, one whole body: head and body in one write.
            await self._send(conn, head + request.content, limit)
            return
        await self._send(conn, head, limit)
        assert isinstance(stream, httpx.AsyncByteStream)
        async for part in stream:
            if part:
                await self._send(conn, encode_chunk(part) if chunked else part, limit)
        if chunked:
            await self._send(conn, b"0\r\n\r\n", limit)

    async def _read_response(
        self, conn: _Connection, method: bytes, limit: float | None, request: httpx.Request
    ) -> httpx.Response:
        buffer = bytearray()
        never = _noop
        while True:
            parsed = parse_response_head(buffer, self._max_head_bytes)
            if parsed is None:
                data = await self._receive(conn, limit, never)
                if not data:
                    raise httpx.RemoteProtocolError(
                        "the server disconnected without sending a complete response head"
                    )
                buffer += data
                continue
            head, size = parsed
            del buffer[:size]
            if head.status == 101:
                raise httpx.RemoteProtocolError("protocol upgrades are not supported")
            if head.status >= 200:
                break  # 1xx informational heads (103 Early Hints, ...) are skipped
        decoder = body_decoder(head, request_method=method)
        first = decoder.feed(bytes(buffer)) if buffer else b""
        keep_alive = (
            head.http_version == b"HTTP/1.1"
            and b"close" not in head.connection_tokens()
            and not decoder.close_delimited
            and not _asks_close(request)
        )
        stream = _ResponseStream(self, conn, decoder, first, limit, keep_alive)
        return httpx.Response(
            status_code=head.status,
            headers=head.headers,
            stream=stream,
            extensions={"http_version": head.http_version, "reason_phrase": head.reason},
        )

    async def aclose(self) -> None:
        """Close every connection, idle or in use. Later requests raise `RuntimeError`."""
        self._closed = True
        for stack in self._idle.values():
            for conn in stack:
                conn.close()
        self._idle.clear()
        self._idle_count = 0
        for conn in list(self._active):
            conn.close()
        await trio.lowlevel.checkpoint()


def _asks_close(request: httpx.Request) -> bool:
    value = request.headers.get("connection")
    return value is not None and "close" in value.lower()


def _noop() -> None:
    pass


class _no_timeout:
    """A do-nothing context manager (cheaper than `contextlib.nullcontext` in a hot path)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None
