"""A Python client of the llmrt websocket gateway (protocol ``llmrt.v1``).

Remote calls have the shape of in-process ones::

    async with open_gateway_client("ws://127.0.0.1:8765/", token=...) as client:
        async with client.stream(options) as call:
            async for chunk in call:   # the same typed llmrt chunks, one terminal Finish
                ...
        providers = await client.list_providers()

The client owns a reader task that routes frames to a bounded channel per
call. A call's consumer that falls behind fills its channel; the reader
then waits, so a slow consumer slows down the calls of its own connection
(the websocket is one TCP stream), never other clients. Failures end calls
the way in-process failures do: an ``error`` frame about a call becomes an
``error`` finish carrying the frame's code; a lost connection ends every
open call with an ``error`` finish, code ``NETWORK``.

Connecting (bounded, refusals translated) is `_dial`'s; putting ``part``
frames back together, `_reassembly`'s.
"""

from __future__ import annotations

import itertools
import logging
import math
import urllib.parse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Any

import attrs
import msgspec
import trio
from trio_websocket import ConnectionClosed, HandshakeError, WebSocketConnection

from llmrt import (
    AttemptChunk,
    DecodeError,
    ErrorCode,
    Finish,
    FinishError,
    GenerateOptions,
    LlmError,
    LlmFailure,
    ModelInfo,
    ResolvedModelInfo,
    ResolvedRetryPolicy,
    RetryScheduled,
)
from llmrt._completion import Completion, complete_chunks, complete_events
from llmrt._helpers import sole_exception
from llmrt.adapter import ConfigurableProvider, DiscoveredModel, ModelDiscoveryRequest, ProviderInfo

from .._statistics import RuntimeStatistics
from .._tracecontext import valid_traceparent
from ._dial import dial, endpoint_of, translate_handshake
from ._protocol import (
    FRAME_BYTES_HEADER,
    JSON,
    MAX_ABORT_REASON,
    MIN_FRAME_BYTES,
    MSGPACK,
    AbortFrame,
    BinaryPartFrame,
    CallFrame,
    ChunkFrame,
    ChunksFrame,
    ClientFrame,
    Codec,
    DiscoverModelsFrame,
    ErrorFrame,
    HelloFrame,
    ListConfigurableProvidersFrame,
    ListModelsFrame,
    ListProvidersFrame,
    PartFrame,
    PongFrame,
    ProvidersChangedFrame,
    ReloadFrame,
    ReloadReport,
    ResolveModelFrame,
    ResultFrame,
    RetryFrame,
    StatsFrame,
    ends_request,
)
from ._reassembly import PartsOverflow, Reassembly

__all__ = ["open_gateway_client", "GatewayClient", "RemoteCall", "RemoteCallContext"]

log = logging.getLogger("llmrt.client")

#: The consumer yields to the scheduler at least once per this many buffered chunks.
_YIELD_EVERY = 64
#: Bound on sending the abort of a call whose consumer left early.
_ABORT_TIMEOUT = 2.0
#: Bound on the frames the gateway sends in ``part`` frames (a very large block-end):
#: the UTF-8 bytes of the ``id`` and ``data`` of every part held, over all frames
#: partly received at once, and how many frames may be partly received at once
#: (`Reassembly`; read when a client is made).
MAX_ASSEMBLED_BYTES = 256 << 20
MAX_PARTIAL_FRAMES = 16


def _error_finish(code: str, message: str) -> Finish:
    return Finish(reason=FinishError(failure=LlmFailure(message=message, code=code)))


def _network(message: str) -> LlmFailure:
    return LlmFailure(message=message, code=ErrorCode.NETWORK)


@attrs.define(eq=False)
class RemoteCall:
    """A call running in the gateway: ``async for chunk in call``; `abort` aborts it."""

    id: str
    _client: GatewayClient
    #: True for `GatewayClient.stream_with_retry` calls: iteration yields `RetryEvent`s.
    retrying: bool = False
    _send: trio.MemorySendChannel[Any] = attrs.field(init=False)
    _recv: trio.MemoryReceiveChannel[Any] = attrs.field(init=False)
    #: The finish the consumer gets after the buffered chunks when the call
    #: ended without a finish frame (error frame, lost connection).
    _terminal: Finish | None = attrs.field(default=None, init=False)
    _ended: bool = attrs.field(default=False, init=False)
    _aborted: bool = attrs.field(default=False, init=False)
    _since_yield: int = attrs.field(default=0, init=False)
    #: The attempt of the latest chunk (retried calls).
    _attempt: int = attrs.field(default=1, init=False)

    def __attrs_post_init__(self) -> None:
        size = self._client._call_buffer
        self._send, self._recv = trio.open_memory_channel[Any](size)

    def __aiter__(self) -> RemoteCall:
        return self

    async def __anext__(self) -> Any:
        """The next chunk; iteration ends after the terminal `Finish`.

        A checkpoint when it waits, and at least once per 64 buffered chunks.
        """
        if self._ended:
            raise StopAsyncIteration
        try:
            chunk = self._recv.receive_nowait()
        except trio.WouldBlock:
            try:
                chunk = await self._recv.receive()
            except trio.EndOfChannel:
                chunk = self._lost()
        except trio.EndOfChannel:
            chunk = self._lost()
        else:
            self._since_yield += 1
            if self._since_yield >= _YIELD_EVERY:
                self._since_yield = 0
                await trio.lowlevel.checkpoint()
        if type(chunk) is Finish or (type(chunk) is AttemptChunk and type(chunk.chunk) is Finish):
            self._ended = True
        return chunk

    def _lost(self) -> Finish | AttemptChunk:
        finish = self._terminal or _error_finish(ErrorCode.NETWORK, "the gateway connection closed")
        return AttemptChunk(attempt=self._attempt, chunk=finish) if self.retrying else finish

    def abort(self, reason: str | None = None) -> None:
        """Ask the gateway to abort the call: it ends with one ``aborted`` finish.

        Synchronous and idempotent; a no-op once the call has ended. ``reason``
        travels in the ``abort`` frame (cut to 256 characters) and comes back
        quoted in the finish's message.
        """
        if self._aborted or self._ended or self.id not in self._client._calls:
            return
        self._aborted = True
        text = None if reason is None else str(reason)[:MAX_ABORT_REASON] or None
        self._client._send_soon(AbortFrame(id=self.id, reason=text))

    # ---- the reader's side -------------------------------------------------------------------

    async def _deliver(self, chunk: Any) -> bool:
        """Hand a chunk to the consumer; False when the consumer is gone."""
        try:
            self._send.send_nowait(chunk)
        except trio.WouldBlock:
            try:
                await self._send.send(chunk)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return False
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return False
        return True

    def _end(self, terminal: Finish | None) -> None:
        if terminal is not None and self._terminal is None:
            self._terminal = terminal
        self._send.close()


def _checked_traceparent(value: str | None) -> str | None:
    if value is not None and not (isinstance(value, str) and valid_traceparent(value)):
        raise ValueError(f"not a W3C traceparent: {value!r:.80}")
    return value


@attrs.define(eq=False)
class RemoteCallContext:
    """``async with client.stream(options) as call``.

    Entering sends the ``call`` frame; leaving before the finish sends
    ``abort`` and drops whatever else arrives for the call.
    """

    _client: GatewayClient
    _options: GenerateOptions
    _retry: bool | ResolvedRetryPolicy | None = None
    _traceparent: str | None = None
    _call: RemoteCall | None = attrs.field(default=None, init=False)

    async def __aenter__(self) -> RemoteCall:
        client = self._client
        call = RemoteCall(f"c{next(client._ids)}", client, retrying=self._retry is not None)
        self._call = call
        client._calls[call.id] = call
        request = client._codec.raw(self._options)
        try:
            await client._send_frame(
                CallFrame(
                    id=call.id, request=request, retry=self._retry, traceparent=self._traceparent
                )
            )
        except LlmError as exc:
            # The call still ends with exactly one finish, as in-process calls do.
            client._calls.pop(call.id, None)
            call._end(Finish(reason=FinishError(failure=exc.failure)))
        return call

    async def __aexit__(self, *exc_info: object) -> None:
        call = self._call
        assert call is not None
        client = self._client
        call._recv.close()
        if client._calls.pop(call.id, None) is not None and not client._closed:
            # When the connection is gone, the gateway cancels the call itself.
            with trio.move_on_after(_ABORT_TIMEOUT, shield=True), suppress(LlmError):
                await client._send_frame(AbortFrame(id=call.id))


@attrs.define(eq=False)
class _Waiter:
    """A metadata request waiting for its ``result`` or ``error`` frame."""

    done: trio.Event = attrs.field(factory=trio.Event)
    value: msgspec.Raw | None = None
    failure: LlmFailure | None = None


@attrs.define(eq=False)
class GatewayClient:
    """A connection to a gateway, made by `open_gateway_client`."""

    _ws: WebSocketConnection
    _codec: Codec
    #: The server's ``hello`` frame: protocol, server version and limits.
    hello: HelloFrame
    _nursery: trio.Nursery
    _call_buffer: int
    _ids: itertools.count[int] = attrs.field(factory=lambda: itertools.count(1), init=False)
    _calls: dict[str, RemoteCall] = attrs.field(factory=dict, init=False)
    _waiters: dict[str, _Waiter] = attrs.field(factory=dict, init=False)
    _closed: bool = attrs.field(default=False, init=False)
    #: Parts of frames too large for one message.
    _parts: Reassembly = attrs.field(
        factory=lambda: Reassembly(MAX_ASSEMBLED_BYTES, MAX_PARTIAL_FRAMES), init=False
    )
    #: The websocket close code once the connection has closed (1001: the gateway shut down).
    close_code: int | None = attrs.field(default=None, init=False)
    #: Subscribers to ``providers-changed`` frames (see `providers_changed`).
    _changes: set[trio.MemorySendChannel[None]] = attrs.field(factory=set, init=False)

    def stream(
        self, options: GenerateOptions, *, traceparent: str | None = None
    ) -> RemoteCallContext:
        """Stream one call through the gateway; see the module docstring.

        ``traceparent``: a W3C trace context sent with the call, so a tracing
        gateway's span of it continues the caller's trace (see
        ``llmrt.actors.otel.current_traceparent``). `ValueError` if malformed.
        """
        if not isinstance(options, GenerateOptions):
            raise TypeError(f"options must be GenerateOptions, not {type(options).__name__}")
        return RemoteCallContext(self, options, None, _checked_traceparent(traceparent))

    def stream_with_retry(
        self,
        options: GenerateOptions,
        *,
        policy: ResolvedRetryPolicy | None = None,
        traceparent: str | None = None,
    ) -> RemoteCallContext:
        """Stream a call the gateway retries (with ``policy``, else the route's).

        Iteration yields `AttemptChunk` and `RetryScheduled` events, as
        `LlmRuntime.stream_with_retry` does in-process. ``traceparent`` as in `stream`.
        """
        if not isinstance(options, GenerateOptions):
            raise TypeError(f"options must be GenerateOptions, not {type(options).__name__}")
        return RemoteCallContext(
            self,
            options,
            policy if policy is not None else True,
            _checked_traceparent(traceparent),
        )

    async def complete(
        self, options: GenerateOptions, *, traceparent: str | None = None
    ) -> Completion:
        """One call through the gateway, not streamed: `LlmRuntime.complete`'s answer.

        Raises `LlmError` with the failure of an ``error`` or ``aborted`` finish
        (a refused request, a lost connection: ``NETWORK``). A checkpoint.
        """
        async with self.stream(options, traceparent=traceparent) as call:
            return await complete_chunks(call, options.provider, options.model)

    async def complete_with_retry(
        self,
        options: GenerateOptions,
        *,
        policy: ResolvedRetryPolicy | None = None,
        traceparent: str | None = None,
    ) -> Completion:
        """`complete` over the attempts the gateway makes (see `stream_with_retry`)."""
        async with self.stream_with_retry(options, policy=policy, traceparent=traceparent) as call:
            return await complete_events(call, options.provider, options.model)

    async def list_providers(self) -> tuple[ProviderInfo, ...]:
        """The gateway runtime's providers. Raises `LlmError` (``NETWORK``, ...)."""
        rid = f"r{next(self._ids)}"
        raw = await self._request(rid, ListProvidersFrame(id=rid))
        providers: tuple[ProviderInfo, ...] = self._decode(raw, tuple[ProviderInfo, ...])
        return providers

    async def list_models(self, provider: str) -> tuple[ModelInfo, ...]:
        """The model catalog of ``provider``. Raises `LlmError` (``NO_ADAPTER``, ...)."""
        rid = f"r{next(self._ids)}"
        raw = await self._request(rid, ListModelsFrame(id=rid, provider=provider))
        models: tuple[ModelInfo, ...] = self._decode(raw, tuple[ModelInfo, ...])
        return models

    async def resolve_model(self, provider: str, model: str) -> ResolvedModelInfo:
        """Exact-model metadata. Raises `LlmError` (``NO_ADAPTER``, ``INVALID_MODEL_INFO``, ...)."""
        rid = f"r{next(self._ids)}"
        raw = await self._request(rid, ResolveModelFrame(id=rid, provider=provider, model=model))
        info: ResolvedModelInfo = self._decode(raw, ResolvedModelInfo)
        return info

    async def list_configurable_providers(self) -> tuple[ConfigurableProvider, ...]:
        """The gateway runtime's provider directory, registered or dormant.

        Raises `LlmError` (``NETWORK``; ``BAD_FRAME`` from a gateway that
        predates the ``list-configurable-providers`` frame).
        """
        rid = f"r{next(self._ids)}"
        raw = await self._request(rid, ListConfigurableProvidersFrame(id=rid))
        entries: tuple[ConfigurableProvider, ...] = self._decode(
            raw, tuple[ConfigurableProvider, ...]
        )
        return entries

    async def discover_models(
        self, settings_ns: str, request: ModelDiscoveryRequest | None = None
    ) -> tuple[DiscoveredModel, ...]:
        """Ask the gateway's discovery for ``settings_ns`` what an endpoint serves.

        ``request.api_key`` travels in the frame (use ``wss://`` beyond this
        machine) and serves this interrogation alone. A gateway refuses a
        ``base_url`` unless its ``discover_any_url`` is on. Raises `LlmError`
        (``NO_ADAPTER``: no discovery for the namespace; ``INVALID_REQUEST``,
        ``NETWORK``, ``TIMEOUT``, the endpoint's classified status, ...).
        """
        rid = f"r{next(self._ids)}"
        frame = DiscoverModelsFrame(
            id=rid, settings_ns=settings_ns, request=request or ModelDiscoveryRequest()
        )
        raw = await self._request(rid, frame)
        models: tuple[DiscoveredModel, ...] = self._decode(raw, tuple[DiscoveredModel, ...])
        return models

    async def stats(self) -> RuntimeStatistics:
        """The gateway's statistics snapshot (its runtime's and its own figures).

        Raises `LlmError` (``NETWORK``; ``BAD_FRAME`` from a gateway that
        predates the ``stats`` frame).
        """
        rid = f"r{next(self._ids)}"
        raw = await self._request(rid, StatsFrame(id=rid))
        value: RuntimeStatistics = self._decode(raw, RuntimeStatistics)
        return value

    async def reload(self) -> ReloadReport:
        """Ask the gateway to read its configuration file again, in every worker.

        Returns the report (``ok`` false: some process refused the file and
        serves its old configuration on; each `WorkerReload` says why, with
        the file's ``FILE:LINE`` error). Raises `LlmError` (``AUTH``: the
        gateway has no token; ``INVALID_REQUEST``: it has no file to reload;
        ``RATE_LIMITED``, ``NETWORK``, ...).
        """
        rid = f"r{next(self._ids)}"
        raw = await self._request(rid, ReloadFrame(id=rid))
        report: ReloadReport = self._decode(raw, ReloadReport)
        return report

    @asynccontextmanager
    async def providers_changed(self) -> AsyncIterator[trio.MemoryReceiveChannel[None]]:
        """Subscribe to the gateway's ``providers-changed`` frames: ``async for _ in changes``
        wakes after each (ask `list_providers` again then).

        Coalescing like `LlmRuntime.adapters_updated`: a subscriber that is
        behind holds one pending wake-up, never a backlog, and never slows
        the connection. The iteration ends when the connection closes.
        """
        send, recv = trio.open_memory_channel[None](1)
        if self._closed:
            send.close()
        else:
            self._changes.add(send)
        try:
            async with recv:
                yield recv
        finally:
            self._changes.discard(send)
            send.close()

    def _providers_changed(self) -> None:
        for send in list(self._changes):
            try:
                send.send_nowait(None)
            except trio.WouldBlock:
                pass  # one wake-up is pending already: payload-free, so coalesced
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self._changes.discard(send)

    # ---- internals ---------------------------------------------------------------------------

    def _decode(self, raw: msgspec.Raw, type: Any) -> Any:
        try:
            return self._codec.decode_value(raw, type)
        except DecodeError as exc:
            raise LlmError(ErrorCode.PROTOCOL, str(exc)) from None

    async def _request(self, rid: str, frame: ClientFrame) -> msgspec.Raw:
        waiter = _Waiter()
        self._waiters[rid] = waiter
        try:
            await self._send_frame(frame)
            await waiter.done.wait()
        finally:
            if self._waiters.pop(rid, None) is not None and not waiter.done.is_set():
                self._send_soon(AbortFrame(id=rid))  # cancelled while waiting
        if waiter.failure is not None:
            raise LlmError.from_failure(waiter.failure)
        assert waiter.value is not None
        return waiter.value

    async def _send_frame(self, frame: ClientFrame) -> None:
        """Send one frame. Raises `LlmError` ``NETWORK`` when the connection is closed."""
        if self._closed:
            raise LlmError(ErrorCode.NETWORK, "the gateway connection is closed")
        try:
            await self._ws.send_message(self._codec.encode(frame))
        except ConnectionClosed:
            raise LlmError(ErrorCode.NETWORK, "the gateway connection is closed") from None

    def _send_soon(self, frame: ClientFrame) -> None:
        async def send() -> None:
            # When the connection is gone, the gateway has cancelled the request.
            with suppress(LlmError):
                await self._send_frame(frame)

        with suppress(RuntimeError):  # the client is closing
            self._nursery.start_soon(send)

    async def _read(self) -> None:
        reason = "the gateway connection closed"
        failure: LlmFailure | None = None
        try:
            while True:
                try:
                    data = await self._ws.get_message()
                except ConnectionClosed as exc:
                    if exc.reason is not None:
                        self.close_code = exc.reason.code
                        reason = f"the gateway connection closed (code {exc.reason.code})"
                    return
                try:
                    frame = self._codec.decode_server(data)
                    if type(frame) is PartFrame or type(frame) is BinaryPartFrame:
                        whole = self._parts.add(frame)
                        if whole is None:
                            continue
                        frame = self._codec.decode_server(whole)
                except DecodeError as exc:
                    # Unknown frame types are ignored (newer servers may add some).
                    log.debug("ignoring a frame: %s", exc)
                    continue
                except PartsOverflow as exc:
                    # Dropping the parts would leave their call waiting forever:
                    # the connection ends instead, every request with this failure.
                    failure = LlmFailure(message=str(exc), code=ErrorCode.PROTOCOL)
                    self._closed = True
                    self._parts.clear()
                    # 1009: the message (here, the frame in parts) is too big. Closed
                    # before the calls end, so the close frame is out before their
                    # consumers can leave (and cancel this reader). Bounded: a peer
                    # that never answers the close loses its TCP stream.
                    with trio.move_on_after(_CLOSE_TIMEOUT):
                        await self._ws.aclose(1009, "a frame in parts is too large")
                    return
                await self._route(frame)
        finally:
            self._closed = True
            if failure is None:
                failure = _network(reason)
            for call in self._calls.values():
                call._end(Finish(reason=FinishError(failure=failure)))
            self._calls.clear()
            for waiter in self._waiters.values():
                waiter.failure = failure
                waiter.done.set()
            for send in self._changes:
                send.close()
            self._changes.clear()

    async def _route(self, frame: Any) -> None:
        cls = type(frame)
        if cls is ChunkFrame or cls is ChunksFrame:
            call = self._calls.get(frame.id)
            if call is None:
                return  # the consumer left; the abort is on its way
            chunks = (frame.chunk,) if cls is ChunkFrame else frame.chunks
            attempt = frame.attempt or 1
            call._attempt = attempt
            for chunk in chunks:
                item = AttemptChunk(attempt=attempt, chunk=chunk) if call.retrying else chunk
                if not await call._deliver(item):
                    break
                if type(chunk) is Finish:
                    self._calls.pop(call.id, None)
                    call._end(None)
                    break
        elif cls is RetryFrame:
            call = self._calls.get(frame.id)
            if call is not None and call.retrying:
                event = RetryScheduled(
                    attempt=frame.attempt, failure=frame.failure, delay_ms=frame.delay_ms
                )
                await call._deliver(event)
        elif cls is ResultFrame:
            waiter = self._waiters.get(frame.id)
            if waiter is not None:
                waiter.value = frame.value
                waiter.done.set()
        elif cls is ErrorFrame:
            self._on_error(frame)
        elif cls is ProvidersChangedFrame:
            self._providers_changed()
        elif cls is PongFrame or cls is HelloFrame:
            pass

    def _on_error(self, frame: ErrorFrame) -> None:
        if frame.id is None or not ends_request(frame.code):
            log.warning("gateway error %s: %s", frame.code, frame.message)
            return
        failure = LlmFailure(message=frame.message, code=frame.code)
        call = self._calls.pop(frame.id, None)
        if call is not None:
            call._end(Finish(reason=FinishError(failure=failure)))
        waiter = self._waiters.get(frame.id)
        if waiter is not None:
            waiter.failure = failure
            waiter.done.set()


#: Bound on the closing handshake when the client leaves.
_CLOSE_TIMEOUT = 2.0


@asynccontextmanager
async def open_gateway_client(
    url: str,
    *,
    token: str | None = None,
    msgpack: bool = False,
    call_buffer: int = 256,
    max_frame_bytes: int = 16 << 20,
    connect_timeout: float = 10.0,
) -> AsyncIterator[GatewayClient]:
    """Connect to the gateway at ``url`` (``ws://host:port/``) and yield a `GatewayClient`.

    ``token`` goes in an ``Authorization: Bearer`` header; ``msgpack`` selects
    the ``llmrt.v1.msgpack`` subprotocol; ``call_buffer`` bounds the chunks
    buffered per call; ``max_frame_bytes`` (at least 4096) is the largest
    message accepted, announced to the gateway, which splits larger frames.
    Connecting (TCP, upgrade and the ``hello`` frame) takes at most
    ``connect_timeout`` seconds whatever the peer does. Leaving the block
    closes the websocket (the gateway then cancels calls still running).

    Raises `LlmError`: ``AUTH`` (token refused or missing), ``OVERLOADED``
    (the gateway is full or shutting down), ``NETWORK`` (cannot connect, the
    connect timeout passed, other refusals; the message names the endpoint),
    ``PROTOCOL`` (the server does not speak ``llmrt.v1``); `ValueError` for a
    URL that is not ``ws://`` or ``wss://``.
    """
    if call_buffer < 1:
        raise ValueError(f"call_buffer must be a positive integer, got {call_buffer!r}")
    if not 0 < connect_timeout < float("inf"):
        raise ValueError(f"connect_timeout must be positive and finite, got {connect_timeout!r}")
    if urllib.parse.urlsplit(url).scheme not in ("ws", "wss"):
        raise ValueError(f"a gateway URL starts with ws:// or wss://, got {url!r}")
    endpoint = endpoint_of(url)
    if max_frame_bytes < MIN_FRAME_BYTES:
        raise ValueError(f"max_frame_bytes must be at least {MIN_FRAME_BYTES}")
    codec = MSGPACK if msgpack else JSON
    headers = [(b"Authorization", b"Bearer " + token.encode())] if token else []
    # The gateway then writes no larger message (it splits, see docs/protocol.md).
    headers.append((FRAME_BYTES_HEADER.encode(), str(max_frame_bytes).encode()))
    try:
        # One nursery for trio-websocket's reader and the client's tasks:
        # whatever leaves it (a failed connect included) cancels them all.
        async with trio.open_nursery() as nursery:
            ws, hello = await dial(
                nursery,
                url,
                endpoint,
                codec=codec,
                headers=headers,
                max_frame_bytes=max_frame_bytes,
                connect_timeout=connect_timeout,
                token_sent=bool(token),
            )
            client = GatewayClient(
                ws=ws, codec=codec, hello=hello, nursery=nursery, call_buffer=call_buffer
            )
            try:
                nursery.start_soon(client._read)
                yield client
            finally:
                client._closed = True
                if trio.current_effective_deadline() == -math.inf:
                    # Cancelled: trio-websocket's reader is cancelled too, so nothing
                    # would receive the gateway's answer to a closing handshake.
                    # Unshielded, aclose closes the TCP stream at once (which ends
                    # the connection for the gateway) and keeps the exception in flight.
                    await ws.aclose()
                else:
                    # The reader still runs: it receives the gateway's close.
                    with trio.move_on_after(_CLOSE_TIMEOUT, shield=True):
                        await ws.aclose()
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        # Give the caller one exception, not a group around it: the body's own,
        # or a refusal that trio-websocket's reader raised during the upgrade.
        inner = sole_exception(group)
        if inner is not None:
            if isinstance(inner, HandshakeError):
                raise translate_handshake(inner, endpoint, token_sent=bool(token)) from None
            raise inner from inner.__cause__
        raise
