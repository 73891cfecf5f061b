"""The websocket gateway and its Python client, over real loopback websockets (port 0).

Frames are checked raw (as JSON dicts) where the protocol's exact shape
matters, and through `open_gateway_client` where the call semantics do.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import msgspec
import pytest
import trio
from _settle import wait_until
from trio_websocket import (
    ConnectionClosed,
    ConnectionRejected,
    WebSocketConnection,
    WebSocketRequest,
    open_websocket_url,
    serve_websocket,
)

import llmrt
from llmrt import (
    Adapter,
    BlockStart,
    ErrorCode,
    Finish,
    FinishAborted,
    FinishError,
    FinishStop,
    GenerateOptions,
    LlmError,
    StreamChunk,
    TextDelta,
)
from llmrt.actors.gateway import GatewayServer, Limits, serve_gateway
from llmrt.actors.gateway._protocol import (
    JSON,
    MSGPACK,
    ChunkFrame,
    ErrorFrame,
    HelloFrame,
    TokenBucket,
    ends_request,
)
from llmrt.actors.gateway.client import open_gateway_client
from llmrt.adapters.demo import DemoAdapter
from llmrt.adapters.scripted import ScriptedAdapter, Stall, text_script

TOKEN = "s3cret-gateway-token_XYZ"
STALL_AFTER_ONE = [BlockStart(index=0, block_type="text"), TextDelta(index=0, text="a"), Stall()]
TEST_LIMITS = Limits(shutdown_grace=0.2, close_timeout=2.0)


def options(provider: str = "p", prompt: str = "hello gateway", **kw: Any) -> GenerateOptions:
    return GenerateOptions(
        provider=provider, model="m", messages=(llmrt.user_message(prompt),), **kw
    )


def request_json(opts: GenerateOptions) -> Any:
    return json.loads(llmrt.encode(opts))


@asynccontextmanager
async def gateway(
    rt: llmrt.LlmRuntime, limits: Limits = TEST_LIMITS, **kw: Any
) -> AsyncIterator[GatewayServer]:
    async with trio.open_nursery() as nursery:
        server = await nursery.start(partial(serve_gateway, rt, limits=limits, **kw))
        try:
            yield server
        finally:
            nursery.cancel_scope.cancel()


class Raw:
    """A bare trio-websocket client that records every frame it receives."""

    def __init__(self, ws: WebSocketConnection) -> None:
        self.ws = ws
        self.frames: list[str | bytes] = []

    async def recv(self) -> Any:
        data = await self.ws.get_message()
        self.frames.append(data)
        return msgspec.msgpack.decode(data) if isinstance(data, bytes) else json.loads(data)

    async def send(self, frame: Any) -> None:
        await self.ws.send_message(frame if isinstance(frame, str) else json.dumps(frame))

    async def until(self, pred: Callable[[Any], bool]) -> Any:
        while True:
            frame = await self.recv()
            if pred(frame):
                return frame

    async def chunks_of(self, cid: str) -> list[Any]:
        """Every chunk of call ``cid`` (expanding ``chunks`` frames) up to its finish."""
        out: list[Any] = []
        while not out or out[-1]["type"] != "finish":
            frame = await self.recv()
            if frame.get("id") != cid:
                continue
            assert frame["type"] in ("chunk", "chunks"), frame
            out += [frame["chunk"]] if frame["type"] == "chunk" else frame["chunks"]
        return out


@asynccontextmanager
async def raw(server: GatewayServer, **kw: Any) -> AsyncIterator[Raw]:
    async with open_websocket_url(server.url, **kw) as ws:
        client = Raw(ws)
        hello = await client.recv()
        assert hello["type"] == "hello" and hello["protocol"] == "llmrt.v1"
        yield client


def last_code(chunks: Sequence[StreamChunk]) -> str:
    assert sum(isinstance(c, Finish) for c in chunks) == 1 and isinstance(chunks[-1], Finish)
    reason = chunks[-1].reason
    assert isinstance(reason, FinishError | FinishAborted), reason
    return reason.failure.code


# ---- the protocol's pure parts ---------------------------------------------------------------


def test_token_bucket_refills_at_its_rate_up_to_its_burst() -> None:
    bucket = TokenBucket(rate=2.0, burst=2)
    assert [bucket.take(0.0) for _ in range(3)] == [True, True, False]
    assert bucket.take(0.5) and not bucket.take(0.5)
    assert bucket.take(100.0) and bucket.take(100.0) and not bucket.take(100.0)


def test_codec_names_the_problem_and_its_path() -> None:
    for data, expected in [
        ("{", "malformed JSON"),
        ("[1]", "string field `type`"),
        ('{"type":"nope"}', "unknown frame type 'nope'"),
        ('{"type":"abort"}', "missing required field `id`"),
        ('{"type":"abort","id":7}', "`$.id`"),
    ]:
        with pytest.raises(llmrt.DecodeError, match=re.escape(expected)):
            JSON.decode_client(data)
    frame = JSON.decode_client('{"type":"call","id":"c","request":{"provider":""}}')
    with pytest.raises(llmrt.DecodeError, match=r"\$\.request"):
        JSON.decode_request(frame.request)  # type: ignore[union-attr]
    assert ends_request("RATE_LIMITED") and not ends_request("DUPLICATE_ID")


def test_limits_reject_nonsense() -> None:
    with pytest.raises(ValueError, match="calls_per_second"):
        Limits(calls_per_second=0)
    with pytest.raises(ValueError, match="max_frame_bytes"):
        Limits(max_frame_bytes=-1)


# ---- calls -----------------------------------------------------------------------------------


async def test_demo_call_streams_the_same_chunks_in_process_and_through_gateway() -> None:
    opts = options("demo", tools=(llmrt.ToolSchema(name="t", description="", parameters={}),))
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["demo"], DemoAdapter())
        async with rt.stream(opts) as call:
            local = [chunk async for chunk in call]
        async with gateway(rt) as server:
            async with open_gateway_client(server.url) as client:
                async with client.stream(opts) as remote:
                    through = [chunk async for chunk in remote]
            async with raw(server) as r:
                await r.send({"type": "call", "id": "x", "request": request_json(opts)})
                wire = await r.chunks_of("x")
    assert len(local) > 20
    assert through == local
    assert wire == [json.loads(llmrt.encode(chunk)) for chunk in local]


async def test_hundred_calls_multiplexed_on_one_connection() -> None:
    limits = Limits(max_calls_per_connection=100, call_burst=100, shutdown_grace=0.2)
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["demo"], DemoAdapter())
        async with gateway(rt, limits) as server, open_gateway_client(server.url) as client:
            results: dict[int, list[StreamChunk]] = {}

            async def one(n: int) -> None:
                async with client.stream(options("demo", prompt=f"call {n}")) as call:
                    results[n] = [chunk async for chunk in call]

            with trio.fail_after(20):
                async with trio.open_nursery() as nursery:
                    for n in range(100):
                        nursery.start_soon(one, n)
    assert len(results) == 100
    for n, chunks in results.items():
        assert sum(isinstance(c, Finish) for c in chunks) == 1
        assert isinstance(chunks[-1], Finish) and isinstance(chunks[-1].reason, FinishStop)
        assert f"call {n}" in "".join(c.text for c in chunks if isinstance(c, TextDelta))


async def test_abort_frame_gives_aborted_finish_and_closes_the_adapter_stream() -> None:
    adapter = ScriptedAdapter(STALL_AFTER_ONE)
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], adapter)
        async with gateway(rt) as server, raw(server) as r:
            await r.send({"type": "call", "id": "a1", "request": request_json(options())})
            await r.until(lambda f: f.get("id") == "a1")
            assert adapter.open_streams == 1
            await r.send({"type": "abort", "id": "a1"})
            finish = (await r.chunks_of("a1"))[-1]
            assert finish["reason"]["kind"] == "aborted"
            assert finish["reason"]["failure"]["code"] == "ABORTED"
            # The finish is delivered only after the adapter's stream closed.
            assert adapter.open_streams == 0 and len(adapter.closed_at) == 1


async def test_client_leaving_a_call_early_aborts_it_upstream() -> None:
    adapter = ScriptedAdapter(STALL_AFTER_ONE)
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], adapter)
        async with gateway(rt) as server, open_gateway_client(server.url) as client:
            async with client.stream(options()) as call:
                assert isinstance(await call.__anext__(), BlockStart)
            await wait_until(lambda: adapter.open_streams == 0)
            assert server.live_requests == 0
            call2 = client.stream(options())
            async with call2 as c:
                await c.__anext__()
                c.abort()
                assert last_code([chunk async for chunk in c]) == "ABORTED"


async def test_disconnect_mid_call_closes_the_adapter_stream() -> None:
    adapter = ScriptedAdapter(STALL_AFTER_ONE)
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], adapter)
        async with gateway(rt) as server:
            async with raw(server) as r:
                await r.send({"type": "call", "id": "d", "request": request_json(options())})
                await r.until(lambda f: f.get("id") == "d")
                assert adapter.open_streams == 1
            await wait_until(lambda: adapter.open_streams == 0 and server.connection_count == 0)
            assert len(adapter.closed_at) == 1 and server.live_requests == 0


@pytest.mark.parametrize("how", ["aclose", "cancel"])
async def test_shutdown_aborts_calls_and_closes_with_1001(how: str) -> None:
    adapter = ScriptedAdapter(STALL_AFTER_ONE)
    checked = False
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], adapter)
        serving = trio.CancelScope()

        async def run(*, task_status: trio.TaskStatus[GatewayServer]) -> None:
            with serving:
                await serve_gateway(rt, limits=TEST_LIMITS, task_status=task_status)

        async with trio.open_nursery() as nursery:
            server = await nursery.start(run)
            async with raw(server) as r, open_gateway_client(server.url) as client:
                await r.send({"type": "call", "id": "s", "request": request_json(options())})
                await r.until(lambda f: f.get("id") == "s")
                async with client.stream(options()) as call:
                    await call.__anext__()
                    if how == "aclose":
                        nursery.start_soon(server.aclose)
                    else:
                        serving.cancel()
                    assert last_code([chunk async for chunk in call]) == "ABORTED"
                finish = (await r.chunks_of("s"))[-1]
                assert finish["reason"]["failure"]["code"] == "ABORTED"
                with pytest.raises(ConnectionClosed) as closed:
                    await r.recv()
                assert closed.value.reason is not None and closed.value.reason.code == 1001
                await wait_until(lambda: client.close_code is not None)
                assert client.close_code == 1001
                checked = True
    assert checked and adapter.open_streams == 0


class Firehose(Adapter):
    """Streams 1 KB text deltas until stopped; counts what it produced."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.produced = 0
        self.open = 0

    async def stream(self, options: GenerateOptions) -> AsyncIterator[StreamChunk]:
        self.open += 1
        try:
            yield BlockStart(index=0, block_type="text")
            text = "x" * 1000
            while self.produced < self.limit:
                self.produced += 1
                yield TextDelta(index=0, text=text)
        finally:
            self.open -= 1


async def test_slow_reading_client_does_not_delay_another_client() -> None:
    firehose = Firehose(limit=200_000)
    quick = ScriptedAdapter(text_script([f"w{i} " for i in range(2000)]))
    limits = Limits(outbound_frames=8, shutdown_grace=0.2, close_timeout=1.0)
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["hose"], firehose)
        await rt.register_adapter(["p"], quick)
        async with gateway(rt, limits) as server:
            async with open_websocket_url(server.url) as a:  # A never reads
                call = {"type": "call", "id": "a", "request": request_json(options("hose"))}
                await a.send_message(json.dumps(call))
                await wait_until(lambda: firehose.produced > 0)
                with trio.fail_after(10):
                    async with open_gateway_client(server.url) as b:
                        async with b.stream(options()) as bcall:
                            chunks = [chunk async for chunk in bcall]
                assert isinstance(chunks[-1], Finish) and len(chunks) == 2004
                # A's call is held back by backpressure, not run to the end.
                assert firehose.open == 1 and firehose.produced < firehose.limit
    assert firehose.open == 0


# ---- security and limits ---------------------------------------------------------------------


async def test_auth_refuses_missing_or_wrong_tokens_and_accepts_header_or_subprotocol() -> None:
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["demo"], DemoAdapter())
        async with gateway(rt, token=TOKEN) as server:
            for kw in (
                {},
                {"extra_headers": [(b"Authorization", b"Bearer wrong")]},
                {"subprotocols": ["llmrt.v1", "llmrt.bearer.wrong"]},
            ):
                with pytest.raises(ConnectionRejected) as refused:
                    async with open_websocket_url(server.url, **kw):
                        pass
                assert refused.value.status_code == 401
                assert TOKEN.encode() not in (refused.value.body or b"")
            with pytest.raises(LlmError) as err:
                async with open_gateway_client(server.url, token="wrong"):
                    pass
            assert err.value.code == ErrorCode.AUTH

            async with open_gateway_client(server.url, token=TOKEN) as client:
                assert (await client.list_providers())[0].id == "demo"
            offered = ["llmrt.bearer." + TOKEN, "llmrt.v1"]
            async with raw(server, subprotocols=offered) as r:
                assert r.ws.subprotocol == "llmrt.v1"  # never the bearer one
                await r.send({"type": "call", "id": "1", "request": request_json(options("demo"))})
                assert (await r.chunks_of("1"))[-1]["reason"]["kind"] == "stop"
                await r.send("{bad json")
                await r.send({"type": "nope", "id": "x"})
                await r.send({"type": "abort", "id": "missing"})
                for _ in range(3):
                    assert (await r.recv())["type"] == "error"
            assert all(TOKEN not in str(frame) for frame in r.frames)
            assert all("bearer" not in str(frame).lower() for frame in r.frames)


async def test_refuses_to_bind_beyond_loopback_without_a_token() -> None:
    async with llmrt.open_runtime() as rt:
        for host in ("0.0.0.0", "::", "192.0.2.1", "example.com"):
            with pytest.raises(ValueError, match="without a token"):
                await serve_gateway(rt, host, 0)
        with pytest.raises(ValueError, match="whitespace"):
            await serve_gateway(rt, "127.0.0.1", 0, token="a b")
        async with gateway(rt) as server:
            with pytest.raises(OSError):
                await serve_gateway(rt, "127.0.0.1", server.port)


async def test_malformed_input_gets_error_frames_and_the_connection_lives_on() -> None:
    adapter = ScriptedAdapter(STALL_AFTER_ONE)
    good = request_json(options())
    bad_temperature = {**good, "temperature": -1}
    cases: list[tuple[Any, str, str | None, str]] = [
        ("not json", "BAD_FRAME", None, "malformed JSON"),
        ("[1, 2]", "BAD_FRAME", None, "`type`"),
        ({"type": "launch", "id": "u"}, "BAD_FRAME", "u", "unknown frame type 'launch'"),
        ({"type": "call", "request": good}, "BAD_FRAME", None, "missing required field `id`"),
        ({"type": "call", "id": "", "request": good}, "BAD_FRAME", None, "$.id"),
        ({"type": "list-models", "id": "m"}, "BAD_FRAME", "m", "`provider`"),
        ({"type": "call", "id": "r1", "request": {"provider": "p"}}, "INVALID_REQUEST", "r1", ""),
        ({"type": "call", "id": "r2", "request": bad_temperature}, "INVALID_REQUEST", "r2",
         "$.request.temperature"),
        ({"type": "abort", "id": "ghost"}, "UNKNOWN_ID", "ghost", "no live request"),
        ({"type": "call", "id": "live", "request": good}, "DUPLICATE_ID", "live", "already"),
        ({"type": "ping", "id": "x" * 5000}, "FRAME_TOO_LARGE", None, "maxFrameBytes (4096)"),
    ]  # fmt: skip
    limits = Limits(max_frame_bytes=4096, shutdown_grace=0.2)
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], adapter)
        await rt.register_adapter(["ok"], ScriptedAdapter(text_script(["fine"])))
        async with gateway(rt, limits) as server, raw(server) as r:
            await r.send({"type": "call", "id": "live", "request": good})
            await r.until(lambda f: f.get("id") == "live")
            for frame, code, cid, text in cases:
                await r.send(frame)
                error = await r.until(lambda f: f["type"] == "error")
                assert (error["code"], error.get("id")) == (code, cid), (frame, error)
                assert text in error["message"], (frame, error)
            await r.send({"type": "call", "id": "np", "request": request_json(options("none"))})
            finish = (await r.chunks_of("np"))[-1]
            assert finish["reason"]["failure"]["code"] == "NO_ADAPTER"
            await r.send({"type": "ping", "id": "p1"})
            assert await r.until(lambda f: f["type"] != "chunk") == {"type": "pong", "id": "p1"}
            await r.send({"type": "call", "id": "after", "request": request_json(options("ok"))})
            assert (await r.chunks_of("after"))[-1]["reason"] == {"kind": "stop"}
            await r.send({"type": "abort", "id": "live"})  # the duplicate left it alive
            assert (await r.chunks_of("live"))[-1]["reason"]["kind"] == "aborted"


async def test_call_limits_per_connection_per_server_and_rate() -> None:
    adapter = ScriptedAdapter(STALL_AFTER_ONE)
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], adapter)
        call = {"type": "call", "request": request_json(options())}
        limits = Limits(max_calls_per_connection=2, max_calls_per_server=3, shutdown_grace=0.1)
        async with gateway(rt, limits) as server, raw(server) as r, raw(server) as r2:
            for cid in ("1", "2", "3"):
                await r.send({**call, "id": cid})
            error = await r.until(lambda f: f["type"] == "error")
            assert (error["code"], error["id"]) == ("LIMIT_EXCEEDED", "3")
            await r.send({"type": "abort", "id": "1"})
            assert (await r.chunks_of("1"))[-1]["reason"]["kind"] == "aborted"
            await r.send({**call, "id": "4"})
            await r.until(lambda f: f.get("id") == "4")
            await r2.send({**call, "id": "5"})
            await r2.until(lambda f: f.get("id") == "5")
            await r2.send({**call, "id": "6"})  # the server's fourth live call
            error = await r2.until(lambda f: f["type"] == "error")
            assert (error["code"], error["id"]) == ("LIMIT_EXCEEDED", "6")
            assert "maxCallsPerServer" in error["message"]

        limits = Limits(calls_per_second=0.001, call_burst=2, shutdown_grace=0.1)
        async with gateway(rt, limits) as server, open_gateway_client(server.url) as client:
            async with client.stream(options()) as c1, client.stream(options()) as c2:
                await c1.__anext__()
                await c2.__anext__()
                async with client.stream(options()) as c3:
                    assert last_code([chunk async for chunk in c3]) == "RATE_LIMITED"


async def test_max_connections_refuses_with_503() -> None:
    async with llmrt.open_runtime() as rt:
        async with gateway(rt, Limits(max_connections=1)) as server, raw(server):
            with pytest.raises(ConnectionRejected) as refused:
                async with open_websocket_url(server.url):
                    pass
            assert refused.value.status_code == 503
            with pytest.raises(LlmError) as err:
                async with open_gateway_client(server.url):
                    pass
            assert err.value.code == ErrorCode.OVERLOADED


async def test_heartbeat_closes_a_peer_that_stops_answering_pings(
    mock_clock: trio.testing.MockClock,
) -> None:
    # Heartbeats on the mock clock; it jumps only after 20 ms of real quiet, so
    # that a pong in flight on the loopback socket lands before a timeout fires.
    mock_clock.autojump_threshold = 0.02
    limits = Limits(heartbeat_interval=0.05, heartbeat_timeout=0.1, close_timeout=0.2)
    async with llmrt.open_runtime() as rt:
        async with gateway(rt, limits) as server:
            async with open_gateway_client(server.url) as alive:
                # A peer whose websocket reader is stuck (its message queue of one
                # is full: hello, then our pong) no longer answers pings.
                async with open_websocket_url(server.url, message_queue_size=1) as stuck:
                    await stuck.send_message('{"type":"ping"}')
                    await wait_until(lambda: server.connection_count == 2)
                    await wait_until(lambda: server.connection_count == 1)
                # The client that reads keeps its connection across many heartbeats.
                await trio.sleep(0.3)
                assert server.connection_count == 1
                assert await alive.list_providers() == ()


# ---- encodings and metadata ------------------------------------------------------------------


async def test_msgpack_subprotocol_round_trip() -> None:
    adapter = ScriptedAdapter(text_script(["mess", "age", "pack"]))
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], adapter)
        async with gateway(rt) as server:
            async with raw(server, subprotocols=["llmrt.v1.msgpack"]) as r:
                assert r.ws.subprotocol == "llmrt.v1.msgpack"
                assert isinstance(r.frames[0], bytes)
                hello = MSGPACK.decode_server(r.frames[0])
                assert isinstance(hello, HelloFrame) and hello.limits.max_frame_bytes == 1 << 20
                call = {"type": "call", "id": "m", "request": request_json(options())}
                request = msgspec.msgpack.encode(call)
                await r.ws.send_message(request)
                wire = await r.chunks_of("m")
            async with open_gateway_client(server.url, msgpack=True) as client:
                async with client.stream(options()) as call:
                    typed = [chunk async for chunk in call]
    assert typed == text_script(["mess", "age", "pack"])
    assert wire == [msgspec.msgpack.decode(msgspec.msgpack.encode(c)) for c in typed]


async def test_list_providers_models_and_resolve_model() -> None:
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["demo"], DemoAdapter())
        await rt.register_adapter(["p"], ScriptedAdapter([], models=("m1", "m2")))
        async with gateway(rt) as server, open_gateway_client(server.url) as client:
            assert await client.list_providers() == rt.list_providers()
            assert await client.list_models("p") == await rt.list_models("p")
            resolved = await client.resolve_model("demo", "demo-1")
            assert resolved == await rt.resolve_model_info("demo", "demo-1")
            assert resolved.reasoning is not None
            with pytest.raises(LlmError) as err:
                await client.list_models("nowhere")
            assert err.value.code == ErrorCode.NO_ADAPTER


# ---- the client's failure mapping ------------------------------------------------------------


async def test_client_maps_error_frames_and_a_lost_connection_to_finishes() -> None:
    async def fake(request: WebSocketRequest) -> None:
        ws = await request.accept(subprotocol="llmrt.v1")
        hello = HelloFrame(protocol="llmrt.v1", server="fake", limits=Limits().announce())
        await ws.send_message(JSON.encode(hello))
        first = JSON.decode_client(await ws.get_message())
        await ws.send_message(
            JSON.encode(ErrorFrame(code="RATE_LIMITED", message="slow", id=first.id))
        )
        second = JSON.decode_client(await ws.get_message())
        chunk = ChunkFrame(id=second.id, chunk=TextDelta(index=0, text="partial"))
        await ws.send_message(JSON.encode(chunk))
        await ws.aclose(1011)

    async with trio.open_nursery() as nursery:
        server = await nursery.start(serve_websocket, fake, "127.0.0.1", 0, None)
        async with open_gateway_client(f"ws://127.0.0.1:{server.port}/") as client:
            async with client.stream(options()) as call:
                first = [chunk async for chunk in call]
            async with client.stream(options()) as call:
                second = [chunk async for chunk in call]
            with pytest.raises(LlmError) as err:
                await client.list_providers()
        nursery.cancel_scope.cancel()
    assert last_code(first) == "RATE_LIMITED"
    assert second[0] == TextDelta(index=0, text="partial") and last_code(second) == "NETWORK"
    assert err.value.code == ErrorCode.NETWORK and client.close_code == 1011
