"""The one transport interface the adapters stream through: a request in, a byte receiver out.

Every upstream byte of an HTTP adapter passes through one call::

    async with transport.exchange(request, body) as response:
        response.status, response.headers       # the final response head
        while data := await response.receive():  # one network read each; b"" at the end
            ...

``request`` is a `RequestHead` (method, URL, origin, headers, timeouts and
the encoded HTTP/1.1 head), ``body`` the whole request body. Leaving the
block closes the response (a body read to its end returns its connection to
the pool); `Response.close` does the same at once and without I/O, for a
call that is stopped (``close_on_stop``). Transport failures raise httpx's
exceptions (``ConnectError``, ``ReadTimeout``, ``RemoteProtocolError``...),
which the adapters translate in one place (``_http.translate_http_error``).

Two transports speak it. `llmrt.adapters._transport.TrioTransport` (HTTP/1.1
on trio sockets, the default) implements it natively: it writes the encoded
head and reads the socket, with no httpx object per request or per read.
`HttpxExchange` wraps any other httpx transport once (``httpx.MockTransport``,
httpx's own for HTTP/2 or a proxy, a user's): it builds the ``httpx.Request``
the transport expects and reads the response's byte stream, through httpx's
public transport API only.

`Upstream` is one endpoint's half: base URL, default headers, timeouts, the
transport, and the requests' constant parts cached per (method, path,
header names) on the `Upstream` itself (`Route`), bounded.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Final, Protocol

import attrs
import httpx

from llmrt import ErrorCode, LlmError
from llmrt._deadlines import RuntimeServices

__all__ = [
    "Exchange",
    "Exchanger",
    "HttpxExchange",
    "MAX_ROUTES",
    "Origin",
    "RequestHead",
    "Response",
    "Route",
    "Upstream",
]

#: (scheme, host, port), as the pool keys connections.
Origin = tuple[bytes, str, int]
_DEFAULT_PORTS: Final = {b"http": 80, b"https": 443}
#: Routes an `Upstream` keeps (model names in paths, as Gemini's, could grow them without end).
MAX_ROUTES: Final = 256


class Response(Protocol):
    """A response as `Exchanger.exchange` yields it: head, then body reads."""

    @property
    def status(self) -> int:
        """The final status (informational 1xx heads are skipped)."""
        ...

    @property
    def headers(self) -> Sequence[tuple[bytes, bytes]]:
        """The header block, raw, in order."""
        ...

    @property
    def done(self) -> bool:
        """True once the body is known to have ended (a transport that cannot tell: False)."""
        ...

    @property
    def stopped(self) -> bool:
        """True once `close` ended the response before its body ended."""
        ...

    async def receive(self) -> bytes:
        """The body bytes of the next network read (content codings untouched); b"" at the end."""
        ...

    def close(self) -> None:
        """End the response now, without I/O: its connection is closed unless fully read.

        A read then waiting, or made later, returns ``b""`` (the body ends:
        a stopped call's read has no error to translate).
        """
        ...


class Exchange(Protocol):
    """``async with`` one exchange: entered, the `Response`; left, it is closed."""

    async def __aenter__(self) -> Response: ...

    async def __aexit__(self, *exc: object) -> None: ...


class Exchanger(Protocol):
    """The transport interface (see the module docstring)."""

    def exchange(self, request: RequestHead, body: bytes) -> Exchange:
        """Send ``request`` (its head) and ``body``; the response once its head arrived."""
        ...

    def connection_counts(self) -> tuple[int, int] | None:
        """(open, of which idle) connections now; None when the transport cannot tell."""
        ...

    def attach_runtime(self, services: RuntimeServices) -> None:
        """Use the runtime's services (a deadline heap, a nursery) while they last."""
        ...

    def detach_runtime(self) -> None: ...

    async def aclose(self) -> None: ...


@attrs.frozen(eq=False)
class Route:
    """What every request of one `Upstream` with one method, path and header names shares."""

    method: bytes
    url: httpx.URL
    origin: Origin
    #: The request line, ``Host`` and the upstream's default headers not overridden.
    prefix: bytes
    #: The default headers not overridden (name, value), for transports that take a list.
    defaults: tuple[tuple[bytes, bytes], ...]
    #: The newline count of `prefix` (the header-injection check counts them).
    prefix_lines: int
    timeouts: Mapping[str, float | None]


class RequestHead:
    """One request's head: its `Route`, its own headers, and the HTTP/1.1 head encoded."""

    __slots__ = ("head", "headers", "route")

    def __init__(self, route: Route, headers: Mapping[str, str], length: int) -> None:
        """Raises `LlmError` ``INVALID_REQUEST`` for a header with a line break or NUL."""
        self.route = route
        self.headers = headers
        parts = [route.prefix]
        for name, value in headers.items():
            parts.append(b"\r\n" + name.encode("ascii") + b": " + value.encode("utf-8"))
        # One CRLF per header line plus the blank line: any other CR, LF or a NUL injects.
        if length or route.method != b"GET":
            parts.append(b"\r\nContent-Length: %d\r\n\r\n" % length)
            lines = len(parts) + route.prefix_lines + 1
        else:
            parts.append(b"\r\n\r\n")  # no body, no length: as httpx sends a GET
            lines = len(parts) + route.prefix_lines
        head = b"".join(parts)
        if head.count(b"\n") != lines or head.count(b"\r") != lines or b"\x00" in head:
            raise LlmError(ErrorCode.INVALID_REQUEST, "a request header holds a line break or NUL")
        #: The encoded HTTP/1.1 request head, ending in the blank line.
        self.head = head

    def header_list(self) -> list[tuple[bytes, bytes]]:
        """Every header as sent: the defaults, then the request's own (no Host, no length)."""
        own = self.headers.items()
        return [
            *self.route.defaults,
            *((name.encode("ascii"), value.encode("utf-8")) for name, value in own),
        ]

    @property
    def endpoint(self) -> str:
        """``scheme://host:port`` of the request: never its path, query or userinfo."""
        scheme, host, port = self.route.origin
        return f"{scheme.decode()}://{host}:{port}"


class Upstream:
    """One endpoint's client: base URL, default headers, timeouts, its `Exchanger`, routes."""

    def __init__(
        self,
        base_url: str,
        *,
        transport: Exchanger,
        headers: Mapping[str, str],
        timeout: httpx.Timeout,
    ) -> None:
        url = httpx.URL(base_url)
        if url.raw_scheme not in _DEFAULT_PORTS:
            raise ValueError("the base URL must be http:// or https://")
        raw_path = url.raw_path.split(b"?", 1)[0]
        if not raw_path.endswith(b"/"):
            raw_path += b"/"
        self.base_url = url.copy_with(raw_path=raw_path)
        self.transport = transport
        self.headers = httpx.Headers(headers)
        self.timeout = timeout
        self._routes: dict[tuple[bytes, str, tuple[str, ...]], Route] = {}

    async def __aenter__(self) -> Upstream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.transport.aclose()

    def url(self, path: str) -> httpx.URL:
        """``path`` under the base URL (a path relative to it, as httpx's ``base_url``)."""
        merged = httpx.URL(path)
        if merged.is_absolute_url:
            return merged
        base = self.base_url
        return base.copy_with(raw_path=base.raw_path + merged.raw_path.lstrip(b"/"))

    def route(self, method: bytes, path: str, names: tuple[str, ...]) -> Route:
        """The cached `Route` of ``method path`` with a request naming headers ``names``."""
        key = (method, path, names)
        route = self._routes.get(key)
        if route is not None:
            return route
        url = self.url(path)
        scheme = url.raw_scheme
        if scheme not in _DEFAULT_PORTS:
            raise httpx.UnsupportedProtocol(f"the upstream does not speak {scheme!r} URLs")
        origin = (scheme, url.raw_host.decode("ascii"), url.port or _DEFAULT_PORTS[scheme])
        overridden = {name.lower() for name in names} | {"host", "content-length"}
        defaults = tuple(
            (name, value)
            for name, value in self.headers.raw
            if name.decode("latin-1").lower() not in overridden
        )
        # ``netloc`` is the Host header httpx sends (default port left out, IPv6 bracketed).
        lines = [method + b" " + url.raw_path + b" HTTP/1.1\r\nHost: " + url.netloc]
        lines.extend(b"\r\n" + name + b": " + value for name, value in defaults)
        prefix = b"".join(lines)
        route = Route(
            method=method,
            url=url,
            origin=origin,
            prefix=prefix,
            defaults=defaults,
            prefix_lines=prefix.count(b"\n"),
            timeouts=self.timeout.as_dict(),
        )
        if len(self._routes) >= MAX_ROUTES:
            self._routes.clear()
        self._routes[key] = route
        return route

    @property
    def route_count(self) -> int:
        """Routes cached now (at most `MAX_ROUTES`)."""
        return len(self._routes)

    def request(
        self, method: bytes, path: str, headers: Mapping[str, str], length: int
    ) -> RequestHead:
        """The head of ``method path`` with ``headers`` and a body of ``length`` bytes.

        Raises `LlmError` ``INVALID_REQUEST`` for a header that would break
        the head (a line break or NUL), and httpx's ``InvalidURL`` or
        ``UnsupportedProtocol`` for a path that is no URL under an http(s) base.
        """
        return RequestHead(self.route(method, path, tuple(headers)), headers, length)


# ---- a foreign httpx transport, wrapped ---------------------------------------------------------


class HttpxExchange:
    """Any ``httpx.AsyncBaseTransport`` as an `Exchanger`, through its public API only.

    ``exchange`` builds the ``httpx.Request`` an ``httpx.AsyncClient`` would
    send (same URL, same headers in the same order, the timeouts in the
    ``timeout`` extension) and hands it to ``handle_async_request``; the
    response's byte stream is read one piece per `receive`.
    """

    def __init__(self, transport: httpx.AsyncBaseTransport) -> None:
        self.transport = transport

    def exchange(self, request: RequestHead, body: bytes) -> _WrappedExchange:
        return _WrappedExchange(self.transport, request, body)

    def connection_counts(self) -> tuple[int, int] | None:
        return None

    def attach_runtime(self, services: RuntimeServices) -> None:
        pass  # httpx's transports keep their own timers

    def detach_runtime(self) -> None:
        pass

    async def aclose(self) -> None:
        await self.transport.aclose()


class _WrappedResponse:
    """A `Response` over an ``httpx.Response`` from a transport (its raw byte stream)."""

    __slots__ = ("_reads", "_response", "done", "headers", "status", "stopped")

    def __init__(self, response: httpx.Response) -> None:
        self.status = response.status_code
        self.headers = response.headers.raw
        self._response = response
        self._reads: AsyncIterator[bytes] = aiter(response.stream)  # type: ignore[arg-type]
        self.stopped = False
        self.done = False

    async def receive(self) -> bytes:
        if self.done or self.stopped:
            return b""
        while True:
            try:
                data = await anext(self._reads)
            except StopAsyncIteration:
                self.done = True
                return b""
            if self.stopped:
                return b""  # closed while the read waited
            if data:
                return bytes(data)

    def close(self) -> None:
        # No I/O here: the transport's stream is closed when the exchange is left.
        if not self.done:
            self.stopped = True

    async def aclose(self) -> None:
        self.close()
        await self._response.aclose()


class _WrappedExchange:
    __slots__ = ("_body", "_request", "_response", "_transport")

    def __init__(
        self, transport: httpx.AsyncBaseTransport, request: RequestHead, body: bytes
    ) -> None:
        self._transport = transport
        self._request = request
        self._body = body
        self._response: _WrappedResponse | None = None

    async def __aenter__(self) -> _WrappedResponse:
        request, route = self._request, self._request.route
        outgoing = httpx.Request(
            route.method.decode("ascii"),
            route.url,
            headers=request.header_list(),
            content=self._body,
            extensions={"timeout": dict(route.timeouts)},
        )
        self._response = _WrappedResponse(await self._transport.handle_async_request(outgoing))
        return self._response

    async def __aexit__(self, *exc: object) -> None:
        response, self._response = self._response, None
        if response is not None:
            await response.aclose()
