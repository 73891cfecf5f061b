"""OpenAI Responses over llmrt: requests decoded, chunks encoded, checked against the SDK."""

from __future__ import annotations

import base64
from typing import Any

import msgspec
import pytest
from _api_support import (
    ARGUMENTS,
    Capture,
    assembled,
    encode_all,
    failing_script,
    json_response,
    length_script,
    openai_client,
    payloads,
    sse_events,
    sse_response,
    text_script,
    tool_script,
)
from _sdks import openai, type_adapter

from llmrt import (
    ErrorCode,
    GenerateOptions,
    ImageBlock,
    JsonSchemaFormat,
    Message,
    ModelSource,
    NamedToolChoice,
    PluginSource,
    ReasoningBlock,
    ReplayEnvelope,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    ToolSchema,
    ToolSource,
    UserSource,
)
from llmrt.actors.gateway.api import ApiRequestError, decode_responses, openai_error
from llmrt.actors.gateway.api._replay import PACKED, pack
from llmrt.actors.gateway.api.responses import PARAMETERS, ResponsesRequest

MODEL = "demo/demo-1"
CREATED = 1_700_000_000
#: The Responses adapter's replay entry of a reasoning item.
NATIVE = {"id": "rs_native", "encrypted": "gAAAAB-enc", "summary": ["Let me think."]}
WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n fake").decode()


def body(**kw: Any) -> bytes:
    kw.setdefault("model", MODEL)
    kw.setdefault("input", "hi")
    return msgspec.json.encode(kw)


def stream_of(script: list[Any], **request: Any) -> bytes:
    call = decode_responses(body(stream=True, **request))
    return encode_all(call.encoder(response_id="resp_1", created=CREATED), script)


def response(status: str, output: list[Any], usage: Any = None, **extra: Any) -> dict[str, Any]:
    """The response object these tests' requests get (a plain request echoes these fields)."""
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": CREATED,
        "status": status,
        "model": MODEL,
        "output": output,
        "usage": usage,
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "tools": [],
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "temperature": None,
        "top_p": None,
        "max_output_tokens": None,
        "metadata": {},
        "store": False,
        **extra,
    }


REASONING_DONE = {
    "id": "rs_1_0",
    "type": "reasoning",
    "summary": [{"type": "summary_text", "text": "Let me think."}],
}
TEXT_PART = {
    "type": "output_text",
    "text": "Checking the weather.",
    "annotations": [],
    "logprobs": [],
}
MESSAGE_DONE = {
    "id": "msg_1_1",
    "type": "message",
    "status": "completed",
    "role": "assistant",
    "content": [TEXT_PART],
}
CALL_DONE = {
    "id": "fc_1_2",
    "type": "function_call",
    "status": "completed",
    "call_id": "call_1",
    "name": "get_weather",
    "arguments": ARGUMENTS,
}
USAGE = {
    "input_tokens": 160,  # 100 uncached + 50 read + 10 written
    "input_tokens_details": {"cached_tokens": 50, "cache_write_tokens": 10},
    "output_tokens": 30,
    "output_tokens_details": {"reasoning_tokens": 5},
    "total_tokens": 190,
}


def event(kind: str, seq: int, **fields: Any) -> dict[str, Any]:
    return {"type": kind, **fields, "sequence_number": seq}


# ---- the stream, event by event ------------------------------------------------------------


def test_the_stream_of_a_tool_calling_turn_event_by_event() -> None:
    sent = stream_of(tool_script(ReplayEnvelope(blocks=(NATIVE, None, None))))
    rs, msg, fc = "rs_1_0", "msg_1_1", "fc_1_2"
    summary_part = {"type": "summary_text", "text": "Let me think."}
    reasoning_with_state = {**REASONING_DONE, "encrypted_content": pack(NATIVE)}
    assert payloads(sent) == [
        event("response.created", 0, response=response("in_progress", [])),
        event("response.in_progress", 1, response=response("in_progress", [])),
        event(
            "response.output_item.added",
            2,
            output_index=0,
            item={"id": rs, "type": "reasoning", "summary": []},
        ),
        event(
            "response.reasoning_summary_part.added",
            3,
            item_id=rs,
            output_index=0,
            summary_index=0,
            part={"type": "summary_text", "text": ""},
        ),
        event(
            "response.reasoning_summary_text.delta",
            4,
            item_id=rs,
            output_index=0,
            summary_index=0,
            delta="Let me ",
        ),
        event(
            "response.reasoning_summary_text.delta",
            5,
            item_id=rs,
            output_index=0,
            summary_index=0,
            delta="think.",
        ),
        event(
            "response.reasoning_summary_text.done",
            6,
            item_id=rs,
            output_index=0,
            summary_index=0,
            text="Let me think.",
        ),
        event(
            "response.reasoning_summary_part.done",
            7,
            item_id=rs,
            output_index=0,
            summary_index=0,
            part=summary_part,
        ),
        event("response.output_item.done", 8, output_index=0, item=REASONING_DONE),
        event(
            "response.output_item.added",
            9,
            output_index=1,
            item={
                "id": msg,
                "type": "message",
                "status": "in_progress",
                "role": "assistant",
                "content": [],
            },
        ),
        event(
            "response.content_part.added",
            10,
            item_id=msg,
            output_index=1,
            content_index=0,
            part={"type": "output_text", "text": "", "annotations": [], "logprobs": []},
        ),
        event(
            "response.output_text.delta",
            11,
            item_id=msg,
            output_index=1,
            content_index=0,
            delta="Checking",
            logprobs=[],
        ),
        event(
            "response.output_text.delta",
            12,
            item_id=msg,
            output_index=1,
            content_index=0,
            delta=" the weather.",
            logprobs=[],
        ),
        event(
            "response.output_text.done",
            13,
            item_id=msg,
            output_index=1,
            content_index=0,
            text="Checking the weather.",
            logprobs=[],
        ),
        event(
            "response.content_part.done",
            14,
            item_id=msg,
            output_index=1,
            content_index=0,
            part=TEXT_PART,
        ),
        event("response.output_item.done", 15, output_index=1, item=MESSAGE_DONE),
        event(
            "response.output_item.added",
            16,
            output_index=2,
            item={**CALL_DONE, "status": "in_progress", "arguments": ""},
        ),
        event(
            "response.function_call_arguments.delta",
            17,
            item_id=fc,
            output_index=2,
            delta='{"city":',
        ),
        event(
            "response.function_call_arguments.delta",
            18,
            item_id=fc,
            output_index=2,
            delta=' "Paris"}',
        ),
        event(
            "response.function_call_arguments.done",
            19,
            item_id=fc,
            output_index=2,
            name="get_weather",
            arguments=ARGUMENTS,
        ),
        event("response.output_item.done", 20, output_index=2, item=CALL_DONE),
        event(
            "response.completed",
            21,
            response=response("completed", [reasoning_with_state, MESSAGE_DONE, CALL_DONE], USAGE),
        ),
    ]
    assert [name for name, _ in sse_events(sent)] == [e["type"] for e in payloads(sent)]


def test_a_length_finish_is_an_incomplete_response() -> None:
    last = payloads(stream_of(length_script()))[-1]
    assert last["type"] == "response.incomplete"
    assert last["response"]["status"] == "incomplete"
    assert last["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert last["response"]["output"][0]["content"][0]["text"] == "Hello there"


def test_a_failure_after_the_start_is_an_error_event_then_a_failed_response() -> None:
    sent = payloads(stream_of(failing_script()))
    error, failed = sent[-2:]
    assert error == event(
        "error",
        error["sequence_number"],
        code="rate_limit_exceeded",
        message="the provider is rate limiting",
        param=None,
    )
    assert failed["type"] == "response.failed"
    assert failed["sequence_number"] == error["sequence_number"] + 1
    assert failed["response"]["status"] == "failed"
    assert failed["response"]["error"] == {
        "code": "rate_limit_exceeded",
        "message": "the provider is rate limiting",
    }
    # The text streamed before the failure is in the failed response, cut short.
    assert failed["response"]["output"][0]["status"] == "incomplete"
    assert [e["sequence_number"] for e in sent] == list(range(len(sent)))


@pytest.mark.parametrize(
    "script", [tool_script(ReplayEnvelope(blocks=(NATIVE, None, None))), text_script(),
               length_script(), failing_script()]
)  # fmt: skip
def test_every_event_validates_against_the_sdk_types(script: list[Any]) -> None:
    for _, data in sse_events(stream_of(script)):
        type_adapter("openai.types.responses.ResponseStreamEvent").validate_json(data, strict=True)


def test_ping_is_a_comment() -> None:
    assert decode_responses(body()).encoder().ping() == b": ping\n\n"


# ---- the SDK's accumulator agrees ----------------------------------------------------------


def streamed_by_sdk(
    script: list[Any], **request: Any
) -> tuple[openai.types.responses.Response | None, list[Any]]:
    def answer(raw: bytes) -> Any:
        return sse_response(encode_all(decode_responses(raw).encoder(), script))

    client = openai_client(Capture(answer))
    request.setdefault("input", "hi")
    with client.responses.stream(model=MODEL, **request) as stream:
        events = list(stream)
        final = stream.get_final_response() if events[-1].type == "response.completed" else None
    return final, events


def summary(response: openai.types.responses.Response) -> dict[str, Any]:
    out: dict[str, Any] = {"text": "", "reasoning": [], "calls": []}
    for item in response.output:
        if item.type == "message":
            out["text"] += "".join(part.text for part in item.content if part.type == "output_text")
        elif item.type == "reasoning":
            out["reasoning"].append(" ".join(s.text for s in item.summary))
        elif item.type == "function_call":
            out["calls"].append((item.call_id, item.name, item.arguments))
    return out


def test_the_sdk_accumulates_what_llmrt_assembles() -> None:
    script = tool_script(ReplayEnvelope(blocks=(NATIVE, None, None)))
    final, _ = streamed_by_sdk(script)
    assert final is not None
    assert summary(final) == {
        "text": "Checking the weather.",
        "reasoning": ["Let me think."],
        "calls": [("call_1", "get_weather", ARGUMENTS)],
    }
    assert final.usage is not None
    assert final.usage.input_tokens == 160
    assert final.usage.input_tokens_details.cached_tokens == 50
    assert final.usage.output_tokens_details.reasoning_tokens == 5
    assert final.status == "completed"
    text, _ = streamed_by_sdk(text_script())
    assert text is not None and text.output_text == "Hello there"


def test_the_sdk_sees_incomplete_and_failed_responses() -> None:
    final, events = streamed_by_sdk(length_script())
    assert final is None
    assert events[-1].type == "response.incomplete"
    assert events[-1].response.incomplete_details.reason == "max_output_tokens"
    final, events = streamed_by_sdk(failing_script())
    assert final is None
    assert [e.type for e in events[-2:]] == ["error", "response.failed"]
    assert events[-2].code == "rate_limit_exceeded"
    assert events[-1].response.error.code == "rate_limit_exceeded"


def test_the_non_streaming_answer_is_what_the_stream_accumulates() -> None:
    script = tool_script(ReplayEnvelope(blocks=(NATIVE, None, None)))

    def answer(raw: bytes) -> Any:
        call = decode_responses(raw)
        assert not call.stream
        return json_response(call.answer(assembled(script), response_id="resp_2"))

    client = openai_client(Capture(answer))
    created = client.responses.create(model=MODEL, input="hi")
    openai.types.responses.Response.model_validate(created.model_dump(), strict=True)
    streamed, _ = streamed_by_sdk(script)
    assert streamed is not None
    assert summary(created) == summary(streamed)
    assert created.usage == streamed.usage
    # Not streamed, the reasoning item is the provider's own: its id and encrypted content.
    reasoning = created.output[0]
    assert reasoning.type == "reasoning"
    assert (reasoning.id, reasoning.encrypted_content) == ("rs_native", "gAAAAB-enc")
    cut = msgspec.json.decode(decode_responses(body()).answer(assembled(length_script())))
    assert cut["status"] == "incomplete"
    assert cut["incomplete_details"] == {"reason": "max_output_tokens"}


# ---- requests the SDK builds, and replay through the client's history ----------------------


def sent_by_sdk(**request: Any) -> bytes:
    capture = Capture(
        lambda raw: json_response(decode_responses(raw).answer(assembled(text_script())))
    )
    openai_client(capture).responses.create(**request)
    return capture.bodies[0]


def test_a_conversation_the_sdk_sends_decodes_to_generate_options() -> None:
    raw = sent_by_sdk(
        model="openai-responses/o4-mini",
        instructions="Be brief.",
        input=[
            {"role": "developer", "content": "Use metric units."},
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "Weather here?"},
                    {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}",
                     "detail": "auto"},
                ],
            },
            {
                "type": "reasoning",
                "id": "rs_native",
                "summary": [{"type": "summary_text", "text": "Let me think."}],
                "encrypted_content": "gAAAAB-enc",
            },
            {
                "type": "message",
                "role": "assistant",
                "id": "msg_1",
                "status": "completed",
                "content": [{"type": "output_text", "text": "Checking.", "annotations": []}],
            },
            {"type": "function_call", "call_id": "call_1", "name": "get_weather",
             "arguments": ARGUMENTS},
            {"type": "function_call_output", "call_id": "call_1", "output": "18 C"},
        ],
        tools=[{"type": "function", "name": "get_weather", "description": "Weather",
                "parameters": WEATHER_SCHEMA, "strict": True}],
        tool_choice={"type": "function", "name": "get_weather"},
        text={"format": {"type": "json_schema", "name": "answer", "schema": {"type": "object"}}},
        reasoning={"effort": "low", "summary": "auto"},
        include=["reasoning.encrypted_content"],
        max_output_tokens=300,
        temperature=0.2,
        store=False,
        metadata={"k": "v"},
    )  # fmt: skip
    call = decode_responses(raw)
    native = ReplayEnvelope(blocks=(NATIVE, None, None))
    result = ToolResultBlock(tool_call_id="call_1", content=(TextBlock(text="18 C"),))
    assert call.options == GenerateOptions(
        provider="openai-responses",
        model="o4-mini",
        system="Be brief.",
        messages=(
            Message(
                id="m0",
                role="system",
                content=(TextBlock(text="Use metric units."),),
                source=PluginSource(plugin="http-api", form="instructions"),
            ),
            Message(
                id="m1",
                role="user",
                content=(
                    TextBlock(text="Weather here?"),
                    ImageBlock(media_type="image/png", data=PNG),
                ),
                source=UserSource(),
            ),
            Message(
                id="m2",
                role="assistant",
                content=(
                    ReasoningBlock(text="Let me think."),
                    TextBlock(text="Checking."),
                    ToolCallBlock(id="call_1", name="get_weather", arguments=ARGUMENTS),
                ),
                source=ModelSource(provider="openai-responses", model="o4-mini",
                                   replay_state=native),
            ),
            Message(id="m3", role="user", content=(result,), source=ToolSource(tool="get_weather")),
        ),
        reasoning_effort="low",
        tools=(ToolSchema(name="get_weather", description="Weather", parameters=WEATHER_SCHEMA,
                          strict=True),),
        temperature=0.2,
        max_tokens=300,
        tool_choice=NamedToolChoice(name="get_weather"),
        response_format=JsonSchemaFormat(schema={"type": "object"}, name="answer"),
    )  # fmt: skip


def test_a_streamed_reasoning_item_round_trips_through_the_clients_history() -> None:
    # The stream had fixed the item's id before the state arrived: the state is packed.
    final, _ = streamed_by_sdk(tool_script(ReplayEnvelope(blocks=(NATIVE, None, None))))
    assert final is not None
    reasoning = final.output[0]
    assert reasoning.type == "reasoning" and reasoning.encrypted_content is not None
    assert reasoning.encrypted_content.startswith(PACKED)
    history = [{"role": "user", "content": "weather?"}]
    history += [item.model_dump(exclude_none=True) for item in final.output]
    history.append({"type": "function_call_output", "call_id": "call_1", "output": "18 C"})
    call = decode_responses(sent_by_sdk(model=MODEL, input=history))
    assistant = call.options.messages[1]
    assert assistant.role == "assistant"
    assert isinstance(assistant.source, ModelSource)
    assert assistant.source.replay_state == ReplayEnvelope(blocks=(NATIVE, None, None))
    assert [type(b).__name__ for b in assistant.content] == [
        "ReasoningBlock",
        "TextBlock",
        "ToolCallBlock",
    ]


def test_a_reasoning_item_without_encrypted_content_has_no_replay_state() -> None:
    item = {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "x"}]}
    call = decode_responses(body(input=[{"role": "user", "content": "q"}, item]))
    source = call.options.messages[1].source
    assert isinstance(source, ModelSource) and source.replay_state is None


def test_previous_response_id_says_llmrt_keeps_no_conversation() -> None:
    with pytest.raises(ApiRequestError) as caught:
        decode_responses(body(previous_response_id="resp_0"))
    assert caught.value.param == "previous_response_id"
    assert "keeps no conversation" in str(caught.value) and "input" in str(caught.value)
    answer = openai_error(caught.value)
    assert answer.status == 400
    assert msgspec.json.decode(answer.body)["error"]["param"] == "previous_response_id"


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"conversation": "conv_1"}, "conversation"),
        ({"top_p": 0.3}, "top_p"),
        ({"parallel_tool_calls": False}, "parallel_tool_calls"),
        ({"truncation": "auto"}, "truncation"),
        ({"background": True}, "background"),
        ({"max_tool_calls": 3}, "max_tool_calls"),
        ({"prompt": {"id": "p"}}, "prompt"),
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"include": ["message.output_text.logprobs"]}, "include[0]"),
        ({"reasoning": {"summary": "detailed"}}, "reasoning.summary"),
        ({"text": {"verbosity": "low"}}, "text.verbosity"),
        ({"text": {"format": {"type": "grammar"}}}, "text.format.type"),
        ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"tool_choice": {"type": "web_search_preview"}}, "tool_choice"),
        ({"tool_choice": "any"}, "tool_choice"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type"),
        ({"input": [{"type": "web_search_call", "id": "ws"}]}, "input[0].type"),
        ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
         "input[0].content[0].type"),
        ({"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]},
         "input[0].content[0].file_id"),
        ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "https://x/a",
                                                  "detail": "high"}]}]},
         "input[0].content[0].detail"),
        ({"input": [{"type": "reasoning", "summary": [], "encrypted_content": PACKED + "!!"}]},
         "input[0].encrypted_content"),
        ({"input": [{"role": "user", "content": "x", "extra": 1}]}, "input[0].extra"),
        ({"input": []}, "input"),
        ({"max_output_tokens": 0}, "max_output_tokens"),
        ({"frobnicate": True}, "frobnicate"),
    ],
)  # fmt: skip
def test_refused_parameters_are_named(extra: dict[str, Any], param: str) -> None:
    with pytest.raises(ApiRequestError) as caught:
        decode_responses(body(**extra))
    assert caught.value.code == ErrorCode.INVALID_REQUEST
    assert caught.value.param == param


def test_defaults_that_change_nothing_are_accepted() -> None:
    call = decode_responses(
        body(
            store=True,
            top_p=1,
            parallel_tool_calls=True,
            truncation="disabled",
            reasoning={"summary": "auto"},
            text={"verbosity": "medium", "format": {"type": "text"}},
            service_tier="auto",
            user="u",
            stream_options={"include_obfuscation": False},
        )
    )
    assert call.options.response_format is None and call.options.reasoning_effort is None


def test_every_parameter_is_in_the_table() -> None:
    assert set(PARAMETERS) == set(ResponsesRequest.__struct_fields__)


def test_model_naming_and_unknown_models() -> None:
    call = decode_responses(body(model="fast"), aliases={"fast": "demo/demo-mini"})
    assert (call.options.provider, call.options.model, call.model) == ("demo", "demo-mini", "fast")
    with pytest.raises(ApiRequestError) as caught:
        decode_responses(body(model="gpt-5"))
    assert caught.value.code == ErrorCode.NO_ADAPTER and caught.value.param == "model"
    assert openai_error(caught.value).status == 404
