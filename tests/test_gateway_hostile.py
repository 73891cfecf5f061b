"""Issue 10 at the gateway: deep frames (5), bounded bytes (6), bounded time and slots (8).

Every test runs over real loopback websockets and ends by checking that a
fresh client is still served.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import msgspec
import pytest
import trio
from trio_websocket import (
    ConnectionClosed,
    ConnectionRejected,
    WebSocketConnection,
    open_websocket_url,
)

import llmrt
from llmrt import (
    Adapter,
    BlockEnd,
    BlockStart,
    Finish,
    FinishStop,
    GenerateOptions,
    ReasoningBlock,
    ReasoningDelta,
    StreamChunk,
    TextBlock,
    TextDelta,
    TokenUsage,
    ToolCallBlock,
    ToolCallDelta,
    UsageChunk,
)
from llmrt.actors.gateway import GatewayServer, Limits, serve_gateway
from llmrt.actors.gateway._connection import IDLE_CLOSE_REASON
from llmrt.actors.gateway._protocol import JSON, MSGPACK, split_delta
from llmrt.actors.gateway.client import open_gateway_client
from llmrt.adapters.scripted import ScriptedAdapter, Stall, text_script

FAST = Limits(shutdown_grace=0.1, close_timeout=1.0)


def options(provider: str = "ok") -> GenerateOptions:
    return GenerateOptions(provider=provider, model="m", messages=(llmrt.user_message("hi"),))


@asynccontextmanager
async def gateway(
    adapters: dict[str, Adapter], limits: Limits = FAST, **runtime: Any
) -> AsyncIterator[GatewayServer]:
    async with llmrt.open_runtime(**runtime) as rt, trio.open_nursery() as nursery:
        await rt.register_adapter(["ok"], ScriptedAdapter(text_script(["fine"])))
        for name, adapter in adapters.items():
            await rt.register_adapter([name], adapter)
        server = await nursery.start(partial(serve_gateway, rt, limits=limits))
        try:
            yield server
        finally:
            nursery.cancel_scope.cancel()


async def fresh_client_is_served(server: GatewayServer) -> None:
    async with open_gateway_client(server.url) as client, client.stream(options()) as call:
        chunks = [chunk async for chunk in call]
    assert chunks[-1] == Finish(reason=FinishStop())


def decode(data: str | bytes) -> Any:
    return msgspec.msgpack.decode(data) if isinstance(data, bytes) else json.loads(data)


async def chunks_until_finish(ws: WebSocketConnection) -> list[Any]:
    """The chunks that arrive (``chunk`` and ``chunks`` frames) up to a finish."""
    chunks: list[Any] = []
    while not chunks or chunks[-1]["type"] != "finish":
        frame = decode(await ws.get_message())
        assert frame["type"] in ("chunk", "chunks"), frame
        chunks += [frame["chunk"]] if frame["type"] == "chunk" else frame["chunks"]
    return chunks


# ---- finding 5: frames nested too deep -------------------------------------------------------


def deep_json(depth: int) -> str:
    return '{"type":"call","id":"deep","request":' + "[" * depth + "]" * depth + "}"


def deep_msgpack(depth: int) -> bytes:
    head = msgspec.msgpack.encode({"type": "call", "id": "deep"})
    # The map grows a third key, ``request``, holding arrays nested ``depth`` deep.
    return b"\x83" + head[1:] + msgspec.msgpack.encode("request") + b"\x91" * depth + b"\x90"


@pytest.mark.parametrize("subprotocol", ["llmrt.v1", "llmrt.v1.msgpack"])
async def test_a_deeply_nested_frame_gets_bad_frame_and_the_connection_lives_on(
    subprotocol: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "llmrt.gateway")
    binary = subprotocol.endswith("msgpack")
    frame = deep_msgpack(1000) if binary else deep_json(1000)
    assert len(frame) < 2100
    ok_call = msgspec.json.decode(llmrt.encode(options()))
    async with gateway({}) as server:
        async with open_websocket_url(server.url, subprotocols=[subprotocol]) as ws:
            decode(await ws.get_message())  # hello
            for _ in range(20):
                await ws.send_message(frame)
                error = decode(await ws.get_message())
                assert error["type"] == "error" and error["code"] == "BAD_FRAME", error
                assert "nests" in error["message"] and "64" in error["message"]
            # The same connection still serves a call.
            call = {"type": "call", "id": "after", "request": ok_call}
            await ws.send_message(msgspec.msgpack.encode(call) if binary else json.dumps(call))
            assert (await chunks_until_finish(ws))[-1]["reason"] == {"kind": "stop"}
        await fresh_client_is_served(server)
    # Twenty bad frames: one log line, no traceback, nothing at ERROR.
    bad = [r for r in caplog.records if "bad frame" in r.getMessage()]
    assert len(bad) == 1 and bad[0].exc_info is None
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_the_codecs_never_let_a_recursion_error_out() -> None:
    for codec, frame in ((JSON, deep_json(100_000)), (MSGPACK, deep_msgpack(100_000))):
        with pytest.raises(llmrt.DecodeError, match="nests"):
            codec.decode_client(frame)
        assert codec.peek_id(frame) is None
        with pytest.raises(llmrt.DecodeError):
            codec.decode_server(frame)


# ---- finding 6: bounded bytes ----------------------------------------------------------------

BIG = 300_000


def big_answer() -> list[StreamChunk]:
    """Deltas of 300 KB in a text, a reasoning and a tool-call block, whose block-ends repeat
    them whole (1.2 MB each), then a finish."""
    text = ['é"\\x' * (BIG // 4)] * 4  # escapes and multi-byte characters
    reasoning = ["r" * BIG] * 2
    arguments = '{"q": "' + "a" * BIG + '"}'
    return [
        BlockStart(index=0, block_type="reasoning"),
        *(ReasoningDelta(index=0, text=t) for t in reasoning),
        BlockEnd(index=0, block=ReasoningBlock(text="".join(reasoning))),
        BlockStart(index=1, block_type="text"),
        *(TextDelta(index=1, text=t) for t in text),
        BlockEnd(index=1, block=TextBlock(text="".join(text))),
        BlockStart(index=2, block_type="tool-call"),
        ToolCallDelta(index=2, id="call_1", name="search", arguments_delta=arguments),
        BlockEnd(index=2, block=ToolCallBlock(id="call_1", name="search", arguments=arguments)),
        UsageChunk(usage=TokenUsage(input_tokens=1, output_tokens=9)),
        Finish(reason=FinishStop()),
    ]


def joined(chunks: Sequence[StreamChunk]) -> list[StreamChunk]:
    """``chunks`` with consecutive deltas of one block joined (what a reader sees)."""
    out: list[StreamChunk] = []
    for chunk in chunks:
        last = out[-1] if out else None
        if isinstance(chunk, TextDelta | ReasoningDelta) and type(last) is type(chunk):
            assert isinstance(last, TextDelta | ReasoningDelta)
            out[-1] = type(chunk)(index=chunk.index, text=last.text + chunk.text)
        elif isinstance(chunk, ToolCallDelta) and isinstance(last, ToolCallDelta):
            out[-1] = ToolCallDelta(
                index=chunk.index,
                id=last.id,
                name=last.name,
                arguments_delta=last.arguments_delta + chunk.arguments_delta,
            )
        else:
            out.append(chunk)
    return out


def test_split_delta_pieces_fit_and_concatenate() -> None:
    def size(chunk: StreamChunk) -> int:
        return len(llmrt.encode(chunk))

    text = 'ab"\\\né€😀' * 5000
    for chunk in (
        TextDelta(index=3, text=text),
        ReasoningDelta(index=3, text=text),
        ToolCallDelta(index=3, id="i", name="n", arguments_delta=text),
    ):
        pieces = split_delta(chunk, size, 4000)
        assert len(pieces) > 10 and all(size(p) <= 4000 for p in pieces)
        assert joined(pieces) == [chunk]
    small = TextDelta(index=0, text="small")
    assert split_delta(small, size, 4000) == [small]


@pytest.mark.parametrize("msgpack", [False, True])
async def test_no_frame_exceeds_the_limit_the_client_announced(msgpack: bool) -> None:
    script = big_answer()
    limit = 64 * 1024
    async with gateway({"big": ScriptedAdapter(script)}) as server:
        # The Python client announces its limit and reassembles what comes in parts.
        async with open_gateway_client(
            server.url, max_frame_bytes=limit, msgpack=msgpack
        ) as client:
            assert client.hello.limits.server_frame_bytes == limit
            async with client.stream(options("big")) as call:
                through = [chunk async for chunk in call]
        assert joined(through) == joined(script)
        assert len(through) > len(script)  # the deltas were cut
        # On the wire: no message above the limit; the block-ends came in parts.
        header = [(b"Llmrt-Max-Frame-Bytes", str(limit).encode())]
        subprotocol = "llmrt.v1.msgpack" if msgpack else "llmrt.v1"
        async with open_websocket_url(
            server.url, subprotocols=[subprotocol], extra_headers=header, max_message_size=limit
        ) as ws:
            decode(await ws.get_message())
            request = msgspec.json.decode(llmrt.encode(options("big")))
            call_frame = {"type": "call", "id": "c", "request": request}
            await ws.send_message(
                msgspec.msgpack.encode(call_frame) if msgpack else json.dumps(call_frame)
            )
            sizes: list[int] = []
            kinds: set[str] = set()
            parts: list[Any] = []
            wire: list[Any] = []
            while not wire or wire[-1]["type"] != "finish":
                data = await ws.get_message()
                sizes.append(len(data if isinstance(data, bytes) else data.encode()))
                frame = decode(data)
                kinds.add(frame["type"])
                if frame["type"] == "part":
                    parts.append(frame["data"])
                    if frame.get("more"):
                        continue
                    frame = decode(b"".join(parts) if msgpack else "".join(parts))
                    parts.clear()
                wire += [frame["chunk"]] if frame["type"] == "chunk" else frame["chunks"]
        assert max(sizes) <= limit
        assert "part" in kinds
        assert joined([msgspec.convert(c, StreamChunk) for c in wire]) == joined(script)
        await fresh_client_is_served(server)


class Counting(Adapter):
    """Yields ``count`` text deltas of ``size`` bytes as fast as it is read; counts them."""

    def __init__(self, count: int, size: int) -> None:
        self.count = count
        self.size = size
        self.produced = 0

    async def stream(self, options: GenerateOptions) -> AsyncIterator[StreamChunk]:
        yield BlockStart(index=0, block_type="text")
        for _ in range(self.count):
            self.produced += 1
            yield TextDelta(index=0, text="x" * self.size)
        yield BlockEnd(index=0, block=TextBlock(text=""))
        yield Finish(reason=FinishStop())


async def test_a_slow_reader_stops_its_upstream_within_the_byte_budget() -> None:
    size, count = 200_000, 400  # 80 MB on offer
    adapter = Counting(count, size)
    limits = Limits(max_pending_bytes=1 << 20, shutdown_grace=0.1, close_timeout=1.0)
    # The runtime's own per-call buffer counts chunks (256 by default): keep it
    # small, so that what is measured is the gateway's share.
    async with gateway({"flood": adapter}, limits, channel_size=4) as server:
        # A client whose reader takes one message and then stops reading.
        async with open_websocket_url(server.url, message_queue_size=1) as ws:
            hello = json.loads(await ws.get_message())
            assert hello["limits"]["maxPendingBytes"] == 1 << 20
            request = msgspec.json.decode(llmrt.encode(options("flood")))
            await ws.send_message(json.dumps({"type": "call", "id": "f", "request": request}))
            # Wait until the upstream stands still: every task blocked (on the
            # full socket, the budget, the runtime's buffer) and nothing produced
            # since the last time they all were.
            with trio.fail_after(20):
                seen = -1
                while adapter.produced != seen:
                    seen = adapter.produced
                    await trio.testing.wait_all_tasks_blocked()
            # The runtime's buffer (4 chunks), the budget (1 MiB), the frame being
            # written and the sockets' kernel buffers: far from all 80 MB.
            assert adapter.produced * size < 16_000_000, adapter.produced
            received = 0
            for chunk in await chunks_until_finish(ws):
                if chunk["type"] == "text-delta":
                    received += len(chunk["text"])
        assert received == size * count
        await fresh_client_is_served(server)


# ---- finding 8: idle connections and per-peer slots --------------------------------------------

#: Timeouts that never fire on their own during a mock-clock test.
NEVER = 1e6


async def test_an_idle_connection_is_closed_with_1001_but_a_busy_one_is_not(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limits = Limits(
        idle_timeout=30.0,
        heartbeat_interval=NEVER,
        heartbeat_timeout=NEVER,
        handshake_timeout=NEVER,
        shutdown_grace=0.1,
        close_timeout=NEVER,
    )
    stall = ScriptedAdapter([BlockStart(index=0, block_type="text"), Stall()])
    async with gateway({"stall": stall}, limits) as server:
        async with open_websocket_url(server.url, connect_timeout=NEVER) as ws:
            hello = json.loads(await ws.get_message())
            assert hello["limits"]["idleTimeout"] == 30.0
            started = trio.current_time()
            # A call in flight keeps the connection, however long it runs.
            request = msgspec.json.decode(llmrt.encode(options("stall")))
            await ws.send_message(json.dumps({"type": "call", "id": "s", "request": request}))
            assert json.loads(await ws.get_message())["chunk"]["type"] == "block-start"
            await trio.sleep(200)  # (below the runtime's stream idle watchdog)
            assert server.connection_count == 1
            await ws.send_message(json.dumps({"type": "abort", "id": "s"}))
            assert (await chunks_until_finish(ws))[-1]["reason"]["kind"] == "aborted"
            aborted = trio.current_time()
            # Pings are no calls: the connection is idle from the abort on.
            await ws.send_message(json.dumps({"type": "ping"}))
            assert json.loads(await ws.get_message())["type"] == "pong"
            with pytest.raises(ConnectionClosed) as closed:
                await ws.get_message()
            assert closed.value.reason.code == 1001
            assert closed.value.reason.reason == IDLE_CLOSE_REASON
            assert 30.0 <= trio.current_time() - aborted < 31.0
            assert trio.current_time() - started > 200
        with trio.fail_after(5):
            while server.connection_count:  # noqa: ASYNC110 - the gateway's side
                await trio.sleep(0.01)
        async with open_gateway_client(server.url, connect_timeout=NEVER) as client:
            assert [p.id for p in await client.list_providers()] == ["ok", "stall"]


async def test_connections_per_peer_are_capped_and_announced() -> None:
    limits = Limits(max_connections_per_peer=2, shutdown_grace=0.1, close_timeout=1.0)
    async with gateway({}, limits) as server:
        async with open_gateway_client(server.url) as first:
            assert first.hello.limits.max_connections_per_peer == 2
            async with open_websocket_url(server.url):
                with pytest.raises(ConnectionRejected) as refused:
                    async with open_websocket_url(server.url):
                        pass  # pragma: no cover
                assert refused.value.status_code == 503
                assert b"maxConnectionsPerPeer" in (refused.value.body or b"")
                assert server.refusals == {"per_peer": 1}
            # A slot came free: a fresh client is served.
            await fresh_client_is_served(server)


async def test_a_bad_frame_size_announcement_is_refused_with_400() -> None:
    async with gateway({}) as server:
        for value in ("100", "lots", "²", "9" * 5000):
            header = [(b"Llmrt-Max-Frame-Bytes", value.encode())]
            with pytest.raises(ConnectionRejected) as refused:
                async with open_websocket_url(server.url, extra_headers=header):
                    pass  # pragma: no cover
            assert refused.value.status_code == 400, value
        # A limit above the server's own changes nothing.
        header = [(b"Llmrt-Max-Frame-Bytes", str(1 << 40).encode())]
        async with open_websocket_url(server.url, extra_headers=header) as ws:
            hello = json.loads(await ws.get_message())
            assert hello["limits"]["serverFrameBytes"] == hello["limits"]["maxFrameBytes"]
        await fresh_client_is_served(server)


async def test_connection_failures_log_one_traceback_per_kind_per_minute(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from llmrt.actors.gateway import _server

    class Broken(_server.Connection):
        async def run(self) -> None:
            raise RuntimeError("a bug a client can trigger")

    caplog.set_level(logging.ERROR, "llmrt.gateway")
    async with gateway({}) as server:
        monkeypatch.setattr(_server, "Connection", Broken)
        for _ in range(5):
            async with open_websocket_url(server.url) as ws:
                with pytest.raises(ConnectionClosed):
                    await ws.get_message()
        monkeypatch.undo()
        failures = [r for r in caplog.records if "connection failed" in r.getMessage()]
        assert len(failures) == 1 and failures[0].exc_info is not None
        await fresh_client_is_served(server)
