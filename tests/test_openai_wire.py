"""The OpenAI/DeepSeek wire translation: stream decoding and request bodies."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import msgspec
import pytest

import llmrt
from llmrt import (
    BlockAssembler,
    BlockEnd,
    BlockStart,
    ErrorCode,
    Finish,
    FinishError,
    FinishStop,
    FinishToolCalls,
    GenerateOptions,
    ImageBlock,
    LlmError,
    Message,
    ModelSource,
    ReasoningBlock,
    ReasoningDelta,
    StreamChunk,
    TextBlock,
    TextDelta,
    ToolCallBlock,
    ToolCallDelta,
    ToolSchema,
    UsageChunk,
)
from llmrt.adapters._openai_wire import OpenAIStreamDecoder, build_openai_body
from llmrt.images import image_placeholder

WIRE = pathlib.Path(__file__).parent / "wire"
EXPECTED: dict[str, Any] = json.loads((WIRE / "expected.json").read_text())
TRANSCRIPTS = sorted(name for name, case in EXPECTED.items() if case["provider"] != "anthropic")


def data_payloads(name: str) -> list[bytes]:
    """The ``data:`` payloads of a transcript (comments dropped), by a blank-line split."""
    out = []
    for event in (WIRE / name).read_bytes().split(b"\n\n"):
        lines = [line[5:].lstrip(b" ") for line in event.split(b"\n") if line.startswith(b"data:")]
        if lines:
            out.append(b"\n".join(lines))
    return out


def decode_all(payloads: list[bytes], provider_kind: str = "openai") -> list[StreamChunk]:
    decoder = OpenAIStreamDecoder(provider_kind=provider_kind)
    chunks: list[StreamChunk] = []
    for payload in payloads:
        chunks += decoder.push(payload)
    return chunks + decoder.end()


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> bytes:
    choice = {"index": 0, "delta": delta or {}, "finish_reason": finish}
    return json.dumps({"object": "chat.completion.chunk", "choices": [choice], **extra}).encode()


def check_invariants(chunks: list[StreamChunk]) -> None:
    """Ordering rules every adapter stream obeys."""
    finishes = [i for i, c in enumerate(chunks) if type(c) is Finish]
    assert finishes == [len(chunks) - 1], "exactly one finish, and it is last"
    usages = [i for i, c in enumerate(chunks) if type(c) is UsageChunk]
    assert len(usages) <= 1
    assert all(i < finishes[0] for i in usages), "usage precedes finish"
    kinds: dict[int, str] = {}
    ended: set[int] = set()
    parts: dict[int, list[str]] = {}
    ids: dict[int, tuple[str | None, str | None]] = {}
    for c in chunks:
        if type(c) is BlockStart:
            assert c.index == len(kinds), "indices are assigned in first-seen order"
            kinds[c.index] = c.block_type
            parts[c.index] = []
        elif type(c) in (TextDelta, ReasoningDelta, ToolCallDelta):
            index: int = c.index  # type: ignore[union-attr]
            assert index in kinds and index not in ended, "a delta belongs to an open block"
            if type(c) is ToolCallDelta:
                assert kinds[index] == "tool-call"
                if index not in ids:
                    assert c.id and c.name, "the first tool-call delta carries id and name"
                    ids[index] = (c.id, c.name)
                else:
                    assert c.id == ids[index][0], "every tool-call delta carries the call id"
                    assert c.name is None
                parts[index].append(c.arguments_delta)
            else:
                expected_kind = "text" if type(c) is TextDelta else "reasoning"
                assert kinds[index] == expected_kind
                assert c.text, "empty deltas are not emitted"  # type: ignore[union-attr]
                parts[index].append(c.text)  # type: ignore[union-attr]
        elif type(c) is BlockEnd:
            assert c.index in kinds and c.index not in ended
            ended.add(c.index)
            joined = "".join(parts[c.index])
            match c.block:
                case TextBlock(text=text):
                    assert kinds[c.index] == "text" and text == joined
                case ReasoningBlock(text=text):
                    assert kinds[c.index] == "reasoning" and text == joined
                case ToolCallBlock():
                    assert kinds[c.index] == "tool-call"
                    assert (c.block.id, c.block.name) == ids[c.index]
                    assert c.block.arguments == joined
                case _:
                    pytest.fail(f"unexpected block {c.block!r}")


def only_finish(chunks: list[StreamChunk]) -> Finish:
    last = chunks[-1]
    assert type(last) is Finish
    return last


@pytest.mark.parametrize("name", TRANSCRIPTS)
def test_transcript_matches_expected(name: str) -> None:
    case = EXPECTED[name]
    chunks = decode_all(data_payloads(name), case["provider"])
    check_invariants(chunks)
    assembler = BlockAssembler()
    for c in chunks:
        assembler.push(c)
    expected_blocks = tuple(llmrt.decode(json.dumps(b), llmrt.ContentBlock) for b in case["blocks"])
    assert assembler.blocks() == expected_blocks
    assert assembler.usage == llmrt.decode(json.dumps(case["usage"]), llmrt.TokenUsage)
    finish = assembler.finish
    assert msgspec.json.decode(llmrt.encode(finish))["kind"] == case["finish"]["kind"]
    if "failure" in case["finish"]:
        assert type(finish) is FinishError
        assert finish.failure.code == case["finish"]["failure"]["code"]
    if "blocks_streamed" in case:
        streamed = tuple(c.block for c in chunks if type(c) is BlockEnd)
        assert streamed == tuple(
            llmrt.decode(json.dumps(b), llmrt.ContentBlock) for b in case["blocks_streamed"]
        )


def test_usage_and_finish_wait_for_done() -> None:
    payloads = data_payloads("openai_text.sse")
    decoder = OpenAIStreamDecoder()
    before_done = [c for p in payloads[:-1] for c in decoder.push(p)]
    assert not any(type(c) in (UsageChunk, Finish, BlockEnd) for c in before_done)
    at_done = decoder.push(payloads[-1])
    assert [type(c) for c in at_done] == [BlockEnd, UsageChunk, Finish]
    assert decoder.finished
    assert decoder.push(chunk({"content": "late"})) == []
    assert decoder.end() == []


def test_truncated_stream_is_a_network_error() -> None:
    decoder = OpenAIStreamDecoder()
    chunks = [c for p in data_payloads("openai_text.sse")[:4] for c in decoder.push(p)]
    assert any(type(c) is TextDelta for c in chunks)
    end = decoder.end()
    finish = only_finish(end)
    assert type(finish.reason) is FinishError
    assert finish.reason.failure.code == ErrorCode.NETWORK
    assert "[DONE]" in finish.reason.failure.message
    assert decoder.end() == [] and decoder.push(b"[DONE]") == []


@pytest.mark.parametrize("payload", [b'{"choices": [', b"not json", b'{"choices": 5}'])
def test_malformed_payload_is_a_protocol_error(payload: bytes) -> None:
    decoder = OpenAIStreamDecoder()
    decoder.push(chunk({"content": "Hi"}))
    finish = only_finish(decoder.push(payload))
    assert type(finish.reason) is FinishError
    assert finish.reason.failure.code == ErrorCode.PROTOCOL
    assert decoder.push(chunk({"content": "more"})) == []
    assert decoder.push(b"[DONE]") == [] and decoder.end() == []


def test_inband_context_overflow_error() -> None:
    message = (
        "This model's maximum context length is 128000 tokens. However, your messages "
        "resulted in 130000 tokens. Please reduce the length of the messages."
    )
    error = {"message": message, "type": "invalid_request_error", "code": None}
    decoder = OpenAIStreamDecoder(request_id="req_123")
    finish = only_finish(decoder.push(json.dumps({"error": error}).encode()))
    assert type(finish.reason) is FinishError
    assert finish.reason.failure.code == ErrorCode.CONTEXT_WINDOW_EXCEEDED
    assert message in finish.reason.failure.message
    assert finish.reason.failure.request_id == "req_123"
    assert decoder.end() == []


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (
            {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"},
            "RATE_LIMIT",
        ),
        (
            {"message": "The server had an error", "type": "server_error", "code": None},
            "SERVER_ERROR",
        ),
        (
            {"message": "bad param", "type": "invalid_request_error", "code": None},
            "INVALID_REQUEST",
        ),
        ("upstream overloaded", "OVERLOADED"),
    ],
)
def test_inband_errors_are_classified(error: Any, code: str) -> None:
    finish = only_finish(OpenAIStreamDecoder().push(json.dumps({"error": error}).encode()))
    assert type(finish.reason) is FinishError and finish.reason.failure.code == code


@pytest.mark.parametrize(
    ("reason", "code"),
    [("content_filter", ErrorCode.INVALID_REQUEST), ("insufficient_system_resource", "OVERLOADED")],
)
def test_error_finish_reasons(reason: str, code: str) -> None:
    chunks = decode_all(
        [chunk({"content": "Partial"}), chunk(finish=reason), b"[DONE]"], "deepseek"
    )
    check_invariants(chunks)
    finish = only_finish(chunks)
    assert type(finish.reason) is FinishError and finish.reason.failure.code == code
    assert [c.block for c in chunks if type(c) is BlockEnd] == [TextBlock(text="Partial")]


def test_parallel_tool_calls_with_interleaved_fragments() -> None:
    def call(index: int, args: str, id: str | None = None, name: str | None = None) -> Any:
        fragment: dict[str, Any] = {"index": index, "function": {"arguments": args}}
        if id is not None:
            fragment |= {"id": id, "type": "function"}
            fragment["function"]["name"] = name
        return fragment

    payloads = [
        chunk({"role": "assistant", "content": None, "tool_calls": [call(0, "", "c_a", "alpha")]}),
        chunk({"tool_calls": [call(1, '{"y"', "c_b", "beta")]}),
        chunk({"tool_calls": [call(0, '{"x": '), call(1, ": 2")]}),
        chunk({"content": "", "tool_calls": [call(2, "{}", "c_c", "gamma")]}),
        chunk({"tool_calls": [call(1, "}")]}),
        chunk({"tool_calls": [call(0, "1}")]}),
        chunk(finish="tool_calls"),
        b"[DONE]",
    ]
    chunks = decode_all(payloads)
    check_invariants(chunks)
    assert [c.block for c in chunks if type(c) is BlockEnd] == [
        ToolCallBlock(id="c_a", name="alpha", arguments='{"x": 1}'),
        ToolCallBlock(id="c_b", name="beta", arguments='{"y": 2}'),
        ToolCallBlock(id="c_c", name="gamma", arguments="{}"),
    ]
    assert type(only_finish(chunks).reason) is FinishToolCalls
    # The arguments are never re-serialized: the fragments come through byte for byte.
    deltas = [c.arguments_delta for c in chunks if type(c) is ToolCallDelta and c.index == 1]
    assert deltas == ['{"y"', ": 2", "}"]


def test_blocks_are_indexed_in_first_seen_order() -> None:
    tool = {"index": 0, "id": "c1", "function": {"name": "f", "arguments": "{}"}}
    payloads = [
        chunk({"content": None, "reasoning_content": "think"}),
        chunk({"tool_calls": [tool]}),
        chunk({"content": "said", "reasoning_content": None}),
        chunk({"content": "", "reasoning_content": ""}),
        chunk(finish="stop"),
        b"[DONE]",
    ]
    chunks = decode_all(payloads, "deepseek")
    check_invariants(chunks)
    assert [c.block_type for c in chunks if type(c) is BlockStart] == [
        "reasoning",
        "tool-call",
        "text",
    ]
    assert type(only_finish(chunks).reason) is FinishStop
    assert not any(type(c) is UsageChunk for c in chunks), "no usage was reported"


def test_missing_finish_reason_at_done() -> None:
    chunks = decode_all([chunk({"content": "Hi"}), b"[DONE]"])
    assert type(only_finish(chunks).reason) is FinishStop
    empty = decode_all([chunk({"content": ""}), b"[DONE]"])
    finish = only_finish(empty)
    assert type(finish.reason) is FinishError
    assert finish.reason.failure.code == ErrorCode.EMPTY_RESPONSE


def test_refusal_is_visible_text() -> None:
    chunks = decode_all([chunk({"refusal": "I can't help."}), chunk(finish="stop"), b"[DONE]"])
    assert [c.block for c in chunks if type(c) is BlockEnd] == [TextBlock(text="I can't help.")]


# --- request bodies -----------------------------------------------------------

PNG = ImageBlock(media_type="image/png", data="iVBORw0KGgo=")
JPEG_URL = ImageBlock(media_type="image/jpeg", url="https://example.com/cat.jpg")
TOOL = ToolSchema(
    name="get_weather",
    description="Weather for a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)


def conversation(**overrides: Any) -> GenerateOptions:
    assistant = Message(
        id="m2",
        role="assistant",
        content=(
            ReasoningBlock(text="need the weather"),
            TextBlock(text="Checking."),
            ToolCallBlock(id="call_1", name="get_weather", arguments='{"city": "Paris"}'),
        ),
        source=ModelSource(provider="p", model="m"),
    )
    fields: dict[str, Any] = {
        "provider": "p",
        "model": "gpt-test",
        "system": "Be brief.",
        "messages": (
            llmrt.system_message("Today is Monday."),
            llmrt.user_message([TextBlock(text="Weather here?"), PNG], id="m1"),
            assistant,
            llmrt.tool_result_message("call_1", [TextBlock(text="18 C"), JPEG_URL], id="m3"),
        ),
        "tools": (TOOL,),
        "temperature": 0.2,
        "max_tokens": 256,
        "stop": ("END",),
    }
    return GenerateOptions(**(fields | overrides))


def test_openai_body_for_a_full_conversation() -> None:
    body = build_openai_body(conversation(reasoning_effort="low"), image_input=True)
    msgspec.json.encode(body)  # JSON-ready
    assert body["model"] == "gpt-test" and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["messages"] == [
        {"role": "system", "content": "Be brief.\n\nToday is Monday."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Weather here?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
            ],
        },
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "call_1",
            "content": "18 C\n\n" + image_placeholder(JPEG_URL),
        },
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "[images of tool result call_1]"},
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
            ],
        },
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather for a city",
                "parameters": TOOL.parameters,
            },
        }
    ]
    assert body["temperature"] == 0.2 and body["max_tokens"] == 256
    assert body["stop"] == ["END"] and body["reasoning_effort"] == "low"


def test_openai_body_on_a_text_only_route() -> None:
    body = build_openai_body(conversation(), image_input=False, include_usage=False)
    assert "stream_options" not in body and "reasoning_effort" not in body
    assert body["messages"][1]["content"] == [
        {"type": "text", "text": "Weather here?"},
        {"type": "text", "text": image_placeholder(PNG)},
    ]
    # The tool result keeps its placeholder and no image message follows it.
    assert body["messages"][3:] == [
        {
            "role": "tool",
            "tool_call_id": "call_1",
            "content": "18 C\n\n" + image_placeholder(JPEG_URL),
        }
    ]
    assert "image_url" not in json.dumps(body)


def test_deepseek_body_sends_reasoning_of_tool_calling_turns() -> None:
    body = build_openai_body(
        conversation(reasoning_effort="none"), provider_kind="deepseek", image_input=False
    )
    assistant = body["messages"][2]
    assert assistant["reasoning_content"] == "need the weather"
    assert body["thinking"] == {"type": "disabled"} and "reasoning_effort" not in body
    # OpenAI never gets reasoning back.
    openai = build_openai_body(conversation(), image_input=False)
    assert "reasoning_content" not in openai["messages"][2]
    assert "need the weather" not in json.dumps(openai)


def test_openai_body_options() -> None:
    body = build_openai_body(
        conversation(tools=None, temperature=None, stop=None, system=None),
        image_input=True,
        max_tokens_field="max_completion_tokens",
    )
    assert body["max_completion_tokens"] == 256 and "max_tokens" not in body
    assert not {"tools", "temperature", "stop"} & body.keys()
    assert body["messages"][0] == {"role": "system", "content": "Today is Monday."}


def test_tool_call_in_a_user_message_is_rejected() -> None:
    bad = llmrt.user_message(ToolCallBlock(id="call_9", name="f", arguments="{}"))
    with pytest.raises(LlmError) as info:
        build_openai_body(conversation(messages=(bad,)), image_input=True)
    assert info.value.code == ErrorCode.INVALID_REQUEST and "call_9" in str(info.value)
