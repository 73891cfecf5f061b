"""The hostile upstream itself: each misbehaviour does on the wire what its name says.

These read the upstream with raw loopback sockets and h11 (not llmrt's
codec), so they check the tool, not the client it is meant to test; the
fault suite (`test_hostile_suite.py`) points llmrt's clients at it.
"""

from __future__ import annotations

import gzip
import zlib
from typing import Any

import h11
import msgspec
import pytest
import trio

from llmrt.testing import (
    MISBEHAVIOURS,
    SECRET_PHRASINGS,
    ErrorScript,
    SSEScript,
    hostile,
    open_upstream,
    openai_events,
)
from llmrt.testing._hostile import _bomb
from llmrt.testing._http import RequestHead, RequestParser

BOUND = 10.0
KEY = "Zq7-raw-key-41c9"


def _request(
    path: str = "/chat/completions",
    body: bytes = b"{}",
    headers: list[tuple[str, str]] | None = None,
    keep_alive: bool = False,
) -> bytes:
    # Closing after the answer lets a reader stop at EOF, kept-alive or not.
    lines = [f"POST {path} HTTP/1.1", "host: upstream", f"content-length: {len(body)}"]
    if not keep_alive:
        lines.append("connection: close")
    lines += [f"{k}: {v}" for k, v in headers or [("authorization", f"Bearer {KEY}")]]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def _exchange(port: int, data: bytes, *, limit: int = 1 << 20) -> bytes:
    """Send `data`; return what arrives until the server closes or `limit` bytes came."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    received = bytearray()
    async with stream:
        await stream.send_all(data)
        try:
            while len(received) < limit and (chunk := await stream.receive_some(65536)):
                received += chunk
        except trio.BrokenResourceError:
            pass  # a reset: what came before it is the answer
    return bytes(received)


def _h11_read(data: bytes, *, http_method: str = "POST", partial: bool = False) -> list[Any]:
    """Parse a response with h11 as a client; return its events (or raise its error).

    With `partial`, `data` is a prefix of an endless response: stop where it ends.
    """
    conn = h11.Connection(h11.CLIENT)
    conn.send(
        h11.Request(
            method=http_method, target="/", headers=[("host", "x"), ("content-length", "0")]
        )
    )
    conn.send(h11.EndOfMessage())
    conn.receive_data(data)
    events: list[Any] = []
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            if partial:
                return events
            conn.receive_data(b"")
            continue
        if event is h11.PAUSED or isinstance(event, h11.ConnectionClosed):
            return events
        events.append(event)
        if isinstance(event, h11.EndOfMessage):
            return events


async def _serve(name: str, data: bytes, *, limit: int = 1 << 20, **options: Any) -> bytes:
    with trio.fail_after(BOUND):
        async with open_upstream(hostile(name, **options)) as upstream:
            return await _exchange(upstream.port, data, limit=limit)


# ---- the catalogue and its API ------------------------------------------------------------------


def test_every_misbehaviour_is_named_described_and_coded() -> None:
    assert len(MISBEHAVIOURS) >= 14
    for name, entry in MISBEHAVIOURS.items():
        assert entry.name == name and entry.description
        script = hostile(name)
        assert script.name == name and script.at_head is entry.at_head
    assert [n for n, e in MISBEHAVIOURS.items() if e.at_head] == ["early-413"]


def test_unknown_names_and_options_are_refused() -> None:
    with pytest.raises(KeyError, match="unknown misbehaviour 'nope'"):
        hostile("nope")
    with pytest.raises(TypeError):
        hostile("trickle", speed=3)
    with pytest.raises(ValueError, match="phrasing"):
        hostile("echo-secrets", phrasing="carrier-pigeon")


def test_ordinary_scripts_are_framed_by_h11_and_broken_framing_by_hand() -> None:
    assert SSEScript(openai_events(["a"])).plan.encoder == "h11"
    assert (
        SSEScript(openai_events(["a"]), chunked=False, close_delimited=True).plan.encoder == "h11"
    )
    assert ErrorScript(529).plan.encoder == "h11"
    forged = SSEScript(
        [b"zz\r\n"], chunked=False, close_delimited=True, headers={"transfer-encoding": "chunked"}
    )
    assert forged.plan.encoder == "raw"
    # What h11 framed, h11 reads back.
    script = SSEScript(openai_events(["Hel", "lo"]))
    events = _h11_read(script.plan.head_keep_alive + b"".join(script.plan.writes))
    assert b"".join(e.data for e in events if isinstance(e, h11.Data)) == script.body


def test_the_parser_reports_a_head_before_its_body() -> None:
    parser = RequestParser(report_heads=True)
    head = b"POST /v1/messages HTTP/1.1\r\ncontent-length: 5\r\n\r\n"
    out = parser.feed(head + b"ab")
    assert out == [RequestHead("POST", "/v1/messages", "HTTP/1.1", (("content-length", "5"),))]
    (request,) = parser.feed(b"cde")
    assert not isinstance(request, RequestHead) and request.body == b"abcde"  # type: ignore[union-attr]


def test_a_gzip_bomb_is_small_and_inflates_to_what_it_claims() -> None:
    body = _bomb(64, b"a")
    assert len(body) < 100_000
    inflated = gzip.decompress(body)  # checks the CRC and size trailer too
    assert inflated == b"a" * (64 << 20)


# ---- on the wire --------------------------------------------------------------------------------


async def test_endless_head_never_ends_its_head() -> None:
    data = await _serve("endless-head", _request(), limit=512 << 10)
    assert data.startswith(b"HTTP/1.1 200 OK\r\n")
    assert len(data) >= 512 << 10 and b"\r\n\r\n" not in data


async def test_giant_chunk_size_is_refused_by_h11() -> None:
    data = await _serve("giant-chunk-size", _request())
    assert b"\r\n" + b"f" * 64 + b"\r\n" in data
    with pytest.raises(h11.RemoteProtocolError):
        _h11_read(data)


async def test_1xx_flood_sends_only_informational_responses() -> None:
    data = await _serve("1xx-flood", _request(), limit=256 << 10)
    events = []
    conn = h11.Connection(h11.CLIENT)
    conn.send(h11.Request(method="GET", target="/", headers=[("host", "x")]))
    conn.send(h11.EndOfMessage())
    conn.receive_data(data)
    while (event := conn.next_event()) is not h11.NEED_DATA:
        events.append(event)
    assert len(events) > 1000
    assert all(isinstance(e, h11.InformationalResponse) and e.status_code == 103 for e in events)


async def test_gzip_bomb_sends_a_compressed_stream() -> None:
    data = await _serve("gzip-bomb", _request(), limit=8 << 20, inflated_mib=16)
    events = _h11_read(data)
    response = events[0]
    assert (b"content-encoding", b"gzip") in list(response.headers)
    body = b"".join(e.data for e in events if isinstance(e, h11.Data))
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    assert inflater.decompress(body, 1 << 20) == b"a" * (1 << 20)  # one endless SSE line


@pytest.mark.parametrize("phrasing", SECRET_PHRASINGS)
@pytest.mark.parametrize("header", ["authorization", "x-api-key"])
async def test_echo_secrets_repeats_the_key_it_was_sent(phrasing: str, header: str) -> None:
    value = f"Bearer {KEY}" if header == "authorization" else KEY
    data = await _serve("echo-secrets", _request(headers=[(header, value)]), phrasing=phrasing)
    events = _h11_read(data)
    assert events[0].status_code == 401
    body = b"".join(e.data for e in events if isinstance(e, h11.Data)).decode()
    assert KEY in body
    if phrasing == "json":
        assert KEY in msgspec.json.decode(body)["error"]["message"]
    if phrasing == "html-title":
        assert f"<title>401 Unauthorized {KEY}</title>" in body


async def test_trickle_sends_one_byte_per_write_and_a_whole_response() -> None:
    with trio.fail_after(BOUND):
        async with open_upstream(hostile("trickle")) as upstream:
            stream = await trio.open_tcp_stream("127.0.0.1", upstream.port)
            async with stream:
                await stream.send_all(_request())
                reads = []
                data = b""
                while not data.endswith(b"0\r\n\r\n"):
                    await trio.lowlevel.checkpoint()  # the upstream sends a byte or so meanwhile
                    piece = await stream.receive_some(65536)
                    reads.append(len(piece))
                    data += piece
    events = _h11_read(data)
    body = b"".join(e.data for e in events if isinstance(e, h11.Data))
    assert b'"content":"world"' in body and body.endswith(b"data: [DONE]\n\n")
    assert len(reads) > 10  # it came in pieces, however the kernel coalesced them


async def test_reset_mid_body_sends_some_events_then_a_reset() -> None:
    with trio.fail_after(BOUND):
        async with open_upstream(hostile("reset-mid-body")) as upstream:
            data = await _exchange(upstream.port, _request())
    assert data.startswith(b"HTTP/1.1 200 OK\r\n") and not data.endswith(b"0\r\n\r\n")


@pytest.mark.parametrize("path", ["/chat/completions", "/v1/messages"])
async def test_deep_nesting_follows_the_dialect_and_nests_deep(path: str) -> None:
    data = await _serve("deep-nesting", _request(path), depth=3000)
    body = b"".join(e.data for e in _h11_read(data) if isinstance(e, h11.Data))
    assert b"[" * 3000 + b"]" * 3000 in body
    assert (b"event: message_start" in body) == (path == "/v1/messages")


async def test_stale_keep_alive_answers_once_then_closes_on_reuse() -> None:
    with trio.fail_after(BOUND):
        async with open_upstream(hostile("stale-keep-alive")) as upstream:
            stream = await trio.open_tcp_stream("127.0.0.1", upstream.port)
            async with stream:
                await stream.send_all(_request(keep_alive=True))
                data = b""
                while not data.endswith(b"0\r\n\r\n"):
                    data += await stream.receive_some(65536)
                await stream.send_all(_request(keep_alive=True))
                rest = await stream.receive_some(65536)
            again = await _exchange(upstream.port, _request())
    assert b"connection: keep-alive" in data.lower()
    assert rest == b""  # the reused connection is closed, unanswered
    assert again.startswith(b"HTTP/1.1 200 OK")  # a fresh connection is answered


async def test_early_413_answers_before_reading_the_body_and_resets_the_writer() -> None:
    body = b"x" * (15 << 20)  # within the upstream's body bound, beyond socket buffers
    with trio.fail_after(BOUND):
        async with open_upstream(hostile("early-413")) as upstream:
            stream = await trio.open_tcp_stream("127.0.0.1", upstream.port)
            async with stream:
                with pytest.raises(trio.BrokenResourceError):
                    await stream.send_all(_request(body=body))
            record = await upstream.wait_connection_closed(0)
    assert upstream.requests[0].body == b""  # answered at the head
    assert record.closed_by == "server"


async def test_garbage_status_and_broken_chunked_are_refused_by_h11() -> None:
    for name in ("garbage-status", "broken-chunked"):
        data = await _serve(name, _request())
        with pytest.raises(h11.RemoteProtocolError):
            _h11_read(data)


async def test_blank_line_flood_is_blank_lines_forever() -> None:
    data = await _serve("blank-line-flood", _request(), limit=1 << 20)
    head, _, body = data.partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head
    assert body.count(b"\n") > 900_000


async def test_comment_flood_sends_one_event_then_only_comments() -> None:
    data = await _serve("comment-flood", _request(), limit=1 << 20)
    events = _h11_read(data, partial=True)
    body = b"".join(e.data for e in events if isinstance(e, h11.Data))
    first, _, rest = body.partition(b"\n\n")
    assert first.startswith(b"data: {")
    assert rest.count(b": keep-alive\n\n") > 50_000 and b"data:" not in rest


async def test_a_misbehaviour_can_be_one_item_of_a_script_queue() -> None:
    queue = [hostile("echo-secrets", phrasing="token"), ErrorScript(200, body=b"fine")]
    with trio.fail_after(BOUND):
        async with open_upstream(queue) as upstream:
            first = await _exchange(upstream.port, _request(headers=[("x-api-key", KEY)]))
            second = await _exchange(upstream.port, _request(headers=[]))
    assert first.startswith(b"HTTP/1.1 401 ") and f"token {KEY}".encode() in first
    assert second.startswith(b"HTTP/1.1 200 ") and second.endswith(b"fine")
