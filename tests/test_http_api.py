"""The provider APIs over HTTP, with the official SDKs as clients of a real ``llmrt serve``.

One server for the module (`_http_api_server`): the demo route, and local
upstreams behind the openai_chat (``oa``) and anthropic (``an``) adapters.
Every request goes through the SDK's own request builder, parser and stream
accumulator; the SDK clients never retry (``max_retries=0``) and time out
after 20 s.
"""

from __future__ import annotations

import base64
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _http_api_server import WEATHER, Gateway, served_gateway
from _sdks import anthropic, openai
from _serving import metric

ROUTES = ["oa/gpt-4.1-mini", "an/claude-sonnet-4-5"]
#: Every adapter: the gemini and openai_responses routes' upstream answers text only.
ALL = ["demo/demo-1", *ROUTES, "gm/gemini-2.5-flash", "rs/o4-mini"]
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n not really a png").decode()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    with served_gateway(tmp_path_factory.mktemp("http-api")) as served:
        yield served


def oai(gateway: Gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.base + "/v1", api_key="unused", max_retries=0, timeout=20)


def ant(gateway: Gateway) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gateway.base, api_key="unused", max_retries=0, timeout=20)


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def metrics(gateway: Gateway) -> str:
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return data.partition(b"\r\n\r\n")[2].decode()


# ---- text, streamed and whole: the SDKs' accumulators agree with the whole answers ----------


@pytest.mark.parametrize("model", ALL)
def test_chat_stream_accumulates_what_the_whole_answer_says(gateway: Gateway, model: str) -> None:
    client = oai(gateway)
    with client.chat.completions.stream(
        model=model, messages=user("Hello"), stream_options={"include_usage": True}
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_completion()
    whole = client.chat.completions.create(model=model, messages=user("Hello"))
    assert "content.delta" in kinds and "content.done" in kinds
    assert final.choices[0].message.content == whole.choices[0].message.content
    assert final.choices[0].message.content
    assert final.choices[0].finish_reason == whole.choices[0].finish_reason == "stop"
    assert final.model == whole.model == model
    assert final.usage is not None and whole.usage is not None
    assert final.usage.completion_tokens == whole.usage.completion_tokens > 0
    assert final.usage.total_tokens == final.usage.prompt_tokens + final.usage.completion_tokens


@pytest.mark.parametrize("model", ALL)
def test_responses_stream_accumulates_what_the_whole_answer_says(
    gateway: Gateway, model: str
) -> None:
    client = oai(gateway)
    with client.responses.stream(model=model, input="Hello") as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    whole = client.responses.create(model=model, input="Hello")
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert final.output_text == whole.output_text != ""
    assert final.status == whole.status == "completed"
    assert final.usage is not None and whole.usage is not None
    assert final.usage.output_tokens == whole.usage.output_tokens > 0


@pytest.mark.parametrize("model", ALL)
def test_messages_stream_accumulates_what_the_whole_answer_says(
    gateway: Gateway, model: str
) -> None:
    client = ant(gateway)
    with client.messages.stream(model=model, max_tokens=200, messages=user("Hello")) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    whole = client.messages.create(model=model, max_tokens=200, messages=user("Hello"))
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"

    def text(message: anthropic.types.Message) -> str:
        return "".join(b.text for b in message.content if b.type == "text")

    assert text(final) == text(whole) != ""
    assert final.stop_reason == whole.stop_reason == "end_turn"
    assert final.usage.output_tokens == whole.usage.output_tokens > 0


def test_usage_follows_each_apis_arithmetic(gateway: Gateway) -> None:
    # The upstream reports 12 prompt tokens and 2 output chunks (openai_events' defaults).
    chat = oai(gateway).chat.completions.create(model="oa/gpt-4.1-mini", messages=user("Hello"))
    assert chat.usage is not None
    assert (chat.usage.prompt_tokens, chat.usage.completion_tokens) == (12, 2)
    response = oai(gateway).responses.create(model="an/claude-sonnet-4-5", input="Hello")
    assert response.usage is not None
    assert (response.usage.input_tokens, response.usage.total_tokens) == (12, 14)
    message = ant(gateway).messages.create(
        model="an/claude-sonnet-4-5", max_tokens=50, messages=user("Hello")
    )
    assert (message.usage.input_tokens, message.usage.output_tokens) == (12, 2)


# ---- reasoning, tools, images, finishes -------------------------------------------------------


@pytest.mark.parametrize("model", ROUTES)
def test_reasoning_reaches_each_api(gateway: Gateway, model: str) -> None:
    chat = oai(gateway).chat.completions.create(model=model, messages=user("think"))
    assert chat.choices[0].message.model_extra["reasoning_content"] == "Let me think."
    with oai(gateway).responses.stream(model=model, input="think") as stream:
        deltas = [e.delta for e in stream if e.type == "response.reasoning_summary_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == "Let me think."
    reasoning = [item for item in final.output if item.type == "reasoning"]
    assert reasoning[0].summary[0].text == "Let me think."
    # Replay state rides along where the route has some: Anthropic's signature, packed.
    assert bool(reasoning[0].encrypted_content) == model.startswith("an/")
    with ant(gateway).messages.stream(model=model, max_tokens=50, messages=user("think")) as s:
        message = s.get_final_message()
    thinking = [b for b in message.content if b.type == "thinking"]
    assert thinking[0].thinking == "Let me think."
    assert bool(thinking[0].signature) == model.startswith("an/")  # only Anthropic's has one
    assert message.content[-1].type == "text" and message.content[-1].text == "Forty-two."


@pytest.mark.parametrize("model", ROUTES)
def test_chat_tool_call_round_trip(gateway: Gateway, model: str) -> None:
    client = oai(gateway)
    messages: list[Any] = user("use the tool")
    with client.chat.completions.stream(
        model=model, messages=messages, tools=[WEATHER_TOOL]
    ) as stream:
        first = stream.get_final_completion()
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]
    assert (call.function.name, json.loads(call.function.arguments)) == (
        "get_weather",
        json.loads(WEATHER),
    )
    messages += [
        choice.message.model_dump(exclude_none=True, exclude={"parsed"}),
        {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"},
    ]
    second = client.chat.completions.create(model=model, messages=messages, tools=[WEATHER_TOOL])
    assert second.choices[0].message.content == "It is sunny in Paris."
    assert second.choices[0].finish_reason == "stop"


@pytest.mark.parametrize("model", ROUTES)
def test_responses_tool_call_round_trip(gateway: Gateway, model: str) -> None:
    client = oai(gateway)
    tool = {"type": "function", **WEATHER_TOOL["function"]}
    with client.responses.stream(model=model, input="use the tool", tools=[tool]) as stream:
        first = stream.get_final_response()
    calls = [item for item in first.output if item.type == "function_call"]
    assert calls and calls[0].name == "get_weather"
    assert json.loads(calls[0].arguments) == json.loads(WEATHER)
    history: list[Any] = [
        {"role": "user", "content": "use the tool"},
        *(item.model_dump(exclude_none=True) for item in first.output),
        {"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny"},
    ]
    second = client.responses.create(model=model, input=history, tools=[tool])
    assert second.output_text == "It is sunny in Paris."


@pytest.mark.parametrize("model", ROUTES)
def test_messages_tool_call_round_trip(gateway: Gateway, model: str) -> None:
    client = ant(gateway)
    tool = {
        "name": "get_weather",
        "description": "The weather in a city",
        "input_schema": WEATHER_TOOL["function"]["parameters"],
    }
    messages: list[Any] = user("use the tool")
    with client.messages.stream(
        model=model, max_tokens=100, messages=messages, tools=[tool]
    ) as stream:
        first = stream.get_final_message()
    assert first.stop_reason == "tool_use"
    use = next(b for b in first.content if b.type == "tool_use")
    assert (use.name, use.input) == ("get_weather", json.loads(WEATHER))
    messages += [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny"}],
        },
    ]
    second = client.messages.create(model=model, max_tokens=100, messages=messages, tools=[tool])
    assert second.content[0].type == "text" and second.content[0].text == "It is sunny in Paris."


def test_an_image_reaches_the_provider(gateway: Gateway) -> None:
    before = len(gateway.upstream.requests)
    content = [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
    ]
    oai(gateway).chat.completions.create(
        model="oa/gpt-4.1-mini", messages=[{"role": "user", "content": content}]
    )
    ant(gateway).messages.create(
        model="an/claude-sonnet-4-5",
        max_tokens=20,
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                 "data": PNG}},
                    {"type": "text", "text": "and this?"},
                ],
            }
        ],
    )  # fmt: skip
    sent = [request.body for request in gateway.upstream.requests[before:]]
    assert len(sent) == 2 and all(PNG.encode() in body for body in sent)


@pytest.mark.parametrize("model", ROUTES)
def test_length_finish_in_each_api(gateway: Gateway, model: str) -> None:
    chat = oai(gateway).chat.completions.create(model=model, messages=user("long"))
    assert chat.choices[0].finish_reason == "length"
    response = oai(gateway).responses.create(model=model, input="long")
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    message = ant(gateway).messages.create(model=model, max_tokens=5, messages=user("long"))
    assert message.stop_reason == "max_tokens"


# ---- model names ------------------------------------------------------------------------------


def test_models_lists_routes_groups_and_aliases_for_both_sdks(gateway: Gateway) -> None:
    ids = {model.id for model in oai(gateway).models.list()}
    assert {"demo/demo-1", "oa/gpt-4.1-mini", "an/claude-sonnet-4-5", "pool", "fast"} <= ids
    assert {model.id for model in ant(gateway).models.list()} == ids


def test_an_alias_and_a_group_name_a_model(gateway: Gateway) -> None:
    for model in ("fast", "pool", "pool/anything"):
        chat = oai(gateway).chat.completions.create(model=model, messages=user("Hello"))
        assert chat.choices[0].message.content == "Hello there"
        assert chat.model == model  # echoed as the client named it


def test_an_unknown_model_is_404_saying_how_to_name_one(gateway: Gateway) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        oai(gateway).chat.completions.create(model="gpt-5", messages=user("Hello"))
    assert caught.value.code == "model_not_found"
    assert "provider/model" in caught.value.message and "fast" in caught.value.message
    with pytest.raises(anthropic.NotFoundError):
        ant(gateway).messages.create(model="nobody/x", max_tokens=5, messages=user("Hello"))


def test_previous_response_id_is_refused_saying_llmrt_keeps_no_state(gateway: Gateway) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        oai(gateway).responses.create(
            model="demo/demo-1", input="Hello", previous_response_id="resp_1"
        )
    assert caught.value.param == "previous_response_id"
    assert "store: false" in caught.value.message


def test_count_tokens_is_the_apis_400_for_a_known_model_and_404_for_another(
    gateway: Gateway,
) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        ant(gateway).messages.count_tokens(model="an/claude-sonnet-4-5", messages=user("Hello"))
    assert "no token counter" in caught.value.message
    with pytest.raises(anthropic.NotFoundError):
        ant(gateway).messages.count_tokens(model="nope/x", messages=user("Hello"))


# ---- errors -----------------------------------------------------------------------------------

OPENAI_ERRORS = [
    ("ratelimit", "RateLimitError", 429),
    ("badkey", "AuthenticationError", 401),
    ("overload", "InternalServerError", 503),
    ("context", "BadRequestError", 400),
    ("broken", "InternalServerError", 502),
]
ANTHROPIC_ERRORS = [
    ("ratelimit", "RateLimitError", 429),
    ("badkey", "AuthenticationError", 401),
    ("overload", "OverloadedError", 529),
    ("context", "BadRequestError", 400),
    ("broken", "InternalServerError", 502),
]


@pytest.mark.parametrize("model", ROUTES)
@pytest.mark.parametrize(("word", "error", "status"), OPENAI_ERRORS)
def test_openai_error_classes(
    gateway: Gateway, model: str, word: str, error: str, status: int
) -> None:
    client = oai(gateway)
    for stream in (False, True):
        with pytest.raises(getattr(openai, error)) as caught:
            if stream:
                with client.chat.completions.stream(model=model, messages=user(word)) as s:
                    list(s)
            else:
                client.responses.create(model=model, input=word)
        assert caught.value.status_code == status
    if word == "ratelimit":
        assert caught.value.response.headers["retry-after"] == "3"
    if word == "context":
        assert caught.value.code == "context_length_exceeded"


@pytest.mark.parametrize("model", ROUTES)
@pytest.mark.parametrize(("word", "error", "status"), ANTHROPIC_ERRORS)
def test_anthropic_error_classes(
    gateway: Gateway, model: str, word: str, error: str, status: int
) -> None:
    client = ant(gateway)
    for stream in (False, True):
        with pytest.raises(getattr(anthropic, error)) as caught:
            if stream:
                with client.messages.stream(model=model, max_tokens=5, messages=user(word)) as s:
                    list(s)
            else:
                client.messages.create(model=model, max_tokens=5, messages=user(word))
        assert caught.value.status_code == status


# ---- a stream the client closes mid-way -------------------------------------------------------


def _aborted(gateway: Gateway, provider: str) -> float:
    return (
        metric(metrics(gateway), "llmrt_calls_finished_total", provider=provider, reason="aborted")
        or 0.0
    )


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
def test_a_stream_closed_mid_way_closes_the_upstream_and_counts_as_aborted(
    gateway: Gateway, api: str
) -> None:
    provider = "an" if api == "messages" else "oa"
    model = "an/claude-sonnet-4-5" if api == "messages" else "oa/gpt-4.1-mini"
    before = _aborted(gateway, provider)
    if api == "chat":
        stream: Any = oai(gateway).chat.completions.create(
            model=model, messages=user("stall"), stream=True
        )
    elif api == "responses":
        stream = oai(gateway).responses.create(model=model, input="stall", stream=True)
    else:
        stream = ant(gateway).messages.create(
            model=model, max_tokens=50, messages=user("stall"), stream=True
        )
    next(iter(stream))  # the stream has started
    # The adapter's pooled connection that carries the stalled response.
    connection = gateway.upstream.requests[-1].connection
    stream.close()  # the SDK closes the HTTP connection
    record = gateway.upstream_call(gateway.upstream.wait_connection_closed, connection)
    assert record.closed_by == "client" and not record.completed
    deadline = time.monotonic() + 10
    while _aborted(gateway, provider) < before + 1:
        assert time.monotonic() < deadline, "the call was not counted as aborted"
        time.sleep(0.05)


def test_a_gateway_token_is_taken_as_bearer_or_x_api_key(tmp_path: Path) -> None:
    with served_gateway(tmp_path, token="s3cret-token") as gateway:
        for client in (
            openai.OpenAI(base_url=gateway.base + "/v1", api_key="s3cret-token", max_retries=0),
            openai.OpenAI(base_url=gateway.base + "/v1", api_key="wrong", max_retries=0),
        ):
            if client.api_key == "wrong":
                with pytest.raises(openai.AuthenticationError) as caught:
                    client.chat.completions.create(model="demo/demo-1", messages=user("Hi"))
                assert "s3cret" not in caught.value.message
            else:
                client.chat.completions.create(model="demo/demo-1", messages=user("Hi"))
        good = anthropic.Anthropic(base_url=gateway.base, api_key="s3cret-token", max_retries=0)
        good.messages.create(model="demo/demo-1", max_tokens=50, messages=user("Hi"))
        with pytest.raises(anthropic.AuthenticationError):
            anthropic.Anthropic(base_url=gateway.base, api_key="no", max_retries=0).messages.create(
                model="demo/demo-1", max_tokens=50, messages=user("Hi")
            )


def test_the_apis_are_served_under_workers(tmp_path: Path) -> None:
    with served_gateway(tmp_path, "--workers", "2") as gateway:
        client = oai(gateway)
        # Connection: close on every answer, so each request is a new connection, which
        # the kernel spreads over the workers' listening sockets.
        for _ in range(6):
            with client.chat.completions.stream(model="fast", messages=user("Hello")) as stream:
                assert stream.get_final_completion().choices[0].message.content == "Hello there"
        message = ant(gateway).messages.create(
            model="an/claude-sonnet-4-5", max_tokens=20, messages=user("Hello")
        )
        assert message.content[0].type == "text"
        # /metrics sums the workers' figures, each as its worker last reported them.
        deadline = time.monotonic() + 20
        while metric(metrics(gateway), "llmrt_calls_started_total", provider="oa") != 6:
            assert time.monotonic() < deadline, metrics(gateway)
            time.sleep(0.1)
