"""HTTP/1.1 server-side framing without I/O: an incremental request parser and response heads.

The parser takes bytes as they arrive (`RequestParser.feed`) and hands back
whole requests, in order, or one `BadRequest` after which it accepts nothing
more (the connection is answered and closed). Bodies are read by
``Content-Length`` or ``Transfer-Encoding: chunked``; head and body sizes are
bounded. It is strict where leniency would let a request be read two ways
(both ``Content-Length`` and ``Transfer-Encoding``; conflicting lengths; header
folding) and lenient where clients differ harmlessly (bare LF line ends,
blank lines before a request line).
"""

from __future__ import annotations

import http
import re
from typing import Final

import attrs

__all__ = [
    "BadRequest",
    "ParsedRequest",
    "RequestParser",
    "reason_phrase",
    "response_head",
]

DEFAULT_MAX_HEADER_BYTES: Final = 64 * 1024
DEFAULT_MAX_BODY_BYTES: Final = 16 * 1024 * 1024
_MAX_CHUNK_LINE: Final = 4096

_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_HEAD_END = re.compile(rb"\r?\n\r?\n")
_VERSION = re.compile(rb"HTTP/(\d)\.(\d)")
_HEX = re.compile(rb"[0-9A-Fa-f]+")
_CTL = re.compile(rb"[\x00-\x20\x7f]")

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


def response_head(status: int, headers: list[tuple[str, str]]) -> bytes:
    """Encode a status line and header lines, ending in the blank line."""
    lines = [f"HTTP/1.1 {status} {reason_phrase(status)}\r\n"]
    lines.extend(f"{name}: {value}\r\n" for name, value in headers)
    lines.append("\r\n")
    return "".join(lines).encode("latin-1")


class _Bad(Exception):
    """Internal: a framing violation, turned into `BadRequest` by the parser."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@attrs.frozen
class _Head:
    method: str
    target: str
    version: str
    headers: tuple[tuple[str, str], ...]
    keep_alive: bool
    content_length: int | None
    chunked: bool


def _parse_head(raw: bytes) -> _Head:
    lines = [line.removesuffix(b"\r") for line in raw.split(b"\n")]
    parts = lines[0].split(b" ")
    if len(parts) != 3:
        raise _Bad(400, "malformed request line")
    method, target, version = parts
    if not _TOKEN.fullmatch(method):
        raise _Bad(400, "malformed method")
    if not target or _CTL.search(target) or not target.isascii():
        raise _Bad(400, "malformed request target")
    match = _VERSION.fullmatch(version)
    if match is None:
        raise _Bad(400, "malformed HTTP version")
    if match.group(1) != b"1":
        raise _Bad(505, "HTTP version not supported")
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(b":")
        # A name with surrounding whitespace, or a folded continuation line,
        # is rejected: RFC 9112 says so, and it is how requests get smuggled.
        if not sep or not _TOKEN.fullmatch(name):
            raise _Bad(400, "malformed header line")
        headers.append((name.decode("ascii").lower(), value.strip(b" \t").decode("latin-1")))
    return _head_of(method.decode("ascii"), target.decode("ascii"), version.decode(), headers)


def _head_of(method: str, target: str, version: str, headers: list[tuple[str, str]]) -> _Head:
    lengths: set[str] = set()
    codings: list[str] = []
    connection: set[str] = set()
    for name, value in headers:
        if name == "content-length":
            lengths.update(v.strip() for v in value.split(","))
        elif name == "transfer-encoding":
            codings.extend(v.strip().lower() for v in value.split(",") if v.strip())
        elif name == "connection":
            connection.update(v.strip().lower() for v in value.split(","))
    if lengths and codings:
        raise _Bad(400, "both Content-Length and Transfer-Encoding")
    content_length: int | None = None
    if lengths:
        if len(lengths) != 1 or not next(iter(lengths)).isdigit():
            raise _Bad(400, "bad Content-Length")
        content_length = int(next(iter(lengths)))
    if codings and codings[-1] != "chunked":
        raise _Bad(400, "unsupported Transfer-Encoding")
    # HTTP/1.1 keeps connections open unless told; HTTP/1.0 closes unless told.
    keep_alive = "close" not in connection if version == "HTTP/1.1" else "keep-alive" in connection
    return _Head(
        method=method,
        target=target,
        version=version,
        headers=tuple(headers),
        keep_alive=keep_alive,
        content_length=content_length,
        chunked=bool(codings),
    )


class RequestParser:
    """Incremental HTTP/1.1 request parser for one connection.

    `feed` returns the requests completed by the new bytes. After it returns a
    `BadRequest`, the parser is dead and returns nothing more.
    """

    def __init__(
        self,
        *,
        max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    ) -> None:
        self._max_header = max_header_bytes
        self._max_body = max_body_bytes
        self._buf = bytearray()
        self._head: _Head | None = None
        self._body = bytearray()
        # In chunked mode: bytes still to read of the current chunk, or None
        # while a chunk-size line is expected; `_trailers` once the last chunk came.
        self._chunk_left: int | None = None
        self._trailers = False
        self._dead = False

    @property
    def idle(self) -> bool:
        """True when no partial request is buffered (a clean place for the client to close)."""
        return not self._buf and self._head is None

    def feed(self, data: bytes) -> list[ParsedRequest | BadRequest]:
        """Add received bytes; return the requests (or the one failure) they complete."""
        if self._dead:
            return []
        self._buf += data
        out: list[ParsedRequest | BadRequest] = []
        try:
            while (item := self._step()) is not None:
                out.append(item)
        except _Bad as bad:
            self._dead = True
            self._buf.clear()
            out.append(BadRequest(bad.status, bad.reason))
        return out

    def _step(self) -> ParsedRequest | None:
        if self._head is None:
            # Clients may send stray CRLFs between requests (RFC 9112 §2.2).
            while self._buf[:2] == b"\r\n" or self._buf[:1] == b"\n":
                del self._buf[: 2 if self._buf[:1] == b"\r" else 1]
            match = _HEAD_END.search(self._buf)
            if match is None:
                if len(self._buf) > self._max_header:
                    raise _Bad(431, "request head too large")
                return None
            if match.start() > self._max_header:
                raise _Bad(431, "request head too large")
            raw = bytes(self._buf[: match.start()])
            del self._buf[: match.end()]
            self._head = _parse_head(raw)
            if self._head.content_length is not None and (
                self._head.content_length > self._max_body
            ):
                raise _Bad(413, "request body too large")
        head = self._head
        if head.chunked:
            if not self._read_chunked():
                return None
        elif head.content_length:
            if len(self._buf) < head.content_length:
                return None
            self._body += self._buf[: head.content_length]
            del self._buf[: head.content_length]
        request = ParsedRequest(
            method=head.method,
            target=head.target,
            version=head.version,
            headers=head.headers,
            body=bytes(self._body),
            keep_alive=head.keep_alive,
        )
        self._head = None
        self._body.clear()
        return request

    def _read_line(self) -> bytes | None:
        end = self._buf.find(b"\n")
        if end < 0:
            if len(self._buf) > _MAX_CHUNK_LINE:
                raise _Bad(400, "chunk line too long")
            return None
        line = bytes(self._buf[:end]).removesuffix(b"\r")
        del self._buf[: end + 1]
        return line

    def _read_chunked(self) -> bool:
        """Consume chunked body bytes; True once the body and its trailers are complete."""
        while True:
            if self._trailers:
                line = self._read_line()
                if line is None:
                    return False
                if not line:
                    self._trailers = False
                    self._chunk_left = None
                    return True
                continue
            if self._chunk_left is None:
                line = self._read_line()
                if line is None:
                    return False
                size = line.split(b";", 1)[0].strip(b" \t")
                if not _HEX.fullmatch(size):
                    raise _Bad(400, "bad chunk size")
                n = int(size, 16)
                if len(self._body) + n > self._max_body:
                    raise _Bad(413, "request body too large")
                if n == 0:
                    self._trailers = True
                    continue
                self._chunk_left = n
            # Chunk data then its line end.
            need = self._chunk_left
            if len(self._buf) < need + 1:
                return False
            if self._buf[need : need + 2] == b"\r\n":
                end = need + 2
            elif self._buf[need : need + 1] == b"\n":
                end = need + 1
            elif self._buf[need : need + 1] == b"\r" and len(self._buf) == need + 1:
                return False
            else:
                raise _Bad(400, "chunk data not followed by a line end")
            self._body += self._buf[:need]
            del self._buf[:end]
            self._chunk_left = None
