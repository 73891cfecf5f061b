"""HTTP/1.1 server-side framing without I/O, on h11: a request parser and response encoders.

The local upstream exists to test HTTP clients, llmrt's own codec among them,
so its framing is not written by the same hand as theirs: requests are parsed
and well-formed responses are encoded by h11. On top of h11 the parser adds
the bounds and strictness a test server wants: a bounded head (431) and body
(413), HTTP/1.x only (505), and a refusal of requests that could be read two
ways (both ``Content-Length`` and ``Transfer-Encoding``; folded header lines).
One leniency: an HTTP/1.1 request without ``Host`` is accepted (raw-socket
tests rarely send one); the parser gives h11 an empty one and leaves it out of
the parsed headers.

`RequestParser.feed` takes bytes as they arrive and hands back whole requests,
in order, or one `BadRequest` after which it accepts nothing more (the
connection is answered and closed). `raw_response_head` encodes a head by hand,
exactly as given, for responses h11 would refuse to produce (broken framing,
hostile peers).
"""

from __future__ import annotations

import http
import re
from typing import Final

import attrs
import h11

__all__ = [
    "BadRequest",
    "H11Response",
    "ParsedRequest",
    "RequestHead",
    "RequestParser",
    "raw_response_head",
    "reason_phrase",
    "response_head",
]

DEFAULT_MAX_HEADER_BYTES: Final = 64 * 1024
DEFAULT_MAX_BODY_BYTES: Final = 16 * 1024 * 1024

_HEAD_END = re.compile(rb"\r?\n\r?\n")
_VERSION = re.compile(rb"HTTP/(\d)\.(\d)")
_HOST_LINE = re.compile(rb"\nhost[ \t]*:", re.IGNORECASE)
_FOLDED = re.compile(rb"\n[ \t]")

# Status codes providers use that `http.HTTPStatus` does not name.
_EXTRA_REASONS: Final = {529: "Site Overloaded"}


@attrs.frozen
class ParsedRequest:
    """One complete request as read off the wire (names lower-cased, values latin-1)."""

    method: str
    target: str
    version: str
    headers: tuple[tuple[str, str], ...]
    body: bytes
    keep_alive: bool


@attrs.frozen
class RequestHead:
    """A request's head, reported before its body when the parser is asked to (`report_heads`)."""

    method: str
    target: str
    version: str
    headers: tuple[tuple[str, str], ...]


@attrs.frozen
class BadRequest:
    """Why the bytes are not a request; the connection answers `status` and closes."""

    status: int
    reason: str


def reason_phrase(status: int) -> str:
    """The reason phrase for `status` ("Unknown" when it has none)."""
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return _EXTRA_REASONS.get(status, "Unknown")


def raw_response_head(
    status: int, headers: list[tuple[str, str]], reason: str | None = None
) -> bytes:
    """Encode a status line and header lines by hand, exactly as given, ending in the blank line.

    For output h11 refuses to produce: framing headers that lie, 1xx heads
    with bodies, hostile peers. Values are sent as latin-1, unchecked.
    """
    phrase = reason_phrase(status) if reason is None else reason
    lines = [f"HTTP/1.1 {status} {phrase}\r\n"]
    lines.extend(f"{name}: {value}\r\n" for name, value in headers)
    lines.append("\r\n")
    return "".join(lines).encode("latin-1")


class H11Response:
    """Encode one response with h11, as a server answering an HTTP/1.1 (or 1.0) request.

    h11 adds or corrects framing headers itself: without ``Content-Length``
    an HTTP/1.1 response is chunked, an HTTP/1.0 one close-delimited. Each
    method returns the bytes to send; h11 raises `h11.LocalProtocolError` for
    anything it will not produce.
    """

    def __init__(self, *, http10: bool = False) -> None:
        self._conn = h11.Connection(h11.SERVER)
        version = b"1.0" if http10 else b"1.1"
        # h11 frames a response by the request it answers: feed it one.
        self._conn.receive_data(b"GET / HTTP/" + version + b"\r\nHost: upstream\r\n\r\n")
        while self._conn.next_event() not in (h11.NEED_DATA, h11.PAUSED):
            pass

    def head(self, status: int, headers: list[tuple[str, str]]) -> bytes:
        event = h11.Response(
            status_code=status, headers=headers, reason=reason_phrase(status).encode("latin-1")
        )
        return self._send(event)

    def informational(self, status: int, headers: list[tuple[str, str]]) -> bytes:
        event = h11.InformationalResponse(
            status_code=status, headers=headers, reason=reason_phrase(status).encode("latin-1")
        )
        return self._send(event)

    def data(self, data: bytes) -> bytes:
        return self._send(h11.Data(data=data))

    def end(self) -> bytes:
        return self._send(h11.EndOfMessage())

    def _send(self, event: h11.Event) -> bytes:
        out = self._conn.send(event)
        assert out is not None  # only ConnectionClosed sends nothing
        return out


def response_head(status: int, headers: list[tuple[str, str]]) -> bytes:
    """Encode a head with h11 (answering HTTP/1.1); raises `h11.LocalProtocolError` if invalid."""
    return H11Response().head(status, headers)


class _Bad(Exception):
    """Internal: a framing violation, turned into `BadRequest` by the parser."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class RequestParser:
    """Incremental HTTP/1.1 request parser for one connection, on h11.

    `feed` returns the requests completed by the new bytes. After it returns a
    `BadRequest`, the parser is dead and returns nothing more. With
    `report_heads`, each request's `RequestHead` comes first, as soon as the
    head is read (a server can answer before the body). Each request
    gets a fresh `h11.Connection`; the bytes after one request (pipelining)
    carry over to the next.
    """

    def __init__(
        self,
        *,
        max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        report_heads: bool = False,
    ) -> None:
        self._report_heads = report_heads
        self._max_header = max_header_bytes
        self._max_body = max_body_bytes
        # Bytes not yet given to h11: the start of the next request's head.
        self._buf = bytearray()
        self._conn: h11.Connection | None = None
        self._request: h11.Request | None = None
        self._added_host = False
        self._body = bytearray()
        self._dead = False

    @property
    def idle(self) -> bool:
        """True when no partial request is buffered (a clean place for the client to close)."""
        return not self._buf and self._conn is None

    def feed(self, data: bytes) -> list[ParsedRequest | RequestHead | BadRequest]:
        """Add received bytes; return the requests (or the one failure) they complete."""
        if self._dead:
            return []
        out: list[ParsedRequest | RequestHead | BadRequest] = []
        try:
            if self._conn is None:
                self._buf += data
            else:
                self._conn.receive_data(data)
            while (item := self._step()) is not None:
                out.append(item)
        except _Bad as bad:
            self._die()
            out.append(BadRequest(bad.status, bad.reason))
        except h11.RemoteProtocolError as exc:
            self._die()
            out.append(BadRequest(exc.error_status_hint, str(exc)))
        return out

    def _die(self) -> None:
        self._dead = True
        self._buf.clear()
        self._conn = None

    def _start(self) -> bool:
        """Find the next head in the buffer and hand it to a fresh h11 connection."""
        # Clients may send stray CRLFs between requests (RFC 9112 section 2.2).
        while self._buf[:2] == b"\r\n" or self._buf[:1] == b"\n":
            del self._buf[: 2 if self._buf[:1] == b"\r" else 1]
        match = _HEAD_END.search(self._buf)
        if match is None:
            if len(self._buf) > self._max_header:
                raise _Bad(431, "request head too large")
            return False
        if match.start() > self._max_header:
            raise _Bad(431, "request head too large")
        head = bytes(self._buf[: match.start()])
        rest = bytes(self._buf[match.start() :])
        self._buf.clear()
        first, _, _ = head.partition(b"\n")
        version = _VERSION.search(first)
        if version is not None and version.group(1) != b"1":
            raise _Bad(505, "HTTP version not supported")
        # A folded continuation line is how requests get smuggled; h11 would unfold it.
        if _FOLDED.search(head):
            raise _Bad(400, "malformed header line")
        self._added_host = first.rstrip(b"\r").endswith(b"HTTP/1.1") and not _HOST_LINE.search(head)
        if self._added_host:
            head += b"\r\nHost: "
        self._conn = h11.Connection(h11.SERVER, max_incomplete_event_size=self._max_header)
        self._conn.receive_data(head + rest)
        return True

    def _step(self) -> ParsedRequest | RequestHead | None:
        if self._conn is None and not self._start():
            return None
        conn = self._conn
        assert conn is not None
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                return None
            if isinstance(event, h11.Request):
                self._on_request(event)
                if self._report_heads:
                    return RequestHead(
                        method=event.method.decode("ascii"),
                        target=event.target.decode("ascii"),
                        version="HTTP/" + event.http_version.decode("ascii"),
                        headers=self._headers(event),
                    )
            elif isinstance(event, h11.Data):
                self._body += event.data
                if len(self._body) > self._max_body:
                    raise _Bad(413, "request body too large")
            elif isinstance(event, h11.EndOfMessage):
                return self._finish(conn)
            else:  # pragma: no cover - h11 yields nothing else for a request
                raise _Bad(400, f"unexpected {type(event).__name__}")

    def _on_request(self, event: h11.Request) -> None:
        names = [name for name, _ in event.headers]
        if b"content-length" in names and b"transfer-encoding" in names:
            raise _Bad(400, "both Content-Length and Transfer-Encoding")
        for name, value in event.headers:
            if name == b"content-length" and int(value) > self._max_body:
                raise _Bad(413, "request body too large")
        self._request = event

    def _headers(self, request: h11.Request) -> tuple[tuple[str, str], ...]:
        headers = [(n.decode("ascii"), v.decode("latin-1")) for n, v in request.headers]
        if self._added_host:
            headers = [h for h in headers if h[0] != "host"]
        return tuple(headers)

    def _finish(self, conn: h11.Connection) -> ParsedRequest:
        request = self._request
        assert request is not None
        headers = self._headers(request)
        tokens = {
            t.strip().lower()
            for name, value in headers
            if name == "connection"
            for t in value.split(",")
        }
        version = request.http_version.decode("ascii")
        # HTTP/1.1 keeps connections open unless told; HTTP/1.0 closes unless told.
        keep_alive = "close" not in tokens if version == "1.1" else "keep-alive" in tokens
        parsed = ParsedRequest(
            method=request.method.decode("ascii"),
            target=request.target.decode("ascii"),
            version=f"HTTP/{version}",
            headers=headers,
            body=bytes(self._body),
            keep_alive=keep_alive,
        )
        # What h11 read past this request is the start of the next one.
        self._buf += conn.trailing_data[0]
        self._conn = None
        self._request = None
        self._body.clear()
        return parsed
