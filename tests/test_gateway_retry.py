"""Retried calls through the gateway: how attempts appear on the wire and in the client."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import trio
from trio_websocket import open_websocket_url

import llmrt
from llmrt import (
    AttemptChunk,
    ErrorCode,
    Finish,
    FinishStop,
    GenerateOptions,
    LlmError,
    NormalRetryPolicy,
    RetryScheduled,
)
from llmrt.actors.gateway import GatewayServer, Limits, serve_gateway
from llmrt.actors.gateway.client import open_gateway_client
from llmrt.adapters.scripted import Raise, ScriptedAdapter, text_script

FAST = NormalRetryPolicy(initial_delay_ms=5, max_delay_ms=5, jitter_ratio=0)
REQUEST = GenerateOptions(provider="p", model="m", messages=(llmrt.user_message("hi"),))


def flaky(failures: int) -> ScriptedAdapter:
    def script(request: GenerateOptions) -> list[Any]:
        if len(adapter.requests) <= failures:
            return [*text_script(["part"])[:2], Raise(LlmError(ErrorCode.OVERLOADED, "busy"))]
        return text_script(["fine"])

    adapter = ScriptedAdapter(script, retry_policy=FAST)
    return adapter


def chunks_of(frame: dict[str, Any]) -> list[dict[str, Any]]:
    if frame["type"] == "chunk":
        return [frame["chunk"]]
    return list(frame.get("chunks", []))


def call_frame(id: str, request: Any) -> dict[str, Any]:
    return {"type": "call", "id": id, "request": request}


@asynccontextmanager
async def served(adapter: ScriptedAdapter) -> AsyncIterator[GatewayServer]:
    async with llmrt.open_runtime() as rt, trio.open_nursery() as nursery:
        await rt.register_adapter(["p"], adapter)
        server = await nursery.start(partial(serve_gateway, rt, limits=Limits(shutdown_grace=0.2)))
        try:
            yield server
        finally:
            nursery.cancel_scope.cancel()


async def test_client_sees_each_attempt_and_the_final_answer() -> None:
    async with served(flaky(2)) as server, open_gateway_client(server.url) as client:
        with trio.fail_after(10):
            async with client.stream_with_retry(REQUEST) as call:
                events = [event async for event in call]
    retries = [e for e in events if isinstance(e, RetryScheduled)]
    assert [(r.attempt, r.failure.code, r.delay_ms) for r in retries] == [
        (1, ErrorCode.OVERLOADED, 5),
        (2, ErrorCode.OVERLOADED, 5),
    ]
    last = events[-1]
    assert isinstance(last, AttemptChunk) and last.attempt == 3
    assert isinstance(last.chunk, Finish) and last.chunk.reason == FinishStop()
    assembler = llmrt.BlockAssembler()
    for event in events:
        if isinstance(event, AttemptChunk) and event.attempt == 3:
            assembler.push(event.chunk)
    assert assembler.blocks() == (llmrt.TextBlock(text="fine"),)


async def test_attempts_on_the_wire() -> None:
    frames: list[dict[str, Any]] = []
    async with served(flaky(1)) as server:
        async with open_websocket_url(server.url, subprotocols=["llmrt.v1"]) as ws:
            json.loads(await ws.get_message())  # hello
            call = {"type": "call", "id": "r1", "request": json.loads(llmrt.encode(REQUEST))}
            await ws.send_message(json.dumps({**call, "retry": True}))
            with trio.fail_after(10):
                while True:
                    frame = json.loads(await ws.get_message())
                    frames.append(frame)
                    chunks = (
                        [frame["chunk"]] if frame["type"] == "chunk" else frame.get("chunks", [])
                    )
                    if any(c["type"] == "finish" for c in chunks):
                        break
    retry = next(f for f in frames if f["type"] == "retry")
    assert retry == {
        "type": "retry",
        "id": "r1",
        "attempt": 1,
        "failure": {"message": "busy", "code": "OVERLOADED"},
        "delayMs": 5,
    }
    at = frames.index(retry)
    assert all(f["attempt"] == 1 for f in frames[:at])
    assert all(f["attempt"] == 2 for f in frames[at + 1 :])


async def test_an_explicit_policy_in_the_call_frame_and_a_bad_one() -> None:
    async with served(flaky(5)) as server:
        async with open_websocket_url(server.url, subprotocols=["llmrt.v1"]) as ws:
            json.loads(await ws.get_message())
            request = json.loads(llmrt.encode(REQUEST))
            bad = {"mode": "normal", "jitterRatio": 3}
            await ws.send_message(
                json.dumps({"type": "call", "id": "x", "request": request, "retry": bad})
            )
            error = json.loads(await ws.get_message())
            assert error["type"] == "error"
            assert "$.retry.jitterRatio" in error["message"]
            one = {"mode": "normal", "maxRetries": 1, "initialDelayMs": 1, "jitterRatio": 0}
            await ws.send_message(
                json.dumps({"type": "call", "id": "y", "request": request, "retry": one})
            )
            kinds = []
            with trio.fail_after(10):
                while True:
                    frame = json.loads(await ws.get_message())
                    kinds.append(frame["type"])
                    chunks = (
                        [frame["chunk"]] if frame["type"] == "chunk" else frame.get("chunks", [])
                    )
                    finish = next((c for c in chunks if c["type"] == "finish"), None)
                    if finish is not None:
                        break
    assert kinds.count("retry") == 1  # maxRetries 1: two attempts, then the failure is final
    assert finish["reason"]["kind"] == "error"
    assert finish["reason"]["failure"]["code"] == "OVERLOADED"
