"""The Anthropic Messages wire translation: stream decoding and request bodies."""

from __future__ import annotations

import json
import logging
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
    FinishMaxTokens,
    FinishStop,
    GenerateOptions,
    ImageBlock,
    LlmError,
    Message,
    ModelSource,
    ReasoningBlock,
    ReasoningDelta,
    ReplayEnvelope,
    StreamChunk,
    TextBlock,
    TextDelta,
    ToolCallBlock,
    ToolCallDelta,
    ToolSchema,
    UsageChunk,
)
from llmrt.adapters._anthropic_wire import AnthropicStreamDecoder, build_anthropic_body
from llmrt.images import image_placeholder

WIRE = pathlib.Path(__file__).parent / "wire"
EXPECTED: dict[str, Any] = json.loads((WIRE / "expected.json").read_text())
TRANSCRIPTS = sorted(name for name, case in EXPECTED.items() if case["provider"] == "anthropic")


def events(name: str) -> list[tuple[str, bytes]]:
    """The ``(event, data)`` pairs of a transcript, by a blank-line split."""
    out = []
    for raw in (WIRE / name).read_bytes().split(b"\n\n"):
        event, data = "", []
        for line in raw.split(b"\n"):
            if line.startswith(b"event:"):
                event = line[6:].strip().decode()
            elif line.startswith(b"data:"):
                data.append(line[5:].lstrip(b" "))
        if data:
            out.append((event, b"\n".join(data)))
    return out


def decode_all(pairs: list[tuple[str, Any]], **kwargs: Any) -> list[StreamChunk]:
    decoder = AnthropicStreamDecoder(**kwargs)
    chunks: list[StreamChunk] = []
    for event, data in pairs:
        payload = data if isinstance(data, bytes) else json.dumps(data).encode()
        chunks += decoder.push(event, payload)
    return chunks + decoder.end()


def assemble(chunks: list[StreamChunk]) -> BlockAssembler:
    assembler = BlockAssembler()
    for c in chunks:
        assembler.push(c)
    return assembler


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
    for c in chunks:
        if type(c) is BlockStart:
            assert c.index == len(kinds), "indices are assigned in first-seen order"
            kinds[c.index], parts[c.index] = c.block_type, []
        elif type(c) in (TextDelta, ReasoningDelta, ToolCallDelta):
            index: int = c.index  # type: ignore[union-attr]
            assert index in kinds and index not in ended, "a delta belongs to an open block"
            if type(c) is ToolCallDelta:
                assert kinds[index] == "tool-call"
                assert c.id, "every tool-call delta carries the call id"
                parts[index].append(c.arguments_delta)
            else:
                assert kinds[index] == ("text" if type(c) is TextDelta else "reasoning")
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
                case ToolCallBlock(arguments=arguments):
                    assert kinds[c.index] == "tool-call" and arguments == (joined or "{}")
                case _:
                    pytest.fail(f"unexpected block {c.block!r}")


def finish_of(chunks: list[StreamChunk]) -> Finish:
    last = chunks[-1]
    assert type(last) is Finish
    return last


@pytest.mark.parametrize("name", TRANSCRIPTS)
def test_transcript_matches_expected(name: str) -> None:
    case = EXPECTED[name]
    chunks = decode_all(events(name))
    check_invariants(chunks)
    assembler = assemble(chunks)

    def blocks(key: str) -> tuple[llmrt.ContentBlock, ...]:
        return tuple(llmrt.decode(json.dumps(b), llmrt.ContentBlock) for b in case[key])

    if "blocks" in case:
        assert assembler.blocks() == blocks("blocks")
    if "blocks_streamed" in case:
        assert assemble(chunks[:-1]).blocks() == blocks("blocks_streamed")
    if "usage" in case:
        assert assembler.usage == llmrt.decode(json.dumps(case["usage"]), llmrt.TokenUsage)
    finish = assembler.finish
    assert msgspec.json.decode(llmrt.encode(finish))["kind"] == case["finish"]["kind"]
    if "failure" in case["finish"]:
        assert type(finish) is FinishError
        expected = case["finish"]["failure"]
        assert finish.failure.code == expected["code"]
        if "message" in expected:
            assert expected["message"] in finish.failure.message


def test_thinking_signature_is_replay_state_not_text() -> None:
    pairs = events("anthropic_thinking_tool.sse")
    signature = next(
        json.loads(data)["delta"]["signature"]
        for event, data in pairs
        if event == "content_block_delta" and b"signature_delta" in data
    )
    chunks = decode_all(pairs)
    texts = [c.text for c in chunks if type(c) in (TextDelta, ReasoningDelta)]  # type: ignore[union-attr]
    assert not any(signature in text for text in texts)
    assembler = assemble(chunks)
    assert not any(signature in msgspec.json.encode(b).decode() for b in assembler.blocks())
    envelope = assembler.replay_state
    assert envelope is not None
    assert envelope.blocks == ({"signature": signature}, None, None)
    assert envelope.response == {
        "id": "msg_01Hq8ZkT3vN6yWc2RfL9pXaB",
        "model": "claude-sonnet-4-5-20250929",
        "stopReason": "tool_use",
    }


def test_truncated_stream_is_a_network_error() -> None:
    decoder = AnthropicStreamDecoder(request_id="req_9")
    chunks = [c for e, d in events("anthropic_thinking_tool.sse")[:8] for c in decoder.push(e, d)]
    assert chunks and not any(type(c) is Finish for c in chunks)
    finish = finish_of(decoder.end())
    assert type(finish.reason) is FinishError
    assert finish.reason.failure.code == ErrorCode.NETWORK
    assert finish.reason.failure.request_id == "req_9"
    assert decoder.end() == [] and decoder.push("message_stop", b"{}") == []


def test_error_event_then_end_gives_one_finish() -> None:
    decoder = AnthropicStreamDecoder()
    for event, data in events("anthropic_overloaded.sse"):
        decoder.push(event, data)
    assert decoder.finished and decoder.end() == []


def test_malformed_json_is_a_protocol_error() -> None:
    decoder = AnthropicStreamDecoder()
    finish = finish_of(decoder.push("content_block_delta", b'{"type":"content_block_delta",'))
    assert type(finish.reason) is FinishError
    assert finish.reason.failure.code == ErrorCode.PROTOCOL
    assert decoder.push("message_stop", b"{}") == [] and decoder.end() == []


START = ("message_start", {"type": "message_start", "message": {"id": "msg_1", "usage": {}}})


def text_block(index: int, text: str) -> list[tuple[str, Any]]:
    return [
        ("content_block_start", {"index": index, "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"index": index, "delta": {"type": "text_delta", "text": text}}),
        ("content_block_stop", {"index": index}),
    ]


def stop(reason: str | None, usage: dict[str, Any] | None = None) -> list[tuple[str, Any]]:
    delta = {"type": "message_delta", "delta": {"stop_reason": reason}, "usage": usage or {}}
    return [("message_delta", delta), ("message_stop", {"type": "message_stop"})]


def test_unknown_events_and_block_types_are_skipped() -> None:
    server_tool = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search"}
    pairs = [
        START,
        ("content_block_start", {"index": 0, "content_block": server_tool}),
        (
            "content_block_delta",
            {"index": 0, "delta": {"type": "input_json_delta", "partial_json": "{}"}},
        ),
        ("content_block_stop", {"index": 0}),
        ("future_event", {"type": "future_event", "anything": [1, 2]}),
        ("ping", {"type": "ping"}),
        *text_block(1, "Found it."),
        *stop("end_turn"),
    ]
    chunks = decode_all(pairs)
    check_invariants(chunks)
    assert [c for c in chunks if type(c) is BlockStart] == [BlockStart(index=0, block_type="text")]
    assembler = assemble(chunks)
    assert assembler.blocks() == (TextBlock(text="Found it."),)
    assert type(assembler.finish) is FinishStop


def test_events_without_a_name_use_the_payload_type() -> None:
    pairs = [("", {"type": name, **data}) for name, data in [START, *text_block(0, "Hi")]]
    pairs += [("", {"type": "message_delta", "delta": {"stop_reason": "end_turn"}})]
    pairs += [("", {"type": "message_stop"})]
    assert assemble(decode_all(pairs)).blocks() == (TextBlock(text="Hi"),)


def test_tool_call_without_argument_fragments_is_an_empty_object() -> None:
    tool = {"type": "tool_use", "id": "toolu_1", "name": "now", "input": {}}
    pairs = [
        START,
        ("content_block_start", {"index": 0, "content_block": tool}),
        (
            "content_block_delta",
            {"index": 0, "delta": {"type": "input_json_delta", "partial_json": ""}},
        ),
        ("content_block_stop", {"index": 0}),
        *stop("tool_use"),
    ]
    chunks = decode_all(pairs)
    check_invariants(chunks)
    assert [c.block for c in chunks if type(c) is BlockEnd] == [
        ToolCallBlock(id="toolu_1", name="now", arguments="{}")
    ]
    first = next(c for c in chunks if type(c) is ToolCallDelta)
    assert (first.id, first.name) == ("toolu_1", "now")


@pytest.mark.parametrize(
    ("reason", "code"),
    [
        ("refusal", ErrorCode.INVALID_REQUEST),
        ("model_context_window_exceeded", ErrorCode.CONTEXT_WINDOW_EXCEEDED),
    ],
)
def test_error_stop_reasons(reason: str, code: str) -> None:
    chunks = decode_all([START, *text_block(0, "Partial"), *stop(reason)])
    check_invariants(chunks)
    finish = finish_of(chunks)
    assert type(finish.reason) is FinishError and finish.reason.failure.code == code
    assert finish.replay_state is None


def test_success_stop_reasons() -> None:
    assert type(assemble(decode_all([START, *text_block(0, "a"), *stop("max_tokens")])).finish) is (
        FinishMaxTokens
    )
    paused = finish_of(decode_all([START, *text_block(0, "a"), *stop("pause_turn")]))
    assert type(paused.reason) is FinishStop
    assert paused.replay_state is not None
    assert paused.replay_state.response["stopReason"] == "pause_turn"
    empty = finish_of(decode_all([START, *stop("end_turn")]))
    assert type(empty.reason) is FinishError
    assert empty.reason.failure.code == ErrorCode.EMPTY_RESPONSE


def test_usage_is_cumulative_and_restated_values_win() -> None:
    start = (
        "message_start",
        {
            "message": {
                "id": "msg_2",
                "usage": {
                    "input_tokens": 2,
                    "cache_creation_input_tokens": 3068,
                    "output_tokens": 1,
                },
            }
        },
    )
    pairs = [
        start,
        *text_block(0, "ok"),
        ("message_delta", {"delta": {"stop_reason": None}, "usage": {"output_tokens": 5}}),
        *stop("end_turn", {"input_tokens": 6, "output_tokens": 9}),
    ]
    usage = assemble(decode_all(pairs)).usage
    assert usage == llmrt.TokenUsage(input_tokens=6, output_tokens=9, cache_write_tokens=3068)


@pytest.mark.parametrize(
    ("error", "code"),
    [
        ({"type": "overloaded_error", "message": "Overloaded"}, ErrorCode.OVERLOADED),
        ({"type": "rate_limit_error", "message": "slow down"}, ErrorCode.RATE_LIMIT),
        ({"type": "api_error", "message": "Internal"}, ErrorCode.SERVER_ERROR),
        (
            {
                "type": "invalid_request_error",
                "message": "prompt is too long: 210000 tokens > 200000 maximum",
            },
            ErrorCode.CONTEXT_WINDOW_EXCEEDED,
        ),
    ],
)
def test_error_events_are_classified_by_type(error: dict[str, str], code: str) -> None:
    chunks = decode_all([START, ("error", {"type": "error", "error": error})])
    finish = finish_of(chunks)
    assert type(finish.reason) is FinishError
    assert finish.reason.failure.code == code
    assert error["message"] in finish.reason.failure.message
    assert finish.reason.failure.status is None


def test_redacted_thinking_is_kept_for_replay() -> None:
    redacted = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va"}
    pairs = [
        START,
        ("content_block_start", {"index": 0, "content_block": redacted}),
        ("content_block_stop", {"index": 0}),
        *text_block(1, "Done."),
        *stop("end_turn"),
    ]
    assembler = assemble(decode_all(pairs, request_id="req_7"))
    assert assembler.blocks() == (ReasoningBlock(text=""), TextBlock(text="Done."))
    envelope = assembler.replay_state
    assert envelope is not None
    assert envelope.blocks == ({"redacted": "EmwKAhgBEgy3va"}, None)
    assert envelope.response["requestId"] == "req_7"
    message = assembler.message(ModelSource(provider="a", model="m", replay_state=envelope))
    body = build_anthropic_body(
        GenerateOptions(provider="a", model="m", messages=(message,)),
        image_input=False,
        default_max_tokens=100,
    )
    assert body["messages"][0]["content"][0] == {
        "type": "redacted_thinking",
        "data": "EmwKAhgBEgy3va",
    }


# --- request bodies -----------------------------------------------------------

PNG = ImageBlock(media_type="image/png", data="iVBORw0KGgo=")
JPEG_URL = ImageBlock(media_type="image/jpeg", url="https://example.com/cat.jpg")
TOOL = ToolSchema(
    name="get_weather",
    description="Weather for a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)
ASSISTANT_BLOCKS = (
    ReasoningBlock(text="need the weather"),
    TextBlock(text="Checking."),
    ToolCallBlock(id="toolu_1", name="get_weather", arguments='{"city": "Paris"}'),
)


def conversation(replay: ReplayEnvelope | None = None, **overrides: Any) -> GenerateOptions:
    assistant = Message(
        id="m2",
        role="assistant",
        content=ASSISTANT_BLOCKS,
        source=ModelSource(provider="anthropic", model="claude", replay_state=replay),
    )
    fields: dict[str, Any] = {
        "provider": "anthropic",
        "model": "claude-test",
        "system": "Be brief.",
        "messages": (
            llmrt.user_message([TextBlock(text="Weather here?"), PNG], id="m1"),
            assistant,
            llmrt.tool_result_message("toolu_1", [TextBlock(text="18 C"), JPEG_URL], id="m3"),
            llmrt.system_message("Answer in French."),
            llmrt.user_message("And tomorrow?", id="m4"),
        ),
        "tools": (TOOL,),
        "temperature": 0.5,
        "stop": ("END",),
    }
    return GenerateOptions(**(fields | overrides))


SIGNED = ReplayEnvelope(response={"id": "msg_1"}, blocks=({"signature": "sig=="}, None, None))


def test_anthropic_body_for_a_full_conversation() -> None:
    body = build_anthropic_body(conversation(SIGNED), image_input=True, default_max_tokens=4096)
    msgspec.json.encode(body)  # JSON-ready
    assert body["model"] == "claude-test" and body["stream"] is True
    assert body["max_tokens"] == 4096
    assert body["system"] == "Be brief.\n\nAnswer in French."
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Weather here?"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
                },
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "need the weather", "signature": "sig=="},
                {"type": "text", "text": "Checking."},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "get_weather",
                    "input": {"city": "Paris"},
                },
            ],
        },
        {
            # The tool result and the next user message share one turn, result first.
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": [
                        {"type": "text", "text": "18 C"},
                        {
                            "type": "image",
                            "source": {"type": "url", "url": "https://example.com/cat.jpg"},
                        },
                    ],
                },
                {"type": "text", "text": "And tomorrow?"},
            ],
        },
    ]
    assert body["tools"] == [
        {
            "name": "get_weather",
            "description": "Weather for a city",
            "input_schema": TOOL.parameters,
        }
    ]
    assert body["temperature"] == 0.5 and body["stop_sequences"] == ["END"]


@pytest.mark.parametrize(
    "replay",
    [
        None,
        ReplayEnvelope(response={"id": "msg_1"}),
        ReplayEnvelope(blocks=(None, None, None)),
        ReplayEnvelope(blocks=({"signature": "sig=="}, None)),  # misaligned: not used
    ],
)
def test_thinking_is_left_out_without_a_signature(replay: ReplayEnvelope | None) -> None:
    body = build_anthropic_body(conversation(replay), image_input=True, default_max_tokens=10)
    assistant = body["messages"][1]["content"]
    assert [part["type"] for part in assistant] == ["text", "tool_use"]
    assert "need the weather" not in json.dumps(body)


def test_unusable_replay_state_is_reported_not_silently_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    misaligned = ReplayEnvelope(blocks=({"signature": "sig=="}, None))
    with caplog.at_level(logging.WARNING, logger="llmrt.replay"):
        body = build_anthropic_body(
            conversation(misaligned), image_input=True, default_max_tokens=10
        )
    assert [part["type"] for part in body["messages"][1]["content"]] == ["text", "tool_use"]
    [record] = caplog.records
    message = record.getMessage()
    assert "does not describe its 3 blocks (2 entries)" in message
    assert "sig==" not in message  # the state itself is not logged
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="llmrt.replay"):
        build_anthropic_body(conversation(None), image_input=True, default_max_tokens=10)
    assert caplog.records == []  # no state at all is not a problem


def test_decoded_thinking_round_trips_into_the_next_request() -> None:
    assembler = assemble(decode_all(events("anthropic_thinking_tool.sse")))
    source = ModelSource(provider="anthropic", model="claude", replay_state=assembler.replay_state)
    options = GenerateOptions(
        provider="anthropic",
        model="claude",
        messages=(llmrt.user_message("Weather?"), assembler.message(source)),
    )
    body = build_anthropic_body(options, image_input=True, default_max_tokens=10)
    thinking, text, tool_use = body["messages"][1]["content"]
    assert thinking["type"] == "thinking" and thinking["signature"].startswith("bjQLnP+zep")
    assert text == {"type": "text", "text": "I'll check the current weather in Paris."}
    assert tool_use["input"] == {"city": "Paris", "unit": "celsius"}


def test_anthropic_body_on_a_text_only_route() -> None:
    body = build_anthropic_body(
        conversation(max_tokens=77), image_input=False, default_max_tokens=4096
    )
    assert body["max_tokens"] == 77
    assert body["messages"][0]["content"][1] == {"type": "text", "text": image_placeholder(PNG)}
    result = body["messages"][2]["content"][0]
    assert result["content"][1] == {"type": "text", "text": image_placeholder(JPEG_URL)}
    assert '"image"' not in json.dumps(body)


def test_thinking_budget_replaces_temperature() -> None:
    body = build_anthropic_body(
        conversation(), image_input=True, default_max_tokens=4096, thinking_budget_tokens=2048
    )
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert "temperature" not in body


@pytest.mark.parametrize("arguments", ['{"city": ', "[1, 2]", "null"])
def test_unparseable_tool_arguments_name_the_call(arguments: str) -> None:
    blocks = (ToolCallBlock(id="toolu_bad", name="f", arguments=arguments),)
    message = Message(id="m", role="assistant", content=blocks, source=llmrt.UserSource())
    with pytest.raises(LlmError) as info:
        build_anthropic_body(
            conversation(messages=(message,)), image_input=True, default_max_tokens=10
        )
    assert info.value.code == ErrorCode.INVALID_REQUEST
    assert "toolu_bad" in info.value.failure.message


def test_empty_tool_arguments_are_an_empty_object() -> None:
    blocks = (ToolCallBlock(id="toolu_0", name="now", arguments=""),)
    message = Message(id="m", role="assistant", content=blocks, source=llmrt.UserSource())
    body = build_anthropic_body(
        conversation(messages=(message,)), image_input=True, default_max_tokens=10
    )
    assert body["messages"][0]["content"][0]["input"] == {}


def _start(message_id: str | None, **message: Any) -> tuple[str, Any]:
    return ("message_start", {"type": "message_start", "message": {"id": message_id, **message}})


def test_a_repeated_message_start_before_any_content_is_tolerated() -> None:
    # Issue 21, finding 11: the same message announced twice before its first
    # block was refused PROTOCOL; it is harmless.
    usage = {"input_tokens": 20, "output_tokens": 1}
    pairs = [
        _start("msg_1", usage=usage),
        _start("msg_1", usage=usage),
        *text_block(0, "Only answer"),
        *stop("end_turn", {"output_tokens": 6}),
    ]
    chunks = decode_all(pairs)
    check_invariants(chunks)
    assembler = assemble(chunks)
    assert assembler.blocks() == (TextBlock(text="Only answer"),)
    assert type(assembler.finish) is FinishStop
    assert assembler.usage is not None and assembler.usage.input_tokens == 20


@pytest.mark.parametrize(
    "pairs",
    [
        # Another message, before content.
        [_start("msg_1"), _start("msg_2"), *text_block(0, "Second"), *stop("end_turn")],
        # The same id, but after a content block: two answers would merge.
        [_start("msg_1"), *text_block(0, "First"), _start("msg_1"), *stop("end_turn")],
        # No id to compare: not known to be the same message.
        [_start(None), _start(None), *text_block(0, "Second"), *stop("end_turn")],
    ],
    ids=["other-id", "after-content", "no-id"],
)
def test_other_second_message_starts_stay_protocol_errors(pairs: list[tuple[str, Any]]) -> None:
    finish = decode_all(pairs)[-1]
    assert type(finish) is Finish and type(finish.reason) is FinishError
    assert finish.reason.failure.code == ErrorCode.PROTOCOL
