"""Every ``tool-call-delta`` carries its call id, from every source (issue 21, finding 11).

The HTTP adapters put the id on every fragment (`BlockTracker`); the demo
adapter and the gateway's delta splitter put it on the first only, so a
client that reads a fragment alone could not tell which call it belongs to.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

import trio

import llmrt
from llmrt import (
    BlockEnd,
    BlockStart,
    Finish,
    FinishToolCalls,
    GenerateOptions,
    StreamChunk,
    ToolCallBlock,
    ToolCallDelta,
    ToolSchema,
)
from llmrt.actors.gateway import GatewayServer, Limits, serve_gateway
from llmrt.actors.gateway.client import open_gateway_client
from llmrt.adapters.demo import DemoAdapter
from llmrt.adapters.scripted import ScriptedAdapter

TOOL = ToolSchema(name="lookup", description="Look it up.", parameters={"type": "object"})


def tool_deltas(chunks: list[StreamChunk]) -> list[ToolCallDelta]:
    return [chunk for chunk in chunks if type(chunk) is ToolCallDelta]


@asynccontextmanager
async def gateway(rt: llmrt.LlmRuntime) -> AsyncIterator[GatewayServer]:
    async with trio.open_nursery() as nursery:
        limits = Limits(shutdown_grace=0.2, close_timeout=2.0)
        server = await nursery.start(partial(serve_gateway, rt, limits=limits))
        try:
            yield server
        finally:
            nursery.cancel_scope.cancel()


async def test_the_demo_puts_the_call_id_on_every_fragment() -> None:
    options = GenerateOptions(
        provider="demo",
        model="demo-1",
        messages=(llmrt.user_message("a prompt long enough for several fragments"),),
        tools=(TOOL,),
    )
    with trio.fail_after(10):
        async with llmrt.open_runtime() as rt:
            await rt.register_adapter(["demo"], DemoAdapter(tokens_per_second=None))
            async with rt.stream(options) as call:
                chunks = [chunk async for chunk in call]
    deltas = tool_deltas(chunks)
    assert len(deltas) > 1
    (end,) = [c for c in chunks if type(c) is BlockEnd and type(c.block) is ToolCallBlock]
    assert isinstance(end.block, ToolCallBlock)
    assert all(delta.id == end.block.id for delta in deltas), deltas
    # The name stays once, on the first fragment.
    assert [delta.name for delta in deltas] == ["lookup"] + [None] * (len(deltas) - 1)


async def test_a_tool_call_delta_cut_by_the_gateway_keeps_its_id_on_every_piece() -> None:
    arguments = '{"q": "' + "a" * 200_000 + '"}'
    script: list[StreamChunk] = [
        BlockStart(index=0, block_type="tool-call"),
        ToolCallDelta(index=0, id="call_7", name="search", arguments_delta=arguments),
        BlockEnd(index=0, block=ToolCallBlock(id="call_7", name="search", arguments=arguments)),
        Finish(reason=FinishToolCalls()),
    ]
    options = GenerateOptions(provider="big", model="m", messages=(llmrt.user_message("go"),))
    with trio.fail_after(30):
        async with llmrt.open_runtime() as rt:
            await rt.register_adapter(["big"], ScriptedAdapter(script))
            async with gateway(rt) as server:
                # Real loopback; the client announces a small frame limit, so the gateway cuts.
                async with (
                    open_gateway_client(server.url, max_frame_bytes=16 * 1024) as client,
                    client.stream(options) as call,
                ):
                    chunks = [chunk async for chunk in call]
    deltas = tool_deltas(chunks)
    assert len(deltas) > 10, "the gateway cut the delta"
    assert "".join(delta.arguments_delta for delta in deltas) == arguments
    assert all(delta.id == "call_7" for delta in deltas), [d.id for d in deltas[:3]]
    assert [delta.name for delta in deltas] == ["search"] + [None] * (len(deltas) - 1)
