"""Shared pieces of the provider-API translation tests: chunk scripts, SSE parsing, SDK clients.

The SDK clients are the real ``openai`` and ``anthropic`` clients over an
in-memory transport (``httpx2.MockTransport``, the HTTP library both SDKs
use): the handler sees the request the SDK built and answers with the bytes
llmrt's encoder wrote, so the SDK's own parser and accumulator read them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import msgspec
from _sdks import anthropic, httpx2, openai

from llmrt import (
    BlockAssembler,
    BlockEnd,
    BlockStart,
    ErrorCode,
    Finish,
    FinishError,
    FinishMaxTokens,
    FinishStop,
    FinishToolCalls,
    LlmFailure,
    ReasoningBlock,
    ReasoningDelta,
    ReplayEnvelope,
    StreamChunk,
    TextBlock,
    TextDelta,
    TokenUsage,
    ToolCallBlock,
    ToolCallDelta,
    UsageChunk,
)

ARGUMENTS = '{"city": "Paris"}'
USAGE = TokenUsage(
    input_tokens=100,
    output_tokens=30,
    cache_read_tokens=50,
    cache_write_tokens=10,
    reasoning_tokens=5,
)


def tool_script(replay: ReplayEnvelope | None = None) -> list[StreamChunk]:
    """Reasoning, text, one tool call (arguments in two fragments), usage, a tool-calls finish."""
    return [
        BlockStart(index=0, block_type="reasoning"),
        ReasoningDelta(index=0, text="Let me "),
        ReasoningDelta(index=0, text="think."),
        BlockEnd(index=0, block=ReasoningBlock(text="Let me think.")),
        BlockStart(index=1, block_type="text"),
        TextDelta(index=1, text="Checking"),
        TextDelta(index=1, text=" the weather."),
        BlockEnd(index=1, block=TextBlock(text="Checking the weather.")),
        BlockStart(index=2, block_type="tool-call"),
        ToolCallDelta(index=2, id="call_1", name="get_weather", arguments_delta='{"city":'),
        ToolCallDelta(index=2, arguments_delta=' "Paris"}'),
        BlockEnd(
            index=2, block=ToolCallBlock(id="call_1", name="get_weather", arguments=ARGUMENTS)
        ),
        UsageChunk(usage=USAGE),
        Finish(reason=FinishToolCalls(), replay_state=replay),
    ]


def text_script(finish: Any = None) -> list[StreamChunk]:
    """One text block in two deltas, usage, a stop (or the given) finish."""
    return [
        BlockStart(index=0, block_type="text"),
        TextDelta(index=0, text="Hello"),
        TextDelta(index=0, text=" there"),
        BlockEnd(index=0, block=TextBlock(text="Hello there")),
        UsageChunk(usage=TokenUsage(input_tokens=7, output_tokens=2)),
        Finish(reason=finish if finish is not None else FinishStop()),
    ]


def length_script() -> list[StreamChunk]:
    """Text cut by the output cap: a max-tokens finish."""
    return text_script(FinishMaxTokens())


RATE_LIMITED = LlmFailure(
    message="the provider is rate limiting", code=ErrorCode.RATE_LIMIT, provider_retry_after_ms=1500
)


def failing_script() -> list[StreamChunk]:
    """Text, then the call fails (after the stream started)."""
    return [
        BlockStart(index=0, block_type="text"),
        TextDelta(index=0, text="Hel"),
        Finish(reason=FinishError(failure=RATE_LIMITED)),
    ]


def assembled(script: Iterable[StreamChunk]) -> BlockAssembler:
    assembler = BlockAssembler()
    for chunk in script:
        assembler.push(chunk)
    return assembler


def encode_all(encoder: Any, script: Iterable[StreamChunk]) -> bytes:
    return b"".join(encoder.push(chunk) for chunk in script)


def sse_events(body: bytes) -> list[tuple[str | None, bytes]]:
    """``(event name, data)`` of each server-sent event of ``body`` (LF framing, as written)."""
    events: list[tuple[str | None, bytes]] = []
    assert body.endswith(b"\n\n"), body[-40:]
    for block in body[:-2].split(b"\n\n"):
        name: str | None = None
        data: list[bytes] = []
        for line in block.split(b"\n"):
            if line.startswith(b"event: "):
                name = line[7:].decode()
            elif line.startswith(b"data: "):
                data.append(line[6:])
            else:
                assert line.startswith(b":"), line  # only comments otherwise
        if data:
            events.append((name, b"\n".join(data)))
    return events


def payloads(body: bytes) -> list[Any]:
    """The JSON data of every event of ``body`` (``[DONE]`` as the string)."""
    return [
        data.decode() if data == b"[DONE]" else msgspec.json.decode(data)
        for _, data in sse_events(body)
    ]


Handler = Callable[[httpx2.Request], httpx2.Response]


def sse_response(body: bytes) -> httpx2.Response:
    return httpx2.Response(
        200, content=body, headers={"content-type": "text/event-stream; charset=utf-8"}
    )


def json_response(body: bytes, status: int = 200, headers: Any = ()) -> httpx2.Response:
    return httpx2.Response(
        status, content=body, headers=[("content-type", "application/json"), *headers]
    )


def openai_client(handler: Handler) -> openai.OpenAI:
    transport = httpx2.MockTransport(handler)
    return openai.OpenAI(
        api_key="llmrt-token",
        base_url="http://gateway.test/v1",
        http_client=httpx2.Client(transport=transport),
        max_retries=0,
    )


def anthropic_client(handler: Handler) -> anthropic.Anthropic:
    transport = httpx2.MockTransport(handler)
    return anthropic.Anthropic(
        api_key="llmrt-token",
        base_url="http://gateway.test",
        http_client=httpx2.Client(transport=transport),
        max_retries=0,
    )


class Capture:
    """A handler that records the request body and answers with a fixed response."""

    def __init__(self, answer: Callable[[bytes], httpx2.Response]) -> None:
        self.bodies: list[bytes] = []
        self._answer = answer

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        body = request.read()
        self.bodies.append(body)
        return self._answer(body)
