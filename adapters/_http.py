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
from collections.abc import AsyncGenerator, Iterable, Mapping, Sequence
from contextlib import aclosing
from typing import NoReturn, Protocol, cast

import attrs
import httpx
import msgspec
import trio

from llmrt import ErrorCode, LlmError, LlmFailure, StreamChunk
from llmrt.adapter import Redactor, attribution_headers, close_on_stop, looks_like_secret

from ._bodies import ACCEPT_ENCODING, BoundedInflater, GatedSSEParser, inflater_for
from ._classify import classify_http_error, classify_stream_error
from ._exchange import Exchanger, HttpxExchange, Response, Upstream
from ._h11lite import MalformedResponse
from ._transport import PeerRefused, TrioTransport

__all__ = [
    "DEFAULT_TIMEOUT",
    "DEFAULT_LIMITS",
    "make_client",
    "pool_counts",
    "read_api_key",
    "KeyRedaction",
    "translate_http_error",
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
    transport: httpx.AsyncBaseTransport | Exchanger | None = None,
    ssl_context: ssl.SSLContext | None = None,
) -> Upstream:
    """One registration's `Upstream`: no redirects, no library retries, attribution headers.

    HTTP/1.1 goes through `TrioTransport` (a constant-time connection pool on
    trio sockets: httpcore's pool scans every connection on each request start
    and end, which dominated CPU at a thousand concurrent streams), except
    for an endpoint the environment routes through a proxy (``HTTPS_PROXY``
    and co.), which goes through httpx's transport for that proxy.
    ``http2=None`` turns HTTP/2 on, through httpx's own transport, for
    ``https`` endpoints when the ``h2`` package is installed (``pip install
    httpx[http2]``). ``ssl_context`` replaces the default certificate checks
    (e.g. a private CA). A given ``transport`` replaces all of this: an
    `Exchanger` is used as it is, any other httpx transport
    (``httpx.MockTransport`` in tests) is wrapped once (`HttpxExchange`).
    """
    if http2 is None:
        http2 = base_url.startswith("https://") and importlib.util.find_spec("h2") is not None
    limits = limits or DEFAULT_LIMITS
    exchanger: Exchanger
    if transport is not None:
        exchanger = (
            cast(Exchanger, transport)
            if _is_exchanger(transport)
            else HttpxExchange(cast(httpx.AsyncBaseTransport, transport))
        )
    else:
        proxy = _proxy_for(base_url)
        if not http2 and proxy is None:
            exchanger = TrioTransport(limits=limits, ssl_context=ssl_context)
        else:
            exchanger = HttpxExchange(
                httpx.AsyncHTTPTransport(
                    verify=ssl_context if ssl_context is not None else True,
                    http2=http2,
                    limits=limits,
                    proxy=proxy,
                )
            )
    return Upstream(
        base_url,
        transport=exchanger,
        # httpx's default headers, with only the codings inflated under a bound
        # (`_bodies`; httpx would add br/zstd) and the attribution headers.
        headers={
            "Accept": "*/*",
            "Accept-Encoding": ACCEPT_ENCODING,
            "Connection": "keep-alive",
            **attribution_headers(),
        },
        timeout=timeout or DEFAULT_TIMEOUT,
    )


def _is_exchanger(transport: object) -> bool:
    return callable(getattr(transport, "exchange", None))


def pool_counts(client: Upstream) -> tuple[int, int] | None:
    """(open, of which idle) connections of a `make_client` upstream's pool; None when unknown.

    Known for `TrioTransport` (the HTTP/1.1 default); httpx's own transport
    (HTTP/2, proxies) and test transports report None.
    """
    counts: tuple[int, int] | None = client.transport.connection_counts()
    return counts


def _proxy_for(base_url: str) -> str | None:
    """The proxy the environment routes ``base_url`` through (HTTPS_PROXY and co.), if any.

    TrioTransport speaks directly to the origin; a proxied endpoint goes
    through httpx's transport for that proxy.
    """
    if not _proxied(base_url):
        return None
    proxies = urllib.request.getproxies()
    scheme = urllib.parse.urlsplit(base_url).scheme
    return proxies.get(scheme) or proxies.get("all")


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
    # Printable ASCII without spaces ("!" .. "~"), checked in C: this runs per request.
    if value and value.isascii() and value.isprintable() and " " not in value:
        return value
    # A "name" that looks like a key is one pasted in the wrong place: these
    # messages reach every gateway client, so it is never repeated.
    named = "named by api_key_env (a name that looks like a key)"
    named = named if looks_like_secret(env_var) else env_var
    if not value:
        raise LlmError(
            ErrorCode.MISSING_CREDENTIAL, f"no API key: the environment variable {named} is unset"
        )
    raise LlmError(
        ErrorCode.INVALID_CREDENTIAL,
        f"the API key in {env_var if named is env_var else 'the variable ' + named} is "
        "malformed: it must be one token of printable ASCII characters, without spaces "
        "or line breaks",
    )


@attrs.define(eq=False)
class KeyRedaction:
    """An adapter's `Redactor` for the key now in its environment variable.

    The key is read again on every call (it may change); the redactor is
    rebuilt only when it did. Neither the key nor the redactor's secrets
    enter a ``repr``.
    """

    _key: str | None = attrs.field(default=None, init=False, repr=False)
    _redactor: Redactor = attrs.field(factory=Redactor, init=False, repr=False)

    def of(self, env_var: str | None, environ: Mapping[str, str] | None = None) -> Redactor:
        """The redactor of the key in ``env_var`` (phrasings only when unset). Never raises."""
        key = (os.environ if environ is None else environ).get(env_var) if env_var else None
        if key != self._key:
            self._key, self._redactor = key, Redactor((key,))
        return self._redactor


def translate_http_error(exc: httpx.HTTPError, endpoint: str | None = None) -> LlmError:
    """An httpx exception as an `LlmError` (``TIMEOUT``, ``NETWORK`` or ``PROTOCOL``).

    Connection failures name the endpoint (scheme, host and port only): the
    failed request's, or ``endpoint`` (``scheme://host:port``) when given.
    """
    name = type(exc).__name__
    detail = str(exc) or name
    if isinstance(exc, httpx.TimeoutException):
        return LlmError(ErrorCode.TIMEOUT, f"the provider did not answer in time ({name})")
    if isinstance(exc, httpx.DecodingError):
        return LlmError(ErrorCode.PROTOCOL, f"undecodable response body ({name}: {detail})")
    if isinstance(exc, MalformedResponse):
        # Bytes that are not HTTP/1.1 (a garbage status line, broken chunk framing):
        # the same server would send them again, so this is not a network failure.
        return LlmError(ErrorCode.PROTOCOL, f"the provider sent malformed HTTP ({detail})")
    if isinstance(exc, httpx.RemoteProtocolError):
        return LlmError(ErrorCode.NETWORK, f"the provider broke the connection ({detail})")
    if isinstance(exc, PeerRefused):
        # A policy refusal, not a network failure: the same URL is refused again.
        return LlmError(ErrorCode.INVALID_REQUEST, detail)
    return LlmError(
        ErrorCode.NETWORK,
        f"connection to the provider{f' at {endpoint}' if endpoint else _endpoint(exc)} "
        f"failed ({name}: {detail})",
    )


def _endpoint(exc: httpx.HTTPError) -> str:
    """`` at scheme://host:port`` of the failed request: never its path, query or userinfo."""
    try:
        url = exc.request.url
    except RuntimeError:  # an error raised outside a request
        return ""
    return f" at {url.scheme}://{url.host}:{url.port or _DEFAULT_PORT.get(url.scheme, '?')}"


_DEFAULT_PORT = {"http": 80, "https": 443}


async def _read_bounded(response: Response) -> bytes:
    body = bytearray()
    try:
        async with aclosing(body_reads(response)) as reads:
            async for piece in reads:
                body += piece
                if len(body) >= MAX_ERROR_BODY:
                    break
    except LlmError:
        pass  # an undecodable error body: what was decoded still helps classify it
    return bytes(body[:MAX_ERROR_BODY])


def _json_error_failure(
    provider_kind: str, status: int, headers: Mapping[str, str], body: bytes
) -> LlmFailure | None:
    """The failure a success-status JSON error body describes (``{"error": ...}``), or None.

    Some servers answer a streaming request with a 2xx status and a JSON
    error body instead of an event stream. The body, not the status, says
    what failed: the code is decided from its ``error`` object as for an
    in-band error, and the rest (message, status, request id, retry delay)
    is what an HTTP error gets.
    """
    try:
        payload = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return None
    if not isinstance(payload, dict) or not payload.get("error"):
        return None
    failure = classify_http_error(provider_kind, status, headers, body)
    code = classify_stream_error(provider_kind, payload).code
    return msgspec.structs.replace(failure, code=code)


def _header(headers: Sequence[tuple[bytes, bytes]], name: bytes) -> str:
    """The first value of header ``name`` (lower case) as text; "" when absent."""
    for key, value in headers:
        if key.lower() == name:
            return value.decode("latin-1")
    return ""


async def _refuse(response: Response, provider_kind: str) -> NoReturn:
    """Raise the `LlmError` for a response that is not a 2xx event stream (body read, bounded)."""
    try:
        raw = await _read_bounded(response)
    except httpx.HTTPError:
        raw = b""
    status = response.status
    headers = httpx.Headers(list(response.headers))
    if status >= 300:
        raise LlmError.from_failure(classify_http_error(provider_kind, status, headers, raw))
    failure = _json_error_failure(provider_kind, status, headers, raw)
    if failure is not None:
        raise LlmError.from_failure(failure)
    content_type = headers.get("content-type", "")
    raise LlmError(
        ErrorCode.PROTOCOL,
        f"expected an event stream, got {content_type or 'no content type'} "
        f"with HTTP {status}: {_snippet(raw)}",
    )


#: Characters of a non-event-stream body quoted in its failure.
_SNIPPET_CHARS = 120
#: Credential-looking phrases only (a value: immutable, shared).
_PHRASES = Redactor()


def _snippet(raw: bytes) -> str:
    """The start of ``raw`` as one line, credential-looking phrases removed, last in a message.

    Cut after the phrasings are removed (a cut could split one), and marked
    with an ellipsis at the very end of the message, where the one redaction
    point finds the start of a key the cut split (`llmrt.adapter.Redactor`).
    """
    text = " ".join(_PHRASES.redact(raw.decode("utf-8", "replace")).split())
    if len(text) <= _SNIPPET_CHARS:
        return text or "(empty body)"
    return text[:_SNIPPET_CHARS] + "\u2026"


#: How long to wait for the end of a body after the provider's end-of-stream marker.
EOF_GRACE = 1.0


async def body_reads(response: Response) -> AsyncGenerator[bytes, None]:
    """The response body's reads, content-decoded under a bound (for ``aclosing``).

    A ``gzip``/``deflate`` read comes out in pieces of at most
    ``_bodies.INFLATE_PIECE`` bytes, with a checkpoint between two pieces of
    one read, so a decompression bomb neither holds the event loop nor
    bypasses the SSE parser's bounds. Raises `LlmError` ``PROTOCOL`` for an
    unsupported coding, a corrupt body or one past the inflation ratio cap,
    and httpx's errors for the transport. For the bounded reads (error
    bodies, model lists); `stream_events` has the same loop inline.
    """
    coding = _header(response.headers, b"content-encoding")
    inflater = inflater_for({"content-encoding": coding}) if coding else None
    while raw := await response.receive():
        if inflater is None:
            yield raw
            continue
        first = True
        for piece in inflater.feed(raw):
            if not first:
                await trio.lowlevel.checkpoint()
            first = False
            yield piece


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
        # Payloads too deep to decode end as PROTOCOL here, not as RecursionError later.
        self._parser: GatedSSEParser = GatedSSEParser()
        self._wire = decoder

    @property
    def finished(self) -> bool:
        return self._wire.finished

    def end(self) -> list[StreamChunk]:
        self._parser.close()
        return self._wire.end()


async def stream_events(
    client: Upstream,
    path: str,
    *,
    body: bytes,
    headers: Mapping[str, str],
    provider_kind: str,
    events: EventFeed,
) -> AsyncGenerator[StreamChunk, None]:
    """POST ``body`` and stream the chunks ``events`` decodes from the response.

    One exchange on the upstream's transport (`Exchanger.exchange`, the same
    for `TrioTransport` and a wrapped httpx transport) and one read loop. The
    read that completes the stream is held until the rest of the body is
    read (`_finish`), so the connection goes back to the pool. Raises
    `LlmError`: the classified failure for an error status, ``PROTOCOL`` for
    a success that is not ``text/event-stream`` (an HTML page from a proxy,
    say), or a translated transport error. Messages quote the body through
    the classifier (bounded, credential-looking phrases removed). Failures
    are not redacted by value here: the call that iterates the stream does it
    once, with the adapter's `redactor` (docs/security.md). Not kept:
    cookies the provider sets (an API client needs none).
    """
    try:
        request = client.request(b"POST", path, headers, len(body))
    except httpx.HTTPError as exc:
        raise translate_http_error(exc) from None
    try:
        async with client.transport.exchange(request, body) as response:
            # A stopped call closes the connection at the stop, not a scheduler pass later.
            close_on_stop(response.close)
            if response.status >= 300 or (
                "text/event-stream" not in _header(response.headers, b"content-type").lower()
            ):
                await _refuse(response, provider_kind)
            coding = _header(response.headers, b"content-encoding")
            inflater = inflater_for({"content-encoding": coding}) if coding else None
            try:
                while raw := await response.receive():
                    if inflater is None:
                        pieces: Iterable[bytes] = (raw,)
                    else:
                        pieces = inflater.feed(raw)
                    first = True
                    for piece in pieces:
                        if not first:
                            await trio.lowlevel.checkpoint()
                        first = False
                        try:
                            chunks = events.feed(piece)
                        except RecursionError:
                            # A backstop: `GatedSSEParser` refuses deep nesting before decoding.
                            raise _too_deep() from None
                        if events.finished:
                            if not response.done:
                                await _finish(response, inflater)
                            for chunk in chunks:
                                yield chunk
                            return
                        for chunk in chunks:
                            yield chunk
            except httpx.HTTPError as exc:
                raise translate_http_error(exc) from None
            if response.stopped:
                # Closed by the stopped call's closer: the stream just ends, and its
                # one ``aborted`` finish is the call's to make.
                return
    except httpx.HTTPError as exc:
        # Before a response (connect, write, the response head): name the endpoint.
        raise translate_http_error(exc, request.endpoint) from None
    for chunk in events.end():
        yield chunk


def _too_deep() -> LlmError:
    return LlmError(ErrorCode.PROTOCOL, "an event from the provider is nested too deeply")


async def _finish(response: Response, inflater: BoundedInflater | None) -> None:
    """Read what is left of a body after its end-of-stream marker, briefly.

    A body read to its end lets the transport return the connection to the
    pool (no new TCP/TLS handshake for the next call); a server that keeps
    the body open past the marker costs at most `EOF_GRACE` seconds and its
    connection. Past the marker nothing can change the call's outcome: a
    read that fails or a body that fails to inflate (a compressed bomb)
    costs only the connection.
    """
    with trio.move_on_after(EOF_GRACE):
        try:
            while raw := await response.receive():
                if inflater is not None:
                    for _ in inflater.feed(raw):
                        await trio.lowlevel.checkpoint()
        except (LlmError, httpx.HTTPError):
            pass
