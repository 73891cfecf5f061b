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
import msgspec
import trio
from trio_websocket import ConnectionClosed, WebSocketConnection

from llmrt import (
    DecodeError,
    ErrorCode,
    Finish,
    GenerateOptions,
    LlmError,
    ModelInfo,
    ReasoningDelta,
    ResolvedModelInfo,
    ResolvedRetryPolicy,
    RetryScheduled,
    StreamChunk,
    TextDelta,
    ToolCallDelta,
)
from llmrt._egress import OUTBOUND
from llmrt.adapter import DiscoveredModel, Redactor

from .._abort import AbortController
from .._runtime import LlmRuntime
from .._statistics import GatewayStatistics, read_only
from .._tracecontext import TRACEPARENT, valid_traceparent
from ._admission import Admission
from ._budget import MetadataBudget, PeerBuckets
from ._counters import GatewayCounters, payload_bytes
from ._origin import LogThrottle, OriginPolicy
from ._protocol import (
    PROTOCOL,
    AbortFrame,
    CallFrame,
    CloseRequest,
    Codec,
    DiscoverModelsFrame,
    ErrorFrame,
    GatewayErrorCode,
    HelloFrame,
    Limits,
    ListConfigurableProvidersFrame,
    ListModelsFrame,
    ListProvidersFrame,
    PingFrame,
    PongFrame,
    ProvidersChangedFrame,
    RawChunkFrame,
    RawChunksFrame,
    ReloadFrame,
    ReloadReport,
    ResolveModelFrame,
    ResultFrame,
    RetryFrame,
    ServerFrame,
    StatsFrame,
    TokenBucket,
    split_delta,
)

__all__ = ["GatewayState", "Connection", "PENDING_CHUNKS", "Reload"]

#: What a ``reload`` frame runs: reads the configuration again, in every worker.
Reload = Callable[[], Awaitable[ReloadReport]]

log = logging.getLogger("llmrt.gateway")

#: Most chunks of one call waiting for the writer (the largest ``chunks`` frame).
PENDING_CHUNKS = 128
#: Seconds between two log lines about the same kind of bad frame on one connection.
FAULT_LOG_INTERVAL = 60.0
#: Close code when pongs stop (as the `websockets` package uses).
HEARTBEAT_CLOSE = 1011
SHUTDOWN_CLOSE = 1001
_SHUTDOWN = CloseRequest(SHUTDOWN_CLOSE, "the gateway is shutting down")
IDLE_CLOSE_REASON = "idle timeout: no call in flight"
#: A ``providers-changed`` frame waits until the providers have not changed for this
#: long (seconds), and never longer than the second figure after the first change.
PROVIDERS_SETTLE = 0.05
PROVIDERS_SETTLE_MAX = 0.5


@attrs.define(eq=False)
class GatewayState:
    """What the connections of one gateway share. Only trio tasks of one run touch it."""

    runtime: LlmRuntime
    limits: Limits
    version: str
    #: The expected bearer token; never printed.
    token: bytes | None = attrs.field(repr=False)
    connections: set[Connection] = attrs.field(factory=set)
    #: The live calls of the HTTP APIs (`_http_handler`), by their abort controllers.
    http_calls: set[AbortController] = attrs.field(factory=set)
    #: Connections accepted or being handshaken (what ``max_connections`` bounds).
    admitted: int = 0
    live: int = 0
    grace: float = 0.0
    #: Set by `GatewayServer.drain`: ``/readyz`` answers 503 (see `ready`).
    draining: bool = False
    stopping: trio.Event = attrs.field(factory=trio.Event)
    all_gone: trio.Event = attrs.field(factory=trio.Event)
    #: Removes the token (and credential-looking phrases) from metadata errors; call
    #: failures come redacted from the runtime, which holds the token while serving.
    redactor: Redactor = attrs.field(init=False, repr=False)
    counters: GatewayCounters = attrs.field(factory=GatewayCounters)
    #: Which browser origins and Host names a handshake may carry.
    policy: OriginPolicy = attrs.field(factory=OriginPolicy)
    #: Every TCP connection held, per peer address, and those still before their head.
    admission: Admission = attrs.field(init=False)
    #: The metadata buckets of peer addresses (each connection has its own too).
    metadata_peers: PeerBuckets = attrs.field(init=False)
    #: One refusal line per peer address per minute.
    refusal_log: LogThrottle = attrs.field(factory=lambda: LogThrottle(60.0))
    #: One traceback per kind of connection failure per minute.
    failure_log: LogThrottle = attrs.field(factory=lambda: LogThrottle(60.0, max_keys=64))
    #: What a ``reload`` frame runs (None: the frame is refused).
    reload: Reload | None = None

    def __attrs_post_init__(self) -> None:
        self.grace = self.limits.shutdown_grace
        self.admission = Admission(self.limits)
        self.metadata_peers = PeerBuckets(
            self.limits.metadata_per_peer_per_second, self.limits.metadata_per_peer_burst
        )
        token = self.token.decode("utf-8", "replace") if self.token is not None else None
        self.redactor = Redactor((token,))

    @property
    def ready(self) -> bool:
        """Whether the gateway accepts calls: not draining and not shutting down.

        The one readiness decision (``GET /readyz``); a load balancer stops
        sending new clients once it turns false.
        """
        return not self.draining and not self.stopping.is_set()

    def refused(self, cause: str) -> None:
        """Count a refused handshake or request; ``cause`` is a `RefusalCause` value."""
        self.counters.refused(cause)

    def statistics(self) -> GatewayStatistics:
        """The gateway's own figures, for the ``stats`` frame."""
        counters = self.counters
        return GatewayStatistics(
            ready=self.ready,
            connections=len(self.connections),
            accepted=counters.accepted,
            live_requests=self.live,
            refused=read_only(counters.refusals),
            frames_received=counters.frames_received,
            frames_sent=counters.frames_sent,
            bytes_received=counters.bytes_received,
            bytes_sent=counters.bytes_sent,
            http_requests=read_only(counters.http_requests),
        )

    def connection_ended(self, conn: Connection) -> None:
        self.connections.discard(conn)
        if self.stopping.is_set() and not self.connections and not self.http_calls:
            self.all_gone.set()

    def http_call_ended(self, controller: AbortController) -> None:
        self.http_calls.discard(controller)
        if self.stopping.is_set() and not self.connections and not self.http_calls:
            self.all_gone.set()


@attrs.define(eq=False)
class _Request:
    """A live call or metadata request of one connection, and its unsent chunks."""

    id: str
    controller: AbortController | None = None
    scope: trio.CancelScope | None = None
    #: Encoded chunks (and attempt boundaries of a retried call) not yet written.
    pending: list[msgspec.Raw | RetryScheduled] = attrs.field(factory=list)
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

    def take(self) -> list[msgspec.Raw | RetryScheduled]:
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

#: Bytes a ``chunks`` frame's envelope may take besides its id: the type, the
#: field names, an attempt number, a MessagePack array header.
_ENVELOPE = 64


def _frames(
    request: _Request, items: list[msgspec.Raw | RetryScheduled], limit: int
) -> tuple[list[RawChunkFrame | RawChunksFrame | RetryFrame], int]:
    """The frames for a request's pending items, and the bytes of chunks they carry.

    Runs of chunks, each frame's chunks at most ``limit`` bytes with the
    envelope, and a ``retry`` frame at each attempt boundary of a retried
    call. A chunk that does not fit a frame alone gets its own (the writer
    then sends it in parts).
    """
    frames: list[RawChunkFrame | RawChunksFrame | RetryFrame] = []
    run: list[msgspec.Raw] = []
    room = limit - _ENVELOPE - 6 * len(request.id)
    size = 0
    total = 0

    def flush() -> None:
        if len(run) == 1:
            frames.append(RawChunkFrame(id=request.id, chunk=run[0], attempt=request.attempt))
        elif run:
            frames.append(RawChunksFrame(id=request.id, chunks=tuple(run), attempt=request.attempt))
        run.clear()

    for item in items:
        if isinstance(item, RetryScheduled):
            flush()
            size = 0
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
            n = len(item)
            total += n
            # Plus a separator per chunk (a comma in JSON).
            if run and size + n + 1 > room:
                flush()
                size = 0
            run.append(item)
            size += n + 1
    flush()
    return frames, total


def _error(code: str, message: str, id: str | None = None) -> ErrorFrame:
    return ErrorFrame(code=code, message=message, id=id)


@attrs.define(eq=False)
class Connection:
    """The actor serving one websocket; `run` returns when the websocket is done."""

    state: GatewayState
    ws: WebSocketConnection
    codec: Codec
    #: The largest message written to this client: ``maxFrameBytes``, or less
    #: when the client announced a smaller limit in its handshake.
    frame_limit: int = attrs.field(default=0, kw_only=True)
    #: The client's address: its metadata budget is shared with its other connections.
    peer: str = attrs.field(default="", kw_only=True)
    #: The close code the gateway chose, when it closed the connection itself.
    close_code: int | None = attrs.field(default=None, init=False)
    _send: trio.MemorySendChannel[Outbound] = attrs.field(init=False)
    _recv: trio.MemoryReceiveChannel[Outbound] = attrs.field(init=False)
    _requests: dict[str, _Request] = attrs.field(factory=dict, init=False)
    _idle: trio.Event = attrs.field(factory=trio.Event, init=False)
    _bucket: TokenBucket = attrs.field(init=False)
    _metadata: MetadataBudget = attrs.field(init=False)
    _nursery: trio.Nursery | None = attrs.field(default=None, init=False)
    #: When the connection last became idle (no live request), on trio's clock.
    _idle_since: float = attrs.field(default=0.0, init=False)
    #: One log line per kind of bad frame per interval, however many arrive.
    _faults: LogThrottle = attrs.field(factory=lambda: LogThrottle(FAULT_LOG_INTERVAL), init=False)
    #: Bytes of encoded chunks queued for the writer, over all calls.
    _pending_bytes: int = attrs.field(default=0, init=False)
    #: Set by the writer when ``_pending_bytes`` is back within the budget.
    _budget: trio.Event | None = attrs.field(default=None, init=False)

    def __attrs_post_init__(self) -> None:
        limits = self.state.limits
        if self.frame_limit <= 0:
            self.frame_limit = limits.max_frame_bytes
        self._send, self._recv = trio.open_memory_channel[Outbound](limits.outbound_frames)
        self._bucket = TokenBucket(limits.calls_per_second, limits.call_burst)
        self._metadata = MetadataBudget(limits, self.peer, self.state.metadata_peers)
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
                        protocol=PROTOCOL,
                        server=state.version,
                        limits=state.limits.announce(self.frame_limit),
                    )
                )
                nursery.start_soon(self._writer)
                nursery.start_soon(self._heartbeat)
                nursery.start_soon(self._watch_shutdown)
                nursery.start_soon(self._watch_idle)
                nursery.start_soon(self._watch_providers)
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
            message = f"a frame of {size} bytes exceeds maxFrameBytes ({limit})"
            self._fault(GatewayErrorCode.FRAME_TOO_LARGE, message)
            await self._reply(_error(GatewayErrorCode.FRAME_TOO_LARGE, message))
            return
        try:
            frame = self.codec.decode_client(data)
        except DecodeError as exc:
            self._fault(GatewayErrorCode.BAD_FRAME, str(exc))
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
                elif frame.reason:
                    request.abort(f"the client aborted the call: {frame.reason}")
                else:
                    request.abort("the client aborted the call")
            case (
                ListProvidersFrame()
                | ListConfigurableProvidersFrame()
                | ListModelsFrame()
                | ResolveModelFrame()
                | DiscoverModelsFrame()
                | ReloadFrame()
            ) if (over := self._metadata.take(trio.current_time())) is not None:
                # Refused before any work: a flood costs a bucket check per frame.
                self._fault(GatewayErrorCode.RATE_LIMITED, over)
                await self._reply(_error(GatewayErrorCode.RATE_LIMITED, over, frame.id))
            case ListProvidersFrame():
                self._idle_since = trio.current_time()  # a request, answered at once
                providers = self.state.runtime.list_providers()
                await self._reply(ResultFrame(id=frame.id, value=self.codec.raw(providers)))
            case ListConfigurableProvidersFrame():
                self._idle_since = trio.current_time()  # a request, answered at once
                directory = self.state.runtime.list_configurable_providers()
                await self._reply(ResultFrame(id=frame.id, value=self.codec.raw(directory)))
            case DiscoverModelsFrame() if (
                frame.request.base_url is not None and not self.state.limits.discover_any_url
            ):
                message = (
                    "this gateway asks only configured endpoints: name a `provider` "
                    "(or set discover_any_url in its [gateway] settings)"
                )
                await self._reply(_error(ErrorCode.INVALID_REQUEST, message, frame.id))
            case ListModelsFrame() | ResolveModelFrame() | DiscoverModelsFrame():
                if await self._admit(frame.id):
                    request = _Request(frame.id, scope=trio.CancelScope())
                    self._add(request)
                    self._spawn(self._run_metadata, request, frame)
            case ReloadFrame() if self.state.token is None:
                message = (
                    "reload needs a gateway with a token (serve with $LLMRT_GATEWAY_TOKEN set), "
                    "or send the serving process SIGHUP"
                )
                await self._reply(_error(ErrorCode.AUTH, message, frame.id))
            case ReloadFrame() if self.state.reload is None:
                message = "this gateway has no configuration file to reload"
                await self._reply(_error(ErrorCode.INVALID_REQUEST, message, frame.id))
            case ReloadFrame():
                if await self._admit(frame.id):
                    request = _Request(frame.id)
                    self._add(request)
                    self._spawn(self._run_reload, request)
            case PingFrame():
                await self._reply(PongFrame(id=frame.id))
            case StatsFrame():
                state = self.state
                value = msgspec.structs.replace(
                    state.runtime.statistics(), gateway=state.statistics()
                )
                await self._reply(ResultFrame(id=frame.id, value=self.codec.raw(value)))
            case _:
                assert_never(frame)

    def _fault(self, code: str, message: str) -> None:
        """Log a refused client frame (bad, too large, over budget): a line per code per minute."""
        log_it, muted = self._faults.allow(code, trio.current_time())
        if log_it:
            more = f" ({muted} more since the last line)" if muted else ""
            what = "over its budget" if code == GatewayErrorCode.RATE_LIMITED else "a bad frame"
            log.info("a client sent %s, %s: %.200s%s", what, code, message, more)

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
        if frame.traceparent is not None and not valid_traceparent(frame.traceparent):
            await self._reply(
                _error(
                    GatewayErrorCode.BAD_FRAME,
                    "traceparent is not a W3C traceparent "
                    "(version-traceid-parentid-flags, lowercase hex, ids not all zero)",
                    frame.id,
                )
            )
            return
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
        self._spawn(self._run_call, request, options, policy, frame.traceparent)

    def _add(self, request: _Request) -> None:
        self._requests[request.id] = request
        self.state.live += 1
        if self._idle.is_set():
            self._idle = trio.Event()

    def _forget(self, request: _Request) -> None:
        del self._requests[request.id]
        self.state.live -= 1
        if not self._requests:
            self._idle_since = trio.current_time()
            self._idle.set()

    def _spawn(self, fn: Callable[..., Awaitable[None]], *args: Any) -> None:
        assert self._nursery is not None
        self._nursery.start_soon(fn, *args)

    # ---- request tasks -----------------------------------------------------------------------

    async def _run_call(
        self,
        request: _Request,
        options: GenerateOptions,
        policy: ResolvedRetryPolicy | None,
        traceparent: str | None = None,
    ) -> None:
        assert request.controller is not None
        if traceparent is not None:
            # This task's own context; the call task copies it (see _tracecontext).
            TRACEPARENT.set(traceparent)
        cid = request.id
        send = self._send
        runtime = self.state.runtime
        signal = request.controller.signal

        raw = self.codec.raw
        budget = self.state.limits.max_pending_bytes
        # The largest chunk that fits a frame of its own.
        room = self.frame_limit - _ENVELOPE - 6 * len(cid) - 1

        def size_of(chunk: StreamChunk) -> int:
            return len(raw(chunk))

        async def put(item: msgspec.Raw | RetryScheduled) -> None:
            request.pending.append(item)
            if type(item) is msgspec.Raw:
                self._pending_bytes += len(item)
            if not request.queued:
                request.queued = True
                try:
                    send.send_nowait(request)
                except trio.WouldBlock:
                    await send.send(request)
            elif len(request.pending) >= PENDING_CHUNKS:
                request.space = trio.Event()
                await request.space.wait()
            if self._pending_bytes > budget:
                await self._wait_for_budget()

        async def forward(item: StreamChunk | RetryScheduled) -> None:
            if type(item) is RetryScheduled:
                await put(item)
                return
            encoded = raw(item)
            size = len(encoded)
            if size > room and isinstance(item, TextDelta | ReasoningDelta | ToolCallDelta):
                # Cut into deltas that concatenate to it, each in a frame of its own size.
                for piece in split_delta(item, size_of, room):
                    await put(raw(piece))
                return
            # The common case, inlined: this runs once per chunk.
            request.pending.append(encoded)
            self._pending_bytes += size
            if not request.queued:
                request.queued = True
                try:
                    send.send_nowait(request)
                except trio.WouldBlock:
                    await send.send(request)
            elif len(request.pending) >= PENDING_CHUNKS:
                request.space = trio.Event()
                await request.space.wait()
            if self._pending_bytes > budget:
                await self._wait_for_budget()

        # Failures arrive redacted (the call task is the one redaction point, and
        # the runtime holds this gateway's token): nothing to redact here.
        try:
            if request.attempt is None:
                async with runtime.stream(options, signal=signal) as call:
                    async for chunk in call:
                        await forward(chunk)
            else:
                async with runtime.stream_with_retry(options, policy=policy, signal=signal) as rc:
                    # Chunks unwrapped (`RetryCall.next_chunk`): the frames carry no attempt tag.
                    while type(event := await rc.next_chunk()) is not Finish:
                        await forward(event)
                    await forward(event)
        except Exception as exc:
            # A middleware failed: the runtime raised it from the iteration.
            log.warning("call %r failed in middleware: %s", cid, type(exc).__name__)
            await send.send(
                _error(ErrorCode.INTERNAL, f"the call failed: {type(exc).__name__}", cid)
            )
        finally:
            self._forget(request)

    async def _run_metadata(
        self, request: _Request, frame: ListModelsFrame | ResolveModelFrame | DiscoverModelsFrame
    ) -> None:
        assert request.scope is not None
        runtime = self.state.runtime
        redactor = self.state.redactor
        reply: ServerFrame = _error(ErrorCode.ABORTED, "the request was aborted", request.id)
        try:
            try:
                with request.scope:
                    value: tuple[ModelInfo, ...] | ResolvedModelInfo | tuple[DiscoveredModel, ...]
                    match frame:
                        case ListModelsFrame():
                            value = await runtime.list_models(
                                frame.provider, max_age=self.state.limits.model_list_ttl
                            )
                        case ResolveModelFrame():
                            value = await runtime.resolve_model_info(frame.provider, frame.model)
                        case DiscoverModelsFrame():
                            # The client's key for this interrogation: never in a reply.
                            redactor = redactor.with_secrets((frame.request.api_key,))
                            if frame.request.base_url is not None:
                                # A URL the client chose: where this task may connect.
                                OUTBOUND.set(self.state.limits.outbound)
                            value = await runtime.discover_models(frame.settings_ns, frame.request)
                        case _:
                            assert_never(frame)
                    reply = ResultFrame(id=request.id, value=self.codec.raw(value))
            except LlmError as exc:
                message = redactor.redact(exc.failure.message)
                reply = _error(exc.code, message, request.id)
            except Exception as exc:
                log.warning("request %r failed: %s", request.id, type(exc).__name__)
                reply = _error(
                    ErrorCode.INTERNAL, f"the request failed: {type(exc).__name__}", request.id
                )
            await self._send.send(reply)
        finally:
            self._forget(request)

    async def _run_reload(self, request: _Request) -> None:
        """Read the configuration again (every worker) and answer with the report.

        Not cancelled by an ``abort``: a reload that started runs to its end
        (it is bounded), only its answer is then dropped.
        """
        assert self.state.reload is not None
        try:
            reply: ServerFrame
            try:
                report = await self.state.reload()
                reply = ResultFrame(id=request.id, value=self.codec.raw(report))
            except Exception as exc:
                log.warning("reload %r failed: %s", request.id, type(exc).__name__)
                reply = _error(
                    ErrorCode.INTERNAL, f"the reload failed: {type(exc).__name__}", request.id
                )
            await self._send.send(reply)
        finally:
            self._forget(request)

    # ---- writer, heartbeat, shutdown ---------------------------------------------------------

    async def _watch_providers(self) -> None:
        """Tell the client when the runtime's providers change (a ``providers-changed`` frame).

        The runtime's subscription holds one pending wake-up at most, so a
        client that reads slowly gets one frame for many changes, never a
        backlog. A reload commits several changes in a row: the frame waits
        until none has come for `PROVIDERS_SETTLE` seconds (at most
        `PROVIDERS_SETTLE_MAX`), so that clients ask for the list once, not
        once per commit.
        """
        async with self.state.runtime.adapters_updated() as updates:
            async for _ in updates:
                ended = False
                with trio.move_on_after(PROVIDERS_SETTLE_MAX):
                    while not ended:
                        with trio.move_on_after(PROVIDERS_SETTLE) as quiet:
                            try:
                                await updates.receive()
                            except trio.EndOfChannel:
                                ended = True  # the runtime closed: say the last change
                        if quiet.cancelled_caught:
                            break
                await self._send.send(ProvidersChangedFrame())
                if ended:
                    return

    async def _writer(self) -> None:
        recv = self._recv
        ws = self.ws
        within = self.codec.frames_within
        limit = self.frame_limit
        counters = self.state.counters
        try:
            while True:
                item = await recv.receive()
                if isinstance(item, _Request):
                    frames, written = _frames(item, item.take(), limit)
                    for frame in frames:
                        for message in within(frame, limit):
                            await ws.send_message(message)
                            # Inline, not a method call: this runs per frame (see bench_scaleout).
                            counters.frames_sent += 1
                            counters.bytes_sent += (
                                len(message)
                                if type(message) is bytes or message.isascii()
                                else payload_bytes(message)
                            )
                    self._release(written)
                elif isinstance(item, CloseRequest):
                    self.close_code = item.code
                    with trio.move_on_after(self.state.limits.close_timeout):
                        await ws.aclose(item.code, item.reason)
                    return
                else:
                    for message in within(item, limit):
                        await ws.send_message(message)
                        counters.frames_sent += 1
                        counters.bytes_sent += payload_bytes(message)
        except ConnectionClosed:
            pass
        finally:
            # Nothing more can reach the client: end the connection.
            assert self._nursery is not None
            self._nursery.cancel_scope.cancel()

    async def _wait_for_budget(self) -> None:
        """Wait until the writer has brought the pending bytes back within the budget.

        The caller's chunk is queued already, so one chunk larger than the
        whole budget still goes through.
        """
        budget = self.state.limits.max_pending_bytes
        while self._pending_bytes > budget:
            if self._budget is None:
                self._budget = trio.Event()
            await self._budget.wait()

    def _release(self, written: int) -> None:
        """The writer wrote ``written`` bytes of chunks: wake calls waiting for the budget."""
        self._pending_bytes -= written
        if self._budget is not None and self._pending_bytes <= self.state.limits.max_pending_bytes:
            self._budget.set()
            self._budget = None

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

    async def _watch_idle(self) -> None:
        """Close the connection once no request has been in flight for ``idle_timeout``."""
        timeout = self.state.limits.idle_timeout
        self._idle_since = trio.current_time()
        while True:
            await self._idle.wait()
            # A request that started and ended meanwhile moved ``_idle_since``.
            deadline = self._idle_since + timeout
            if trio.current_time() < deadline:
                await trio.sleep_until(deadline)
                continue
            if self.state.stopping.is_set():
                return  # the shutdown closes it
            log.debug("closing a connection idle for %g s", timeout)
            await self._send.send(CloseRequest(SHUTDOWN_CLOSE, IDLE_CLOSE_REASON))
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
