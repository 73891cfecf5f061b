"""The Gemini wire translation: decoder rules and request bodies, without sockets."""

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
    FinishMaxTokens,
    FinishStop,
    FinishToolCalls,
    GenerateOptions,
    ImageBlock,
    LlmError,
    Message,
    ModelSource,
    StreamChunk,
    TextBlock,
    ToolCallBlock,
    UsageChunk,
)
from llmrt.adapters._gemini_wire import GeminiStreamDecoder, build_gemini_body
from llmrt.images import image_placeholder


def payload(
    parts: list[dict[str, Any]] | None = None, finish: str | None = None, **kw: Any
) -> bytes:
    candidate: dict[str, Any] = {"index": kw.pop("index", 0)}
    if parts is not None:
        candidate["content"] = {"role": "model", "parts": parts}
    if finish is not None:
        candidate["finishReason"] = finish
    return json.dumps({"candidates": [candidate], **kw}).encode()


def decode(*payloads: bytes) -> list[StreamChunk]:
    decoder = GeminiStreamDecoder()
    chunks: list[StreamChunk] = []
    for data in payloads:
        chunks += decoder.push(data)
    chunks += decoder.end()
    check_invariants(chunks)
    return chunks


def finish_of(chunks: list[StreamChunk]) -> Finish:
    last = chunks[-1]
    assert type(last) is Finish
    return last


@pytest.mark.parametrize(
    ("reason", "code"),
    [
        ("SAFETY", ErrorCode.INVALID_REQUEST),
        ("RECITATION", ErrorCode.INVALID_REQUEST),
        ("BLOCKLIST", ErrorCode.INVALID_REQUEST),
        ("PROHIBITED_CONTENT", ErrorCode.INVALID_REQUEST),
        ("SPII", ErrorCode.INVALID_REQUEST),
        ("IMAGE_SAFETY", ErrorCode.INVALID_REQUEST),
        ("MALFORMED_FUNCTION_CALL", ErrorCode.SERVER_ERROR),
        ("UNEXPECTED_TOOL_CALL", ErrorCode.SERVER_ERROR),
        ("OTHER", ErrorCode.SERVER_ERROR),
        ("TOO_MANY_TOOL_CALLS", ErrorCode.SERVER_ERROR),
    ],
)
def test_error_finish_reasons(reason: str, code: str) -> None:
    finish = finish_of(decode(payload([{"text": "partial"}]), payload(finish=reason)))
    assert type(finish.reason) is FinishError
    assert finish.reason.failure.code == code
    assert reason in finish.reason.failure.message
    assert finish.replay_state is None


def test_an_unknown_finish_reason_after_the_answer_keeps_it_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Issue 21, finding 11: it used to be a retryable SERVER_ERROR that threw the answer away.
    chunks = decode(payload([{"text": "partial"}]), payload(finish="SOMETHING_NEW"))
    finish = finish_of(chunks)
    assert type(finish.reason) is FinishStop
    assert finish.replay_state is not None
    assert finish.replay_state.response["finishReason"] == "SOMETHING_NEW"
    assert "SOMETHING_NEW" in caplog.text and "does not know" in caplog.text
    call = {"functionCall": {"name": "f", "args": {}}}
    assert type(finish_of(decode(payload([call], "SOMETHING_NEW"))).reason) is FinishToolCalls
    # Nothing streamed: still the empty-response error, not a success.
    empty = finish_of(decode(payload([{"text": ""}], "SOMETHING_NEW")))
    assert type(empty.reason) is FinishError
    assert empty.reason.failure.code == ErrorCode.EMPTY_RESPONSE


@pytest.mark.parametrize(
    "data",
    [
        b"{}",
        b'{"object": "chat.completion.chunk", "choices": [{"delta": {"content": "a"}}]}',
        b'{"unexpected": true}',
    ],
)
def test_json_that_is_not_a_generate_content_response_is_a_protocol_error(data: bytes) -> None:
    # Issue 21, finding 11: it ended NETWORK (retried) although the body ended cleanly.
    finish = finish_of(decode(data))
    assert type(finish.reason) is FinishError
    assert finish.reason.failure.code == ErrorCode.PROTOCOL
    assert "GenerateContentResponse" in finish.reason.failure.message


def test_success_finish_reasons() -> None:
    assert type(finish_of(decode(payload([{"text": "a"}], "STOP"))).reason) is FinishStop
    assert type(finish_of(decode(payload([{"text": "a"}], "MAX_TOKENS"))).reason) is FinishMaxTokens
    call = {"functionCall": {"name": "f", "args": {}}}
    assert type(finish_of(decode(payload([call], "STOP"))).reason) is FinishToolCalls


def test_stop_without_content_is_an_empty_response() -> None:
    finish = finish_of(decode(payload([{"text": ""}], "STOP")))
    assert type(finish.reason) is FinishError
    assert finish.reason.failure.code == ErrorCode.EMPTY_RESPONSE


@pytest.mark.parametrize("data", [b"{not json", b'{"candidates": 3}'])
def test_malformed_payload_is_a_protocol_error(data: bytes) -> None:
    finish = finish_of(decode(payload([{"text": "a"}]), data))
    assert type(finish.reason) is FinishError
    assert finish.reason.failure.code == ErrorCode.PROTOCOL


def test_body_that_ends_before_a_finish_reason_is_a_network_error() -> None:
    finish = finish_of(decode(payload([{"text": "a"}])))
    assert type(finish.reason) is FinishError
    assert finish.reason.failure.code == ErrorCode.NETWORK


def test_other_candidates_are_ignored() -> None:
    chunks = decode(payload([{"text": "other"}], index=1), payload([{"text": "mine"}], "STOP"))
    texts = [c.text for c in chunks if type(c) is llmrt.TextDelta]
    assert texts == ["mine"]


def test_kind_switches_close_blocks_and_calls_arrive_whole() -> None:
    chunks = decode(
        payload([{"text": "think", "thought": True}]),
        payload([{"text": "say"}, {"functionCall": {"name": "f", "args": {"a": [1, 2]}}}]),
        payload([{"text": "more"}], "STOP"),
    )
    ends = [c.block for c in chunks if type(c) is llmrt.BlockEnd]
    assert [type(b).__name__ for b in ends] == [
        "ReasoningBlock",
        "TextBlock",
        "ToolCallBlock",
        "TextBlock",
    ]
    call = ends[2]
    assert type(call) is ToolCallBlock and call.arguments == '{"a": [1, 2]}' and call.name == "f"
    assert call.id.startswith("gcall_")


def test_a_native_call_id_is_kept_and_null_args_are_an_empty_object() -> None:
    chunks = decode(payload([{"functionCall": {"name": "f", "id": "fc-9", "args": None}}], "STOP"))
    (end,) = [c.block for c in chunks if type(c) is llmrt.BlockEnd]
    assert end == ToolCallBlock(id="fc-9", name="f", arguments="{}")


def test_a_signature_before_any_block_goes_to_the_next_block() -> None:
    chunks = decode(
        payload([{"text": "", "thoughtSignature": "early"}]), payload([{"text": "hi"}], "STOP")
    )
    envelope = finish_of(chunks).replay_state
    assert envelope is not None and envelope.blocks == ({"signature": "early"},)


def test_usage_is_disjoint_and_the_last_report_wins() -> None:
    first = {"promptTokenCount": 5}
    last = {
        "promptTokenCount": 1000,
        "cachedContentTokenCount": 600,
        "toolUsePromptTokenCount": 50,
        "candidatesTokenCount": 30,
        "thoughtsTokenCount": 70,
    }
    chunks = decode(
        payload([{"text": "a"}], usageMetadata=first), payload([], "STOP", usageMetadata=last)
    )
    (usage,) = [c.usage for c in chunks if type(c) is UsageChunk]
    assert usage == llmrt.TokenUsage(
        input_tokens=450, output_tokens=100, cache_read_tokens=600, reasoning_tokens=70
    )


def test_malformed_usage_is_a_protocol_error_at_the_end() -> None:
    bad = {"promptTokenCount": "many"}
    finish = finish_of(decode(payload([{"text": "a"}], "STOP", usageMetadata=bad)))
    assert type(finish.reason) is FinishError
    assert finish.reason.failure.code == ErrorCode.PROTOCOL


def test_prompt_block_without_candidates() -> None:
    data = json.dumps({"promptFeedback": {"blockReason": "BLOCKLIST"}}).encode()
    finish = finish_of(decode(data))
    assert type(finish.reason) is FinishError
    assert finish.reason.failure.code == ErrorCode.INVALID_REQUEST
    assert "BLOCKLIST" in finish.reason.failure.message


# ---- request bodies ---------------------------------------------------------------------------


def options(*messages: Message, **kw: Any) -> GenerateOptions:
    return GenerateOptions(provider="p", model="gemini-2.5-flash", messages=messages, **kw)


def test_thinking_off_and_a_text_only_route() -> None:
    image = ImageBlock(media_type="image/jpeg", url="https://example.com/cat.jpg")
    body = build_gemini_body(
        options(llmrt.user_message((TextBlock(text="look"), image))),
        image_input=False,
        thinking=True,
        thinking_budget=0,
    )
    assert body["contents"] == [
        {"role": "user", "parts": [{"text": "look"}, {"text": image_placeholder(image)}]}
    ]
    assert body["generationConfig"] == {
        "thinkingConfig": {"includeThoughts": False, "thinkingBudget": 0}
    }


def test_url_images_and_consecutive_turns() -> None:
    image = ImageBlock(media_type="image/jpeg", url="https://example.com/cat.jpg")
    body = build_gemini_body(
        options(llmrt.user_message("a"), llmrt.user_message(image)), image_input=True
    )
    assert body == {
        "contents": [
            {
                "role": "user",
                "parts": [
                    {"text": "a"},
                    {
                        "fileData": {
                            "mimeType": "image/jpeg",
                            "fileUri": "https://example.com/cat.jpg",
                        }
                    },
                ],
            }
        ]
    }


def test_tool_result_names_come_from_the_call_or_the_tool_source() -> None:
    body = build_gemini_body(
        options(llmrt.tool_result_message("gcall_x_1", "done", tool="search", is_error=True)),
        image_input=True,
    )
    assert body["contents"][0]["parts"] == [
        {"functionResponse": {"name": "search", "response": {"error": "done"}}}
    ]
    orphan = Message(
        id="m",
        role="user",
        content=(llmrt.ToolResultBlock(tool_call_id="nowhere", content=()),),
        source=llmrt.UserSource(),
    )
    with pytest.raises(LlmError) as caught:
        build_gemini_body(options(orphan), image_input=True)
    assert caught.value.failure.code == ErrorCode.INVALID_REQUEST


@pytest.mark.parametrize("arguments", ["[1]", "{bad", '"text"'])
def test_unparseable_tool_arguments_name_the_call(arguments: str) -> None:
    reply = Message(
        id="a",
        role="assistant",
        content=(ToolCallBlock(id="c7", name="f", arguments=arguments),),
        source=ModelSource(provider="p", model="m"),
    )
    with pytest.raises(LlmError) as caught:
        build_gemini_body(options(reply), image_input=True)
    assert caught.value.failure.code == ErrorCode.INVALID_REQUEST
    assert "c7" in caught.value.failure.message


def test_a_mismatched_envelope_is_not_used() -> None:
    reply = Message(
        id="a",
        role="assistant",
        content=(TextBlock(text="x"), TextBlock(text="y")),
        source=ModelSource(
            provider="p",
            model="m",
            replay_state=llmrt.ReplayEnvelope(blocks=({"signature": "s"},)),
        ),
    )
    body = build_gemini_body(options(reply), image_input=True)
    assert body["contents"] == [{"role": "model", "parts": [{"text": "x"}, {"text": "y"}]}]
