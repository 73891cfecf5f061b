"""`_h11lite`, the transport's hand-written HTTP/1.1 response codec, proved against h11.

Generated responses are framed by ``Content-Length``, chunked (with chunk
extensions and trailers) or by the end of the connection, with and without
informational heads and LF-only heads; malformed variants
break the status line, a header, the framing headers or the chunk framing,
or cut the bytes short. Each is delivered in random read splits to both
codecs, which must agree: both reject it, or both accept it with the same
status and body.

Decided differences, not generated (and pinned by the last test): h11
accepts any ``HTTP/x.y`` status line (an ``HTTP/2.0`` head on an HTTP/1.1
connection is garbage to `_h11lite`) and unfolds obsolete line folding
(which servers must not send and which smuggles headers past proxies;
`_h11lite` refuses it). `_h11lite` also bounds informational heads,
chunk-line length and trailers (``_transport.MAX_INFORMATIONAL``,
``_h11lite``).
"""

from __future__ import annotations

import itertools

import h11
import httpx
import pytest
from conftest import examples
from hypothesis import example, given, settings
from hypothesis import strategies as st

from llmrt.adapters._h11lite import body_decoder, parse_response_head

Outcome = tuple[str, int, bytes] | tuple[str]
REJECTED: Outcome = ("rejected",)


def by_h11(pieces: list[bytes], method: bytes) -> Outcome:
    """What h11, as a client that sent ``method``, makes of the response bytes."""
    conn = h11.Connection(h11.CLIENT)
    conn.send(h11.Request(method=method, target="/", headers=[("Host", "x")]))
    conn.send(h11.EndOfMessage())
    feed = [*pieces, b""]  # b"": the end of the connection
    status = 0
    body = bytearray()
    try:
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                if not feed:
                    return REJECTED
                conn.receive_data(feed.pop(0))
            elif isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                return ("accepted", status, bytes(body))
            elif isinstance(event, h11.ConnectionClosed):
                return REJECTED
            # an InformationalResponse: skipped, as the transport does
    except h11.RemoteProtocolError:
        return REJECTED


def by_h11lite(pieces: list[bytes], method: bytes) -> Outcome:
    """The same, read as `TrioTransport` reads it (head, 1xx skipping, body decoder)."""
    feed = list(pieces)
    buffer = bytearray()
    try:
        while True:
            parsed = parse_response_head(buffer, 16 * 1024)
            if parsed is None:
                if not feed or not feed[0]:
                    return REJECTED
                buffer += feed.pop(0)
                continue
            head, size = parsed
            del buffer[:size]
            if head.status >= 200:
                break
        decoder = body_decoder(head, request_method=method)
        body = bytearray(decoder.feed(bytes(buffer)) if buffer else b"")
        while not decoder.done:
            if not feed:
                decoder.eof()
                break
            body += decoder.feed(feed.pop(0))
        return ("accepted", head.status, bytes(body))
    except httpx.RemoteProtocolError:
        return REJECTED


# ---- generated responses ----------------------------------------------------------------------

_token = st.text(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-!#$%&'*+.^_`|~",
    min_size=1,
    max_size=8,
).map(str.encode)
_value = st.binary(max_size=12).map(
    lambda b: bytes(c for c in b if c not in b"\r\n\x00").strip(b" \t")
)
_reason = st.sampled_from(
    [b" OK", b" Not Found", b" ", b"", b" Payload Too Large", b" \xe2\x9c\x93"]
)
_status = st.sampled_from([200, 201, 204, 206, 299, 304, 400, 404, 413, 429, 500, 503])
_framing_names = {b"content-length", b"transfer-encoding", b"connection"}

_BAD_STATUS_LINES = [
    b"HTTP/1.1 2000 OK",
    b"HTTP/1.1 20 OK",
    b"HTTPS/1.1 200 OK",
    b"HTTP/1.1 OK 200",
    b"http/1.1 200 OK",
    b"HTTP/1.1  200 OK",
    b"HTTP/11 200 OK",
    b"ICY 200 OK",
    b"",
    b"\x16\x03\x01\x02\x00",
]
_BAD_HEADER_LINES = [b"no colon here", b"Bad Name: x", b": empty name", b"X\x00: y", b"(x): y"]
_BAD_SIZE_LINES = [b"zz", b"0x5", b"-5", b" 5", b"5 ;ext", b"5\n", b"", b"5;\x00"]


@st.composite
def chunked_body(draw: st.DrawFn, body: bytes) -> bytes:
    """``body`` chunked at random points, with extensions, zero padding and trailers."""
    cuts = sorted(set(draw(st.lists(st.integers(1, max(1, len(body))), max_size=5))))
    edges = [0, *[c for c in cuts if c < len(body)], len(body)]
    out = bytearray()

    def size_line(size: int) -> bytes:
        digits = b"%x" % size
        if draw(st.booleans()):
            digits = digits.upper()
        digits = b"0" * draw(st.integers(0, 3)) + digits
        ext = draw(
            st.sampled_from([b"", b";a", b";a=b", b';name="quoted value"', b";x=1;y", b"; sp"])
        )
        space = draw(st.sampled_from([b"", b"", b" ", b"\t"]))
        return digits + ext + space + b"\r\n"

    for a, b in itertools.pairwise(edges):
        if a < b:
            out += size_line(b - a) + body[a:b] + b"\r\n"
    out += size_line(0)
    for _ in range(draw(st.integers(0, 2))):
        out += draw(_token) + b": " + draw(_value) + b"\r\n"
    out += b"\r\n"
    return bytes(out)


@st.composite
def responses(draw: st.DrawFn) -> tuple[bytes, bytes]:
    """A response (its bytes) and the method of the request it answers."""
    method = draw(st.sampled_from([b"GET", b"POST", b"HEAD"]))
    eol = draw(st.sampled_from([b"\r\n", b"\r\n", b"\n"]))
    fault = draw(
        st.sampled_from(
            ["none"] * 6
            + ["status", "header", "length", "coding", "size-line", "data-crlf", "trailer", "cut"]
        )
    )
    out = bytearray()
    for _ in range(draw(st.integers(0, 2))):
        out += b"HTTP/1.1 %d Info" % draw(st.sampled_from([100, 102, 103])) + eol
        out += b"Link: </a.css>; rel=preload" + eol + eol
    version = draw(st.sampled_from([b"1.1", b"1.1", b"1.0", b"1.2"]))
    status_line = b"HTTP/%b %d%b" % (version, draw(_status), draw(_reason))
    if fault == "status":
        status_line = draw(st.sampled_from(_BAD_STATUS_LINES))
    lines = [status_line]
    for _ in range(draw(st.integers(0, 3))):
        name = draw(_token)
        if name.lower() not in _framing_names:
            lines.append(name + b":" + draw(st.sampled_from([b" ", b"", b"\t"])) + draw(_value))
    if fault == "header":
        lines.insert(draw(st.integers(1, len(lines))), draw(st.sampled_from(_BAD_HEADER_LINES)))

    body = draw(st.binary(max_size=200))
    framing = draw(st.sampled_from(["length", "chunked", "close"]))
    if framing == "length":
        length = b"%d" % len(body)
        if fault == "length":
            length = draw(
                st.sampled_from(
                    [b"abc", b"+1", b"-1", b"%d, %d" % (len(body), len(body) + 1), b"1 2", b""]
                )
            )
        elif draw(st.booleans()):
            length = draw(
                st.sampled_from(
                    [length, b"%b, %b" % (length, length), b"%d" % (len(body) + 3), b"0"]
                )
            )
        lines.append(b"Content-Length: " + length)
        payload = body
    elif framing == "chunked":
        coding = draw(st.sampled_from([b"chunked", b"Chunked", b"chunked "]))
        if fault == "coding":
            coding = draw(st.sampled_from([b"gzip, chunked", b"chunked, gzip", b"identity", b"br"]))
        lines.append(b"Transfer-Encoding: " + coding)
        payload = draw(chunked_body(body))
        if fault == "size-line":
            payload = draw(st.sampled_from(_BAD_SIZE_LINES)) + b"\r\n" + payload
        elif fault == "data-crlf" and body:
            line_end = payload.index(b"\r\n")
            size = int(payload[:line_end].split(b";")[0].strip(b" \t"), 16)
            at = line_end + 2 + size  # the CRLF after the first chunk's data
            payload = payload[:at] + b"XX" + payload[at + 2 :]
        elif fault == "trailer":
            payload = payload[:-2] + draw(st.sampled_from(_BAD_HEADER_LINES)) + b"\r\n\r\n"
    else:
        payload = body
    if draw(st.integers(0, 9)) == 0:
        lines.append(b"Connection: close")
    out += eol.join(lines) + eol + eol + payload
    wire = bytes(out)
    if fault == "cut":
        wire = wire[: draw(st.integers(0, len(wire)))]
    return wire, method


def splits(wire: bytes, cuts: list[int]) -> list[bytes]:
    edges = [0, *sorted({c % (len(wire) + 1) for c in cuts}), len(wire)]
    return [wire[a:b] for a, b in itertools.pairwise(edges) if a < b]


@settings(max_examples=examples(600), deadline=None)
@given(response=responses(), cuts=st.lists(st.integers(min_value=0), max_size=12))
@example(response=(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", b"GET"), cuts=[3, 20])
def test_h11lite_agrees_with_h11(response: tuple[bytes, bytes], cuts: list[int]) -> None:
    wire, method = response
    pieces = splits(wire, cuts)
    expected = by_h11(pieces, method)
    assert by_h11lite(pieces, method) == expected
    # Whatever the read boundaries, the same outcome (h11 itself is split-independent).
    assert by_h11lite([wire], method) == expected


@pytest.mark.parametrize(
    ("wire", "accepted"),
    [
        (b"HTTP/1.2 200 OK\r\nContent-Length: 2\r\n\r\nok", True),
        (b"HTTP/1.1 200 OK\r\nX: \x0b\r\nContent-Length: 2\r\n\r\nok", False),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\nok\r\n0\r\n\r\n", False),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nbad\r\n\r\n",
            False,
        ),
        (b"HTTP/1.1 204 OK\r\nContent-Length: x\r\n\r\n", False),
    ],
    ids=["minor-version", "vertical-tab", "lf-size-line", "bad-trailer", "framing-without-body"],
)
def test_the_cases_where_h11lite_was_aligned_with_h11(wire: bytes, accepted: bool) -> None:
    expected = by_h11([wire], b"GET")
    assert (expected != REJECTED) is accepted
    assert by_h11lite([wire], b"GET") == expected


@pytest.mark.parametrize(
    "wire",
    [
        b"HTTP/2.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\nX: a\r\n  b\r\nContent-Length: 2\r\n\r\nok",
    ],
    ids=["major-version", "obs-fold"],
)
def test_the_decided_differences_from_h11(wire: bytes) -> None:
    assert by_h11([wire], b"GET") == ("accepted", 200, b"ok")
    assert by_h11lite([wire], b"GET") == REJECTED
