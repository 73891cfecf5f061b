"""The provider APIs over HTTP on the gateway's port: one request handler for all of them.

The front door (`_front.serve_stream`) reads a request head; a head whose path
is one of `PATHS` comes here with the h11 connection that parsed it:

==================================  ===========================================
``POST /v1/chat/completions``       OpenAI Chat Completions (`api.chat`)
``POST /v1/responses``              OpenAI Responses (`api.responses`)
``POST /v1/messages``               Anthropic Messages (`api.messages`)
``POST /v1/messages/count_tokens``  Anthropic's token count: no adapter has a
                                    counter, so a known model is answered with
                                    the API's 400 saying so
``GET /v1/models``                  every route's models as ``provider/model``,
                                    the routing groups and the aliases
``OPTIONS`` on any of them          the CORS preflight, for allowed origins only
==================================  ===========================================

The checks, in order, each answered in the API's error shape (OpenAI's for
everything but ``/v1/messages*``): the ``Origin`` / ``Host`` policy of the
websockets (`_origin`, 403); the gateway token as ``Authorization: Bearer``
or ``x-api-key`` (401); shutting down or ``maxCallsPerServer`` live calls
(503); ``Content-Type: application/json`` (415); the body's byte bound
(``max_body_bytes``, 413, from ``Content-Length`` before a byte of it is read)
and time bound (``body_timeout``, 408); the JSON nesting bound (400); then the
API's decoder (400 naming the parameter, 404 for a model that names no route).
Per-peer concurrency is the gateway's admission: a connection holds its
address's slot until it closes.

A call runs as ``rt.stream_or_retry(..., retry_after_output=False)``: the
route's retry policy applies until the first output, never after (a stream
cannot take output back); a route that allows no retry skips the executor.
Nothing is written before the first chunk, so a call that fails before any
output is the API's HTTP error (status, headers); after it, the API's
in-stream error event. A slow reader backpressures the call (each write
waits for the socket, so the call's buffer fills and the adapter stops
reading upstream); a write that makes no progress for ``heartbeat_timeout``
ends the call. A client that closes its connection (read as end of input,
at any time after its body) aborts the call: the upstream response is
closed and the call counts as ``aborted``. A quiet stream gets the API's
ping every ``ping_interval`` (10 s). Answers carry ``Connection: close``.
"""

from __future__ import annotations

import functools
import logging
import socket
from collections.abc import Mapping, Sequence
from http import HTTPStatus
from typing import Any, Final

import attrs
import h11
import msgspec
import trio

from llmrt import (
    BlockAssembler,
    ErrorCode,
    Finish,
    FinishAborted,
    FinishError,
    LlmError,
    LlmFailure,
    RetryScheduled,
    UsageChunk,
)
from llmrt._helpers import recv_when_readable, stdlib_socket
from llmrt._nesting import MAX_NESTING, json_too_deep

from .._abort import AbortController
from .._tracecontext import TRACEPARENT, valid_traceparent
from ._connection import GatewayState
from ._head import PlainRequest
from ._protocol import Limits, bearer_from_headers, token_matches
from .api import APIS, MESSAGES, Api, ApiRequestError, ErrorAnswer
from .api._common import resolve_model

__all__ = ["HttpApi", "PATHS", "COUNT_TOKENS", "MODELS"]

log = logging.getLogger("llmrt.gateway")

COUNT_TOKENS: Final = "/v1/messages/count_tokens"
MODELS: Final = "/v1/models"
#: Every path this module answers.
PATHS: Final = frozenset((*APIS, COUNT_TOKENS, MODELS))
#: Bound on listing one route's models for ``GET /v1/models``.
MODELS_SECONDS: Final = 10.0
#: Input read and dropped after the body (a client should send nothing more).
_EXTRA_BYTES: Final = 64 * 1024
_RECEIVE: Final = 64 * 1024
#: Events taken while more were already here, written together: at most this many.
_MAX_WAITING: Final = 32
_JSON: Final = b"application/json"
_COMMON: Final = ((b"X-Content-Type-Options", b"nosniff"), (b"Cache-Control", b"no-store"))
_SSE_HEADERS: Final = (
    (b"Content-Type", b"text/event-stream; charset=utf-8"),
    (b"Cache-Control", b"no-cache"),
    # nginx: pass the stream through unbuffered even where proxy_buffering is on.
    (b"X-Accel-Buffering", b"no"),
    (b"X-Content-Type-Options", b"nosniff"),
)
_ALLOW_METHODS: Final = b"GET, POST, OPTIONS"
_encode = msgspec.json.Encoder().encode


class _Model(msgspec.Struct):
    """The one field of a count_tokens body read before refusing it."""

    model: str


def _header(headers: Sequence[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    for key, value in headers:
        if key == name:
            return value
    return None


def _error_body(
    anthropic: bool, message: str, openai_type: str, code: str | None, anthropic_type: str
) -> bytes:
    if anthropic:
        return _encode({"type": "error", "error": {"type": anthropic_type, "message": message}})
    return _encode(
        {"error": {"message": message, "type": openai_type, "param": None, "code": code}}
    )


def _answer(
    anthropic: bool,
    status: int,
    message: str,
    *,
    openai_type: str = "invalid_request_error",
    code: str | None = None,
    anthropic_type: str = "invalid_request_error",
) -> ErrorAnswer:
    """A refusal of the HTTP layer (no llmrt code has it) in the API's shape."""
    body = _error_body(anthropic, message, openai_type, code, anthropic_type)
    return ErrorAnswer(status, (), body)


def _llm_answer(anthropic: bool, error: LlmError) -> ErrorAnswer:
    return (MESSAGES.error if anthropic else APIS["/v1/chat/completions"].error)(error)


@functools.cache
def _reason(status: int) -> bytes:
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""


def _head_bytes(status: int, headers: tuple[tuple[bytes, bytes], ...]) -> bytes:
    lines = [b"HTTP/1.1 %d %b" % (status, _reason(status))]
    lines.extend(name + b": " + value for name, value in headers)
    lines.append(b"Connection: close")
    return b"\r\n".join(lines) + b"\r\n\r\n"


#: A stream's head without CORS headers, chunked (HTTP/1.1) or not (HTTP/1.0).
_SSE_HEAD_CHUNKED: Final = _head_bytes(200, (*_SSE_HEADERS, (b"Transfer-Encoding", b"chunked")))
_SSE_HEAD_PLAIN: Final = _head_bytes(200, _SSE_HEADERS)


class _Gone(Exception):
    """The client left, or stopped reading: nothing more can reach it."""


class _Late(Exception):
    """The request body did not arrive within ``body_timeout``."""


class _TooLarge(Exception):
    """The request body is larger than ``max_body_bytes``."""


def _too_large(anthropic: bool, bound: int) -> ErrorAnswer:
    return _answer(
        anthropic,
        413,
        f"the request body exceeds {bound} bytes (max_body_bytes)",
        code="request_too_large",
        anthropic_type="request_too_large",
    )


async def _receive(stream: trio.SocketStream) -> bytes:
    """The next bytes of the request body; `_Gone` when the client closed or broke."""
    try:
        data = await stream.receive_some(_RECEIVE)
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        raise _Gone from None
    if not data:
        raise _Gone
    return bytes(data)


@attrs.define(eq=False)
class _Writer:
    """One connection's output: the response head, the body pieces, and whether the client left.

    A whole answer's write is bounded by ``send_timeout`` itself; a stream's
    writes are watched by `_watch` instead (no timer per chunk), which
    closes the socket under a write that makes no progress.
    """

    stream: trio.SocketStream
    #: The h11 connection that read the head (None: `_head` read it, and the body
    #: is framed by Content-Length).
    conn: h11.Connection | None
    send_timeout: float
    #: Whether the body goes out in the chunked coding (HTTP/1.1), framed here, not by h11.
    chunked: bool = True
    #: Headers on every answer (CORS for an allowed origin).
    extra: tuple[tuple[bytes, bytes], ...] = ()
    gone: bool = False
    started: bool = False
    #: The stream's event encoder, once it has begun (`_watch` then keeps its timers).
    encoder: Any = None
    #: Writes begun so far, and whether one is under way (what `_watch` watches).
    writes: int = 0
    busy: bool = False
    #: Held by a write that waits (`_wait_send`); made by the first such write.
    lock: trio.Lock | None = None
    #: The plain socket under ``stream`` (None where there is none, e.g. under TLS).
    raw: socket.socket | None = attrs.field(default=None, init=False)

    def __attrs_post_init__(self) -> None:
        self.raw = stdlib_socket(self.stream)

    async def _send(self, data: bytes, limit: float | None = None) -> None:
        """Write ``data``; ``limit``: within that many seconds, or the client is gone."""
        if self.gone:
            raise _Gone
        if self.raw is not None and (self.lock is None or not self.lock.locked()):
            data = await self._at_once(data)  # nearly always all of it
            if not data:
                return
        if limit is None:
            await self._wait_send(data)
            return
        with trio.move_on_after(limit) as scope:
            await self._wait_send(data)
        if scope.cancelled_caught:
            self.gone = True
            raise _Gone

    async def _at_once(self, data: bytes) -> bytes:
        """What one non-blocking send of ``data`` left over (``b""``: all of it went).

        The common case, once per event: the socket takes the whole write, with
        no lock, no timer and no schedule point past the cancellation check
        (the stream's ``send_all`` yields after every send). The rest goes the
        waiting way (`_wait_send`), watched by `_watch`. Only while no write
        is under way.
        """
        assert self.raw is not None
        await trio.lowlevel.checkpoint_if_cancelled()
        try:
            sent = self.raw.send(data)
        except BlockingIOError:
            sent = 0
        except OSError:
            self.gone = True
            raise _Gone from None
        if sent == len(data):
            self.writes += 1
            return b""
        return data[sent:]

    async def _wait_send(self, data: bytes) -> None:
        """The waiting way: under the lock, one write at a time, watched by `_watch`."""
        lock = self.lock
        if lock is None:
            lock = self.lock = trio.Lock()
        if lock.locked():
            await lock.acquire()
        else:
            lock.acquire_nowait()
        self.writes += 1
        self.busy = True
        try:
            await self.stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            self.gone = True
            raise _Gone from None
        finally:
            self.busy = False
            lock.release()

    async def _bounded(self, data: bytes) -> None:
        """One write within ``send_timeout``: a whole answer, or a stream's start."""
        await self._send(data, self.send_timeout)

    def _head(self, status: int, headers: tuple[tuple[bytes, bytes], ...]) -> bytes:
        """The response head, written here: h11's header validation is most of a
        small request's cost, and every name and value here is the gateway's own
        (the echoed ``Origin`` passed h11's parser and the origin policy)."""
        return _head_bytes(status, (*headers, *self.extra))

    async def whole(
        self, status: int, body: bytes, headers: tuple[tuple[bytes, bytes], ...] = ()
    ) -> None:
        """A complete answer: head and body (``Content-Length``)."""
        head = self._head(
            status,
            (
                (b"Content-Type", _JSON),
                *_COMMON,
                *headers,
                (b"Content-Length", b"%d" % len(body)),
            ),
        )
        self.started = True
        await self._bounded(head + body)

    async def error(self, answer: ErrorAnswer) -> None:
        headers = tuple((k.encode(), v.encode()) for k, v in answer.headers)
        if answer.status == 401:
            headers += ((b"WWW-Authenticate", b"Bearer"),)
        await self.whole(answer.status, answer.body, headers)

    async def start_stream(self, first: bytes, *, last: bool = False) -> None:
        """The stream's head and its first events (``last``: and its end), in one write."""
        self.started = True
        if self.extra:
            framing = ((b"Transfer-Encoding", b"chunked"),) if self.chunked else ()
            head = self._head(200, (*_SSE_HEADERS, *framing))
        else:  # the usual head, made once
            head = _SSE_HEAD_CHUNKED if self.chunked else _SSE_HEAD_PLAIN
        await self._bounded(head + self._frame(first, last))

    def _frame(self, data: bytes, last: bool = False) -> bytes:
        if not self.chunked:
            return data
        end = b"0\r\n\r\n" if last else b""
        return (b"%x\r\n%b\r\n" % (len(data), data) if data else b"") + end

    async def data(self, data: bytes, *, last: bool = False) -> None:
        """Events of the stream (``last``: and its end)."""
        if data or last:
            await self._send(self._frame(data, last))


@attrs.define(eq=False)
class HttpApi:
    """The HTTP APIs of one gateway: its state (runtime, limits, token, origins) and aliases."""

    state: GatewayState
    #: ``[aliases]`` of llmrt.toml: bare model name -> ``provider/model``.
    aliases: Mapping[str, str] = attrs.field(factory=dict)
    _names: tuple[tuple[str, ...], Mapping[str, str]] | None = attrs.field(default=None, init=False)
    #: Starts each call's `_watch` task (`attach` makes it before the gateway accepts).
    _starter: _Starter | None = attrs.field(default=None, init=False)

    def attach(self, nursery: trio.Nursery) -> None:
        """Run the calls' client watchers in ``nursery`` (the gateway's connections nursery)."""
        self._starter = _Starter(nursery)
        nursery.start_soon(self._starter.run)

    def claims(self, target: bytes) -> bool:
        """Whether a request for ``target`` is this module's."""
        return target.partition(b"?")[0].decode("ascii", "replace") in PATHS

    def names(self) -> Mapping[str, str]:
        """The bare names a request may use: the aliases, and each group's own name."""
        groups = self.state.runtime.group_names()
        if self._names is None or self._names[0] != groups:
            names = {group: f"{group}/{group}" for group in groups}
            names.update(self.aliases)
            self._names = (groups, names)
        return self._names[1]

    # ---- the request -------------------------------------------------------------------------

    async def serve(
        self,
        stream: trio.SocketStream,
        conn: h11.Connection | None,
        request: h11.Request | PlainRequest,
    ) -> None:
        """Answer one request whose head ``conn`` has read (None: `_head` read it).

        Never raises but for cancellation.
        """
        path = request.target.partition(b"?")[0].decode("ascii", "replace")
        anthropic = path.startswith("/v1/messages")
        state = self.state
        state.counters.http_requests[path] += 1
        writer = _Writer(
            stream, conn, state.limits.heartbeat_timeout, chunked=request.http_version != b"1.0"
        )
        try:
            answer = await self._serve(writer, path, anthropic, request)
            if answer is not None:
                await writer.error(answer)
                await _drop_input(stream)
        except _Gone:
            pass
        except (h11.LocalProtocolError, h11.RemoteProtocolError):
            pass  # nothing more can be said on this connection
        except Exception:
            log_it, muted = state.failure_log.allow("http-api", trio.current_time())
            if log_it:
                log.exception("serving an HTTP API request failed (%d more)", muted)

    async def _serve(
        self, writer: _Writer, path: str, anthropic: bool, request: h11.Request | PlainRequest
    ) -> ErrorAnswer | None:
        state = self.state
        headers = request.headers
        origin = _header(headers, b"origin")
        host = _header(headers, b"host")
        refusal = state.policy.check(
            origin.decode("latin-1") if origin is not None else None,
            host.decode("latin-1") if host is not None else None,
        )
        if refusal is not None:
            state.refused(refusal.cause)
            return _answer(
                anthropic, 403, refusal.message, code="forbidden", anthropic_type="permission_error"
            )
        if origin is not None:
            writer.extra = (
                (b"Access-Control-Allow-Origin", origin),
                (b"Vary", b"Origin"),
                (b"Access-Control-Expose-Headers", b"retry-after, retry-after-ms"),
            )
        method = request.method
        if method == b"OPTIONS":
            await self._preflight(writer, origin, headers)
            return None
        wanted = b"GET" if path == MODELS else b"POST"
        if method != wanted:
            return _answer(
                anthropic,
                405,
                f"{path} takes {wanted.decode()} requests",
                code="method_not_allowed",
            )
        if state.token is not None:
            presented = bearer_from_headers(headers) or _header(headers, b"x-api-key")
            if not token_matches(state.token, presented):
                state.refused("auth")
                return _llm_answer(
                    anthropic,
                    LlmError(
                        ErrorCode.AUTH,
                        "a valid gateway token is required: send it as `Authorization: "
                        "Bearer <token>` or `x-api-key: <token>` (the SDKs' api_key)",
                    ),
                )
        if path == MODELS:
            await writer.whole(200, await self._models())
            return None
        if state.stopping.is_set():
            return _llm_answer(
                anthropic, LlmError(ErrorCode.OVERLOADED, "the gateway is shutting down")
            )
        limits = state.limits
        if state.live >= limits.max_calls_per_server:
            return _llm_answer(
                anthropic,
                LlmError(
                    ErrorCode.OVERLOADED,
                    f"the gateway has {state.live} live requests "
                    f"(maxCallsPerServer is {limits.max_calls_per_server})",
                ),
            )
        content_type = (_header(headers, b"content-type") or b"").partition(b";")[0].strip()
        if content_type.lower() != _JSON:
            return _answer(
                anthropic,
                415,
                "the request body must be JSON: send `Content-Type: application/json`",
                code="unsupported_media_type",
            )
        body = await self._body(writer, anthropic, request)
        if isinstance(body, ErrorAnswer):
            return body
        if json_too_deep(body):
            return _llm_answer(
                anthropic,
                ApiRequestError(
                    ErrorCode.INVALID_REQUEST,
                    f"the request body nests arrays and objects more than {MAX_NESTING} deep",
                ),
            )
        if path == COUNT_TOKENS:
            return self._count_tokens(body)
        api = APIS[path]
        try:
            call = api.decode(body, aliases=self.names())
        except LlmError as exc:
            return api.error(exc)
        traceparent = _header(headers, b"traceparent")
        if traceparent is not None:
            # An invalid one is ignored, as W3C Trace Context asks (the trace restarts).
            text = traceparent.decode("latin-1")
            if valid_traceparent(text):
                TRACEPARENT.set(text)
        await self._call(writer, api, call)
        return None

    async def _preflight(
        self, writer: _Writer, origin: bytes | None, headers: Sequence[tuple[bytes, bytes]]
    ) -> None:
        """The CORS preflight of an allowed origin (a refused one got its 403 already)."""
        asked = _header(headers, b"access-control-request-headers") or b""
        # Only header-name characters, bounded: never an arbitrary value echoed back.
        names = b",".join(
            name.strip()
            for name in asked.split(b",")[:64]
            if name.strip() and all(c in _TOKEN for c in name.strip())
        )
        extra: tuple[tuple[bytes, bytes], ...] = ()
        if origin is not None:
            extra = (
                (b"Access-Control-Allow-Methods", _ALLOW_METHODS),
                (b"Access-Control-Allow-Headers", names or b"authorization, content-type"),
                (b"Access-Control-Max-Age", b"600"),
            )
        head = writer._head(204, (*_COMMON, *extra, (b"Allow", _ALLOW_METHODS)))
        writer.started = True
        await writer._bounded(head)

    async def _body(
        self, writer: _Writer, anthropic: bool, request: h11.Request | PlainRequest
    ) -> bytes | ErrorAnswer:
        """The request body, within ``max_body_bytes`` and ``body_timeout``."""
        limits = self.state.limits
        bound = limits.max_body_bytes
        length = _header(request.headers, b"content-length")
        if length is not None and length.isdigit() and int(length) > bound:
            return _too_large(anthropic, bound)
        try:
            if type(request) is PlainRequest:
                return await self._plain_body(writer, request)
            return await self._h11_body(writer, bound)
        except _TooLarge:
            return _too_large(anthropic, bound)
        except _Late:
            return _answer(
                anthropic,
                408,
                f"the request body did not arrive within {limits.body_timeout:g} s (body_timeout)",
                code="request_timeout",
            )

    async def _plain_body(self, writer: _Writer, request: PlainRequest) -> bytes:
        """The ``Content-Length`` body of a plain head (`_head`): what followed the
        head in its reads, and the rest as it comes (``_Late`` past the time bound)."""
        length = request.content_length
        parts = [request.rest[:length]]
        size = len(parts[0])
        if size == length:
            return parts[0]
        with trio.move_on_after(self.state.limits.body_timeout):
            while size < length:
                data = await _receive(writer.stream)
                parts.append(data[: length - size])
                size += len(parts[-1])
            return b"".join(parts)
        raise _Late

    async def _h11_body(self, writer: _Writer, bound: int) -> bytes:
        """The body as h11 frames it (any framing, ``Expect: 100-continue``).

        Raises ``_TooLarge`` past ``bound``, ``_Late`` past the time bound.
        """
        conn = writer.conn
        assert conn is not None  # a plain head has a plain body
        parts: list[bytes] = []
        size = 0
        # The time bound starts at the first wait: a small body usually came in the
        # head's own read, and then no timer is made at all.
        deadline: float | None = None
        while True:
            event = conn.next_event()
            if type(event) is h11.Data:
                size += len(event.data)
                if size > bound:
                    raise _TooLarge
                parts.append(bytes(event.data))
            elif type(event) is h11.EndOfMessage:
                return b"".join(parts)
            elif event is not h11.NEED_DATA:
                raise _Gone  # a close (h11 reports it as ConnectionClosed)
            else:
                with trio.move_on_at(
                    deadline or trio.current_time() + self.state.limits.body_timeout
                ) as scope:
                    deadline = scope.deadline
                    if conn.they_are_waiting_for_100_continue:
                        await writer._send(
                            conn.send(h11.InformationalResponse(status_code=100, headers=[])) or b""
                        )
                    conn.receive_data(await _receive(writer.stream))
                if scope.cancelled_caught:
                    raise _Late

    def _count_tokens(self, body: bytes) -> ErrorAnswer:
        """Anthropic's token count: the model is checked, then the count is refused."""
        try:
            named = msgspec.json.decode(body, type=_Model)
            provider, _ = resolve_model(named.model, self.names())
        except ApiRequestError as exc:
            return MESSAGES.error(exc)
        except msgspec.ValidationError as exc:
            return MESSAGES.error(ApiRequestError(ErrorCode.INVALID_REQUEST, str(exc)))
        except msgspec.DecodeError as exc:
            return MESSAGES.error(
                ApiRequestError(ErrorCode.INVALID_REQUEST, f"the request body is not JSON: {exc}")
            )
        known = {info.id for info in self.state.runtime.list_providers()}
        if provider not in known:
            return MESSAGES.error(
                LlmError(ErrorCode.NO_ADAPTER, f"no route or group is named {provider[:100]!r}")
            )
        return MESSAGES.error(
            LlmError(
                ErrorCode.INVALID_REQUEST,
                f"count_tokens is not supported: the adapter of {provider[:100]!r} has no "
                "token counter (llmrt counts tokens only as usage, after a call)",
            )
        )

    async def _models(self) -> bytes:
        """``GET /v1/models``: OpenAI's list, whose entries also carry Anthropic's fields."""
        runtime = self.state.runtime
        groups = set(runtime.group_names())
        routes = [info.id for info in runtime.list_providers() if info.id not in groups]
        found: dict[str, list[str]] = {}

        async def one(route: str) -> None:
            with trio.move_on_after(MODELS_SECONDS):
                try:
                    models = await runtime.list_models(
                        route, max_age=self.state.limits.model_list_ttl
                    )
                except LlmError:
                    return
                found[route] = [model.id for model in models]

        async with trio.open_nursery() as nursery:
            for route in routes:
                nursery.start_soon(one, route)
        ids: list[tuple[str, str]] = []
        for route in routes:
            ids.extend((f"{route}/{model}", route) for model in found.get(route, ()))
        ids.extend((group, group) for group in runtime.group_names())
        ids.extend((alias, target.partition("/")[0]) for alias, target in self.aliases.items())
        data = [
            {
                "id": model,
                "object": "model",
                "created": 0,
                "owned_by": owner,
                "type": "model",
                "display_name": model,
                "created_at": "1970-01-01T00:00:00Z",
            }
            for model, owner in ids
        ]
        return _encode(
            {
                "object": "list",
                "data": data,
                "has_more": False,
                "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None,
            }
        )

    # ---- the call ----------------------------------------------------------------------------

    async def _call(self, writer: _Writer, api: Api, call: Any) -> None:
        state = self.state
        controller = AbortController()
        state.live += 1
        state.http_calls.add(controller)
        watch = trio.CancelScope()
        starter = self._starter
        assert starter is not None, "serve_gateway attaches the HttpApi before it serves"
        try:
            # The watcher in the connections nursery, not in a nursery of the call's
            # own: opening and closing one is a good part of a short call's cost. It
            # is cancelled as the call ends, before the connection closes.
            starter.start((watch, writer, controller, state.limits))
            if call.stream:
                await self._stream(writer, api, call, controller)
            else:
                await self._complete(writer, api, call, controller)
        finally:
            watch.cancel()
            state.live -= 1
            state.http_call_ended(controller)

    def _events(self, call: Any, controller: AbortController) -> Any:
        return self.state.runtime.stream_or_retry(
            call.options, signal=controller.signal, retry_after_output=False
        )

    async def _stream(
        self,
        writer: _Writer,
        api: Api,
        call: Any,
        controller: AbortController,
    ) -> None:
        encoder = call.encoder()
        held: list[Any] = []
        #: Encoded events not yet written: taken while the next was already here.
        waiting: list[bytes] = []
        try:
            async with self._events(call, controller) as events:
                while True:  # every way out of the loop's body on the finish returns
                    chunk = await events.next_chunk()
                    if type(chunk) is RetryScheduled:
                        held.clear()  # the failed attempt's chunks are void
                        continue
                    if writer.gone:
                        # Drained to the aborted finish: the call counts as aborted.
                        if type(chunk) is Finish:
                            return
                        continue
                    try:
                        if not writer.started:
                            cls = type(chunk)
                            if cls is UsageChunk:
                                held.append(chunk)
                                continue
                            if cls is Finish and type(chunk.reason) in (FinishError, FinishAborted):
                                await writer.error(api.error(chunk.reason.failure))
                                return
                            if held:  # usage that came before the first event: pushed first
                                data = b"".join([*map(encoder.push, held), encoder.push(chunk)])
                                held.clear()
                            else:
                                data = encoder.push(chunk)
                            writer.encoder = encoder  # `_watch` keeps its timers from now on
                            if not data and cls is not Finish:
                                # Nothing to say yet (a block start, say): the head waits,
                                # to go out in one write with the first event (or with
                                # the first ping of `_watch`, if that comes first).
                                continue
                            await writer.start_stream(data, last=cls is Finish)
                        elif type(chunk) is Finish:
                            data = encoder.push(chunk)
                            if waiting:
                                data = b"".join((*waiting, data))
                            await writer.data(data, last=True)
                        else:
                            data = encoder.push(chunk)
                            if data:
                                if events.ready and len(waiting) < _MAX_WAITING:
                                    # More is here already (one upstream read held
                                    # several events): it goes out in one write.
                                    waiting.append(data)
                                    continue
                                if waiting:
                                    data = b"".join((*waiting, data))
                                    waiting.clear()
                                await writer.data(data)
                            continue
                        if type(chunk) is Finish:
                            return
                    except _Gone:
                        controller.abort("the client stopped reading")
        except Exception as exc:
            # A middleware failed (the runtime raised it from the iteration).
            log.warning("an HTTP API call failed in middleware: %s", type(exc).__name__)
            if writer.gone:
                return
            failure = LlmFailure(
                message=f"the call failed: {type(exc).__name__}", code=ErrorCode.INTERNAL
            )
            if not writer.started:
                await writer.error(api.error(failure))
            else:
                data = encoder.push(Finish(reason=FinishError(failure=failure)))
                await writer.data(b"".join((*waiting, data)), last=True)

    async def _complete(
        self, writer: _Writer, api: Api, call: Any, controller: AbortController
    ) -> None:
        assembler = BlockAssembler()
        finish: Finish | None = None
        try:
            async with self._events(call, controller) as events:
                while finish is None:
                    chunk = await events.next_chunk()
                    if type(chunk) is RetryScheduled:
                        assembler = BlockAssembler()
                        continue
                    assembler.push(chunk)
                    if type(chunk) is Finish:
                        finish = chunk
        except Exception as exc:
            log.warning("an HTTP API call failed in middleware: %s", type(exc).__name__)
            failure = LlmFailure(
                message=f"the call failed: {type(exc).__name__}", code=ErrorCode.INTERNAL
            )
            finish = Finish(reason=FinishError(failure=failure))
        if writer.gone or finish is None:
            return
        reason = finish.reason
        if type(reason) is FinishError or type(reason) is FinishAborted:
            await writer.error(api.error(reason.failure))
        else:
            await writer.whole(200, call.answer(assembler))


#: Characters of an HTTP header name (RFC 9110 ``token``).
_TOKEN: Final = frozenset(
    b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
)


_Watched = tuple[trio.CancelScope, _Writer, AbortController, Limits]


@attrs.define(eq=False)
class _Starter:
    """Starts the calls' client watchers, each after its call's first step.

    A call task started in one scheduler batch takes its first step (the
    upstream request) in the next; a watcher spawned beside it would take
    its own first step in that same batch, before it half of the time, and
    the spawn itself would lengthen the step that starts the call. So the
    request's task only hands the watcher's arguments over (`start`), and
    this task spawns the watchers one batch after the calls' first steps.
    One task for the gateway, parked while there is nothing to start.
    """

    nursery: trio.Nursery
    _todo: list[_Watched] = attrs.field(factory=list, init=False)
    _parked: trio.lowlevel.Task | None = attrs.field(default=None, init=False)

    def start(self, watched: _Watched) -> None:
        self._todo.append(watched)
        task = self._parked
        if task is not None:
            self._parked = None
            trio.lowlevel.reschedule(task)

    def _abort(self, _: Any) -> trio.lowlevel.Abort:
        self._parked = None
        return trio.lowlevel.Abort.SUCCEEDED

    async def run(self) -> None:
        while True:
            if not self._todo:
                self._parked = trio.lowlevel.current_task()
                await trio.lowlevel.wait_task_rescheduled(self._abort)
            # Woken in the same batch as the first steps of the calls handed over
            # (both were scheduled in the step that started them): one more batch,
            # so the spawns come after those steps.
            await trio.lowlevel.cancel_shielded_checkpoint()
            todo, self._todo = self._todo, []
            for watched in todo:
                self.nursery.start_soon(_watched, *watched)


async def _watched(
    scope: trio.CancelScope, writer: _Writer, controller: AbortController, limits: Limits
) -> None:
    """`_watch` in ``scope``, which the call cancels as it ends; never raises."""
    if scope.cancel_called:
        return  # the call ended before its watcher started: nothing to watch
    with scope:
        try:
            await _watch(writer, controller, limits)
        except Exception:
            log.exception("watching an HTTP API client failed")


async def _watch(writer: _Writer, controller: AbortController, limits: Limits) -> None:
    """The client's side of one call, in one task: its close, and a stream's two timers.

    A client that closes its side (or breaks the connection) aborts the call.
    Once a stream has begun (`_Writer.encoder` set), its timers are sampled
    every tick (the writes themselves carry none): the API's ping once nothing
    was written for ``ping_interval`` (up to one tick more; a stream whose
    head is still held for its first event sends the head with it); and when
    one write has made no progress for ``heartbeat_timeout`` the client has
    stopped reading: the call is aborted and the socket closed under the
    write, which then fails. One task, not two: a task's start and end are a
    good part of a short call's cost.
    """
    stall_after = limits.heartbeat_timeout
    tick = min(limits.ping_interval, stall_after) / 2
    left = _EXTRA_BYTES
    quiet = stalled = 0.0
    seen = -1  # no stream yet
    due = trio.current_time() + tick
    raw = writer.raw
    while True:
        if left > 0:
            data = None
            with trio.move_on_at(due):
                try:
                    if raw is None:
                        data = await writer.stream.receive_some(_RECEIVE)
                    else:
                        # The socket itself: the client has sent its request, so a
                        # first non-blocking read (what receive_some tries) would fail.
                        data = await recv_when_readable(raw, _RECEIVE)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    data = b""
            if data is not None:
                if not data:
                    writer.gone = True
                    controller.abort("the client closed the connection")
                    return
                left -= len(data)  # a client that keeps sending is read no further
                continue
        else:
            await trio.sleep_until(due)
        # From now, as a sleep would: a late tick (a long ping write, a busy
        # loop) is one tick, not a burst of them catching up.
        due = trio.current_time() + tick
        encoder = writer.encoder
        if writer.gone or encoder is None:
            continue
        if encoder.finished:
            return
        if seen < 0:  # the stream has just begun: its timers start now
            seen = writer.writes
            continue
        if writer.busy and writer.writes == seen:
            stalled += tick
            if stalled >= stall_after:
                writer.gone = True
                controller.abort("the client stopped reading")
                await writer.stream.aclose()
                return
            continue
        stalled = 0.0
        quiet = quiet + tick if writer.writes == seen else 0.0
        seen = writer.writes
        if quiet >= limits.ping_interval:
            quiet = 0.0
            try:
                if writer.started:
                    await writer.data(encoder.ping())
                else:  # the head held for the first event: it goes out now
                    await writer.start_stream(encoder.ping())
            except _Gone:
                return
            seen = writer.writes


async def _drop_input(stream: trio.SocketStream) -> None:
    """After an early answer: end our side, drop input a moment (no reset under the answer)."""
    try:
        await stream.send_eof()
        left = _EXTRA_BYTES
        with trio.move_on_after(1.0):
            while left > 0 and (chunk := await stream.receive_some(_RECEIVE)):
                left -= len(chunk)
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass
