"""What the HTTP adapters put on the wire, as the local upstream received it, field by field."""

from __future__ import annotations

import base64
import json

import llmrt
from llmrt import (
    GenerateOptions,
    ImageBlock,
    Message,
    ModelSource,
    ReasoningBlock,
    ReplayEnvelope,
    TextBlock,
    ToolCallBlock,
    ToolSchema,
)
from llmrt.adapters.anthropic import AnthropicAdapter
from llmrt.adapters.openai_chat import OpenAIChatAdapter
from llmrt.testing import SSEScript, anthropic_events, open_upstream, openai_events

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n fake").decode()
WEATHER = ToolSchema(
    name="get_weather",
    description="Weather for a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)

#: A thinking block's signature as the Anthropic adapter's replay state: one
#: entry per block of the assistant message below.
ENVELOPE = ReplayEnvelope(response={"id": "msg_1"}, blocks=({"signature": "sig-abc"}, None, None))


def conversation(provider: str, replay: ReplayEnvelope | None = None) -> tuple[Message, ...]:
    assistant = Message(
        id="m2",
        role="assistant",
        content=(
            ReasoningBlock(text="The user wants weather."),
            TextBlock(text="Let me check."),
            ToolCallBlock(id="call_1", name="get_weather", arguments='{"city": "Paris"}'),
        ),
        source=ModelSource(provider=provider, model="m", replay_state=replay),
    )
    return (
        llmrt.user_message(
            (TextBlock(text="Weather in Paris?"), ImageBlock(media_type="image/png", data=PNG)),
            id="m1",
        ),
        assistant,
        llmrt.tool_result_message("call_1", "18 C, sunny", tool="get_weather", id="m3"),
    )


async def test_openai_request_body_field_by_field() -> None:
    options = GenerateOptions(
        provider="openai",
        model="gpt-4o",
        system="Be brief.",
        messages=conversation("openai"),
        tools=(WEATHER,),
        temperature=0.3,
        max_tokens=256,
        stop=("END",),
    )
    async with open_upstream(SSEScript(events=openai_events(["ok"]))) as upstream:
        adapter = OpenAIChatAdapter(
            preset="openai", base_url=upstream.base_url, environ={"OPENAI_API_KEY": "sk-test-1234"}
        )
        async with llmrt.open_runtime() as rt:
            await rt.register_adapter(["openai"], adapter)
            async with rt.stream(options) as call:
                [chunk async for chunk in call]
        request = upstream.requests[0]
        body = json.loads(request.body)
    assert request.headers["authorization"] == "Bearer sk-test-1234"
    assert request.headers["user-agent"] == llmrt.adapter.attribution_headers()["User-Agent"]
    assert request.headers["content-type"] == "application/json"
    assert request.path == "/chat/completions"
    assert body["model"] == "gpt-4o"
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["temperature"] == 0.3
    assert body["max_tokens"] == 256
    assert body["stop"] == ["END"]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather for a city",
                "parameters": WEATHER.parameters,
            },
        }
    ]
    system, user, assistant, tool = body["messages"]
    assert system == {"role": "system", "content": "Be brief."}
    assert user["role"] == "user"
    assert user["content"][0] == {"type": "text", "text": "Weather in Paris?"}
    assert user["content"][1]["type"] == "image_url"
    assert user["content"][1]["image_url"]["url"] == f"data:image/png;base64,{PNG}"
    assert assistant["role"] == "assistant"
    assert assistant["content"] == "Let me check."
    assert assistant["tool_calls"] == [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
        }
    ]
    assert "reasoning_content" not in assistant  # OpenAI takes no reasoning back
    assert tool == {"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"}


async def test_deepseek_body_returns_reasoning_on_tool_turns_and_placeholders_images() -> None:
    options = GenerateOptions(
        provider="deepseek", model="deepseek-chat", messages=conversation("deepseek")
    )
    async with open_upstream(SSEScript(events=openai_events(["ok"]))) as upstream:
        adapter = OpenAIChatAdapter(
            preset="deepseek-official",
            base_url=upstream.base_url,
            environ={"DEEPSEEK_API_KEY": "sk-test-1234"},
        )
        async with llmrt.open_runtime() as rt:
            await rt.register_adapter(["deepseek"], adapter)
            async with rt.stream(options) as call:
                [chunk async for chunk in call]
        body = json.loads(upstream.requests[0].body)
    user, assistant, _tool = body["messages"]
    # deepseek-chat takes no images: the runtime sends a deterministic per-image
    # placeholder instead (before the request reaches the adapter).
    image = ImageBlock(media_type="image/png", data=PNG)
    assert user["content"] == [
        {"type": "text", "text": "Weather in Paris?"},
        {"type": "text", "text": llmrt.images.image_placeholder(image)},
    ]
    assert assistant["reasoning_content"] == "The user wants weather."
    assert body["max_tokens"] == 4_096  # the model's default output cap, materialized


async def test_anthropic_body_field_by_field_with_replayed_thinking() -> None:
    envelope = ReplayEnvelope(
        response={"id": "msg_1"}, blocks=({"signature": "sig-abc"}, None, None)
    )
    options = GenerateOptions(
        provider="anthropic",
        model="claude-sonnet-4-5",
        system="Be brief.",
        messages=conversation("anthropic", envelope),
        tools=(WEATHER,),
        temperature=0.3,
        max_tokens=512,
        stop=("END",),
    )
    async with open_upstream(SSEScript(events=anthropic_events(["ok"]))) as upstream:
        adapter = AnthropicAdapter(
            base_url=upstream.base_url, environ={"ANTHROPIC_API_KEY": "sk-ant-test-1234"}
        )
        async with llmrt.open_runtime() as rt:
            await rt.register_adapter(["anthropic"], adapter)
            async with rt.stream(options) as call:
                [chunk async for chunk in call]
        request = upstream.requests[0]
        body = json.loads(request.body)
    assert request.path == "/v1/messages"
    assert request.headers["x-api-key"] == "sk-ant-test-1234"
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in request.headers
    assert body["model"] == "claude-sonnet-4-5"
    assert body["system"] == "Be brief."
    assert body["max_tokens"] == 512
    assert body["temperature"] == 0.3
    assert body["stop_sequences"] == ["END"]
    assert body["stream"] is True
    assert body["tools"] == [
        {
            "name": "get_weather",
            "description": "Weather for a city",
            "input_schema": WEATHER.parameters,
        }
    ]
    user, assistant, tool = body["messages"]
    assert user["role"] == "user"
    assert user["content"][0] == {"type": "text", "text": "Weather in Paris?"}
    assert user["content"][1] == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": PNG},
    }
    assert assistant["role"] == "assistant"
    assert assistant["content"] == [
        {"type": "thinking", "thinking": "The user wants weather.", "signature": "sig-abc"},
        {"type": "text", "text": "Let me check."},
        {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}},
    ]
    assert tool["role"] == "user"
    assert tool["content"][0]["type"] == "tool_result"
    assert tool["content"][0]["tool_use_id"] == "call_1"


async def test_replay_state_of_another_adapter_never_reaches_anthropic() -> None:
    envelope = ReplayEnvelope(
        response={"id": "msg_1"}, blocks=({"signature": "sig-abc"}, None, None)
    )
    # The history's assistant message came from "other", served by another adapter.
    options = GenerateOptions(
        provider="anthropic",
        model="claude-sonnet-4-5",
        messages=conversation("other", envelope),
    )
    async with open_upstream(SSEScript(events=anthropic_events(["ok"]))) as upstream:
        adapter = AnthropicAdapter(
            base_url=upstream.base_url, environ={"ANTHROPIC_API_KEY": "sk-ant-test-1234"}
        )
        other = AnthropicAdapter(
            base_url=upstream.base_url, environ={"ANTHROPIC_API_KEY": "sk-ant-test-1234"}
        )
        async with llmrt.open_runtime() as rt:
            await rt.register_adapter(["anthropic"], adapter)
            await rt.register_adapter(["other"], other)
            async with rt.stream(options) as call:
                [chunk async for chunk in call]
        body = json.loads(upstream.requests[0].body)
    assistant = body["messages"][1]
    assert all(block["type"] != "thinking" for block in assistant["content"])
