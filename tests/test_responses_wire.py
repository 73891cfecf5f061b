"""The OpenAI Responses wire translation: decoder rules and request bodies, without sockets."""

from __future__ import annotations

import json
from typing import Any

import pytest
from _stream_checks import check_invariants

import llmrt
from llmrt import (
    ErrorCode,
    Finish,
    FinishError,
    GenerateOptions,
    ImageBlock,
    LlmError,
    Message,
    ModelSource,
    ReasoningBlock,
    StreamChunk,
    TextBlock,
    ToolCallBlock,
)
from llmrt.adapters._responses_wire import ResponsesStreamDecoder, build_responses_body
from llmrt.images import image_placeholder


def event(kind: str, **fields: Any) -> bytes:
    return json.dumps({"type": kind, **fields}).encode()


def completed(**response: Any) -> bytes:
    return event("response.completed", response={"id": "r", "status": "completed", **response})


def decode(*payloads: bytes, request_id: str | None = None) -> list[StreamChunk]:
    decoder = ResponsesStreamDecoder(request_id=request_id)
    chunks: list[StreamChunk] = []
    for data in payloads:
        chunks += decoder.push(data)
    chunks += decoder.end()
    check_invariants(chunks)
    return chunks


def failure_of(chunks: list[StreamChunk]) -> llmrt.LlmFailure:
    last = chunks[-1]
    assert type(last) is Finish and type(last.reason) is FinishError
    return last.reason.failure


TEXT = event("response.output_text.delta", output_index=0, delta="hi")


@pytest.mark.parametrize(
    ("reason", "code"),
    [("content_filter", ErrorCode.INVALID_REQUEST), ("something_new", ErrorCode.SERVER_ERROR)],
)
def test_incomplete_reasons(reason: str, code: str) -> None:
    incomplete = event(
        "response.incomplete",
        response={"status": "incomplete", "incomplete_details": {"reason": reason}},
    )
    assert failure_of(decode(TEXT, incomplete)).code == code


@pytest.mark.parametrize(
    ("error", "code"),
    [
        ({"code": "server_error", "message": "boom"}, ErrorCode.SERVER_ERROR),
        ({"code": "rate_limit_exceeded", "message": "slow down"}, ErrorCode.RATE_LIMIT),
        ({"code": "invalid_prompt", "message": "flagged"}, ErrorCode.INVALID_REQUEST),
        (
            {"code": "context_length_exceeded", "message": "Your input exceeds the context window"},
            ErrorCode.CONTEXT_WINDOW_EXCEEDED,
        ),
    ],
)
def test_failed_responses_are_classified_and_keep_usage(error: dict[str, str], code: str) -> None:
    usage = {"input_tokens": 10, "output_tokens": 2}
    failed = event("response.failed", response={"status": "failed", "error": error, "usage": usage})
    chunks = decode(TEXT, failed, request_id="req-7")
    failure = failure_of(chunks)
    assert failure.code == code and failure.request_id == "req-7"
    assert any(type(c) is llmrt.UsageChunk for c in chunks)


def test_the_error_event_ends_the_stream() -> None:
    chunks = decode(TEXT, event("error", code="server_error", message="x"), TEXT, completed())
    assert failure_of(chunks).code == ErrorCode.SERVER_ERROR
    nested = event("error", error={"type": "invalid_request_error", "code": "invalid_prompt"})
    assert failure_of(decode(nested)).code == ErrorCode.INVALID_REQUEST


def test_completed_without_content_is_an_empty_response() -> None:
    assert failure_of(decode(completed())).code == ErrorCode.EMPTY_RESPONSE


@pytest.mark.parametrize("data", [b"{nope", b'{"type": 5}'])
def test_malformed_events_are_protocol_errors(data: bytes) -> None:
    assert failure_of(decode(TEXT, data)).code == ErrorCode.PROTOCOL


def test_a_body_cut_before_a_terminal_event_is_a_network_error() -> None:
    assert failure_of(decode(TEXT)).code == ErrorCode.NETWORK


def test_unknown_events_are_ignored() -> None:
    chunks = decode(event("response.something_new", output_index=0), TEXT, completed())
    assert type(chunks[-1]) is Finish and type(chunks[-1].reason) is llmrt.FinishStop


def test_calls_announced_only_when_done_and_arguments_only_in_done() -> None:
    whole = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"a":1}'}
    added = {"type": "function_call", "call_id": "c2", "name": "g", "arguments": ""}
    chunks = decode(
        event("response.output_item.done", output_index=0, item=whole),
        event("response.output_item.added", output_index=1, item=added),
        event("response.function_call_arguments.done", output_index=1, arguments='{"b":2}'),
        event("response.output_item.done", output_index=1, item={**added, "arguments": '{"b":2}'}),
        completed(),
    )
    ends = [c.block for c in chunks if type(c) is llmrt.BlockEnd]
    assert ends == [
        ToolCallBlock(id="c1", name="f", arguments='{"a":1}'),
        ToolCallBlock(id="c2", name="g", arguments='{"b":2}'),
    ]
    assert type(chunks[-1]) is Finish and type(chunks[-1].reason) is llmrt.FinishToolCalls


def test_raw_reasoning_text_is_reasoning_and_deltas_of_another_kind_are_ignored() -> None:
    chunks = decode(
        event("response.reasoning_text.delta", output_index=0, delta="step 1"),
        TEXT,  # a text delta for the reasoning item's index: not text
        event("response.output_text.delta", output_index=1, delta="answer"),
        completed(),
    )
    ends = [c.block for c in chunks if type(c) is llmrt.BlockEnd]
    assert ends == [ReasoningBlock(text="step 1"), TextBlock(text="answer")]


# ---- request bodies ---------------------------------------------------------------------------


def options(*messages: Message, **kw: Any) -> GenerateOptions:
    return GenerateOptions(provider="p", model="gpt-4.1", messages=messages, **kw)


def test_tool_result_images_follow_in_a_user_message() -> None:
    image = ImageBlock(media_type="image/png", data="AAAA")
    result = llmrt.tool_result_message("c1", (TextBlock(text="chart"), image), is_error=True)
    body = build_responses_body(options(result), image_input=True, reasoning=False)
    assert body["input"] == [
        {
            "type": "function_call_output",
            "call_id": "c1",
            "output": "[tool error]\n\nchart\n\n" + image_placeholder(image),
        },
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "[images of tool result c1]"},
                {
                    "type": "input_image",
                    "image_url": "data:image/png;base64,AAAA",
                    "detail": "auto",
                },
            ],
        },
    ]


def test_text_only_routes_get_placeholders_and_unsigned_reasoning_stays_home() -> None:
    reply = Message(
        id="a",
        role="assistant",
        content=(ReasoningBlock(text="hmm"), TextBlock(text="ok")),
        source=ModelSource(provider="p", model="m"),
    )
    image = ImageBlock(media_type="image/png", url="https://example.com/a.png")
    body = build_responses_body(
        options(llmrt.user_message(image), reply), image_input=False, reasoning=False
    )
    assert body["input"] == [
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": image_placeholder(image)}],
        },
        {"type": "message", "role": "assistant", "content": "ok"},
    ]


def test_tool_blocks_in_the_wrong_role_are_refused() -> None:
    wrong = Message(
        id="u",
        role="user",
        content=(ToolCallBlock(id="c", name="f", arguments="{}"),),
        source=llmrt.UserSource(),
    )
    with pytest.raises(LlmError) as caught:
        build_responses_body(options(wrong), image_input=True, reasoning=False)
    assert caught.value.failure.code == ErrorCode.INVALID_REQUEST
