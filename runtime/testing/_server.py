"""The local upstream: a trio HTTP/1.1 server that plays an LLM provider for tests and benchmarks.

Each client connection runs as two tasks under the server's nursery: a
reader that parses requests and notices the client leaving (EOF or reset) at
once, even while a response is stalled or sleeping, and a responder that
answers requests one after another by sending a script's compiled plan (or,
for a hostile script, by running its own code). Requests are parsed by h11.
Whatever goes wrong on one connection is recorded on it and ends only it.
"""

from __future__ import annotations

import collections
import enum
import functools
import socket
import ssl
import struct
import urllib.parse
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from contextlib import asynccontextmanager
from typing import Final, NoReturn, TypeAlias, assert_never

import attrs
import trio

from ._http import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_HEADER_BYTES,
    BadRequest,
    ParsedRequest,
    RequestHead,
    RequestParser,
    response_head,
)
from ._records import ConnectionRecord, Headers, RecordedRequest
from ._scripts import Ending, ErrorScript, HostileScript, Script, SSEScript

__all__ = [
    "DEFAULT_MODELS",
    "DEFAULT_SCRIPT_PATHS",
    "Route",
    "Router",
    "Upstream",
    "open_upstream",
    "serve_upstream",
]

#: A function choosing the script for a request; None falls through to the
#: built-in model lists, then 404.
Router: TypeAlias = Callable[[RecordedRequest], Script | None]
#: One script for every request, scripts consumed in order, or a router.
Route: TypeAlias = Script | Sequence[Script] | Router

#: POST paths a script (or script queue) answers: OpenAI-compatible chat
#: completions with and without a ``/v1`` base, and Anthropic Messages.
DEFAULT_SCRIPT_PATHS: Final = frozenset(
    {"/chat/completions", "/v1/chat/completions", "/v1/messages"}
)
DEFAULT_MODELS: Final = ("gpt-4.1-mini", "claude-sonnet-4-5")

_RECEIVE_BYTES: Final = 64 * 1024
# Parsed requests a connection may queue ahead of its responder, so the reader
# keeps reading (and keeps noticing a client leaving) past a pipelined request.
_PIPELINE_DEPTH: Final = 8
# How long a rejected connection waits for the client to read the error and
# leave, so that closing with unread input does not reset away the answer.
_LINGER_SECONDS: Final = 1.0

_NOT_FOUND: Final = ErrorScript(404, body={"error": {"message": "not found", "type": "not_found"}})
_EXHAUSTED: Final = ErrorScript(500, body=b"llmrt.testing: the script queue is exhausted\n")
_ROUTER_FAILED: Final = ErrorScript(500, body=b"llmrt.testing: the router raised\n")
_STATIC: Final = (SSEScript, ErrorScript, HostileScript)


class _Next(enum.Enum):
    CONTINUE = "continue"
    CLOSE = "close"
    RESET = "reset"


_Item: TypeAlias = ParsedRequest | RequestHead | BadRequest


def _openai_models(models: Sequence[str]) -> ErrorScript:
    data = [{"id": m, "object": "model", "created": 0, "owned_by": "llmrt-testing"} for m in models]
    return ErrorScript(200, body={"object": "list", "data": data})


def _anthropic_models(models: Sequence[str]) -> ErrorScript:
    data = [
        {"type": "model", "id": m, "display_name": m, "created_at": "2025-01-01T00:00:00Z"}
        for m in models
    ]
    return ErrorScript(
        200,
        body={
            "data": data,
            "has_more": False,
            "first_id": models[0] if models else None,
            "last_id": models[-1] if models else None,
        },
    )


@attrs.define(eq=False)
class Upstream:
    """A running local upstream: where it listens, what it saw, and ways to wait for it.

    Built by `serve_upstream` / `open_upstream`; not constructed directly.
    `requests` and `connections` grow as traffic arrives, in arrival order.
    """

    host: str
    port: int
    _route: Route
    _script_paths: Collection[str] | None
    _max_header_bytes: int
    _max_body_bytes: int
    _models_openai: ErrorScript
    _models_anthropic: ErrorScript
    #: Serve TLS with this context (``https`` URLs); None: plain HTTP.
    _ssl_context: ssl.SSLContext | None = None
    requests: list[RecordedRequest] = attrs.field(init=False, factory=list, repr=False)
    connections: list[ConnectionRecord] = attrs.field(init=False, factory=list, repr=False)
    #: Exceptions raised by a router (repr), answered with a 500.
    errors: list[str] = attrs.field(init=False, factory=list, repr=False)
    _queue: collections.deque[Script] = attrs.field(
        init=False, factory=collections.deque, repr=False
    )
    _changed: trio.Event = attrs.field(init=False, factory=trio.Event, repr=False)

    def __attrs_post_init__(self) -> None:
        self.set_route(self._route)

    @property
    def base_url(self) -> str:
        """``http://host:port`` (``https`` with TLS), with no trailing slash."""
        scheme = "http" if self._ssl_context is None else "https"
        return f"{scheme}://{self.host}:{self.port}"

    def set_route(self, route: Route) -> None:
        """Answer later requests from `route` (a script, a sequence consumed in order, a router)."""
        self._route = route
        self._queue = collections.deque()
        if not isinstance(route, _STATIC) and not callable(route):
            self._queue.extend(route)

    async def wait_request(self, n: int = 0) -> RecordedRequest:
        """Wait until request number `n` (0-based) has arrived; return it. A checkpoint."""
        await trio.lowlevel.checkpoint()
        while len(self.requests) <= n:
            await self._changed.wait()
        return self.requests[n]

    async def wait_connection(self, n: int = 0) -> ConnectionRecord:
        """Wait until connection number `n` (0-based) has been accepted; return it."""
        await trio.lowlevel.checkpoint()
        while len(self.connections) <= n:
            await self._changed.wait()
        return self.connections[n]

    async def wait_connection_closed(self, n: int = 0) -> ConnectionRecord:
        """Wait until connection `n` has been accepted and closed; return its record."""
        record = await self.wait_connection(n)
        await record.closed.wait()
        return record

    async def wait_all_closed(self) -> None:
        """Wait until every connection accepted so far (and any accepted meanwhile) is closed."""
        await trio.lowlevel.checkpoint()
        while still_open := [c for c in self.connections if not c.closed.is_set()]:
            await still_open[0].closed.wait()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def _early(self, head: RequestHead) -> HostileScript | None:
        """The hostile script that answers `head` before its body, if the route has one next."""
        route = self._route
        if callable(route) and not isinstance(route, _STATIC):
            return None  # a router decides on whole requests only
        path = urllib.parse.urlsplit(head.target).path or head.target
        if self._script_paths is not None and not (
            head.method == "POST" and path in self._script_paths
        ):
            return None
        script = route if isinstance(route, _STATIC) else (self._queue[0] if self._queue else None)
        if isinstance(script, HostileScript) and script.at_head:
            if not isinstance(route, _STATIC):
                self._queue.popleft()
            return script
        return None

    def _pick(self, request: RecordedRequest) -> Script:
        route = self._route
        if isinstance(route, _STATIC) or not callable(route):
            if self._script_paths is None or (
                request.method == "POST" and request.path in self._script_paths
            ):
                if isinstance(route, _STATIC):
                    return route
                return self._queue.popleft() if self._queue else _EXHAUSTED
        else:
            try:
                script = route(request)
            except Exception as exc:  # a test's router bug must not take the server down
                self.errors.append(repr(exc))
                return _ROUTER_FAILED
            if script is not None:
                return script
        if request.method == "GET" and request.path == "/models":
            return self._models_openai
        if request.method == "GET" and request.path == "/v1/models":
            # OpenAI's real list lives at /v1/models too: a Bearer request
            # without anthropic-version is an OpenAI client.
            headers = request.headers
            if "authorization" in headers and "anthropic-version" not in headers:
                return self._models_openai
            return self._models_anthropic
        return _NOT_FOUND

    async def _handle(self, stream: trio.SocketStream) -> None:
        try:
            host, port = stream.socket.getpeername()[:2]
        except OSError:
            host, port = "", 0
        record = ConnectionRecord(
            index=len(self.connections), opened_at=trio.current_time(), peer=(host, port)
        )
        self.connections.append(record)
        self._notify()
        next_ = _Next.CLOSE
        try:
            conversation: trio.abc.Stream = stream
            if self._ssl_context is not None:
                conversation = trio.SSLStream(
                    stream, self._ssl_context, server_side=True, https_compatible=True
                )
                await conversation.do_handshake()
            next_ = await self._converse(conversation, record)
        except Exception as exc:  # one connection's failure never reaches the others
            record.error = repr(exc)
        finally:
            record.mark_closed("server")
            if next_ is _Next.RESET:
                # SO_LINGER with a zero timeout makes close() send an RST.
                stream.socket.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )
            stream.socket.close()
            record.closed.set()
            self._notify()

    async def _converse(self, stream: trio.abc.Stream, record: ConnectionRecord) -> _Next:
        send, receive = trio.open_memory_channel[_Item](_PIPELINE_DEPTH)
        reader_done = trio.Event()
        next_ = _Next.CLOSE
        async with trio.open_nursery() as nursery:
            reader: trio.CancelScope = await nursery.start(
                self._read_loop, stream, record, send, nursery.cancel_scope, reader_done
            )
            async with receive:
                async for item in receive:
                    if isinstance(item, BadRequest):
                        await self._reject(stream, item)
                        with trio.move_on_after(_LINGER_SECONDS):
                            await reader_done.wait()
                        break
                    if isinstance(item, RequestHead):
                        early = self._early(item)
                        if early is None:
                            continue
                        # Stop reading: the client is left writing a body nobody reads.
                        reader.cancel()
                        next_ = await self._run_hostile(
                            stream, record, early, self._record(record, item), False
                        )
                        break
                    next_ = await self._respond(stream, record, item)
                    if next_ is not _Next.CONTINUE:
                        break
            nursery.cancel_scope.cancel()
        return next_

    async def _read_loop(
        self,
        stream: trio.abc.Stream,
        record: ConnectionRecord,
        send: trio.MemorySendChannel[_Item],
        scope: trio.CancelScope,
        done: trio.Event,
        task_status: trio.TaskStatus[trio.CancelScope] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        parser = RequestParser(
            max_header_bytes=self._max_header_bytes,
            max_body_bytes=self._max_body_bytes,
            report_heads=True,
        )
        try:
            with trio.CancelScope() as own:
                task_status.started(own)
                async with send:
                    while True:
                        try:
                            data = await stream.receive_some(_RECEIVE_BYTES)
                        except trio.BrokenResourceError:
                            data = b""
                        if not data:
                            # The client left: stop whatever is being sent to it now.
                            record.mark_closed("client")
                            scope.cancel()
                            return
                        for item in parser.feed(bytes(data)):
                            try:
                                await send.send(item)
                            except (trio.BrokenResourceError, trio.ClosedResourceError):
                                return  # the responder has finished with this connection
        finally:
            done.set()

    def _record(
        self, record: ConnectionRecord, parsed: ParsedRequest | RequestHead
    ) -> RecordedRequest:
        split = urllib.parse.urlsplit(parsed.target)
        request = RecordedRequest(
            index=len(self.requests),
            connection=record.index,
            method=parsed.method,
            target=parsed.target,
            path=split.path or parsed.target,
            query=split.query,
            version=parsed.version,
            headers=Headers(parsed.headers),
            body=parsed.body if isinstance(parsed, ParsedRequest) else b"",
            received_at=trio.current_time(),
        )
        self.requests.append(request)
        record.requests.append(request)
        self._notify()
        return request

    async def _respond(
        self, stream: trio.abc.Stream, record: ConnectionRecord, parsed: ParsedRequest
    ) -> _Next:
        request = self._record(record, parsed)
        script = self._pick(request)
        if isinstance(script, HostileScript):
            return await self._run_hostile(stream, record, script, request, parsed.keep_alive)
        plan = script.plan
        keep_alive = parsed.keep_alive and not plan.always_close
        head = plan.head_keep_alive if keep_alive else plan.head_close
        if plan.first_byte_delay:
            await trio.sleep(plan.first_byte_delay)
        writes = plan.writes
        delay = plan.delay
        try:
            start = trio.current_time()
            await stream.send_all(head + writes[0] if writes else head)
            for i in range(1, len(writes)):
                if delay:
                    # Absolute deadlines: a server slowed by load catches up
                    # instead of drifting, so events keep their scripted times.
                    await trio.sleep_until(start + i * delay)
                await stream.send_all(writes[i])
        except trio.BrokenResourceError:
            record.mark_closed("client")
            return _Next.CLOSE
        if plan.ending is Ending.STALL:
            await trio.sleep_forever()
        if plan.ending is Ending.DISCONNECT:
            return _Next.RESET if plan.reset else _Next.CLOSE
        record.responses_completed += 1
        return _Next.CONTINUE if keep_alive else _Next.CLOSE

    async def _run_hostile(
        self,
        stream: trio.abc.Stream,
        record: ConnectionRecord,
        script: HostileScript,
        request: RecordedRequest,
        keep_alive: bool,
    ) -> _Next:
        try:
            outcome = await script.serve(stream, request)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            record.mark_closed("client")
            return _Next.CLOSE
        match outcome:
            case "keep-alive":
                record.responses_completed += 1
                return _Next.CONTINUE if keep_alive else _Next.CLOSE
            case "close":
                return _Next.CLOSE
            case "reset":
                return _Next.RESET
            case _:
                assert_never(outcome)

    async def _reject(self, stream: trio.abc.Stream, bad: BadRequest) -> None:
        body = f"{bad.reason}\n".encode()
        headers = [
            ("content-type", "text/plain; charset=utf-8"),
            ("content-length", str(len(body))),
            ("connection", "close"),
        ]
        try:
            await stream.send_all(response_head(bad.status, headers) + body)
            if isinstance(stream, trio.abc.HalfCloseableStream):
                await stream.send_eof()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass


async def serve_upstream(
    route: Route,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    models: Sequence[str] = DEFAULT_MODELS,
    script_paths: Collection[str] | None = DEFAULT_SCRIPT_PATHS,
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    ssl_context: ssl.SSLContext | None = None,
    task_status: trio.TaskStatus[Upstream] = trio.TASK_STATUS_IGNORED,
) -> NoReturn:
    """Serve `route` on `host`:`port` (0: any free port) until cancelled.

    With `nursery.start`, returns the `Upstream` once it listens. A static
    script or a script sequence answers POSTs to `script_paths` (None: every
    request); a router sees every request first. Then ``GET /models`` (OpenAI
    list) and ``GET /v1/models`` (Anthropic list, or OpenAI's for a Bearer
    request without ``anthropic-version``) list `models`; anything else is
    404. An exhausted script sequence answers 500. With `ssl_context`, every
    connection speaks TLS (`Upstream.base_url` is then ``https``). Raises `OSError` if the
    port cannot be bound.
    """
    listeners = await trio.open_tcp_listeners(port, host=host, backlog=None)
    upstream = Upstream(
        host=host,
        port=listeners[0].socket.getsockname()[1],
        route=route,
        script_paths=script_paths,
        max_header_bytes=max_header_bytes,
        max_body_bytes=max_body_bytes,
        models_openai=_openai_models(models),
        models_anthropic=_anthropic_models(models),
        ssl_context=ssl_context,
    )
    task_status.started(upstream)
    await trio.serve_listeners(upstream._handle, listeners)
    raise AssertionError("unreachable: serve_listeners never returns")  # pragma: no cover


@asynccontextmanager
async def open_upstream(
    route: Route,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    models: Sequence[str] = DEFAULT_MODELS,
    script_paths: Collection[str] | None = DEFAULT_SCRIPT_PATHS,
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    ssl_context: ssl.SSLContext | None = None,
) -> AsyncIterator[Upstream]:
    """Run a local upstream for the duration of the block; yield its `Upstream`.

    Arguments are `serve_upstream`'s. Leaving the block cancels every
    connection and closes every socket (records not already closed show
    ``closed_by == "server"``). Raises `OSError` if the port cannot be bound.
    """
    serve = functools.partial(
        serve_upstream,
        route,
        host=host,
        port=port,
        models=models,
        script_paths=script_paths,
        max_header_bytes=max_header_bytes,
        max_body_bytes=max_body_bytes,
        ssl_context=ssl_context,
    )
    async with trio.open_nursery() as nursery:
        upstream: Upstream = await nursery.start(serve)
        try:
            yield upstream
        finally:
            nursery.cancel_scope.cancel()
