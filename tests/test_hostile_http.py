"""A hostile or unlucky upstream, seen from the HTTP client: every misbehaviour ends coded.

Each test runs a call through an adapter over real loopback sockets, against
either the local upstream (`llmrt.testing`) or a small raw trio server written
here for what that upstream cannot do (stale keep-alive connections, early
answers, 1xx floods, garbage heads).
"""

from __future__ import annotations

import functools
import gzip
import socket
import struct
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress

import attrs
import msgspec
import pytest
import trio
from _ports import free_port

import llmrt
from llmrt import ErrorCode, Finish, FinishError, FinishStop, NormalRetryPolicy, StreamChunk
from llmrt.adapters._bodies import (
    INFLATE_PIECE,
    BoundedInflater,
    check_depth,
    describe_json_error,
    inflater_for,
)
from llmrt.adapters._http import make_client, stream_events
from llmrt.adapters._transport import MAX_INFORMATIONAL, TrioTransport
from llmrt.adapters.anthropic import AnthropicAdapter
from llmrt.adapters.openai_chat import OpenAIChatAdapter
from llmrt.testing import ErrorScript, SSEScript, anthropic_events, open_upstream, openai_events

KEY = "sk-hostile-0123456789abcdef"
NO_RETRY = NormalRetryPolicy(max_retries=0)
#: A whole OpenAI stream, ending with [DONE].
STREAM = b"".join(openai_events(["Hel", "lo"]))


def adapter(base_url: str, kind: str = "openai") -> llmrt.Adapter:
    if kind == "anthropic":
        return AnthropicAdapter(
            base_url=base_url,
            api_key_env="K",
            environ={"K": KEY},
            transport=TrioTransport(),
            retry_policy=NO_RETRY,
        )
    return OpenAIChatAdapter(
        base_url=base_url,
        api_key_env="K",
        environ={"K": KEY},
        transport=TrioTransport(),
        retry_policy=NO_RETRY,
    )


async def run_calls(
    base_url: str, n: int = 1, *, kind: str = "openai", prompt: str = "hi"
) -> list[list[StreamChunk]]:
    """``n`` calls one after the other through one adapter (so one connection pool)."""
    out = []
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], adapter(base_url, kind))
        for _ in range(n):
            options = llmrt.GenerateOptions(
                provider="p", model="m", messages=(llmrt.user_message(prompt),)
            )
            async with rt.stream(options) as call:
                out.append([chunk async for chunk in call])
    return out


def finish_of(chunks: list[StreamChunk]) -> Finish:
    finishes = [c for c in chunks if isinstance(c, Finish)]
    assert len(finishes) == 1 and chunks[-1] is finishes[0], chunks
    return finishes[0]


def failure(chunks: list[StreamChunk]) -> llmrt.LlmFailure:
    reason = finish_of(chunks).reason
    assert isinstance(reason, FinishError), reason
    assert KEY not in reason.failure.message
    return reason.failure


def text_of(chunks: list[StreamChunk]) -> str:
    return "".join(c.text for c in chunks if isinstance(c, llmrt.TextDelta))


# ---- a raw HTTP/1.1 server ----------------------------------------------------------------------


@attrs.define
class Conn:
    """One accepted connection of a raw server, with a buffer for request parsing."""

    stream: trio.SocketStream
    index: int
    buffer: bytearray = attrs.field(factory=bytearray)

    async def read_head(self) -> bytes | None:
        """The next request head (None at EOF)."""
        while b"\r\n\r\n" not in self.buffer:
            data = await self.stream.receive_some(65536)
            if not data:
                return None
            self.buffer += data
        end = self.buffer.index(b"\r\n\r\n") + 4
        head = bytes(self.buffer[:end])
        del self.buffer[:end]
        return head

    async def read_request(self) -> bytes | None:
        """The next request's head and body (Content-Length framed), None at EOF."""
        head = await self.read_head()
        if head is None:
            return None
        length = 0
        for line in head.split(b"\r\n"):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(self.buffer) < length:
            data = await self.stream.receive_some(65536)
            if not data:
                return None
            self.buffer += data
        del self.buffer[:length]
        return head

    def reset(self) -> None:
        """Close with a TCP RST (SO_LINGER 0), as a crashed or impatient server does."""
        self.stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.stream.socket.close()


@asynccontextmanager
async def raw_server(handler: Callable[[Conn], Awaitable[None]]) -> AsyncIterator[str]:
    """A loopback server running ``handler`` per connection; yields its base URL."""
    count = 0

    async def serve(stream: trio.SocketStream) -> None:
        nonlocal count
        conn = Conn(stream, count)
        count += 1
        with suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            await handler(conn)

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, serve, 0, host="127.0.0.1")
        )
        port = listeners[0].socket.getsockname()[1]
        yield f"http://127.0.0.1:{port}"
        nursery.cancel_scope.cancel()


def sse_response(body: bytes = STREAM, *, extra: bytes = b"") -> bytes:
    """A keep-alive 200 event stream framed by Content-Length."""
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
        + extra
        + b"Content-Length: %d\r\n\r\n" % len(body)
        + body
    )


# ---- finding 5: deep nesting in an SSE payload --------------------------------------------------

DEEP = b"[" * 1000 + b"]" * 1000


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_a_deeply_nested_sse_payload_is_a_protocol_error(kind: str) -> None:
    if kind == "openai":
        events = openai_events(["ok"])
        events.insert(2, b'data: {"choices": [], "x": ' + DEEP + b"}\n\n")
    else:
        events = anthropic_events(["ok"])
        deep = b'{"type": "message_delta", "x": ' + DEEP + b"}"
        events.insert(3, b"event: message_delta\ndata: " + deep + b"\n\n")
    async with open_upstream(SSEScript(events=events)) as upstream:
        [chunks] = await run_calls(upstream.base_url, kind=kind)
        await upstream.wait_all_closed()
    lost = failure(chunks)
    assert lost.code == ErrorCode.PROTOCOL
    assert "nests JSON more than 64 levels deep" in lost.message


class _Recursing:
    """An event feed whose decoding recurses without bound (what the payload gate prevents)."""

    finished = False

    def feed(self, data: bytes) -> list[StreamChunk]:
        raise RecursionError("maximum recursion depth exceeded while deserializing an object")

    def end(self) -> list[StreamChunk]:
        return []


async def test_a_recursion_error_in_decoding_is_a_protocol_error() -> None:
    async with open_upstream(SSEScript(events=openai_events(["a"]))) as upstream:
        async with make_client(upstream.base_url) as client:
            events = stream_events(
                client,
                "/chat/completions",
                body=b"{}",
                headers={},
                provider_kind="openai",
                events=_Recursing(),
            )
            with pytest.raises(llmrt.LlmError, match="nested too deeply") as caught:
                async for _ in events:
                    pass
    assert caught.value.code == ErrorCode.PROTOCOL


def test_the_depth_check_passes_ordinary_payloads() -> None:
    check_depth(b'{"a": [[[1]]], "s": "' + b"[" * 100 + b'"}')  # brackets in a string
    check_depth(b"[DONE]")
    with pytest.raises(llmrt.LlmError, match="levels deep") as caught:
        check_depth(b'{"a": ' + b"{" * 65 + b"}" * 65 + b"}")
    assert caught.value.code == ErrorCode.PROTOCOL


def test_an_unpaired_surrogate_is_described_as_such() -> None:
    for good in [b'{"s": "\\ud83d\\ude00"}', b'{"s": "\\\\ud800"}']:  # a pair; an escaped \\
        assert msgspec.json.decode(good)
    for bad, escape in [
        (b'{"s": "\\ud800"}', "\\ud800"),
        (b'{"s": "\\ud800x"}', "\\ud800"),
        (b'{"s": "\\uDBFF"}', "\\uDBFF"),
    ]:
        with pytest.raises(msgspec.DecodeError) as caught:
            msgspec.json.decode(bad)
        message = describe_json_error(caught.value, bad)
        assert escape in message and "surrogate pair" in message and "truncated" not in message
    cut = b'{"s": "abc'
    with pytest.raises(msgspec.DecodeError) as caught:
        msgspec.json.decode(cut)
    assert describe_json_error(caught.value, cut) == str(caught.value)  # truly truncated


# ---- finding 7: compressed bodies ---------------------------------------------------------------


def gzip_pieces(body: bytes, piece: int = 4096) -> list[bytes]:
    data = gzip.compress(body)
    return [data[i : i + piece] for i in range(0, len(data), piece)]


async def test_a_gzip_stream_is_inflated() -> None:
    script = SSEScript(events=gzip_pieces(STREAM, 37), headers={"content-encoding": "gzip"})
    async with open_upstream(script) as upstream:
        [chunks] = await run_calls(upstream.base_url)
    assert isinstance(finish_of(chunks).reason, FinishStop) and text_of(chunks) == "Hello"
    assert upstream.requests[0].headers["accept-encoding"] == "gzip, deflate"


@pytest.mark.parametrize(
    ("filler", "message"),
    [
        # 30 MB of blank lines: each costs the parser a step and none makes an event.
        (b"\n" * (30 << 20), "lines without an event"),
        # One 30 MB line: it would be refused at 4 MiB, but the ratio cap comes first.
        (b"data: " + b"a" * (30 << 20), "inflates more than 100 times"),
    ],
    ids=["blank-lines", "one-line"],
)
async def test_a_gzip_bomb_is_a_protocol_error(filler: bytes, message: str) -> None:
    prefix = b"".join(openai_events(["a"])[:2])
    script = SSEScript(
        events=gzip_pieces(prefix + filler + STREAM), headers={"content-encoding": "gzip"}
    )
    async with open_upstream(script) as upstream:
        [chunks] = await run_calls(upstream.base_url)
    lost = failure(chunks)
    assert lost.code == ErrorCode.PROTOCOL and message in lost.message


async def test_a_gzip_error_body_is_inflated_and_classified() -> None:
    error = b'{"error": {"message": "Slow down", "type": "rate_limit_exceeded"}}'
    script = ErrorScript(
        429,
        body=gzip.compress(error),
        headers={"content-encoding": "gzip", "content-type": "application/json"},
    )
    async with open_upstream(script) as upstream:
        [chunks] = await run_calls(upstream.base_url)
    lost = failure(chunks)
    assert lost.code == ErrorCode.RATE_LIMIT and "Slow down" in lost.message


async def test_a_gzip_bomb_after_the_end_marker_costs_only_the_connection() -> None:
    script = SSEScript(
        # One unterminated 30 MB line: the parser stops at [DONE] before it sees its end.
        events=gzip_pieces(STREAM + b"x" * (30 << 20)),
        headers={"content-encoding": "gzip"},
    )
    async with open_upstream(script) as upstream:
        [chunks] = await run_calls(upstream.base_url)
        with trio.fail_after(5):
            record = await upstream.wait_connection_closed(0)
    assert isinstance(finish_of(chunks).reason, FinishStop) and text_of(chunks) == "Hello"
    assert record.closed_by == "client"


async def test_a_gzip_bomb_as_a_model_list_is_a_protocol_error() -> None:
    bomb = gzip.compress(b'{"data": [' + b" " * (30 << 20) + b"]}")

    async def handler(conn: Conn) -> None:
        await conn.read_request()
        await conn.stream.send_all(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\n"
            b"Content-Length: %d\r\n\r\n%b" % (len(bomb), bomb)
        )
        await conn.read_request()

    async with raw_server(handler) as base_url:
        with pytest.raises(llmrt.LlmError, match="inflates more than 100 times") as caught:
            await adapter(base_url).list_models("p")
    assert caught.value.code == ErrorCode.PROTOCOL


def test_inflation_is_stepwise_and_bounded() -> None:
    body = b"data: x\n\n" * 100_000  # 900 KB, under the floor
    for coding, data in [
        ("gzip", gzip.compress(body)),
        ("deflate", zlib.compress(body)),
        ("deflate", zlib.compress(body, wbits=-15)),  # raw deflate, as some servers send
    ]:
        inflater = BoundedInflater(coding)
        pieces = [p for i in range(0, len(data), 1000) for p in inflater.feed(data[i : i + 1000])]
        assert b"".join(pieces) == body
        assert max(map(len, pieces)) <= INFLATE_PIECE
    with pytest.raises(llmrt.LlmError, match="undecodable gzip"):
        list(BoundedInflater("gzip").feed(b"not gzip at all"))
    assert inflater_for({}) is None and inflater_for({"content-encoding": "identity"}) is None
    for coding in ["br", "gzip, gzip", "zstd"]:
        with pytest.raises(llmrt.LlmError, match="unsupported content coding") as caught:
            inflater_for({"content-encoding": coding})
        assert caught.value.code == ErrorCode.PROTOCOL


async def test_the_sse_parser_bounds_blank_lines_and_comments_uncompressed() -> None:
    events = openai_events(["a"])
    events[1:1] = [b": keep-alive\n\n"] * 6000  # 12,000 lines without an event
    async with open_upstream(SSEScript(events=events)) as upstream:
        [chunks] = await run_calls(upstream.base_url)
    lost = failure(chunks)
    assert lost.code == ErrorCode.PROTOCOL and "lines without an event" in lost.message


# ---- finding 9: endless informational responses -------------------------------------------------


@pytest.mark.parametrize("count", [MAX_INFORMATIONAL, 1000])
async def test_informational_responses_are_capped(count: int) -> None:
    async def handler(conn: Conn) -> None:
        await conn.read_request()
        early = b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
        await conn.stream.send_all(early * count + sse_response())
        await conn.read_request()

    async with raw_server(handler) as base_url:
        [chunks] = await run_calls(base_url)
    if count <= MAX_INFORMATIONAL:
        assert isinstance(finish_of(chunks).reason, FinishStop) and text_of(chunks) == "Hello"
    else:
        lost = failure(chunks)
        assert lost.code == ErrorCode.PROTOCOL and "informational" in lost.message


# ---- finding 10: a stale pooled connection ------------------------------------------------------


@pytest.mark.parametrize("how", ["close", "reset"])
async def test_a_request_on_a_stale_pooled_connection_is_sent_again(how: str) -> None:
    received: list[int] = []

    async def handler(conn: Conn) -> None:
        while await conn.read_request() is not None:
            received.append(conn.index)
            if conn.index == 0 and len(received) == 2:
                # The server dropped the idle connection as the second request went out.
                if how == "reset":
                    conn.reset()
                else:
                    await conn.stream.aclose()
                return
            await conn.stream.send_all(sse_response())

    async with raw_server(handler) as base_url:
        results = await run_calls(base_url, 2)
    for chunks in results:
        assert isinstance(finish_of(chunks).reason, FinishStop) and text_of(chunks) == "Hello"
    assert received == [0, 0, 1]  # sent once more, on a fresh connection


async def test_a_fresh_connection_that_fails_is_not_retried() -> None:
    received: list[int] = []

    async def handler(conn: Conn) -> None:
        await conn.read_request()
        received.append(conn.index)
        await conn.stream.aclose()

    async with raw_server(handler) as base_url:
        [chunks] = await run_calls(base_url)
    assert failure(chunks).code == ErrorCode.NETWORK
    assert received == [0]


async def test_a_reused_connection_that_failed_after_answering_is_not_retried() -> None:
    received: list[int] = []

    async def handler(conn: Conn) -> None:
        while await conn.read_request() is not None:
            received.append(conn.index)
            if len(received) == 2:
                await conn.stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream")
                await conn.stream.aclose()  # part of a head: the server did act on it
                return
            await conn.stream.send_all(sse_response())

    async with raw_server(handler) as base_url:
        first, second = await run_calls(base_url, 2)
    assert isinstance(finish_of(first).reason, FinishStop)
    assert failure(second).code == ErrorCode.NETWORK
    assert received == [0, 0]


# ---- finding 11: an early error response ---------------------------------------------------------


async def test_an_early_413_is_read_while_the_body_is_still_being_written() -> None:
    error = b'{"error": {"message": "Request too large", "type": "invalid_request_error"}}'

    async def handler(conn: Conn) -> None:
        await conn.read_head()
        await conn.stream.send_all(
            b"HTTP/1.1 413 Payload Too Large\r\nContent-Type: application/json\r\n"
            b"Connection: close\r\nContent-Length: %d\r\n\r\n%b" % (len(error), error)
        )
        conn.reset()  # unread request bytes: the peer's writes fail

    async with raw_server(handler) as base_url:
        [chunks] = await run_calls(base_url, prompt="x" * (64 << 20))
    lost = failure(chunks)
    assert lost.code == ErrorCode.INVALID_REQUEST and lost.status == 413
    assert "Request too large" in lost.message


# ---- finding 12: classification of transport failures -------------------------------------------


@pytest.mark.parametrize(
    "response",
    [
        b"HTTP/1.1 OK 200\r\n\r\n",
        b"ICY 200 OK\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
        b"\r\nzz\r\nhello\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
        b"\r\n5\r\nhelloXX0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: x\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nBad Header\r\n\r\n",
    ],
    ids=["status-order", "icy", "tls-bytes", "chunk-size", "chunk-crlf", "length", "header"],
)
async def test_malformed_http_is_a_protocol_error(response: bytes) -> None:
    async def handler(conn: Conn) -> None:
        await conn.read_request()
        await conn.stream.send_all(response)
        await conn.read_request()

    async with raw_server(handler) as base_url:
        [chunks] = await run_calls(base_url)
    lost = failure(chunks)
    assert lost.code == ErrorCode.PROTOCOL, lost
    assert "malformed HTTP" in lost.message


async def test_a_body_cut_short_stays_a_network_error() -> None:
    async def handler(conn: Conn) -> None:
        await conn.read_request()
        await conn.stream.send_all(sse_response()[:-20])
        await conn.stream.aclose()

    async with raw_server(handler) as base_url:
        [chunks] = await run_calls(base_url)
    assert failure(chunks).code == ErrorCode.NETWORK


async def test_a_refused_connection_names_the_endpoint() -> None:
    port = free_port()  # a port nothing listens on, nor will during the test
    [chunks] = await run_calls(f"http://127.0.0.1:{port}/v1?key={KEY}")
    lost = failure(chunks)
    assert lost.code == ErrorCode.NETWORK
    assert f"at http://127.0.0.1:{port} failed" in lost.message and "key=" not in lost.message


async def test_a_connection_reset_at_once_names_the_endpoint() -> None:
    async def handler(conn: Conn) -> None:
        conn.reset()

    async with raw_server(handler) as base_url:
        [chunks] = await run_calls(base_url)
    lost = failure(chunks)
    assert lost.code == ErrorCode.NETWORK
    assert f"at {base_url} failed" in lost.message


async def test_an_unpaired_surrogate_says_so() -> None:
    events = openai_events(["ok"])
    events.insert(2, b'data: {"choices": [{"index": 0, "delta": {"content": "\\ud83d"}}]}\n\n')
    async with open_upstream(SSEScript(events=events)) as upstream:
        [chunks] = await run_calls(upstream.base_url)
    lost = failure(chunks)
    assert lost.code == ErrorCode.PROTOCOL
    assert "\\ud83d is half of a UTF-16 surrogate pair" in lost.message, lost.message
    assert "truncated" not in lost.message
