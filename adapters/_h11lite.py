"""A small sans-I/O HTTP/1.1 client codec: request heads out, response heads and bodies in.

No sockets and no clocks here: `TrioTransport` (``_transport.py``) feeds the
bytes it reads and writes the bytes this module builds. What it covers is
what a streaming API client needs: one request at a time per connection (no
pipelining), responses framed by ``Transfer-Encoding: chunked``,
``Content-Length`` or the end of the connection. Trailers are read,
checked and dropped. ``tests/test_h11_oracle.py`` proves the parsing
against h11 on generated responses. Malformed framing raises `MalformedResponse` (an
`httpx.RemoteProtocolError`: the server broke the protocol); a body cut
short by the end of the connection raises a plain
`httpx.RemoteProtocolError` (the network, or the server, went away). A
request head that would inject lines raises `httpx.LocalProtocolError`.

The chunked decoder works on whole network reads: sizes are found with
``bytes.find`` and the payload of one read comes back as one ``bytes``
object, however many chunks the read carried.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

import attrs
import httpx

__all__ = [
    "ChunkedDecoder",
    "CloseDelimitedDecoder",
    "ContentLengthDecoder",
    "Decoder",
    "MalformedResponse",
    "ResponseHead",
    "body_decoder",
    "encode_chunk",
    "parse_response_head",
    "request_head",
]

#: Longest chunk-size line (size plus extensions) accepted.
MAX_CHUNK_LINE: Final = 4096
#: Most trailer bytes accepted after the last chunk.
MAX_TRAILER_BYTES: Final = 64 * 1024

_HEAD_END = re.compile(rb"\n\r?\n")
# As h11 reads them: a reason phrase and a header value hold no NUL and no
# whitespace but spaces and tabs (RFC 9110 field-content, plus obs-text).
_STATUS_LINE = re.compile(rb"HTTP/1\.([0-9]) ([0-9]{3})(?: ((?:[ \t]|[^\x00\s])*))?")
_HEADER_FIELD = re.compile(
    rb"([-!#$%&'*+.^_`|~0-9A-Za-z]+):[ \t]*((?:[^\x00\s]+(?:[ \t]+[^\x00\s]+)*)?)[ \t]*"
)
_TOKEN = re.compile(rb"[-!#$%&'*+.^_`|~0-9A-Za-z]+")
# A chunk-size line: hex size, optional extensions, optional whitespace, CRLF (as h11 reads it).
_SIZE_LINE = re.compile(rb"([0-9A-Fa-f]{1,16})(?:;[^\r\n]{0,4000})?[ \t]*\r\n")
_DIGITS = re.compile(rb"[0-9]{1,19}")


class MalformedResponse(httpx.RemoteProtocolError):
    """The server sent bytes that are not HTTP/1.1 (a bad status line, header or framing).

    Distinct from a plain `httpx.RemoteProtocolError` for a response cut
    short: the adapters code this one ``PROTOCOL`` and that one ``NETWORK``.
    """


def _protocol_error(message: str) -> MalformedResponse:
    return MalformedResponse(message)


# ---- requests -------------------------------------------------------------------------------


def request_head(method: bytes, target: bytes, headers: Iterable[tuple[bytes, bytes]]) -> bytes:
    """The encoded request line and header block, ending with the blank line.

    Raises `httpx.LocalProtocolError` if the method, target, a header name or
    a header value contains a line break or NUL (header injection).
    """
    lines = [method + b" " + target + b" HTTP/1.1\r\n"]
    for name, value in headers:
        lines.append(name + b": " + value + b"\r\n")
    lines.append(b"\r\n")
    head = b"".join(lines)
    # One scan of the block: exactly the line ends we wrote, nothing smuggled.
    if head.count(b"\n") != len(lines) or head.count(b"\r") != len(lines) or b"\x00" in head:
        raise httpx.LocalProtocolError("illegal line break or NUL in the request head")
    if b" " in target or not _TOKEN.fullmatch(method):
        raise httpx.LocalProtocolError("illegal request method or target")
    return head


def encode_chunk(data: bytes) -> bytes:
    """``data`` as one chunk of a chunked request body (empty data: the last chunk)."""
    return b"%x\r\n%b\r\n" % (len(data), data)


# ---- response heads -------------------------------------------------------------------------


@attrs.frozen
class ResponseHead:
    """A parsed status line and header block."""

    http_version: bytes
    status: int
    reason: bytes
    headers: list[tuple[bytes, bytes]]

    def values(self, name: bytes) -> list[bytes]:
        """Every value of header ``name`` (lower case), in order."""
        return [v for k, v in self.headers if k.lower() == name]

    def connection_tokens(self) -> set[bytes]:
        """The lower-cased tokens of every ``Connection`` header."""
        return {
            token.strip().lower()
            for value in self.values(b"connection")
            for token in value.split(b",")
        }


def parse_response_head(
    buffer: bytes | bytearray, max_size: int
) -> tuple[ResponseHead, int] | None:
    """The response head at the start of ``buffer`` and its length, or None if incomplete.

    LF and CRLF line ends are accepted; a minor version above 1 reads as
    HTTP/1.1 (RFC 9110 section 2.5). Raises `MalformedResponse` for a
    malformed status line or header, for obsolete line folding, and when no
    complete head fits in ``max_size`` bytes.
    """
    match = _HEAD_END.search(buffer)
    if match is None:
        if len(buffer) > max_size:
            raise _protocol_error(f"response head larger than {max_size} bytes")
        return None
    end = match.end()
    if end > max_size:
        raise _protocol_error(f"response head larger than {max_size} bytes")
    lines = bytes(buffer[: match.start()]).split(b"\n")
    status = _STATUS_LINE.fullmatch(_chomp(lines[0]))
    if status is None:
        raise _protocol_error("malformed status line")
    headers = _header_lines(lines[1:])
    return (
        ResponseHead(
            http_version=b"HTTP/1.0" if status.group(1) == b"0" else b"HTTP/1.1",
            status=int(status.group(2)),
            reason=status.group(3) or b"",
            headers=headers,
        ),
        end,
    )


def _chomp(line: bytes) -> bytes:
    """``line`` without the CR of a CRLF line end (one CR only)."""
    return line[:-1] if line[-1:] == b"\r" else line


def _header_lines(lines: Iterable[bytes]) -> list[tuple[bytes, bytes]]:
    """Header (or trailer) lines, without their LFs, as name-value pairs."""
    headers: list[tuple[bytes, bytes]] = []
    for raw in lines:
        field = _HEADER_FIELD.fullmatch(_chomp(raw))
        if field is None:
            if raw[:1] in (b" ", b"\t"):
                # Obsolete line folding. h11 unfolds it; servers must not send it and
                # it is a known request-smuggling vector, so it is refused here.
                raise _protocol_error("obsolete line folding in a response header")
            raise _protocol_error("malformed response header")
        headers.append((field.group(1), field.group(2)))
    return headers


# ---- response bodies ------------------------------------------------------------------------


class Decoder:
    """Body framing: `feed` network reads, get payload bytes back, until `done`."""

    #: True once the body's end was seen (the connection may carry another response).
    done: bool = False
    #: Bytes read past the body's end (a misbehaving server); nonzero forbids reuse.
    surplus: int = 0
    #: True when the body ends with the connection (it can never be reused).
    close_delimited: bool = False

    def feed(self, data: bytes) -> bytes:
        """The payload bytes in ``data``. Raises `MalformedResponse` on bad framing."""
        raise NotImplementedError

    def eof(self) -> None:
        """Note the end of the connection. Raises `httpx.RemoteProtocolError` if the body is cut."""
        if not self.done:
            raise httpx.RemoteProtocolError(
                "the server closed the connection before the body's end"
            )


class ContentLengthDecoder(Decoder):
    """A body of a known length."""

    def __init__(self, length: int) -> None:
        self._remaining = length
        self.done = length == 0

    def feed(self, data: bytes) -> bytes:
        remaining = self._remaining
        if len(data) < remaining:
            self._remaining = remaining - len(data)
            return data
        self._remaining = 0
        self.done = True
        self.surplus += len(data) - remaining
        return data if len(data) == remaining else data[:remaining]


class CloseDelimitedDecoder(Decoder):
    """A body that ends when the server closes the connection."""

    close_delimited = True

    def feed(self, data: bytes) -> bytes:
        return data

    def eof(self) -> None:
        self.done = True


_SIZE, _DATA, _DATA_END, _TRAILER, _DONE = range(5)


class ChunkedDecoder(Decoder):
    """A ``Transfer-Encoding: chunked`` body; trailers are read, checked and dropped."""

    def __init__(self) -> None:
        self._state = _SIZE
        self._remaining = 0  # bytes left in the current chunk's data
        self._pending = b""  # an incomplete size line, CRLF or trailer line
        self._trailer_bytes = 0
        self._trailers: list[bytes] = []  # trailer lines, checked (then dropped) at the end

    def feed(self, data: bytes) -> bytes:
        if self._pending:
            data = self._pending + data
            self._pending = b""
        out: list[bytes] = []
        pos = 0
        n = len(data)
        state = self._state
        while pos < n:
            if state == _DATA:
                end = pos + self._remaining
                if end + 2 <= n:
                    # The whole rest of the chunk and its CRLF are here (the common case).
                    out.append(data[pos:end])
                    if data[end : end + 2] != b"\r\n":
                        raise _protocol_error("chunk data not followed by CRLF")
                    pos = end + 2
                    self._remaining = 0
                    state = _SIZE
                elif end <= n:
                    out.append(data[pos:end])
                    pos = end
                    self._remaining = 0
                    state = _DATA_END
                else:
                    out.append(data[pos:] if pos else data)
                    self._remaining -= n - pos
                    pos = n
            elif state == _SIZE:
                # One C-level match finds the size, skips extensions and the line end.
                m = _SIZE_LINE.match(data, pos)
                if m is None:
                    if data.find(b"\n", pos) >= 0 or n - pos > MAX_CHUNK_LINE:
                        raise _protocol_error(f"malformed chunk size line {data[pos : pos + 20]!r}")
                    self._pending = data[pos:]
                    break
                pos = m.end()
                size = int(m.group(1), 16)
                if size:
                    self._remaining = size
                    state = _DATA
                else:
                    state = _TRAILER
            elif state == _DATA_END:
                if n - pos < 2:
                    if data[pos:] != b"\r":
                        raise _protocol_error("chunk data not followed by CRLF")
                    self._pending = data[pos:]
                    break
                if data[pos : pos + 2] != b"\r\n":
                    raise _protocol_error("chunk data not followed by CRLF")
                pos += 2
                state = _SIZE
            elif state == _TRAILER:
                eol = data.find(b"\n", pos)
                if eol < 0:
                    self._pending = data[pos:]
                    if self._trailer_bytes + n - pos > MAX_TRAILER_BYTES:
                        raise _protocol_error("trailers too large")
                    break
                self._trailer_bytes += eol + 1 - pos
                if self._trailer_bytes > MAX_TRAILER_BYTES:
                    raise _protocol_error("trailers too large")
                line = data[pos:eol]
                pos = eol + 1
                if line in (b"", b"\r"):
                    _header_lines(self._trailers)  # malformed trailers break the framing too
                    state = _DONE
                    self.done = True
                    self.surplus = n - pos
                    break
                self._trailers.append(line)
            else:  # _DONE
                break
        self._state = state
        if not out:
            return b""
        return out[0] if len(out) == 1 else b"".join(out)


def body_decoder(head: ResponseHead, *, request_method: bytes) -> Decoder:
    """The framing of the body that follows ``head`` (RFC 9112 section 6.3).

    Raises `MalformedResponse` for an unsupported transfer coding or
    a malformed or contradictory ``Content-Length``.
    """
    # The framing headers are checked even where no body follows: a server
    # that writes them malformed is not one to trust with the next response.
    length: int | None = None
    lengths = head.values(b"content-length")
    if lengths:
        values = {t.strip() for v in lengths for t in v.split(b",")}
        if len(values) != 1:
            raise _protocol_error("conflicting Content-Length values")
        (value,) = values
        if not _DIGITS.fullmatch(value):
            raise _protocol_error("malformed Content-Length")
        length = int(value)
    codings = head.values(b"transfer-encoding")
    if codings:
        tokens = [t.strip().lower() for v in codings for t in v.split(b",") if t.strip()]
        if tokens != [b"chunked"]:
            raise _protocol_error(f"unsupported transfer coding {b', '.join(tokens)!r}")
    status = head.status
    if request_method == b"HEAD" or status < 200 or status in (204, 304):
        return ContentLengthDecoder(0)
    if codings:
        return ChunkedDecoder()
    if length is not None:
        return ContentLengthDecoder(length)
    return CloseDelimitedDecoder()
