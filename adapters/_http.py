"""HTTP plumbing shared by the provider adapters: clients, credentials, errors, SSE bodies.

Foreign exceptions are translated here, at the I/O edge: every httpx error
becomes an `LlmError` with a stable code, and an error response is
classified from its status, headers and body before anything is streamed.
"""

from __future__ import annotations

import importlib.util
import os
import ssl
import urllib.parse
import urllib.request
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import aclosing, asynccontextmanager
from typing import Protocol, cast

import httpx
import trio

from llmrt import ErrorCode, LlmError, StreamChunk, attribution_headers

from ._classify import classify_http_error
from ._sse import SSEParser
from ._transport import TrioTransport

__all__ = [
    "DEFAULT_TIMEOUT",
    "DEFAULT_LIMITS",
    "make_client",
    "pool_counts",
    "read_api_key",
    "translate_http_error",
    "open_event_stream",
    "finish_body",
    "body_reads",
    "EventFeed",
    "SSEFeed",
    "stream_events",
]

#: Explicit bounds on every phase. Reads may be slow (a long prompt before the
#: first token); the runtime's idle watchdog is what bounds a stalled stream.
DEFAULT_TIMEOUT = httpx.Timeout(connect=10.0, read=600.0, write=30.0, pool=60.0)
#: Sized for thousands of concurrent streams through one registration.
DEFAULT_LIMITS = httpx.Limits(
    max_connections=10_000, max_keepalive_connections=1_000, keepalive_expiry=30.0
)
#: How much of an error body is read to classify it.
MAX_ERROR_BODY = 64 * 1024


def make_client(
    base_url: str,
    *,
    timeout: httpx.Timeout | None = None,
    limits: httpx.Limits | None = None,
    http2: bool | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    ssl_context: ssl.SSLContext | None = None,
) -> httpx.AsyncClient:
    """One registration's client: no redirects, no library retries, attribution headers.

    HTTP/1.1 goes through `TrioTransport` (a constant-time connection pool on
    trio sockets: httpcore's pool scans every connection on each request start
    and end, which dominated CPU at a thousand concurrent streams), except
    for an endpoint the environment routes through a proxy (``HTTPS_PROXY``
    and co.), which stays on httpx's transport.
    ``http2=None`` turns HTTP/2 on, through httpx's own transport, for
    ``https`` endpoints when the ``h2`` package is installed (``pip install
    httpx[http2]``). ``ssl_context`` replaces the default certificate checks
    (e.g. a private CA). A given ``transport`` (``httpx.MockTransport`` in
    tests) replaces all of this.
    """
    if http2 is None:
        http2 = base_url.startswith("https://") and importlib.util.find_spec("h2") is not None
    if transport is None and not http2 and not _proxied(base_url):
        # httpx ignores limits when given a transport: they go to ours.
        transport = TrioTransport(limits=limits or DEFAULT_LIMITS, ssl_context=ssl_context)
    return httpx.AsyncClient(
        base_url=base_url,
        timeout=timeout or DEFAULT_TIMEOUT,
        limits=limits or DEFAULT_LIMITS,
        http2=http2,
        transport=transport,
        verify=ssl_context if ssl_context is not None else True,
        headers=attribution_headers(),
        follow_redirects=False,
    )


def pool_counts(client: httpx.AsyncClient) -> tuple[int, int] | None:
    """(open, of which idle) connections of a `make_client` client's pool; None when unknown.

    Known for `TrioTransport` (the HTTP/1.1 default); httpx's own transport
    (HTTP/2, proxies) and test transports report None.
    """
    transport = client._transport  # httpx keeps the transport it was given here
    if isinstance(transport, TrioTransport):
        return transport.connection_counts()
    return None


def _proxied(base_url: str) -> bool:
    """Whether the environment routes ``base_url`` through a proxy (HTTPS_PROXY and co.).

    TrioTransport speaks directly to the origin; a proxied endpoint stays on
    httpx's own transport, which honours the proxy variables.
    """
    parts = urllib.parse.urlsplit(base_url)
    if parts.hostname in ("localhost", "127.0.0.1", "::1"):
        return False  # a local server is never reached through a proxy
    proxies = urllib.request.getproxies()
    if not (proxies.get(parts.scheme) or proxies.get("all")):
        return False
    return not urllib.request.proxy_bypass(parts.hostname or "")


def read_api_key(env_var: str, environ: Mapping[str, str] | None = None) -> str:
    """The API key in ``env_var``, checked before any I/O.

    Raises `LlmError` ``MISSING_CREDENTIAL`` (unset or empty) or
    ``INVALID_CREDENTIAL`` (not a single printable ASCII token). The key never
    appears in a message.
    """
    value = (os.environ if environ is None else environ).get(env_var)
    if not value:
        raise LlmError(
            ErrorCode.MISSING_CREDENTIAL, f"no API key: the environment variable {env_var} is unset"
        )
    if not all("!" <= ch <= "~" for ch in value):
        raise LlmError(
            ErrorCode.INVALID_CREDENTIAL,
            f"the API key in {env_var} is malformed: it must be one token of printable "
            "ASCII characters, without spaces or line breaks",
        )
    return value


def translate_http_error(exc: httpx.HTTPError) -> LlmError:
    """An httpx exception as an `LlmError` (``TIMEOUT``, ``NETWORK`` or ``PROTOCOL``)."""
    name = type(exc).__name__
    detail = str(exc) or name
    if isinstance(exc, httpx.TimeoutException):
        return LlmError(ErrorCode.TIMEOUT, f"the provider did not answer in time ({name})")
    if isinstance(exc, httpx.DecodingError):
        return LlmError(ErrorCode.PROTOCOL, f"undecodable response body ({name}: {detail})")
    if isinstance(exc, httpx.RemoteProtocolError):
        return LlmError(ErrorCode.NETWORK, f"the provider broke the connection ({detail})")
    return LlmError(ErrorCode.NETWORK, f"connection to the provider failed ({name}: {detail})")


async def _read_bounded(response: httpx.Response) -> bytes:
    body = bytearray()
    async for piece in response.aiter_bytes():
        body += piece
        if len(body) >= MAX_ERROR_BODY:
            break
    return bytes(body[:MAX_ERROR_BODY])


@asynccontextmanager
async def open_event_stream(
    client: httpx.AsyncClient,
    path: str,
    *,
    body: bytes,
    headers: Mapping[str, str],
    provider_kind: str,
) -> AsyncIterator[httpx.Response]:
    """POST ``body`` and yield the streaming response once it is a 2xx event stream.

    Raises `LlmError`: the classified failure for an error status, ``PROTOCOL``
    for a success that is not ``text/event-stream`` (an HTML page from a
    proxy, say), or a translated transport error. The response is closed on
    exit, however it is left.
    """
    request = client.build_request("POST", path, content=body, headers=headers)
    try:
        response = await client.send(request, stream=True)
    except httpx.HTTPError as exc:
        raise translate_http_error(exc) from None
    try:
        if response.status_code >= 300:
            try:
                raw = await _read_bounded(response)
            except httpx.HTTPError:
                raw = b""
            raise LlmError.from_failure(
                classify_http_error(provider_kind, response.status_code, response.headers, raw)
            )
        content_type = response.headers.get("content-type", "")
        if "text/event-stream" not in content_type.lower():
            try:
                raw = await _read_bounded(response)
            except httpx.HTTPError:
                raw = b""
            snippet = raw[:120].decode("utf-8", "replace").strip()
            raise LlmError(
                ErrorCode.PROTOCOL,
                f"expected an event stream, got {content_type or 'no content type'} "
                f"with HTTP {response.status_code}: {snippet!r}",
            )
        yield response
    finally:
        await response.aclose()


#: How long to wait for the end of a body after the provider's end-of-stream marker.
EOF_GRACE = 1.0


async def finish_body(reads: AsyncIterator[bytes]) -> None:
    """Read what is left of a body after its end-of-stream marker, briefly.

    A body read to its end lets httpx return the connection to the pool (no
    new TCP/TLS handshake for the next call); a server that keeps the body
    open past the marker costs at most `EOF_GRACE` seconds and its connection.
    """
    with trio.move_on_after(EOF_GRACE):
        async for _ in reads:
            pass


def body_reads(response: httpx.Response) -> AsyncGenerator[bytes, None]:
    """The response body's reads, as the async generator httpx makes (for ``aclosing``)."""
    return cast(AsyncGenerator[bytes, None], response.aiter_bytes())


class EventFeed(Protocol):
    """A provider's body decoding: network reads in, chunks out (SSE parser + wire decoder)."""

    def feed(self, data: bytes) -> list[StreamChunk]:
        """The chunks of one read; stops at the provider's end-of-stream marker."""

    @property
    def finished(self) -> bool:
        """True once the end-of-stream marker (or a terminal error) was decoded."""

    def end(self) -> list[StreamChunk]:
        """The chunks owed when the body ended before the marker (an error finish)."""


class _WireDecoder(Protocol):
    @property
    def finished(self) -> bool: ...

    def end(self) -> list[StreamChunk]: ...


class SSEFeed:
    """The common half of the adapters' `EventFeed`s: an SSE parser and a wire decoder.

    Subclasses implement ``feed`` for their event shape.
    """

    def __init__(self, decoder: _WireDecoder) -> None:
        self._parser = SSEParser()
        self._wire = decoder

    @property
    def finished(self) -> bool:
        return self._wire.finished

    def end(self) -> list[StreamChunk]:
        self._parser.close()
        return self._wire.end()


async def stream_events(
    client: httpx.AsyncClient,
    path: str,
    *,
    body: bytes,
    headers: Mapping[str, str],
    provider_kind: str,
    events: EventFeed,
) -> AsyncIterator[StreamChunk]:
    """POST ``body`` and stream the chunks ``events`` decodes from the response.

    The read that completes the stream is held until the rest of the body is
    read (`finish_body`), so the connection goes back to the pool. Raises
    `LlmError` as `open_event_stream` does, and for transport errors mid-body.
    """
    async with open_event_stream(
        client, path, body=body, headers=headers, provider_kind=provider_kind
    ) as response:
        try:
            async with aclosing(body_reads(response)) as reads:
                async for raw in reads:
                    chunks = events.feed(raw)
                    if events.finished:
                        await finish_body(reads)
                        for chunk in chunks:
                            yield chunk
                        return
                    for chunk in chunks:
                        yield chunk
        except httpx.HTTPError as exc:
            raise translate_http_error(exc) from None
    for chunk in events.end():
        yield chunk
