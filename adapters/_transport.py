"""`TrioTransport`: HTTP/1.1 over trio sockets, with an O(1) pool.

It speaks the adapters' transport interface natively (`exchange`, see
``_exchange.py``: an encoded request head and body in, one network read per
``receive`` out) and is an httpx transport as well (`handle_async_request`,
for an ``httpx.AsyncClient``). It replaces httpcore for two reasons
measured on thousands of concurrent streams. httpcore's pool scans
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

Two failures are recovered, as httpcore recovers them. A request that fails
on a reused idle connection before a single response byte arrives (the
server closed the connection as the request went out) is sent once more on a
fresh connection. A request whose body cannot be written because the server
already answered and closed (a 413 for a body too large) returns that answer.

Bounds: a response head of at most ``max_head_bytes``, at most
`MAX_INFORMATIONAL` informational (1xx) heads before the final one, and the
chunk-line and trailer bounds of ``_h11lite``. Bytes that break HTTP/1.1 raise
`MalformedResponse`; a connection that ends early raises a plain
`httpx.RemoteProtocolError` or `httpx.ReadError`.

Out of scope (use httpx's own transport): HTTP/2, proxies, ``Expect:
100-continue``, Unix sockets, client certificates.
"""

from __future__ import annotations

import math
import select
import socket
import ssl
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Final, cast

import attrs
import httpx
import trio

from llmrt._deadlines import DeadlineHeap, Entry, RuntimeServices
from llmrt._egress import OUTBOUND, is_public_address
from llmrt._helpers import recv_when_readable, stdlib_socket

from ._exchange import RequestHead
from ._h11lite import (
    Decoder,
    MalformedResponse,
    ResponseHead,
    body_decoder,
    encode_chunk,
    parse_response_head,
    request_head,
)

__all__ = ["PeerRefused", "ResponseBody", "TrioTransport", "stdlib_socket"]

#: The most bytes one network read asks for.
RECEIVE_BYTES: Final = 64 * 1024
#: The largest response head accepted.
MAX_HEAD_BYTES: Final = 64 * 1024
#: The most informational (1xx) responses accepted before the final response.
MAX_INFORMATIONAL: Final = 10
_DEFAULT_PORTS: Final = {b"http": 80, b"https": 443}

Origin = tuple[bytes, str, int]


async def _open_tcp(host: str, port: int) -> trio.SocketStream:
    """A TCP connection to ``host:port``.

    A host with one address (an IP literal, most private endpoints) is
    connected directly; several go through `trio.open_tcp_stream`'s happy
    eyeballs. The direct way spares a nursery, a task and a cancel scope per
    connection, which count when thousands of streams open at once.
    """
    targets = await trio.socket.getaddrinfo(host, port, type=trio.socket.SOCK_STREAM)
    if len(targets) != 1:
        return await trio.open_tcp_stream(host, port)
    family, type_, proto, _, address = targets[0]
    sock = trio.socket.socket(family, type_, proto)
    try:
        await sock.connect(address)
    except BaseException:
        sock.close()
        raise
    return trio.SocketStream(sock)


class PeerRefused(httpx.ConnectError):
    """The connection reached an address the request's `llmrt._egress.OutboundPolicy` refuses."""


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
    #: The non-blocking standard-library socket under a plain TCP stream (None: TLS).
    raw: socket.socket | None = None
    #: trio time by which the read now waiting must get data (see `TrioTransport._receive`).
    read_deadline: float = math.inf
    #: True while a read waits on the socket.
    reading: bool = False
    #: The heap watching this connection's reads, and its entry there (None: none).
    deadline_heap: DeadlineHeap | None = None
    deadline_entry: Entry | None = None
    #: Set when the read deadline closed the connection.
    timed_out: bool = False
    #: Set when its response was closed mid-body (`ResponseBody.close`): a read
    #: waiting on it then ends the body instead of raising.
    stopped: bool = False
    #: Whether the next read tries the socket before waiting on it: only when
    #: the last read found data waiting or filled its buffer. Tokens come apart
    #: in time, so a read right after one usually finds nothing, and trying
    #: first would cost a failing recv call per token.
    eager: bool = False

    def close(self) -> None:
        """Close the socket now, without I/O (a TLS session ends without close_notify)."""
        if not self.closed:
            self.closed = True
            self.socket_stream.socket.close()


def _timeouts(request: httpx.Request) -> Mapping[str, float | None]:
    timeout = request.extensions.get("timeout")
    return timeout if isinstance(timeout, dict) else {}


def _check_read(conn: _Connection, now: float) -> float | None:
    """The read-deadline heap's question about ``conn`` (see `TrioTransport._receive`).

    A closed connection, or one not reading, leaves the heap (its next read
    watches it again); one whose deadline moved goes back at its new
    deadline; one whose read still waits past it is closed, and the read
    then raises `httpx.ReadTimeout`.
    """
    if conn.closed:
        return None
    if conn.read_deadline > now:
        return conn.read_deadline
    if conn.reading:
        conn.timed_out = True
        conn.close()  # the waiting read wakes with ClosedResourceError
    return None


async def _wait_read(conn: _Connection, raw: socket.socket | None) -> bytes:
    """Wait for the next read of ``conn`` (``raw``: its plain socket, None for TLS)."""
    conn.reading = True
    try:
        if raw is None:
            return cast(bytes, await conn.stream.receive_some(RECEIVE_BYTES))
        data = await recv_when_readable(raw, RECEIVE_BYTES)
        conn.eager = len(data) == RECEIVE_BYTES
        return data
    finally:
        conn.reading = False


class _NothingReceived(Exception):
    """An exchange failed before a single byte of the response arrived (``error`` says how)."""

    def __init__(self, error: httpx.HTTPError) -> None:
        super().__init__(str(error))
        self.error = error


class ResponseBody(httpx.AsyncByteStream):
    """A response (an ``_exchange.Response``): its head, its body one `bytes` per network read.

    Returns its connection to the pool once read to its end, else closes it.
    """

    def __init__(
        self,
        transport: TrioTransport,
        head: ResponseHead,
        conn: _Connection,
        decoder: Decoder,
        first: bytes,
        read_timeout: float | None,
        keep_alive: bool,
    ) -> None:
        self._transport = transport
        self.status = head.status
        self.headers = head.headers
        self.http_version = head.http_version
        self._conn: _Connection | None = conn
        self._decoder = decoder
        self._first = first
        self._read_timeout = read_timeout
        self._keep_alive = keep_alive
        #: True once `close` ended the response before its body did.
        self.stopped = False
        if decoder.done:
            self._finish()

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self

    async def __anext__(self) -> bytes:
        data = await self.receive()
        if not data:
            raise StopAsyncIteration
        return data

    @property
    def done(self) -> bool:
        """True once the body was read to its end (nothing is left to receive)."""
        return not self._first and self._decoder.done

    async def receive(self) -> bytes:
        """The body bytes of the next network read; ``b""`` once the body has ended.

        The body's own API (the adapters' fast path reads it without httpx's
        stream wrappers); ``async for`` is the same reads for httpx.
        """
        if self._first:
            first, self._first = self._first, b""
            return first
        decoder = self._decoder
        while not decoder.done:
            conn = self._conn
            if conn is None:
                if self.stopped:
                    return b""
                raise httpx.ReadError("the response stream is closed")
            data = await self._transport._receive(conn, self._read_timeout, self._release_broken)
            if not data:
                if self.stopped:
                    return b""  # closed under the read (`close`): the body ends, untranslated
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
        return b""

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

    def close(self) -> None:
        """Return the connection if the body was read to its end, else close it. No I/O.

        Closed before its end (``stopped``), the body ends: a read waiting on
        it, or made later, returns ``b""`` rather than raising.
        """
        conn = self._conn
        if conn is not None:
            self.stopped = conn.stopped = True
            self._release_broken()

    async def aclose(self) -> None:
        """`close`, and a checkpoint."""
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
        #: The read-deadline heap of the runtime services attached (None: cancel scopes).
        self._deadlines: DeadlineHeap | None = None

    # ---- the exchange interface -------------------------------------------------------------

    def exchange(self, request: RequestHead, body: bytes) -> _NativeExchange:
        """One request, natively: ``async with transport.exchange(request, body) as response``.

        The request head is encoded once (`RequestHead.encode`) and written
        with the body in one write; the response is this transport's
        `ResponseBody`. Raises httpx's exceptions, as `handle_async_request`.
        """
        return _NativeExchange(self, request, body)

    def attach_runtime(self, services: RuntimeServices) -> None:
        """Watch read deadlines on ``services.deadlines`` (no cancel scope per read)."""
        self._deadlines = services.deadlines

    def detach_runtime(self) -> None:
        """Back to a cancel scope per waiting read."""
        self._deadlines = None

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
        # A cancellation point, not a schedule point: the round trip waits for
        # its response anyway, and a yield here would put one more pass of the
        # run loop between a call's start and its request reaching the wire.
        slots = self._slots
        if slots is None:
            await trio.lowlevel.checkpoint_if_cancelled()
            return
        if slots.value:
            # A free slot: no timeout scope (the common case below max_connections).
            await trio.lowlevel.checkpoint_if_cancelled()
            try:
                slots.acquire_nowait()
                return
            except trio.WouldBlock:
                pass  # taken meanwhile: wait for one
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
                socket_stream = await _open_tcp(host, port)
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
        raw = None if scheme == b"https" else stdlib_socket(socket_stream)
        return _Connection(origin=origin, stream=stream, socket_stream=socket_stream, raw=raw)

    # ---- I/O --------------------------------------------------------------------------------

    async def _receive(
        self, conn: _Connection, limit: float | None, on_error: Callable[[], None]
    ) -> bytes:
        """One network read: a schedule point, bounded by ``limit`` seconds of waiting.

        After a read that found data waiting (or filled its buffer), the next
        first tries one non-blocking ``recv``; otherwise it waits on the socket
        at once (see ``_Connection.eager``). A read that waits records its
        deadline on the connection: with runtime services attached
        (`attach_runtime`) that is all it pays, and the
        services' `DeadlineHeap` closes a connection whose read still waits
        past it (no cancel scope per read: one costs about four checkpoints,
        paid per token; the heap wakes about once per timeout per
        connection). Without services, a waiting read runs in a cancel scope.
        """
        try:
            raw = conn.raw
            if raw is not None and conn.eager:
                try:
                    data = raw.recv(RECEIVE_BYTES)
                except BlockingIOError:
                    conn.eager = False
                else:
                    # A read is a schedule point, as trio's receive_some is (cancelled
                    # here, the data is lost with the connection, which is closed).
                    await trio.lowlevel.checkpoint()
                    return data
            if limit is None:
                return await _wait_read(conn, raw)
            due = conn.read_deadline = trio.current_time() + limit
            heap = self._deadlines
            if heap is None or not heap.running:
                with trio.CancelScope(deadline=due):
                    return await _wait_read(conn, raw)
                conn.timed_out = True
                conn.close()
                raise trio.ClosedResourceError
            entry = conn.deadline_entry
            if entry is None or entry[2] is None or conn.deadline_heap is not heap:
                # Not watched: one entry, which later reads only move (`_check_read`).
                conn.deadline_heap = heap
                conn.deadline_entry = heap.push(conn, due, _check_read)
            conn.reading = True  # `_wait_read`, inlined: this is the per-token path
            try:
                if raw is None:
                    return cast(bytes, await conn.stream.receive_some(RECEIVE_BYTES))
                while True:
                    await trio.lowlevel.wait_readable(raw)
                    try:
                        data = raw.recv(RECEIVE_BYTES)
                    except BlockingIOError:
                        continue  # a spurious wake-up
                    conn.eager = len(data) == RECEIVE_BYTES
                    return data
            finally:
                conn.reading = False
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            if conn.stopped:
                # Closed under the read by its response's close() (a stopped call's
                # closer): the body ends here, with nothing to translate for nobody.
                # No yield first: the call's unwinding step is short (its
                # bookkeeping waits for a step of its own), so it may run in this
                # pass, beside a server in the same trio run seeing the close.
                return b""
            on_error()
            if conn.timed_out:
                raise httpx.ReadTimeout("the server sent nothing in time") from None
            raise httpx.ReadError(f"reading the response failed: {exc!r}") from None
        except BaseException:
            on_error()  # cancelled mid-read: the connection's state is unknown
            raise

    async def _send(self, conn: _Connection, data: bytes, limit: float | None) -> None:
        raw = conn.raw
        if raw is not None:
            # A request fits the socket's send buffer: one non-blocking send, no
            # timeout scope; the rest (if any) goes the waiting way. No yield
            # before it (see `_acquire_slot`): the response's wait is the round
            # trip's schedule point.
            await trio.lowlevel.checkpoint_if_cancelled()
            try:
                sent = raw.send(data)
            except BlockingIOError:
                sent = 0
            except OSError as exc:
                raise httpx.WriteError(f"sending the request failed: {exc!r}") from None
            if sent == len(data):
                return
            data = data[sent:]
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
        url = request.url
        method = request.method.encode("ascii")
        raw = request.headers.raw
        head = request_head(method, url.raw_path, raw)
        chunked_body = any(
            k.lower() == b"transfer-encoding" and b"chunked" in v.lower() for k, v in raw
        )
        stream = request.stream
        # Only a body held whole in memory can be sent a second time.
        body: bytes | httpx.AsyncByteStream
        if isinstance(stream, httpx.ByteStream):
            body = request.content
        else:
            assert isinstance(stream, httpx.AsyncByteStream)
            body = stream
        response_head, body_stream = await self.round_trip(
            self.origin_of(url),
            method,
            head,
            body,
            _timeouts(request),
            chunked=chunked_body,
            asks_close=_asks_close(request),
        )
        return httpx.Response(
            status_code=response_head.status,
            headers=response_head.headers,
            stream=body_stream,
            extensions={
                "http_version": response_head.http_version,
                "reason_phrase": response_head.reason,
            },
        )

    @staticmethod
    def origin_of(url: httpx.URL) -> Origin:
        """(scheme, host, port) of ``url``; raises `httpx.UnsupportedProtocol` for non-http(s)."""
        scheme = url.raw_scheme
        if scheme not in _DEFAULT_PORTS:
            raise httpx.UnsupportedProtocol(f"TrioTransport does not speak {scheme!r} URLs")
        return (scheme, url.raw_host.decode("ascii"), url.port or _DEFAULT_PORTS[scheme])

    async def round_trip(
        self,
        origin: Origin,
        method: bytes,
        head: bytes,
        body: bytes | httpx.AsyncByteStream,
        timeouts: Mapping[str, float | None],
        *,
        chunked: bool = False,
        asks_close: bool = False,
    ) -> tuple[ResponseHead, ResponseBody]:
        """One exchange without httpx's request and response objects. A checkpoint.

        ``head`` is the encoded request head (`request_head`); ``body`` is
        sent after it (chunked when ``chunked``). Returns the final response
        head and its streaming body, which the caller must `close
        <ResponseBody.close>` (the body read to its end returns the
        connection to the pool). Raises as `handle_async_request` does.
        """
        if self._closed:
            raise RuntimeError("the transport is closed")
        await self._acquire_slot(timeouts.get("pool"))
        conn = self._take_idle(origin)
        reused = conn is not None
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
        if OUTBOUND.get() is not None:  # a request another party named: where did it go?
            self._check_peer(conn)
        replayable = isinstance(body, bytes)
        while True:
            self._active.add(conn)
            try:
                return await self._exchange(conn, body, method, head, chunked, timeouts, asks_close)
            except _NothingReceived as failed:
                if not (reused and replayable):
                    self._release(conn, reusable=False)
                    raise failed.error from None
            except BaseException:
                self._release(conn, reusable=False)
                raise
            # A connection from the idle pool failed before the server sent a single byte
            # (no 1xx, no partial head): the keep-alive race, where the server closes an
            # idle connection as the request goes out and never parses the request. RFC
            # 9112 section 9.3.1 lets a client resend a non-idempotent request when it can
            # tell the request was not applied; silence on a connection the server was
            # closing is that sign. The one case it misreads (a server that read the
            # request and died without a byte) costs one duplicate generation, which the
            # default retry policy would run anyway for this NETWORK failure. So: once,
            # on a fresh connection, keeping the slot. A second failure is final;
            # timeouts and cancellation never get here.
            self._active.discard(conn)
            conn.close()
            reused = False
            try:
                conn = await self._connect(origin, timeouts.get("connect"))
            except BaseException:
                self._release_slot()
                raise
            if OUTBOUND.get() is not None:
                self._check_peer(conn)

    def _check_peer(self, conn: _Connection) -> None:
        """Refuse ``conn`` when the request's policy forbids the address it is connected to.

        The address actually connected to, not one resolved before: a name
        that resolved to a public address when it was checked and to a
        private one when connecting (DNS rebinding) is caught here. A pooled
        connection is checked again when a restricted request takes it.
        Refused: the connection is closed and its slot returned. No I/O.
        """
        policy = OUTBOUND.get()
        if policy is None or policy.allow_private:
            return
        try:
            peer = str(conn.socket_stream.socket.getpeername()[0])
        except OSError:
            peer = ""
        if is_public_address(peer):
            return
        conn.close()
        self._release_slot()
        raise PeerRefused(
            "the connection reached a loopback, private or link-local address, which a "
            "client-named URL may not reach (discover_allow_private)"
        )

    async def _exchange(
        self,
        conn: _Connection,
        body: bytes | httpx.AsyncByteStream,
        method: bytes,
        head: bytes,
        chunked: bool,
        timeouts: Mapping[str, float | None],
        asks_close: bool,
    ) -> tuple[ResponseHead, ResponseBody]:
        """Write the request and read the response head; `_NothingReceived` if no byte came."""
        read_limit = timeouts.get("read")
        try:
            await self._write_request(conn, body, head, chunked, timeouts.get("write"))
        except httpx.WriteError as write_error:
            # The server may have answered and closed before reading the whole body (a
            # 413, say): read that answer, as httpcore does. The connection is broken,
            # so the read ends at once; without a usable answer the write error stands.
            try:
                return await self._read_response(conn, method, read_limit, asks_close, reuse=False)
            except _NothingReceived:
                raise _NothingReceived(write_error) from None
            except httpx.HTTPError:
                raise write_error from None
        return await self._read_response(conn, method, read_limit, asks_close)

    async def _write_request(
        self,
        conn: _Connection,
        body: bytes | httpx.AsyncByteStream,
        head: bytes,
        chunked: bool,
        limit: float | None,
    ) -> None:
        if isinstance(body, bytes):
            if not chunked:
                # The common case, one whole body: head and body in one write.
                await self._send(conn, head + body, limit)
                return
            await self._send(conn, head, limit)
            if body:
                await self._send(conn, encode_chunk(body), limit)
            await self._send(conn, b"0\r\n\r\n", limit)
            return
        await self._send(conn, head, limit)
        async for part in body:
            if part:
                await self._send(conn, encode_chunk(part) if chunked else part, limit)
        if chunked:
            await self._send(conn, b"0\r\n\r\n", limit)

    async def _read_response(
        self,
        conn: _Connection,
        method: bytes,
        limit: float | None,
        asks_close: bool,
        *,
        reuse: bool = True,
    ) -> tuple[ResponseHead, ResponseBody]:
        buffer = bytearray()
        received = False
        informational = 0
        while True:
            parsed = parse_response_head(buffer, self._max_head_bytes)
            if parsed is None:
                try:
                    data = await self._receive(conn, limit, _noop)
                except httpx.ReadError as exc:
                    if not received:
                        raise _NothingReceived(exc) from None
                    raise
                if not data:
                    error = httpx.RemoteProtocolError(
                        "the server disconnected without sending a complete response head"
                    )
                    if not received:
                        raise _NothingReceived(error)
                    raise error
                received = True
                buffer += data
                continue
            head, size = parsed
            del buffer[:size]
            if head.status >= 200:
                break
            if head.status == 101:
                raise MalformedResponse("protocol upgrades are not supported")
            # 1xx informational heads (103 Early Hints, ...) are skipped, a bounded number.
            informational += 1
            if informational > MAX_INFORMATIONAL:
                raise MalformedResponse(
                    f"more than {MAX_INFORMATIONAL} informational (1xx) responses"
                )
        decoder = body_decoder(head, request_method=method)
        first = decoder.feed(bytes(buffer)) if buffer else b""
        keep_alive = (
            reuse
            and head.http_version == b"HTTP/1.1"
            and b"close" not in head.connection_tokens()
            and not decoder.close_delimited
            and not asks_close
        )
        return head, ResponseBody(self, head, conn, decoder, first, limit, keep_alive)

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


class _NativeExchange:
    """`TrioTransport.exchange`'s context: the round trip in, the body closed out (no I/O)."""

    __slots__ = ("_body", "_request", "_response", "_transport")

    def __init__(self, transport: TrioTransport, request: RequestHead, body: bytes) -> None:
        self._transport = transport
        self._request = request
        self._body = body
        self._response: ResponseBody | None = None

    async def __aenter__(self) -> ResponseBody:
        request = self._request
        route = request.route
        _, response = await self._transport.round_trip(
            route.origin, route.method, request.head, self._body, route.timeouts
        )
        self._response = response
        return response

    async def __aexit__(self, *exc: object) -> None:
        # No checkpoint: a generator closed under cancellation still closes its socket.
        response, self._response = self._response, None
        if response is not None:
            response.close()


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
