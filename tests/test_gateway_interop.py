"""The gateway speaks plain websockets: the same exchanges, driven by the `websockets` package.

Each exchange is a synchronous function using ``websockets.sync.client``
that runs in a worker thread while the gateway serves from the trio loop.
Every receive has a timeout, so a broken gateway fails the test instead of
hanging it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any, TypeVar

import msgspec
import pytest
import trio
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

import llmrt
from llmrt import BlockStart, GenerateOptions, TextDelta
from llmrt.actors.gateway import GatewayServer, Limits, serve_gateway
from llmrt.adapters.demo import DemoAdapter
from llmrt.adapters.scripted import ScriptedAdapter, Stall, text_script

TOKEN = "interop-token-123"
T = TypeVar("T")
LIMITS = Limits(shutdown_grace=0.2, close_timeout=2.0)


def options(provider: str) -> GenerateOptions:
    return GenerateOptions(
        provider=provider, model="m", messages=(llmrt.user_message("interop please"),)
    )


def request_json(provider: str) -> Any:
    return json.loads(llmrt.encode(options(provider)))


@asynccontextmanager
async def gateway(**kw: Any) -> AsyncIterator[tuple[GatewayServer, ScriptedAdapter]]:
    stalled = ScriptedAdapter(
        [BlockStart(index=0, block_type="text"), TextDelta(index=0, text="a"), Stall()]
    )
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["demo"], DemoAdapter())
        await rt.register_adapter(["stall"], stalled)
        await rt.register_adapter(["ok"], ScriptedAdapter(text_script(["o", "k"])))
        async with trio.open_nursery() as nursery:
            server = await nursery.start(partial(serve_gateway, rt, limits=LIMITS, **kw))
            try:
                yield server, stalled
            finally:
                nursery.cancel_scope.cancel()


async def in_thread(fn: Callable[[], T]) -> T:
    return await trio.to_thread.run_sync(fn)


def open_ws(server: GatewayServer, **kw: Any) -> ClientConnection:
    return connect(server.url, proxy=None, open_timeout=5, compression=None, **kw)


def recv(ws: ClientConnection) -> Any:
    data = ws.recv(timeout=5)
    return msgspec.msgpack.decode(data) if isinstance(data, bytes) else json.loads(data)


def chunks_of(ws: ClientConnection, cid: str) -> list[Any]:
    out: list[Any] = []
    while not out or out[-1]["type"] != "finish":
        frame = recv(ws)
        if frame.get("id") == cid:
            out += [frame["chunk"]] if frame["type"] == "chunk" else frame["chunks"]
    return out


async def test_hello_and_a_call_with_its_chunks_and_finish() -> None:
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["demo"], DemoAdapter())
        async with rt.stream(options("demo")) as call:
            local = [json.loads(llmrt.encode(chunk)) async for chunk in call]

    def exchange(server: GatewayServer) -> tuple[Any, list[Any], str | None]:
        with open_ws(server, subprotocols=["llmrt.v1"]) as ws:
            hello = recv(ws)
            ws.send(json.dumps({"type": "call", "id": "i1", "request": request_json("demo")}))
            return hello, chunks_of(ws, "i1"), ws.subprotocol

    async with gateway() as (server, _):
        hello, wire, subprotocol = await in_thread(partial(exchange, server))
    assert hello["type"] == "hello" and hello["protocol"] == "llmrt.v1"
    assert hello["limits"]["maxFrameBytes"] == LIMITS.max_frame_bytes
    assert subprotocol == "llmrt.v1"
    assert wire == local and wire[-1]["reason"] == {"kind": "stop"}


async def test_abort_ends_the_call_and_closes_its_upstream() -> None:
    def exchange(server: GatewayServer) -> list[Any]:
        with open_ws(server) as ws:
            recv(ws)
            ws.send(json.dumps({"type": "call", "id": "a", "request": request_json("stall")}))
            first = recv(ws)
            assert first["id"] == "a"
            ws.send(json.dumps({"type": "abort", "id": "a"}))
            return chunks_of(ws, "a")

    async with gateway() as (server, stalled):
        chunks = await in_thread(partial(exchange, server))
        assert stalled.open_streams == 0 and len(stalled.closed_at) == 1
    assert chunks[-1]["reason"]["kind"] == "aborted"
    assert chunks[-1]["reason"]["failure"]["code"] == "ABORTED"


async def test_malformed_frame_gets_an_error_and_the_connection_lives_on() -> None:
    def exchange(server: GatewayServer) -> tuple[Any, Any, list[Any]]:
        with open_ws(server) as ws:
            recv(ws)
            ws.send("{not json")
            bad = recv(ws)
            ws.send(json.dumps({"type": "call", "id": "x", "request": {"model": "m"}}))
            invalid = recv(ws)
            ws.send(json.dumps({"type": "call", "id": "ok", "request": request_json("ok")}))
            return bad, invalid, chunks_of(ws, "ok")

    async with gateway() as (server, _):
        bad, invalid, chunks = await in_thread(partial(exchange, server))
    assert bad["type"] == "error" and bad["code"] == "BAD_FRAME" and "id" not in bad
    assert "malformed JSON" in bad["message"]
    assert (invalid["code"], invalid["id"]) == ("INVALID_REQUEST", "x")
    assert "$.request" in invalid["message"]
    assert chunks[-1]["reason"] == {"kind": "stop"}


async def test_auth_header_and_subprotocol_token() -> None:
    def refused(server: GatewayServer, headers: dict[str, str]) -> int:
        with pytest.raises(InvalidStatus) as err, open_ws(server, additional_headers=headers):
            pass
        status: int = err.value.response.status_code
        return status

    def accepted(server: GatewayServer, **kw: Any) -> tuple[Any, str | None, list[Any]]:
        with open_ws(server, **kw) as ws:
            hello = recv(ws)
            frame = {"type": "call", "id": "t", "request": request_json("ok")}
            binary = ws.subprotocol == "llmrt.v1.msgpack"
            ws.send(msgspec.msgpack.encode(frame) if binary else json.dumps(frame))
            return hello, ws.subprotocol, chunks_of(ws, "t")

    async with gateway(token=TOKEN) as (server, _):
        assert await in_thread(partial(refused, server, {})) == 401
        wrong = {"Authorization": "Bearer nope"}
        assert await in_thread(partial(refused, server, wrong)) == 401
        header = {"Authorization": f"Bearer {TOKEN}"}
        hello, sub, chunks = await in_thread(partial(accepted, server, additional_headers=header))
        assert hello["type"] == "hello" and sub is None
        assert chunks[-1]["reason"] == {"kind": "stop"}
        offered = [f"llmrt.bearer.{TOKEN}", "llmrt.v1.msgpack"]
        hello, sub, chunks = await in_thread(partial(accepted, server, subprotocols=offered))
        assert sub == "llmrt.v1.msgpack" and hello["type"] == "hello"
        assert chunks[-1]["reason"] == {"kind": "stop"}


async def test_shutdown_closes_with_1001_after_an_aborted_finish() -> None:
    def exchange(server: GatewayServer, started: Callable[[], None]) -> tuple[list[Any], int]:
        with open_ws(server) as ws:
            recv(ws)
            ws.send(json.dumps({"type": "call", "id": "s", "request": request_json("stall")}))
            recv(ws)
            started()
            chunks = chunks_of(ws, "s")
            with pytest.raises(ConnectionClosed) as closed:
                recv(ws)
            assert closed.value.rcvd is not None
            return chunks, closed.value.rcvd.code

    async with gateway() as (server, _):
        token = trio.lowlevel.current_trio_token()

        def started() -> None:
            trio.from_thread.run_sync(lambda: nursery.start_soon(server.aclose), trio_token=token)

        async with trio.open_nursery() as nursery:
            chunks, code = await in_thread(partial(exchange, server, started))
    assert chunks[-1]["reason"]["failure"]["code"] == "ABORTED"
    assert code == 1001
