"""`_head.parse_plain_head`, the HTTP APIs' request-head reader, proved against h11.

Generated heads are plain API requests and their variants: other versions,
bare ``LF`` line ends, folded lines, whitespace where it may and may not be,
control and non-ASCII bytes in names and values, repeated or odd
``Content-Length``, framing and upgrade headers, a missing ``Host``, targets
that are not paths, heads at the size bound. For each, the plain reader
either declines (None: the front door then reads the same bytes with h11) or
reads exactly what h11 reads: method, target, version, headers in order, the
body's length and the bytes after the head. It never accepts a head that h11
refuses.
"""

from __future__ import annotations

import h11
import pytest
from conftest import examples
from hypothesis import example, given, settings
from hypothesis import strategies as st

from llmrt.actors.gateway._front import MAX_HEAD_BYTES
from llmrt.actors.gateway._head import parse_plain_head

PLAIN = (
    b"POST /v1/chat/completions HTTP/1.1\r\n"
    b"Host: 127.0.0.1:8765\r\n"
    b"Content-Type: application/json\r\n"
    b"Authorization: Bearer sk-test\r\n"
    b"Content-Length: 2\r\n"
    b"\r\n"
    b"{}"
)


def by_h11(data: bytes) -> tuple[object, ...] | None:
    """What an h11 server reads of ``data``: the head's fields and the body's length."""
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
    conn.receive_data(data)
    try:
        event = conn.next_event()
    except h11.RemoteProtocolError:
        return None
    if not isinstance(event, h11.Request):
        return None
    length = 0
    for name, value in event.headers:
        if name == b"content-length":
            length = int(value)
    return (event.method, event.target, event.http_version, list(event.headers), length)


def by_plain(data: bytes) -> tuple[object, ...] | None:
    request = parse_plain_head(data, MAX_HEAD_BYTES)
    if request is None:
        return None
    fields = list(request.headers)
    return (request.method, request.target, request.http_version, fields, request.content_length)


def _mostly(good: list[bytes], odd: list[bytes]) -> st.SearchStrategy[bytes]:
    """Mostly one of ``good`` (hypothesis shrinks toward the first), now and then ``odd``."""
    return st.sampled_from(good * 4 + odd)


_NAMES = _mostly(
    [b"Content-Type", b"Authorization", b"X-Api-Key", b"anthropic-version", b"traceparent",
     b"Origin", b"Connection", b"Content-Length", b"content-length", b"Host"],
    [b"Transfer-Encoding", b"Expect", b"Upgrade", b"X-\xffBad", b"Bad Name", b"", b"Bad:Name",
     b"X\x00"],
)  # fmt: skip
_VALUES = st.one_of(
    *[_mostly(
        [b"127.0.0.1:8765", b"application/json", b"2", b"0", b"Bearer sk-test", b"a\tb",
         b"\xe9t\xe9", b"", b"close", b"2023-06-01"],
        [b"02", b" 2", b"2, 2", b"-1", b"chunked", b"100-continue", b"websocket", b"a\x7fb",
         b"a\x00b", b"a\rb", b"99999999999999999999"],
    )] * 3,
    st.binary(max_size=12),
)  # fmt: skip


@st.composite
def heads(draw: st.DrawFn) -> bytes:
    method = draw(_mostly([b"POST", b"GET", b"OPTIONS"], [b"P@ST", b""]))
    target = draw(
        _mostly(
            [b"/v1/chat/completions", b"/v1/messages?beta=true", b"/v1/models"],
            [b"*", b"http://x/v1/models", b"/a b", b"/\x80"],
        )
    )
    version = draw(_mostly([b"HTTP/1.1", b"HTTP/1.0"], [b"HTTP/2.0", b"HTTP/1.10", b"http/1.1"]))
    lines = [draw(_mostly([b" "], [b"  ", b"\t"])).join((method, target, version))]
    if draw(st.integers(0, 9)) < 9:
        lines.append(b"Host: x")
    for _ in range(draw(st.integers(0, 5))):
        name, value = draw(_NAMES), draw(_VALUES)
        sep = draw(_mostly([b": ", b":"], [b":\t", b" : ", b":  "]))
        tail = draw(_mostly([b""], [b" ", b"\t"]))
        lines.append(name + sep + value + tail)
    if draw(st.integers(0, 9)) == 9:
        lines.insert(draw(st.integers(1, len(lines))), b" folded")
    end = draw(_mostly([b"\r\n"], [b"\n"]))
    body = draw(st.binary(max_size=8))
    return end.join(lines) + end + end + body


@settings(max_examples=examples(1500), deadline=None)
@given(data=heads())
@example(data=PLAIN)
def test_the_plain_reader_reads_what_h11_reads_or_declines(data: bytes) -> None:
    plain = by_plain(data)
    if plain is not None:
        assert plain == by_h11(data)


def test_a_plain_api_request_is_read_plainly_with_its_body_bytes() -> None:
    request = parse_plain_head(PLAIN + b"more", MAX_HEAD_BYTES)
    assert request is not None
    assert (request.method, request.target, request.http_version) == (
        b"POST",
        b"/v1/chat/completions",
        b"1.1",
    )
    assert request.headers[2] == (b"authorization", b"Bearer sk-test")
    assert request.content_length == 2
    assert request.rest == b"{}more"


@pytest.mark.parametrize(
    "head",
    [
        PLAIN.replace(b"\r\n", b"\n"),  # bare LF: h11's to read
        PLAIN.replace(b"Content-Length: 2", b"Transfer-Encoding: chunked"),
        PLAIN.replace(b"Content-Length: 2", b"Expect: 100-continue\r\nContent-Length: 2"),
        PLAIN.replace(b"Content-Length: 2", b"Content-Length: 2\r\nContent-Length: 2"),
        PLAIN.replace(b"Host: 127.0.0.1:8765\r\n", b""),
        PLAIN.replace(b"Host:", b" Host:"),
        PLAIN[: PLAIN.index(b"\r\n\r\n")],  # not complete yet
    ],
    ids=["lf", "chunked", "expect", "two-lengths", "no-host", "folded", "incomplete"],
)
def test_heads_that_are_not_plain_go_to_h11(head: bytes) -> None:
    assert parse_plain_head(head, MAX_HEAD_BYTES) is None


def test_a_head_past_the_bound_goes_to_h11_which_refuses_it() -> None:
    filler = b"X-Fill: " + b"a" * MAX_HEAD_BYTES + b"\r\n"
    head = PLAIN.replace(b"\r\n\r\n", b"\r\n" + filler + b"\r\n")
    assert parse_plain_head(head, MAX_HEAD_BYTES) is None
    # Exactly at the bound it is still read.
    room = MAX_HEAD_BYTES - (PLAIN.index(b"\r\n\r\n") + 4) - len(b"X-Fill: \r\n")
    at_bound = PLAIN.replace(b"\r\n\r\n", b"\r\nX-Fill: " + b"a" * room + b"\r\n\r\n")
    assert at_bound.index(b"\r\n\r\n") + 4 == MAX_HEAD_BYTES
    assert parse_plain_head(at_bound, MAX_HEAD_BYTES) is not None
