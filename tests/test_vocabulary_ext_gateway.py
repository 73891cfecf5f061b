"""Registered blocks, sources and finish reasons through the runtime and the websocket gateway.

A call frame whose request carries an extension block reaches the adapter
intact; chunks carrying extensions reach the client intact; an assistant
message holding an extension block goes back to the same adapter (replay).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

import pytest
import trio
from _vocab_kinds import AUDIO, AgentSource, AudioBlock, FinishContentFilter, QuoteBlock

import llmrt
from llmrt import (
    BlockAssembler,
    BlockEnd,
    BlockStart,
    Finish,
    GenerateOptions,
    Message,
    ModelSource,
    ReplayEnvelope,
    StreamChunk,
    TextBlock,
    TextDelta,
    ToolResultBlock,
    UsageChunk,
)
from llmrt.actors.gateway import GatewayServer, Limits, serve_gateway
from llmrt.actors.gateway.client import open_gateway_client
from llmrt.adapters.scripted import ScriptedAdapter

QUOTE = QuoteBlock(author="ada", content=(AUDIO,))
SCRIPT: list[StreamChunk] = [
    BlockStart(index=0, block_type="text"),
    TextDelta(index=0, text="a clip: "),
    BlockStart(index=1, block_type="audio"),
    BlockEnd(index=1, block=AUDIO),
    BlockEnd(index=2, block=QUOTE),
    UsageChunk(usage=llmrt.TokenUsage(input_tokens=3, output_tokens=4)),
    Finish(
        reason=FinishContentFilter(category="none"),
        replay_state=ReplayEnvelope(response={"id": "r1"}, blocks=(None, "audio-1", None)),
    ),
]


def request(*messages: Message) -> GenerateOptions:
    return GenerateOptions(provider="p", model="m", messages=messages)


def user_turn() -> Message:
    return Message(
        id="msg_user",
        role="user",
        content=(
            TextBlock(text="what do you hear?"),
            AUDIO,
            ToolResultBlock(tool_call_id="c1", content=(QUOTE,)),
        ),
        source=AgentSource(agent="planner"),
    )


@asynccontextmanager
async def gateway(rt: llmrt.LlmRuntime) -> AsyncIterator[GatewayServer]:
    async with trio.open_nursery() as nursery:
        limits = Limits(shutdown_grace=0.2, close_timeout=2.0)
        server = await nursery.start(partial(serve_gateway, rt, limits=limits))
        try:
            yield server
        finally:
            nursery.cancel_scope.cancel()


@pytest.mark.parametrize("msgpack", [False, True], ids=["json", "msgpack"])
async def test_gateway_keeps_extension_kinds_in_requests_and_chunks(msgpack: bool) -> None:
    adapter = ScriptedAdapter(script=SCRIPT)
    options = request(user_turn())
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], adapter)
        async with (
            gateway(rt) as server,
            open_gateway_client(server.url, msgpack=msgpack) as client,
        ):
            async with client.stream(options) as call:
                chunks = [chunk async for chunk in call]
    # The call frame's request reached the adapter intact, extension types included.
    (received,) = adapter.requests
    assert received == options
    got = received.messages[0]
    assert type(got.source) is AgentSource
    assert type(got.content[1]) is AudioBlock
    assert type(got.content[2].content[0]) is QuoteBlock  # type: ignore[union-attr]
    # Chunks carrying extensions reached the client intact.
    assert chunks == SCRIPT
    assert type(chunks[3].block) is AudioBlock  # type: ignore[union-attr]
    assert type(chunks[-1]) is Finish and type(chunks[-1].reason) is FinishContentFilter


async def test_an_assistant_message_with_an_extension_block_goes_back_to_its_adapter() -> None:
    adapter = ScriptedAdapter(script=SCRIPT)
    first = request(user_turn())
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], adapter)
        async with gateway(rt) as server, open_gateway_client(server.url) as client:
            assembler = BlockAssembler()
            async with client.stream(first) as call:
                async for chunk in call:
                    assembler.push(chunk)
            answer = assembler.message(
                ModelSource(provider="p", model="m", replay_state=assembler.replay_state)
            )
            # The host stores the conversation as JSON and loads it back.
            stored = llmrt.decode_message(llmrt.encode(answer))
            assert stored == answer
            follow_up = request(user_turn(), stored, llmrt.user_message("and now?"))
            async with client.stream(follow_up) as call:
                assert [chunk async for chunk in call][-1] == SCRIPT[-1]
        # The same again in process, without the gateway.
        async with rt.stream(follow_up) as call:
            async for _ in call:
                pass
    assert len(adapter.requests) == 3
    for replayed in adapter.requests[1:]:
        back = replayed.messages[1]
        assert back == answer
        assert back.content == (TextBlock(text="a clip: "), AUDIO, QUOTE)
        assert type(back.content[1]) is AudioBlock and type(back.content[2]) is QuoteBlock
        assert back.source == ModelSource(
            provider="p",
            model="m",
            replay_state=ReplayEnvelope(response={"id": "r1"}, blocks=(None, "audio-1", None)),
        )
