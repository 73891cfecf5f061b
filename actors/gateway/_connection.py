"""The connection actor: one per accepted websocket.

It owns a nursery holding: the reader (the handler task itself, decoding
client frames), ONE writer task (the only caller of ``send_message``), a
heartbeat task, a shutdown watcher, and one task per live call or metadata
request. They reach the writer through one bounded queue (`Outbound`).

A call task does not queue every chunk: it appends the chunk to its call's
pending list (a plain list append) and queues the call itself, once, as a
"has chunks" token. When the writer reaches the token it takes the whole
list and sends it as one ``chunk`` / ``chunks`` frame. So chunks batch
exactly when the writer is behind, and many calls multiplexed on a busy
connection still travel in few frames. Frames of one call keep their
order: its chunks are sent in list order, and the frame that follows its
last chunk (an error) is queued behind its last token.

Backpressure: a call's pending list holds at most `PENDING_CHUNKS`; a call
task that reaches it waits until the writer takes the list, so it stops
reading its call, whose bounded buffer fills, which stops the call actor
iterating its adapter. A client that reads slowly slows only its own
calls, and a connection's memory stays bounded (the queue, plus one pending
list per live call).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, assert_never

import attrs
import trio
from trio_websocket import ConnectionClosed, WebSocketConnection

from llmrt import (
    AttemptChunk,
    DecodeError,
    ErrorCode,
    GenerateOptions,
    LlmError,
    ModelInfo,
    ResolvedModelInfo,
    ResolvedRetryPolicy,
    RetryScheduled,
    StreamChunk,
)

from .._abort import AbortController
from .._runtime import LlmRuntime
from ._counters import GatewayCounters, payload_bytes
from ._protocol import (
    PROTOCOL,
    AbortFrame,
    CallFrame,
    ChunkFrame,
    ChunksFrame,
    CloseRequest,
    Codec,
    ErrorFrame,
    GatewayErrorCode,
    HelloFrame,
    Limits,
    ListModelsFrame,
    ListProvidersFrame,
    PingFrame,
    PongFrame,
    ResolveModelFrame,
    ResultFrame,
    RetryFrame,
    ServerFrame,
    StatsFrame,
    TokenBucket,
)
from ._snapshot import GatewayValue, statistics_value

__all__ = ["GatewayState", "Connection", "PENDING_CHUNKS"]

log = logging.getLogger("llmrt.gateway")

#: Most chunks of one call waiting for the writer (the largest ``chunks`` frame).
PENDING_CHUNKS = 128
#: Close code when pongs stop (as the `websockets` package uses).
HEARTBEAT_CLOSE = 1011
SHUTDOWN_CLOSE = 1001
_SHUTDOWN = CloseRequest(SHUTDOWN_CLOSE, "the gateway is shutting down")


@attrs.define(eq=False)
class GatewayState:
    """What the connections of one gateway share. Only trio tasks of one run touch it."""

    runtime: LlmRuntime
    limits: Limits
    version: str
    #: The expected bearer token; never printed.
    token: bytes | None = attrs.field(repr=False)
    connections: set[Connection] = attrs.field(factory=set)
    #: Connections accepted or being handshaken (what ``max_connections`` bounds).
    admitted: int = 0
    live: int = 0
    grace: float = 0.0
    #: Set by `GatewayServer.drain`: ``/readyz`` answers 503 (see `ready`).
    draining: bool = False
    stopping: trio.Event = attrs.field(factory=trio.Event)
    all_gone: trio.Event = attrs.field(factory=trio.Event)
    counters: GatewayCounters = attrs.field(factory=GatewayCounters)

    def __attrs_post_init__(self) -> None:
        self.grace = self.limits.shutdown_grace

    @property
    def ready(self) -> bool:
        """Whether the gateway accepts calls: not draining and not shutting down.

        The one readiness decision (``GET /readyz``); a load balancer stops
        sending new clients once it turns false.
        """
        return not self.draining and not self.stopping.is_set()

    def statistics(self) -> GatewayValue:
        """The gateway's own figures, for the ``stats`` frame."""
        counters = self.counters
        return GatewayValue(
            ready=self.ready,
            connections=len(self.connections),
            accepted=counters.accepted,
            live_requests=self.live,
            refused=dict(counters.refusals),
            frames_received=counters.frames_received,
            frames_sent=counters.frames_sent,
            bytes_received=counters.bytes_received,
            bytes_sent=counters.bytes_sent,
            http_requests=dict(counters.http_requests),
        )

    def connection_ended(self, conn: Connection) -> None:
        self.connections.discard(conn)
        if self.stopping.is_set() and not self.connections:
            self.all_gone.set()


@attrs.define(eq=False)
class _Request:
    """A live call or metadata request of one connection, and its unsent chunks."""

    id: str
    controller: AbortController | None = None
    scope: trio.CancelScope | None = None
    pending: list[StreamChunk | RetryScheduled] = attrs.field(factory=list)
    #: For a retried call, the attempt the next pending chunk belongs to; else None.
    attempt: int | None = None
    #: True while this request's token is in the writer's queue.
    queued: bool = False
    #: Set when the writer takes ``pending``; a call task waits on it when the list is full.
    space: trio.Event | None = None

    def abort(self, reason: str) -> None:
        if self.controller is not None:
            self.controller.abort(reason)
        if self.scope is not None:
            self.scope.cancel()

    def take(self) -> list[StreamChunk | RetryScheduled]:
        """The writer's side: take every pending chunk and make room."""
        chunks, self.pending = self.pending, []
        self.queued = False
        if self.space is not None:
            self.space.set()
            self.space = None
        return chunks


#: What the writer takes from a connection's queue: a frame, a request with
#: pending chunks, or the request to close the websocket.
Outbound = ServerFrame | _Request | CloseRequest


def _frames(
    request: _Request, items: list[StreamChunk | RetryScheduled]
) -> list[ChunkFrame | ChunksFrame | RetryFrame]:
    """The frames for a request's pending items: runs of chunks, and a ``retry``
    frame at each attempt boundary of a retried call."""
    frames: list[ChunkFrame | ChunksFrame | RetryFrame] = []
    run: list[StreamChunk] = []

    def flush() -> None:
        if len(run) == 1:
            frames.append(ChunkFrame(id=request.id, chunk=run[0], attempt=request.attempt))
        elif run:
            frames.append(ChunksFrame(id=request.id, chunks=tuple(run), attempt=request.attempt))
        run.clear()

    for item in items:
        if type(item) is RetryScheduled:
            flush()
            frames.append(
                RetryFrame(
                    id=request.id,
                    attempt=item.attempt,
                    failure=item.failure,
                    delay_ms=item.delay_ms,
                )
            )
            request.attempt = item.attempt + 1
        else:
            run.append(item)  # type: ignore[arg-type]
    flush()
    return frames


def _error(code: str, message: str, id: str | None = None) -> ErrorFrame:
    return ErrorFrame(code=code, message=message, id=id)


@attrs.define(eq=False)
class Connection:
    """The actor serving one websocket; `run` returns when the websocket is done."""

    state: GatewayState
    ws: WebSocketConnection
    codec: Codec
    #: The close code the gateway chose, when it closed the connection itself.
    close_code: int | None = attrs.field(default=None, init=False)
    _send: trio.MemorySendChannel[Outbound] = attrs.field(init=False)
    _recv: trio.MemoryReceiveChannel[Outbound] = attrs.field(init=False)
    _requests: dict[str, _Request] = attrs.field(factory=dict, init=False)
    _idle: trio.Event = attrs.field(factory=trio.Event, init=False)
    _bucket: TokenBucket = attrs.field(init=False)
    _nursery: trio.Nursery | None = attrs.field(default=None, init=False)

    def __attrs_post_init__(self) -> None:
        limits = self.state.limits
        self._send, self._recv = trio.open_memory_channel[Outbound](limits.outbound_frames)
        self._bucket = TokenBucket(limits.calls_per_second, limits.call_burst)
        self._idle.set()

    async def run(self) -> None:
        """Serve the websocket until the client leaves, the peer dies or the gateway stops."""
        state = self.state
        state.connections.add(self)
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self._send.send_nowait(
                    HelloFrame(
                        protocol=PROTOCOL, server=state.version, limits=state.limits.announce()
                    )
                )
                nursery.start_soon(self._writer)
                nursery.start_soon(self._heartbeat)
                nursery.start_soon(self._watch_shutdown)
                await self._reader()
                if self.close_code is None:
                    # The client is gone: cancelling its calls makes their `async
                    # with` blocks exit, which closes their upstream responses.
                    # (When the writer is closing the websocket, it ends the
                    # connection itself once the close handshake is done.)
                    nursery.cancel_scope.cancel()
        finally:
            state.connection_ended(self)

    # ---- reader ------------------------------------------------------------------------------

    async def _reader(self) -> None:
        counters = self.state.counters
        while True:
            try:
                data = await self.ws.get_message()
            except ConnectionClosed:
                return
            # Inline, not a method call: this runs per frame (see bench_scaleout).
            counters.frames_received += 1
            counters.bytes_received += (
                len(data) if type(data) is bytes or data.isascii() else payload_bytes(data)
            )
            await self._dispatch(data)

    async def _reply(self, frame: ServerFrame) -> None:
        await self._send.send(frame)

    async def _dispatch(self, data: str | bytes) -> None:
        limit = self.state.limits.max_frame_bytes
        size = len(data)
        if isinstance(data, str) and limit // 4 < size <= limit:
            size = len(data.encode(errors="surrogatepass"))
        if size > limit:
            await self._reply(
                _error(
                    GatewayErrorCode.FRAME_TOO_LARGE,
                    f"a frame of {size} bytes exceeds maxFrameBytes ({limit})",
                )
            )
            return
        try:
            frame = self.codec.decode_client(data)
        except DecodeError as exc:
            await self._reply(
                _error(GatewayErrorCode.BAD_FRAME, str(exc), self.codec.peek_id(data))
            )
            return
        match frame:
            case CallFrame():
                await self._start_call(frame)
            case AbortFrame():
                request = self._requests.get(frame.id)
                if request is None:
                    await self._reply(
                        _error(GatewayErrorCode.UNKNOWN_ID, "no live request has this id", frame.id)
                    )
                else:
                    request.abort("the client aborted the call")
            case ListProvidersFrame():
                providers = self.state.runtime.list_providers()
                await self._reply(ResultFrame(id=frame.id, value=self.codec.raw(providers)))
            case ListModelsFrame() | ResolveModelFrame():
                if await self._admit(frame.id):
                    request = _Request(frame.id, scope=trio.CancelScope())
                    self._add(request)
                    self._spawn(self._run_metadata, request, frame)
            case PingFrame():
                await self._reply(PongFrame(id=frame.id))
            case StatsFrame():
                state = self.state
                value = statistics_value(state.runtime.statistics(), state.statistics())
                await self._reply(ResultFrame(id=frame.id, value=self.codec.raw(value)))
            case _:
                assert_never(frame)

    async def _admit(self, id: str) -> bool:
        """Check that a new request may start; reply with the error when it may not."""
        state = self.state
        limits = state.limits
        problem: ErrorFrame | None = None
        if id in self._requests:
            problem = _error(
                GatewayErrorCode.DUPLICATE_ID, "a live request already has this id", id
            )
        elif state.stopping.is_set():
            problem = _error(GatewayErrorCode.SHUTTING_DOWN, "the gateway is shutting down", id)
        elif len(self._requests) >= limits.max_calls_per_connection:
            problem = _error(
                GatewayErrorCode.LIMIT_EXCEEDED,
                f"this connection has {len(self._requests)} live requests "
                f"(maxCallsPerConnection is {limits.max_calls_per_connection})",
                id,
            )
        elif state.live >= limits.max_calls_per_server:
            problem = _error(
                GatewayErrorCode.LIMIT_EXCEEDED,
                f"the gateway has {state.live} live requests "
                f"(maxCallsPerServer is {limits.max_calls_per_server})",
                id,
            )
        if problem is None:
            return True
        await self._reply(problem)
        return False

    async def _start_call(self, frame: CallFrame) -> None:
        if not await self._admit(frame.id):
            return
        if not self._bucket.take(trio.current_time()):
            limits = self.state.limits
            await self._reply(
                _error(
                    GatewayErrorCode.RATE_LIMITED,
                    f"more than {limits.calls_per_second:g} calls per second "
                    f"(burst {limits.call_burst}) on this connection",
                    frame.id,
                )
            )
            return
        try:
            options = self.codec.decode_request(frame.request)
        except DecodeError as exc:
            await self._reply(_error(ErrorCode.INVALID_REQUEST, str(exc), frame.id))
            return
        request = _Request(frame.id, controller=AbortController())
        if frame.retry is not None and frame.retry is not False:
            request.attempt = 1
        self._add(request)
        policy = frame.retry if not isinstance(frame.retry, bool) else None
        self._spawn(self._run_call, request, options, policy)

    def _add(self, request: _Request) -> None:
        self._requests[request.id] = request
        self.state.live += 1
        if self._idle.is_set():
            self._idle = trio.Event()

    def _forget(self, request: _Request) -> None:
        del self._requests[request.id]
        self.state.live -= 1
        if not self._requests:
            self._idle.set()

    def _spawn(self, fn: Callable[..., Awaitable[None]], *args: Any) -> None:
        assert self._nursery is not None
        self._nursery.start_soon(fn, *args)

    # ---- request tasks -----------------------------------------------------------------------

    async def _run_call(
        self, request: _Request, options: GenerateOptions, policy: ResolvedRetryPolicy | None
    ) -> None:
        assert request.controller is not None
        cid = request.id
        send = self._send
        runtime = self.state.runtime
        signal = request.controller.signal

        async def forward(item: StreamChunk | RetryScheduled) -> None:
            request.pending.append(item)
            if not request.queued:
                request.queued = True
                try:
                    send.send_nowait(request)
                except trio.WouldBlock:
                    await send.send(request)
            elif len(request.pending) >= PENDING_CHUNKS:
                request.space = trio.Event()
                await request.space.wait()

        try:
            if request.attempt is None:
                async with runtime.stream(options, signal=signal) as call:
                    async for chunk in call:
                        await forward(chunk)
            else:
                async with runtime.stream_with_retry(options, policy=policy, signal=signal) as rc:
                    async for event in rc:
                        await forward(event.chunk if isinstance(event, AttemptChunk) else event)
        except Exception as exc:
            # A middleware failed: the runtime raised it from the iteration.
            log.warning("call %r failed in middleware: %s", cid, type(exc).__name__)
            await send.send(
                _error(ErrorCode.INTERNAL, f"the call failed: {type(exc).__name__}", cid)
            )
        finally:
            self._forget(request)

    async def _run_metadata(
        self, request: _Request, frame: ListModelsFrame | ResolveModelFrame
    ) -> None:
        assert request.scope is not None
        runtime = self.state.runtime
        reply: ServerFrame = _error(ErrorCode.ABORTED, "the request was aborted", request.id)
        try:
            try:
                with request.scope:
                    value: tuple[ModelInfo, ...] | ResolvedModelInfo
                    if isinstance(frame, ListModelsFrame):
                        value = await runtime.list_models(frame.provider)
                    else:
                        value = await runtime.resolve_model_info(frame.provider, frame.model)
                    reply = ResultFrame(id=request.id, value=self.codec.raw(value))
            except LlmError as exc:
                reply = _error(exc.code, exc.failure.message, request.id)
            except Exception as exc:
                log.warning("request %r failed: %s", request.id, type(exc).__name__)
                reply = _error(
                    ErrorCode.INTERNAL, f"the request failed: {type(exc).__name__}", request.id
                )
            await self._send.send(reply)
        finally:
            self._forget(request)

    # ---- writer, heartbeat, shutdown ---------------------------------------------------------

    async def _writer(self) -> None:
        recv = self._recv
        ws = self.ws
        encode = self.codec.encode
        counters = self.state.counters
        try:
            while True:
                item = await recv.receive()
                if isinstance(item, _Request):
                    for frame in _frames(item, item.take()):
                        data = encode(frame)
                        await ws.send_message(data)
                        # Inline, not a method call: this runs per frame (see bench_scaleout).
                        counters.frames_sent += 1
                        counters.bytes_sent += (
                            len(data)
                            if type(data) is bytes or data.isascii()
                            else payload_bytes(data)
                        )
                elif isinstance(item, CloseRequest):
                    self.close_code = item.code
                    with trio.move_on_after(self.state.limits.close_timeout):
                        await ws.aclose(item.code, item.reason)
                    return
                else:
                    data = encode(item)
                    await ws.send_message(data)
                    counters.frames_sent += 1
                    counters.bytes_sent += payload_bytes(data)
        except ConnectionClosed:
            pass
        finally:
            # Nothing more can reach the client: end the connection.
            assert self._nursery is not None
            self._nursery.cancel_scope.cancel()

    async def _heartbeat(self) -> None:
        limits = self.state.limits
        while True:
            await trio.sleep(limits.heartbeat_interval)
            with trio.move_on_after(limits.heartbeat_timeout) as scope:
                try:
                    await self.ws.ping()
                except ConnectionClosed:
                    return
            if scope.cancelled_caught:
                log.info("a client missed its heartbeat; closing its connection")
                self.close_code = HEARTBEAT_CLOSE
                assert self._nursery is not None
                self._nursery.cancel_scope.cancel()
                return

    async def _watch_shutdown(self) -> None:
        state = self.state
        await state.stopping.wait()
        with trio.move_on_after(state.grace):
            await self._idle.wait()
        for request in list(self._requests.values()):
            request.abort("the gateway is shutting down")
        with trio.move_on_after(state.limits.close_timeout):
            await self._idle.wait()
            # Behind the last finishes: the writer sends them, then closes with 1001.
            await self._send.send(_SHUTDOWN)
            return
        assert self._nursery is not None
        self._nursery.cancel_scope.cancel()
