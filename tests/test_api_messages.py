"""Anthropic Messages over llmrt: requests decoded, chunks encoded, checked against the SDK."""

from __future__ import annotations

import base64
from typing import Any

import msgspec
import pytest
from _api_support import (
    Capture,
    anthropic_client,
    assembled,
    encode_all,
    failing_script,
    json_response,
    length_script,
    payloads,
    sse_events,
    sse_response,
    text_script,
    tool_script,
)
from _sdks import anthropic, type_adapter

from llmrt import (
    BlockEnd,
    BlockStart,
    ErrorCode,
    Finish,
    FinishStop,
    GenerateOptions,
    ImageBlock,
    JsonSchemaFormat,
    Message,
    ModelSource,
    ReasoningBlock,
    ReplayEnvelope,
    TextBlock,
    TextDelta,
    TokenUsage,
    ToolCallBlock,
    ToolResultBlock,
    ToolSchema,
    ToolSource,
    UsageChunk,
    UserSource,
)
from llmrt.actors.gateway.api import ApiRequestError, anthropic_error, decode_messages
from llmrt.actors.gateway.api._replay import PACKED
from llmrt.actors.gateway.api.messages import (
    PARAMETERS,
    THINKING_BUDGETS,
    MessagesRequest,
    effort_of_budget,
)
from llmrt.adapters import anthropic as anthropic_adapter

MODEL = "demo/demo-1"
SIGNED = ReplayEnvelope(blocks=({"signature": "sig-1"}, None, None))
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n fake").decode()
WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}


def body(**kw: Any) -> bytes:
    kw.setdefault("model", MODEL)
    kw.setdefault("max_tokens", 100)
    kw.setdefault("messages", [{"role": "user", "content": "hi"}])
    return msgspec.json.encode(kw)


def stream_of(script: list[Any], **request: Any) -> bytes:
    call = decode_messages(body(stream=True, **request))
    return encode_all(call.encoder(message_id="msg_1"), script)


def delta(index: int, **fields: Any) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": fields}


def start(index: int, **block: Any) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def stop(index: int) -> dict[str, Any]:
    return {"type": "content_block_stop", "index": index}


# ---- the stream, event by event ------------------------------------------------------------


def test_the_stream_of_a_tool_calling_turn_event_by_event() -> None:
    sent = stream_of(tool_script(SIGNED))
    zero = {
        "input_tokens": 0,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": 0,
    }
    assert payloads(sent) == [
        {
            "type": "message_start",
            "message": {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": MODEL,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": zero,
            },
        },
        start(0, type="thinking", thinking="", signature=""),
        delta(0, type="thinking_delta", thinking="Let me "),
        delta(0, type="thinking_delta", thinking="think."),
        start(1, type="text", text=""),
        delta(1, type="text_delta", text="Checking"),
        delta(1, type="text_delta", text=" the weather."),
        stop(1),
        start(2, type="tool_use", id="call_1", name="get_weather", input={}),
        delta(2, type="input_json_delta", partial_json='{"city":'),
        delta(2, type="input_json_delta", partial_json=' "Paris"}'),
        stop(2),
        # The signature is llmrt replay state, known at the finish: the thinking block ends here.
        delta(0, type="signature_delta", signature="sig-1"),
        stop(0),
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {
                # Anthropic's arithmetic is llmrt's: uncached input, cache reads and writes apart.
                "input_tokens": 100,
                "cache_creation_input_tokens": 10,
                "cache_read_input_tokens": 50,
                "output_tokens": 30,
                "output_tokens_details": {"thinking_tokens": 5},
            },
        },
        {"type": "message_stop"},
    ]
    assert [name for name, _ in sse_events(sent)] == [e["type"] for e in payloads(sent)]


def test_a_failure_after_the_start_is_an_error_event_and_no_message_stop() -> None:
    sent = payloads(stream_of(failing_script()))
    assert sent[-1] == {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": "the provider is rate limiting"},
    }
    assert all(e["type"] != "message_stop" for e in sent)


@pytest.mark.parametrize(
    "script", [tool_script(SIGNED), text_script(), length_script(), tool_script()]
)
def test_every_event_validates_against_the_sdk_types(script: list[Any]) -> None:
    for _, data in sse_events(stream_of(script)):
        type_adapter("anthropic.types.RawMessageStreamEvent").validate_json(data, strict=True)


def test_ping_is_a_ping_event() -> None:
    ping = decode_messages(body()).encoder().ping()
    assert sse_events(ping) == [("ping", b'{"type":"ping"}')]


# ---- the SDK's accumulator agrees ----------------------------------------------------------


def streamed_by_sdk(script: list[Any], **request: Any) -> anthropic.types.Message:
    def answer(raw: bytes) -> Any:
        return sse_response(encode_all(decode_messages(raw).encoder(), script))

    client = anthropic_client(Capture(answer))
    request.setdefault("messages", [{"role": "user", "content": "hi"}])
    with client.messages.stream(model=MODEL, max_tokens=100, **request) as stream:
        return stream.get_final_message()


def blocks_of(message: anthropic.types.Message) -> list[Any]:
    return [block.model_dump(exclude_none=True) for block in message.content]


@pytest.mark.parametrize(
    ("script", "stop_reason"),
    [
        (tool_script(SIGNED), "tool_use"),
        (text_script(), "end_turn"),
        (length_script(), "max_tokens"),
    ],
)
def test_the_sdk_accumulates_what_llmrt_assembles(script: list[Any], stop_reason: str) -> None:
    final = streamed_by_sdk(script)
    assert final.stop_reason == stop_reason
    expected: list[Any] = []
    for block in assembled(script).blocks():
        if isinstance(block, TextBlock):
            expected.append({"type": "text", "text": block.text})
        elif isinstance(block, ReasoningBlock):
            expected.append({"type": "thinking", "thinking": block.text, "signature": "sig-1"})
        elif isinstance(block, ToolCallBlock):
            args = msgspec.json.decode(block.arguments)
            expected.append({"type": "tool_use", "id": block.id, "name": block.name, "input": args})
    assert blocks_of(final) == expected
    usage = assembled(script).usage
    assert usage is not None
    assert final.usage.input_tokens == usage.input_tokens
    assert final.usage.output_tokens == usage.output_tokens
    assert final.usage.cache_read_input_tokens == (usage.cache_read_tokens or 0)


def test_the_sdk_raises_the_in_stream_error() -> None:
    with pytest.raises(anthropic.APIStatusError, match="rate limiting"):
        streamed_by_sdk(failing_script())


def test_the_non_streaming_answer_is_what_the_stream_accumulates() -> None:
    script = tool_script(SIGNED)

    def answer(raw: bytes) -> Any:
        call = decode_messages(raw)
        assert not call.stream
        return json_response(call.answer(assembled(script), message_id="msg_2"))

    client = anthropic_client(Capture(answer))
    created = client.messages.create(
        model=MODEL, max_tokens=100, messages=[{"role": "user", "content": "hi"}]
    )
    anthropic.types.Message.model_validate(created.model_dump(), strict=True)
    assert blocks_of(created) == blocks_of(streamed_by_sdk(script))
    assert created.usage == streamed_by_sdk(script).usage
    assert created.stop_reason == "tool_use"


# ---- requests the SDK builds, and replay through the client's history ----------------------


def sent_by_sdk(**request: Any) -> bytes:
    capture = Capture(
        lambda raw: json_response(decode_messages(raw).answer(assembled(text_script())))
    )
    anthropic_client(capture).messages.create(**request)
    return capture.bodies[0]


def test_a_conversation_the_sdk_sends_decodes_to_generate_options() -> None:
    raw = sent_by_sdk(
        model="anthropic/claude-sonnet-4-5",
        max_tokens=1000,
        system=[{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Use metric.",
                "cache_control": {"type": "ephemeral"}}],
        messages=[
            {"role": "user", "content": [
                {"type": "text", "text": "Weather here?"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                             "data": PNG}},
                {"type": "image", "source": {"type": "url", "url": "https://x.test/p.webp"}},
            ]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "The user wants weather.", "signature": "sig-0"},
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                 "input": {"city": "Paris"}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18 C"},
            ]},
        ],
        tools=[{"name": "get_weather", "description": "Weather", "input_schema": WEATHER_SCHEMA,
                "strict": True}],
        tool_choice={"type": "any"},
        thinking={"type": "enabled", "budget_tokens": 8000},
        output_config={"format": {"type": "json_schema", "schema": {"type": "object"}}},
        stop_sequences=["END"],
        # This SDK version dropped `temperature`; older ones and other clients send it.
        extra_body={"temperature": 0.5},
        metadata={"user_id": "u1"},
    )  # fmt: skip
    call = decode_messages(raw)
    signed = ReplayEnvelope(blocks=({"signature": "sig-0"}, None, None))
    result = ToolResultBlock(tool_call_id="toolu_1", content=(TextBlock(text="18 C"),))
    assert call.options == GenerateOptions(
        provider="anthropic",
        model="claude-sonnet-4-5",
        system="Be brief.\n\nUse metric.",
        messages=(
            Message(id="m0", role="user", content=(
                TextBlock(text="Weather here?"),
                ImageBlock(media_type="image/png", data=PNG),
                ImageBlock(media_type="image/webp", url="https://x.test/p.webp"),
            ), source=UserSource()),
            Message(id="m1", role="assistant", content=(
                ReasoningBlock(text="The user wants weather."),
                TextBlock(text="Checking."),
                ToolCallBlock(id="toolu_1", name="get_weather", arguments='{"city":"Paris"}'),
            ), source=ModelSource(provider="anthropic", model="claude-sonnet-4-5",
                                  replay_state=signed)),
            Message(id="m2", role="user", content=(result,), source=ToolSource(tool="get_weather")),
        ),
        reasoning_effort="medium",  # the budget nearest 8,000 is medium's 8,192
        tools=(ToolSchema(name="get_weather", description="Weather", parameters=WEATHER_SCHEMA,
                          strict=True),),
        temperature=0.5,
        max_tokens=1000,
        stop=("END",),
        tool_choice="required",
        response_format=JsonSchemaFormat(schema={"type": "object"}),
    )  # fmt: skip


def test_a_streamed_signature_round_trips_through_the_clients_history() -> None:
    final = streamed_by_sdk(tool_script(SIGNED))
    history = [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": blocks_of(final)},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1"}]},
    ]
    call = decode_messages(sent_by_sdk(model=MODEL, max_tokens=10, messages=history))
    source = call.options.messages[1].source
    assert isinstance(source, ModelSource)
    assert source.replay_state == SIGNED  # the signature as itself, exactly the adapter's entry


def redacted_script() -> list[Any]:
    """A redacted thinking block (empty text, its data as replay state), then text."""
    return [
        BlockStart(index=0, block_type="reasoning"),
        BlockEnd(index=0, block=ReasoningBlock(text="")),
        BlockStart(index=1, block_type="text"),
        TextDelta(index=1, text="Hi"),
        BlockEnd(index=1, block=TextBlock(text="Hi")),
        UsageChunk(usage=TokenUsage(input_tokens=3, output_tokens=1)),
        Finish(
            reason=FinishStop(),
            replay_state=ReplayEnvelope(blocks=({"redacted": "opaque=="}, None)),
        ),
    ]


FOREIGN = {"id": "rs_9", "encrypted": "gAAA", "summary": ["x"]}


@pytest.mark.parametrize("streamed", [True, False])
@pytest.mark.parametrize(
    ("script", "entry"),
    [
        (tool_script(ReplayEnvelope(blocks=(FOREIGN, None, None))), FOREIGN),
        (redacted_script(), {"redacted": "opaque=="}),
    ],
    ids=["another-adapters-entry", "redacted"],
)
def test_other_replay_entries_round_trip(streamed: bool, script: list[Any], entry: Any) -> None:
    if streamed:
        content = blocks_of(streamed_by_sdk(script))
    else:
        content = msgspec.json.decode(decode_messages(body()).answer(assembled(script)))["content"]
    first = content[0]
    if not streamed and "redacted" in entry:
        assert first == {"type": "redacted_thinking", "data": "opaque=="}
    else:  # no native form: packed into the signature
        assert first["type"] == "thinking" and first["signature"].startswith(PACKED)
    history = [{"role": "user", "content": "q"}, {"role": "assistant", "content": content}]
    source = decode_messages(body(messages=history)).options.messages[1].source
    assert isinstance(source, ModelSource) and source.replay_state is not None
    assert source.replay_state.blocks is not None
    assert source.replay_state.blocks[0] == entry


def test_thinking_budgets_map_to_the_adapters_efforts() -> None:
    assert THINKING_BUDGETS == anthropic_adapter.THINKING_BUDGETS
    # Nearest by ratio: 4,096 (the geometric middle of 2,048 and 8,192) is the boundary.
    assert [effort_of_budget(b) for b in (1024, 2048, 4000, 5000, 8192, 12000, 31999)] == [
        "low",
        "low",
        "low",
        "medium",
        "medium",
        "medium",
        "high",
    ]
    disabled = decode_messages(body(thinking={"type": "disabled"}))
    assert disabled.options.reasoning_effort is None
    effort = decode_messages(body(output_config={"effort": "high"}))
    assert effort.options.reasoning_effort == "high"


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"top_p": 0.9}, "top_p"),
        ({"top_k": 5}, "top_k"),
        ({"container": "c"}, "container"),
        ({"mcp_servers": []}, "mcp_servers"),
        ({"thinking": {"type": "adaptive"}}, "thinking.type"),
        ({"thinking": {"type": "enabled", "budget_tokens": 2000, "display": "omitted"}},
         "thinking.display"),
        ({"thinking": {"type": "enabled", "budget_tokens": 2000},
          "output_config": {"effort": "low"}}, "output_config.effort"),
        ({"tool_choice": {"type": "auto", "disable_parallel_tool_use": True}},
         "tool_choice.disable_parallel_tool_use"),
        ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0].type"),
        ({"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]},
         "messages[0].content[0].type"),
        ({"messages": [{"role": "user", "content": [{"type": "thinking", "thinking": "x",
                                                      "signature": ""}]}]},
         "messages[0].content[0].type"),
        ({"messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "file", "file_id": "f"}}]}]},
         "messages[0].content[0].source.type"),
        ({"messages": [{"role": "assistant", "content": [
            {"type": "tool_use", "id": "t", "name": "f", "input": [1]}]}]},
         "messages[0].content[0].input"),
        ({"messages": [{"role": "assistant", "content": [
            {"type": "thinking", "thinking": "x", "signature": PACKED + "%%"}]}]},
         "messages[0].content[0].signature"),
        ({"messages": [{"role": "user", "content": "x", "id": 1}]}, "messages[0].id"),
        ({"temperature": 1.5}, "temperature"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"frobnicate": 1}, "frobnicate"),
    ],
)  # fmt: skip
def test_refused_parameters_are_named(extra: dict[str, Any], param: str) -> None:
    with pytest.raises(ApiRequestError) as caught:
        decode_messages(body(**extra))
    assert caught.value.code == ErrorCode.INVALID_REQUEST
    assert caught.value.param == param
    answer = anthropic_error(caught.value)
    assert answer.status == 400
    assert msgspec.json.decode(answer.body)["error"]["type"] == "invalid_request_error"


def test_missing_fields_are_named() -> None:
    with pytest.raises(ApiRequestError, match="content") as caught:
        decode_messages(msgspec.json.encode({"model": MODEL, "messages": [{"role": "user"}]}))
    assert caught.value.param == "messages[0].content"
    with pytest.raises(ApiRequestError) as caught:
        turn = {"role": "user", "content": "x"}
        decode_messages(msgspec.json.encode({"model": MODEL, "messages": [turn]}))
    assert caught.value.param == "max_tokens"
    assert "missing required field `max_tokens`" in str(caught.value)


def test_ignored_parameters_are_accepted() -> None:
    call = decode_messages(
        body(
            metadata={"user_id": "u"},
            service_tier="auto",
            cache_control={"type": "ephemeral"},
            inference_geo="us",
            tool_choice={"type": "auto", "disable_parallel_tool_use": False},
        )
    )
    assert call.options.tool_choice == "auto"


def test_every_parameter_is_in_the_table() -> None:
    assert set(PARAMETERS) == set(MessagesRequest.__struct_fields__)


def test_model_naming_and_unknown_models() -> None:
    call = decode_messages(body(model="claude"), aliases={"claude": "anthropic/claude-haiku-4-5"})
    assert (call.options.provider, call.options.model) == ("anthropic", "claude-haiku-4-5")
    with pytest.raises(ApiRequestError) as caught:
        decode_messages(body(model="claude-sonnet-4-5"))
    answer = anthropic_error(caught.value)
    assert answer.status == 404
    assert msgspec.json.decode(answer.body) == {
        "type": "error",
        "error": {"type": "not_found_error", "message": caught.value.failure.message},
    }
