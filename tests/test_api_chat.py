"""OpenAI Chat Completions over llmrt: requests decoded, chunks encoded, checked against the SDK."""

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
from _sdks import openai

import llmrt
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
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    ToolSchema,
    ToolSource,
    UserSource,
)
from llmrt.actors.gateway.api import ApiRequestError, decode_chat
from llmrt.actors.gateway.api.chat import PARAMETERS, ChatRequest

MODEL = "demo/demo-1"
CREATED = 1_700_000_000
HEAD = {
    "id": "chatcmpl-1",
    "object": "chat.completion.chunk",
    "created": CREATED,
    "model": MODEL,
    "system_fingerprint": None,
}
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n fake").decode()
WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}


def body(**kw: Any) -> bytes:
    kw.setdefault("model", MODEL)
    kw.setdefault("messages", [{"role": "user", "content": "hi"}])
    return msgspec.json.encode(kw)


def chunk(
    delta: dict[str, Any], finish_reason: str | None = None, *, usage: bool = True
) -> dict[str, Any]:
    """One ``chat.completion.chunk``; ``usage: null`` is there only with ``include_usage``."""
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
    return {**HEAD, "choices": [choice], **({"usage": None} if usage else {})}


def user_parts(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": list(parts)}]}


def stream_of(script: list[Any], **request: Any) -> bytes:
    call = decode_chat(body(stream=True, **request))
    return encode_all(call.encoder(completion_id="chatcmpl-1", created=CREATED), script)


# ---- the stream, event by event ------------------------------------------------------------


def test_the_stream_of_a_tool_calling_turn_event_by_event() -> None:
    sent = stream_of(tool_script(), stream_options={"include_usage": True})
    assert payloads(sent) == [
        chunk({"role": "assistant", "reasoning_content": "Let me "}),
        chunk({"reasoning_content": "think."}),
        chunk({"content": "Checking"}),
        chunk({"content": " the weather."}),
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": ""},
                    }
                ]
            }
        ),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city":'}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": ' "Paris"}'}}]}),
        chunk({}, "tool_calls"),
        {
            **HEAD,
            "choices": [],
            "usage": {
                # 100 uncached + 50 cache reads + 10 cache writes: OpenAI counts them all.
                "prompt_tokens": 160,
                "completion_tokens": 30,
                "total_tokens": 190,
                "prompt_tokens_details": {"cached_tokens": 50, "cache_write_tokens": 10},
                "completion_tokens_details": {"reasoning_tokens": 5},
            },
        },
        "[DONE]",
    ]
    assert all(name is None for name, _ in sse_events(sent))  # chat streams name no events


def test_without_include_usage_no_chunk_carries_usage() -> None:
    sent = payloads(stream_of(text_script()))
    assert sent[-1] == "[DONE]"
    assert all("usage" not in event for event in sent[:-1])
    assert sent[-2]["choices"][0]["finish_reason"] == "stop"
    assert [event["choices"][0]["delta"] for event in sent[:-2]] == [
        {"role": "assistant", "content": "Hello"},
        {"content": " there"},
    ]


def test_a_failure_after_the_start_is_an_error_event_without_done() -> None:
    sent = payloads(stream_of(failing_script()))
    assert sent == [
        chunk({"role": "assistant", "content": "Hel"}, usage=False),
        {
            "error": {
                "message": "the provider is rate limiting",
                "type": "requests",
                "param": None,
                "code": "rate_limit_exceeded",
            }
        },
    ]


@pytest.mark.parametrize("script", [tool_script(), text_script(), length_script()])
def test_every_chunk_validates_against_the_sdk_type(script: list[Any]) -> None:
    sent = stream_of(script, stream_options={"include_usage": True})
    events = payloads(sent)
    assert events[-1] == "[DONE]"
    for event in events[:-1]:
        openai.types.chat.ChatCompletionChunk.model_validate(event, strict=True)


def test_ping_is_a_comment_every_client_skips() -> None:
    encoder = decode_chat(body(stream=True)).encoder()
    assert encoder.ping() == b": ping\n\n"
    assert sse_events(encoder.ping() + b"data: [DONE]\n\n") == [(None, b"[DONE]")]


# ---- the SDK's accumulator agrees ----------------------------------------------------------


def streamed_by_sdk(script: list[Any], **request: Any) -> openai.types.chat.ChatCompletion:
    def answer(raw: bytes) -> Any:
        call = decode_chat(raw)
        return sse_response(encode_all(call.encoder(), script))

    client = openai_client(Capture(answer))
    with client.chat.completions.stream(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], **request
    ) as stream:
        try:
            return stream.get_final_completion()
        except openai.LengthFinishReasonError as exc:
            # The SDK's parse step refuses a cut answer, and hands over what it accumulated.
            return exc.completion


def expected_message(script: list[Any]) -> dict[str, Any]:
    """What the answer holds by llmrt's own assembly of the script."""
    blocks = assembled(script).blocks()
    texts = [b.text for b in blocks if isinstance(b, TextBlock)]
    return {
        "content": "".join(texts) if texts else None,
        "reasoning": "".join(b.text for b in blocks if isinstance(b, ReasoningBlock)) or None,
        "calls": [(b.id, b.name, b.arguments) for b in blocks if isinstance(b, ToolCallBlock)],
    }


def message_of(completion: openai.types.chat.ChatCompletion) -> dict[str, Any]:
    message = completion.choices[0].message
    return {
        "content": message.content,
        "reasoning": getattr(message, "reasoning_content", None),
        "calls": [
            (call.id, call.function.name, call.function.arguments)  # type: ignore[union-attr]
            for call in message.tool_calls or ()
        ],
    }


@pytest.mark.parametrize(
    ("script", "finish_reason"),
    [(tool_script(), "tool_calls"), (text_script(), "stop"), (length_script(), "length")],
)
def test_the_sdk_accumulates_what_llmrt_assembles(script: list[Any], finish_reason: str) -> None:
    completion = streamed_by_sdk(script, stream_options={"include_usage": True})
    expected = expected_message(script)
    if finish_reason == "length":
        expected["calls"] = []  # (no call in this script; llmrt would drop it)
    assert message_of(completion) == expected
    assert completion.choices[0].finish_reason == finish_reason
    assert completion.model == MODEL
    usage = assembled(script).usage
    assert usage is not None and completion.usage is not None
    assert completion.usage.completion_tokens == usage.output_tokens
    assert completion.usage.prompt_tokens == (
        usage.input_tokens + (usage.cache_read_tokens or 0) + (usage.cache_write_tokens or 0)
    )


def test_the_sdk_raises_the_in_stream_error() -> None:
    with pytest.raises(openai.APIError, match="rate limiting"):
        streamed_by_sdk(failing_script())


def test_the_non_streaming_answer_is_what_the_stream_accumulates() -> None:
    script = tool_script()

    def answer(raw: bytes) -> Any:
        call = decode_chat(raw)
        assert not call.stream
        return json_response(call.answer(assembled(script), completion_id="c", created=CREATED))

    client = openai_client(Capture(answer))
    completion = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}]
    )
    openai.types.chat.ChatCompletion.model_validate(completion.model_dump(), strict=True)
    assert message_of(completion) == message_of(streamed_by_sdk(script))
    assert completion.choices[0].finish_reason == "tool_calls"
    assert completion.usage is not None
    assert completion.usage.model_dump(exclude_none=True) == {
        "prompt_tokens": 160,
        "completion_tokens": 30,
        "total_tokens": 190,
        "prompt_tokens_details": {"cached_tokens": 50, "cache_write_tokens": 10},
        "completion_tokens_details": {"reasoning_tokens": 5},
    }


def test_the_non_streaming_answer_of_a_length_finish() -> None:
    call = decode_chat(body())
    answer = msgspec.json.decode(call.answer(assembled(length_script())))
    assert answer["choices"][0]["finish_reason"] == "length"
    assert answer["choices"][0]["message"]["content"] == "Hello there"
    assert answer["object"] == "chat.completion"


# ---- requests the SDK builds ---------------------------------------------------------------


def sent_by_sdk(**request: Any) -> bytes:
    capture = Capture(lambda raw: json_response(decode_chat(raw).answer(assembled(text_script()))))
    openai_client(capture).chat.completions.create(**request)
    return capture.bodies[0]


def test_a_conversation_the_sdk_sends_decodes_to_generate_options() -> None:
    raw = sent_by_sdk(
        model="openai/gpt-4.1",
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "developer", "content": [{"type": "text", "text": "Use metric units."}]},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Weather here?"},
                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                    {
                        "type": "image_url",
                        "image_url": {"url": "https://x.test/a.jpg", "detail": "auto"},
                    },
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "reasoning_content": "The user wants weather.",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": ARGUMENTS},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "18 C"},
        ],  # type: ignore[list-item]
        tools=[
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "Weather",
                    "parameters": WEATHER_SCHEMA,
                    "strict": True,
                },
            }
        ],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "answer", "schema": {"type": "object"}, "strict": True},
        },
        reasoning_effort="low",
        max_completion_tokens=200,
        temperature=0.5,
        stop=["END"],
        user="someone",
        metadata={"k": "v"},
        store=False,
    )
    call = decode_chat(raw)
    instructions = PluginSource(plugin="http-api", form="instructions")
    result = ToolResultBlock(tool_call_id="call_1", content=(TextBlock(text="18 C"),))
    weather = ToolSchema(
        name="get_weather", description="Weather", parameters=WEATHER_SCHEMA, strict=True
    )
    assert call.options == GenerateOptions(
        provider="openai",
        model="gpt-4.1",
        messages=(
            Message(
                id="m0", role="system", content=(TextBlock(text="Be brief."),), source=instructions
            ),
            Message(
                id="m1",
                role="system",
                content=(TextBlock(text="Use metric units."),),
                source=instructions,
            ),
            Message(
                id="m2",
                role="user",
                content=(
                    TextBlock(text="Weather here?"),
                    ImageBlock(media_type="image/png", data=PNG),
                    ImageBlock(media_type="image/jpeg", url="https://x.test/a.jpg"),
                ),
                source=UserSource(),
            ),
            Message(
                id="m3",
                role="assistant",
                content=(
                    ReasoningBlock(text="The user wants weather."),
                    ToolCallBlock(id="call_1", name="get_weather", arguments=ARGUMENTS),
                ),
                source=ModelSource(provider="openai", model="gpt-4.1"),
            ),
            Message(id="m4", role="user", content=(result,), source=ToolSource(tool="get_weather")),
        ),
        reasoning_effort="low",
        tools=(weather,),
        temperature=0.5,
        max_tokens=200,
        stop=("END",),
        tool_choice=NamedToolChoice(name="get_weather"),
        response_format=JsonSchemaFormat(schema={"type": "object"}, name="answer", strict=True),
    )
    assert call.model == "openai/gpt-4.1" and not call.stream


def test_stream_options_and_plain_choices() -> None:
    call = decode_chat(
        sent_by_sdk(
            model=MODEL,
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=5,
            tools=[{"type": "function", "function": {"name": "f"}}],
            tool_choice="required",
            response_format={"type": "json_object"},
            stop="STOP",
        )
    )
    assert call.options.max_tokens == 5
    assert call.options.tool_choice == "required"
    assert call.options.response_format == llmrt.JsonObjectFormat()
    assert call.options.stop == ("STOP",)
    assert call.options.tools == (
        ToolSchema(name="f", description="", parameters={"type": "object", "properties": {}}),
    )
    streamed = decode_chat(body(stream=True, stream_options={"include_usage": True}))
    assert streamed.stream and streamed.include_usage


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"n": 2}, "n"),
        ({"top_p": 0.5}, "top_p"),
        ({"seed": 1}, "seed"),
        ({"logprobs": True}, "logprobs"),
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"logit_bias": {"1": 5}}, "logit_bias"),
        ({"frequency_penalty": 0.5}, "frequency_penalty"),
        ({"presence_penalty": -1}, "presence_penalty"),
        ({"parallel_tool_calls": False}, "parallel_tool_calls"),
        ({"modalities": ["text", "audio"]}, "modalities"),
        ({"audio": {"voice": "x", "format": "wav"}}, "audio"),
        ({"verbosity": "low"}, "verbosity"),
        ({"functions": [{"name": "f"}]}, "functions"),
        ({"max_tokens": 5, "max_completion_tokens": 6}, "max_tokens"),
        ({"tools": [{"type": "custom", "custom": {"name": "c"}}]}, "tools[0].type"),
        ({"tool_choice": {"type": "allowed_tools", "allowed_tools": {}}}, "tool_choice"),
        ({"messages": [{"role": "user", "content": "x", "name": "ann"}]}, "messages[0].name"),
        (user_parts({"type": "input_audio", "input_audio": {}}), "messages[0].content[0].type"),
        (
            user_parts({"type": "image_url", "image_url": {"url": "https://x/a", "detail": "low"}}),
            "messages[0].content[0].image_url.detail",
        ),
        (
            user_parts({"type": "image_url", "image_url": {"url": "ftp://x.test/a.png"}}),
            "messages[0].content[0].image_url.url",
        ),
        (
            user_parts({"type": "image_url", "image_url": {"url": "data:image/png,abc"}}),
            "messages[0].content[0].image_url.url",
        ),
        ({"temperature": 3}, "temperature"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": "5"}, "max_tokens"),
        ({"messages": []}, "messages"),
        ({"frobnicate": 1}, "frobnicate"),
        ({"stream_options": {"include_usage": True, "x": 1}}, "stream_options.x"),
    ],
)
def test_refused_parameters_are_named(extra: dict[str, Any], param: str) -> None:
    with pytest.raises(ApiRequestError) as caught:
        decode_chat(body(**extra))
    assert caught.value.code == ErrorCode.INVALID_REQUEST
    assert caught.value.param == param
    answer = caught.value  # the handler's 400, in OpenAI's shape
    error = msgspec.json.decode(llmrt.actors.gateway.api.openai_error(answer).body)["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error"


def test_defaults_that_change_nothing_are_accepted() -> None:
    call = decode_chat(
        body(
            n=1,
            top_p=1,
            frequency_penalty=0,
            presence_penalty=0,
            parallel_tool_calls=True,
            logprobs=False,
            modalities=["text"],
            service_tier="auto",
            prompt_cache_key="k",
            safety_identifier="s",
            stream_options={"include_obfuscation": False},
        )
    )
    assert call.options.messages[0].content == (TextBlock(text="hi"),)


def test_every_parameter_is_in_the_table() -> None:
    # The table docs/http-api.md prints covers exactly the fields the decoder reads.
    assert set(PARAMETERS) == set(ChatRequest.__struct_fields__)


def test_model_naming() -> None:
    assert decode_chat(body(model="openrouter/anthropic/claude")).options.provider == "openrouter"
    assert (
        decode_chat(body(model="openrouter/anthropic/claude")).options.model == "anthropic/claude"
    )
    aliased = decode_chat(body(model="gpt-5"), aliases={"gpt-5": "openai/gpt-5"})
    assert (aliased.options.provider, aliased.options.model, aliased.model) == (
        "openai",
        "gpt-5",
        "gpt-5",
    )
    with pytest.raises(ApiRequestError) as caught:
        decode_chat(body(model="gpt-5"), aliases={"fast": "demo/demo-1"})
    assert caught.value.code == ErrorCode.NO_ADAPTER
    assert "provider/model" in str(caught.value) and "fast" in str(caught.value)
    answer = llmrt.actors.gateway.api.openai_error(caught.value)
    assert answer.status == 404
    assert msgspec.json.decode(answer.body)["error"]["code"] == "model_not_found"


def test_malformed_json_is_a_coded_error() -> None:
    with pytest.raises(ApiRequestError, match="not JSON") as caught:
        decode_chat(b'{"model": ')
    assert caught.value.code == ErrorCode.INVALID_REQUEST
