"""Through the gateway to a real provider socket: abort and disconnect close the upstream.

The chain is the whole product: a websocket client, the gateway, a call
actor, the OpenAI-compatible adapter over httpx, and the local upstream
server on loopback, which records when the provider connection closed.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

import trio
from trio_websocket import open_websocket_url

import llmrt
from llmrt import Finish, FinishAborted, GenerateOptions
from llmrt.actors.gateway import GatewayServer, Limits, serve_gateway
from llmrt.actors.gateway.client import open_gateway_client
from llmrt.adapters.openai_chat import OpenAIChatAdapter
from llmrt.testing import SSEScript, Upstream, open_upstream, openai_events

REQUEST = GenerateOptions(provider="p", model="m", messages=(llmrt.user_message("hi"),))


@asynccontextmanager
async def chain() -> AsyncIterator[tuple[Upstream, GatewayServer]]:
    script = SSEScript(events=openai_events(["one", "two", "three"]), stall_after=3)
    async with open_upstream(script) as upstream, llmrt.open_runtime() as rt:
        adapter = OpenAIChatAdapter(
            base_url=upstream.base_url, api_key_env="K", environ={"K": "sk-test-key-1"}
        )
        await rt.register_adapter(["p"], adapter)
        async with trio.open_nursery() as nursery:
            server = await nursery.start(
                partial(serve_gateway, rt, limits=Limits(shutdown_grace=0.2))
            )
            try:
                yield upstream, server
            finally:
                nursery.cancel_scope.cancel()


async def test_abort_frame_closes_the_provider_connection() -> None:
    async with chain() as (upstream, server), open_gateway_client(server.url) as client:
        with trio.fail_after(10):
            async with client.stream(REQUEST) as call:
                chunks = []
                async for chunk in call:
                    chunks.append(chunk)
                    if isinstance(chunk, llmrt.TextDelta):
                        call.abort()
            record = await upstream.wait_connection_closed(0)
    last = chunks[-1]
    assert isinstance(last, Finish) and isinstance(last.reason, FinishAborted)
    assert record.closed_by == "client"
    assert not record.completed  # the stalled response never finished: the abort cut it


async def test_client_disconnect_mid_call_closes_the_provider_connection() -> None:
    async with chain() as (upstream, server):
        with trio.fail_after(10):
            async with open_websocket_url(server.url, subprotocols=["llmrt.v1"]) as ws:
                await ws.get_message()  # hello
                frame = {"type": "call", "id": "a", "request": json.loads(llmrt.encode(REQUEST))}
                await ws.send_message(json.dumps(frame))
                await upstream.wait_request(0)
                await ws.get_message()  # the first chunks are flowing
            # The websocket is gone (closed without aborting): the gateway must
            # cancel the call, and the call must close the provider socket.
            record = await upstream.wait_connection_closed(0)
    assert record.closed_by == "client"
    assert not record.completed
