"""Tool choice, structured output and strict tools: the vocabulary, each adapter's body, refusals.

Every adapter whose provider supports a feature sends it (checked on the body
the local upstream received); every other one refuses the request with
``INVALID_REQUEST`` before any I/O (the upstream saw no connection).
"""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest

import llmrt
from llmrt import (
    Adapter,
    ErrorCode,
    Finish,
    FinishError,
    GenerateOptions,
    JsonObjectFormat,
    JsonSchemaFormat,
    NamedToolChoice,
    StreamChunk,
    ToolCallBlock,
    ToolSchema,
)
from llmrt.adapters.anthropic import AnthropicAdapter
from llmrt.adapters.demo import DemoAdapter
from llmrt.adapters.gemini import GeminiAdapter
from llmrt.adapters.openai_chat import OpenAIChatAdapter
from llmrt.adapters.openai_responses import OpenAIResponsesAdapter
from llmrt.testing import (
    SSEScript,
    Upstream,
    anthropic_events,
    open_upstream,
    openai_events,
    sse_data,
)

KEY = "sk-test-0123456789"
ENV = {"TEST_KEY": KEY}
WEATHER = ToolSchema(
    name="get_weather",
    description="Weather for a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)
STRICT_WEATHER = msgspec.structs.replace(WEATHER, strict=True)
TIME = ToolSchema(name="get_time", description="The time", parameters={"type": "object"})
SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}},
    "required": ["answer"],
    "additionalProperties": False,
}
JSON_SCHEMA = JsonSchemaFormat(schema=SCHEMA, name="answer", strict=True)

GEMINI_PATH = "/v1beta/models/gemini-2.5-flash:streamGenerateContent"


def request(**kw: Any) -> GenerateOptions:
    kw.setdefault("messages", (llmrt.user_message("hello"),))
    kw.setdefault("model", "m")
    return GenerateOptions(provider="p", **kw)


def events_for(kind: str) -> list[bytes]:
    if kind == "anthropic":
        return anthropic_events(["ok"])
    if kind == "gemini":
        done = {
            "candidates": [
                {"index": 0, "content": {"parts": [{"text": "ok"}]}, "finishReason": "STOP"}
            ]
        }
        return [sse_data(done)]
    if kind == "responses":
        delta = {"type": "response.output_text.delta", "output_index": 0, "delta": "ok"}
        done = {"type": "response.completed", "response": {"id": "r", "status": "completed"}}
        return [sse_data(delta), sse_data(done)]
    return openai_events(["ok"])


def adapter_for(kind: str, upstream: Upstream, preset: str = "openai") -> Adapter:
    if kind == "anthropic":
        return AnthropicAdapter(base_url=upstream.base_url, api_key_env="TEST_KEY", environ=ENV)
    if kind == "gemini":
        return GeminiAdapter(base_url=upstream.base_url, api_key_env="TEST_KEY", environ=ENV)
    if kind == "responses":
        return OpenAIResponsesAdapter(
            base_url=upstream.base_url + "/v1", api_key_env="TEST_KEY", environ=ENV
        )
    return OpenAIChatAdapter(
        preset=preset, base_url=upstream.base_url, api_key_env="TEST_KEY", environ=ENV
    )


def model_for(kind: str) -> str:
    return {
        "gemini": "gemini-2.5-flash",
        "responses": "gpt-4.1",
        "anthropic": "claude-haiku-4-5",
    }.get(kind, "gpt-4.1-mini")


async def call(
    kind: str, options: GenerateOptions, preset: str = "openai"
) -> tuple[list[StreamChunk], Upstream]:
    paths = {GEMINI_PATH} if kind == "gemini" else None
    route = SSEScript(events=events_for(kind))
    upstream_cm = (
        open_upstream(route) if paths is None else open_upstream(route, script_paths=paths)
    )
    async with upstream_cm as upstream:
        async with llmrt.open_runtime() as rt:
            await rt.register_adapter(["p"], adapter_for(kind, upstream, preset))
            options = msgspec.structs.replace(options, model=model_for(kind))
            async with rt.stream(options) as stream:
                chunks = [chunk async for chunk in stream]
    return chunks, upstream


def refusal(chunks: list[StreamChunk]) -> llmrt.LlmFailure:
    last = chunks[-1]
    assert isinstance(last, Finish) and isinstance(last.reason, FinishError), last
    assert len(chunks) == 1, chunks
    return last.reason.failure


# ---- the vocabulary ----------------------------------------------------------------------------


def test_new_fields_default_to_nothing_and_encode_in_camel_case() -> None:
    plain = request()
    assert plain.tool_choice is None and plain.response_format is None
    assert b"toolChoice" not in llmrt.encode(plain)
    options = request(
        tools=(STRICT_WEATHER,),
        tool_choice=NamedToolChoice(name="get_weather"),
        response_format=JSON_SCHEMA,
    )
    wire = msgspec.json.decode(llmrt.encode(options))
    assert wire["toolChoice"] == {"type": "tool", "name": "get_weather"}
    assert wire["responseFormat"] == {
        "type": "json-schema",
        "schema": SCHEMA,
        "name": "answer",
        "strict": True,
    }
    assert wire["tools"][0]["strict"] is True
    assert llmrt.decode_request(llmrt.encode(options)) == options
    required = llmrt.decode_request(
        b'{"provider":"p","model":"m","messages":[],"toolChoice":"required",'
        b'"responseFormat":{"type":"json-object"}}'
    )
    assert required.tool_choice == "required"
    assert required.response_format == JsonObjectFormat()


def test_bad_tool_choice_and_format_are_decode_errors() -> None:
    with pytest.raises(llmrt.DecodeError, match=r"\$\.toolChoice"):
        llmrt.decode_request(b'{"provider":"p","model":"m","messages":[],"toolChoice":"any"}')
    with pytest.raises(llmrt.DecodeError, match=r"\$\.responseFormat"):
        llmrt.decode_request(
            b'{"provider":"p","model":"m","messages":[],"responseFormat":{"type":"xml"}}'
        )


def test_a_schema_is_deep_frozen() -> None:
    fmt = JsonSchemaFormat(schema={"type": "object", "properties": {}})
    with pytest.raises(TypeError):
        fmt.schema["type"] = "array"
    with pytest.raises(TypeError):
        fmt.schema["properties"]["x"] = {}


def test_required_features() -> None:
    assert llmrt.vocabulary.required_features(request()) == frozenset()
    assert (
        llmrt.vocabulary.required_features(request(tools=(WEATHER,), tool_choice="auto"))
        == frozenset()
    )
    assert llmrt.vocabulary.required_features(request(tools=(WEATHER,), tool_choice="none")) == {
        "tool-choice"
    }
    assert llmrt.vocabulary.required_features(
        request(tools=(STRICT_WEATHER,), response_format=JsonObjectFormat())
    ) == {"strict-tools", "json-object"}
    assert llmrt.vocabulary.required_features(request(response_format=JSON_SCHEMA)) == {
        "json-schema"
    }


# ---- the call path refuses before the adapter ----------------------------------------------


class Plain(Adapter):
    """An adapter that declares nothing: the contract's safe default."""

    def __init__(self) -> None:
        self.streams = 0

    async def stream(self, options: GenerateOptions) -> AsyncIterator[StreamChunk]:
        self.streams += 1
        yield Finish(reason=llmrt.FinishStop())


@pytest.mark.parametrize(
    "options",
    [
        request(tools=(WEATHER,), tool_choice="required"),
        request(tools=(WEATHER,), tool_choice=NamedToolChoice(name="get_weather")),
        request(response_format=JSON_SCHEMA),
        request(response_format=JsonObjectFormat()),
        request(tools=(STRICT_WEATHER,)),
    ],
)
async def test_an_adapter_without_the_feature_is_never_called(options: GenerateOptions) -> None:
    adapter = Plain()
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], adapter)
        async with rt.stream(options) as stream:
            chunks = [chunk async for chunk in stream]
    failure = refusal(chunks)
    assert failure.code == ErrorCode.INVALID_REQUEST
    assert "'p'" in failure.message and "cannot honour" in failure.message
    assert adapter.streams == 0


@pytest.mark.parametrize(
    ("options", "phrase"),
    [
        (request(tool_choice="required"), "needs at least one tool"),
        (request(tools=(WEATHER,), tool_choice=NamedToolChoice(name="nope")), "'nope'"),
    ],
)
async def test_a_tool_choice_that_names_no_tool_is_refused(
    options: GenerateOptions, phrase: str
) -> None:
    adapter = DemoAdapter()
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], adapter)
        async with rt.stream(options) as stream:
            chunks = [chunk async for chunk in stream]
    failure = refusal(chunks)
    assert failure.code == ErrorCode.INVALID_REQUEST
    assert phrase in failure.message


# ---- the demo honours tool choice ---------------------------------------------------------------


async def demo_tool_calls(options: GenerateOptions) -> list[ToolCallBlock]:
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], DemoAdapter())
        assembler = llmrt.BlockAssembler()
        async with rt.stream(options) as stream:
            async for chunk in stream:
                assembler.push(chunk)
    return [b for b in assembler.blocks() if isinstance(b, ToolCallBlock)]


async def test_the_demo_honours_tool_choice() -> None:
    tools = (WEATHER, TIME)
    assert [c.name for c in await demo_tool_calls(request(tools=tools))] == ["get_weather"]
    assert await demo_tool_calls(request(tools=tools, tool_choice="none")) == []
    named = request(tools=tools, tool_choice=NamedToolChoice(name="get_time"))
    assert [c.name for c in await demo_tool_calls(named)] == ["get_time"]
    required = request(tools=tools, tool_choice="required")
    assert [c.name for c in await demo_tool_calls(required)] == ["get_weather"]


async def test_the_demo_refuses_structured_output() -> None:
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], DemoAdapter())
        async with rt.stream(request(response_format=JSON_SCHEMA)) as stream:
            chunks = [chunk async for chunk in stream]
    assert refusal(chunks).code == ErrorCode.INVALID_REQUEST


# ---- the HTTP adapters' bodies ------------------------------------------------------------------


async def test_openai_chat_sends_tool_choice_format_and_strict() -> None:
    options = request(
        tools=(STRICT_WEATHER, TIME),
        tool_choice=NamedToolChoice(name="get_time"),
        response_format=JSON_SCHEMA,
    )
    _, upstream = await call("openai", options)
    body = upstream.requests[0].json
    assert body["tool_choice"] == {"type": "function", "function": {"name": "get_time"}}
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": SCHEMA, "strict": True},
    }
    assert body["tools"][0]["function"]["strict"] is True
    assert "strict" not in body["tools"][1]["function"]  # None: the server's default
    for choice in ("auto", "none", "required"):
        _, upstream = await call("openai", request(tools=(WEATHER,), tool_choice=choice))
        assert upstream.requests[0].json["tool_choice"] == choice
    _, upstream = await call("openai", request(response_format=JsonObjectFormat()))
    assert upstream.requests[0].json["response_format"] == {"type": "json_object"}


async def test_responses_sends_tool_choice_format_and_strict() -> None:
    options = request(
        tools=(STRICT_WEATHER, TIME),
        tool_choice=NamedToolChoice(name="get_weather"),
        response_format=JsonSchemaFormat(schema=SCHEMA, description="An answer."),
    )
    _, upstream = await call("responses", options)
    body = upstream.requests[0].json
    assert body["tool_choice"] == {"type": "function", "name": "get_weather"}
    assert body["text"] == {
        "format": {
            "type": "json_schema",
            "name": "response",
            "schema": SCHEMA,
            "description": "An answer.",
        }
    }
    assert [tool["strict"] for tool in body["tools"]] == [True, False]
    _, upstream = await call("responses", request(tools=(WEATHER,), tool_choice="required"))
    assert upstream.requests[0].json["tool_choice"] == "required"
    _, upstream = await call("responses", request(response_format=JsonObjectFormat()))
    assert upstream.requests[0].json["text"] == {"format": {"type": "json_object"}}


async def test_anthropic_sends_tool_choice_output_config_and_strict() -> None:
    options = request(tools=(STRICT_WEATHER,), tool_choice="required", response_format=JSON_SCHEMA)
    _, upstream = await call("anthropic", options)
    body = upstream.requests[0].json
    assert body["tool_choice"] == {"type": "any"}
    assert body["output_config"] == {"format": {"type": "json_schema", "schema": SCHEMA}}
    assert body["tools"][0]["strict"] is True
    expected = {
        "auto": {"type": "auto"},
        "none": {"type": "none"},
        NamedToolChoice(name="get_weather"): {"type": "tool", "name": "get_weather"},
    }
    for choice, sent in expected.items():
        _, upstream = await call("anthropic", request(tools=(WEATHER,), tool_choice=choice))
        assert upstream.requests[0].json["tool_choice"] == sent


async def test_gemini_sends_tool_config_and_a_json_response() -> None:
    options = request(
        tools=(WEATHER, TIME),
        tool_choice=NamedToolChoice(name="get_time"),
        response_format=JSON_SCHEMA,
    )
    _, upstream = await call("gemini", options)
    body = upstream.requests[0].json
    assert body["toolConfig"] == {
        "functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["get_time"]}
    }
    config = body["generationConfig"]
    assert config["responseMimeType"] == "application/json"
    assert config["responseJsonSchema"] == SCHEMA
    for choice, mode in (("auto", "AUTO"), ("none", "NONE"), ("required", "ANY")):
        _, upstream = await call("gemini", request(tools=(WEATHER,), tool_choice=choice))
        assert upstream.requests[0].json["toolConfig"] == {"functionCallingConfig": {"mode": mode}}
    _, upstream = await call("gemini", request(response_format=JsonObjectFormat()))
    config = upstream.requests[0].json["generationConfig"]
    assert config["responseMimeType"] == "application/json"
    assert "responseJsonSchema" not in config


@pytest.mark.parametrize(
    ("kind", "preset", "options"),
    [
        ("anthropic", "openai", request(response_format=JsonObjectFormat())),
        ("gemini", "openai", request(tools=(STRICT_WEATHER,))),
        ("openai", "ollama", request(tools=(WEATHER,), tool_choice="none")),
        ("openai", "deepseek-official", request(response_format=JSON_SCHEMA)),
        ("openai", "deepseek-official", request(tools=(STRICT_WEATHER,))),
        ("openai", "lmstudio", request(response_format=JsonObjectFormat())),
    ],
)
async def test_adapters_refuse_what_their_provider_lacks_before_any_io(
    kind: str, preset: str, options: GenerateOptions
) -> None:
    chunks, upstream = await call(kind, options, preset)
    failure = refusal(chunks)
    assert failure.code == ErrorCode.INVALID_REQUEST
    assert "cannot honour" in failure.message
    assert upstream.connections == []


async def test_anthropic_refuses_a_forced_tool_with_thinking_before_any_io() -> None:
    options = request(tools=(WEATHER,), tool_choice="required", reasoning_effort="low")
    chunks, upstream = await call("anthropic", options)
    failure = refusal(chunks)
    assert failure.code == ErrorCode.INVALID_REQUEST
    assert "extended thinking" in failure.message
    assert upstream.connections == []


def test_every_adapter_declares_its_features() -> None:
    # The table docs/adapters.md prints, read from the adapters themselves.
    anthropic = AnthropicAdapter(environ=ENV, api_key_env="TEST_KEY")
    gemini = GeminiAdapter(environ=ENV, api_key_env="TEST_KEY")
    responses = OpenAIResponsesAdapter(environ=ENV, api_key_env="TEST_KEY")
    chat = OpenAIChatAdapter(preset="openai", environ=ENV, api_key_env="TEST_KEY")
    assert anthropic.request_features("p", "m") == {"tool-choice", "json-schema", "strict-tools"}
    assert gemini.request_features("p", "m") == {"tool-choice", "json-schema", "json-object"}
    assert responses.request_features("p", "m") == llmrt.vocabulary.REQUEST_FEATURES
    assert chat.request_features("p", "m") == llmrt.vocabulary.REQUEST_FEATURES
    assert DemoAdapter().request_features("p", "m") == {"tool-choice"}
    assert Plain().request_features("p", "m") == frozenset()


# ---- the docs say what the adapters declare ------------------------------------------------

DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs"
FEATURE_COLUMNS = ("tool-choice", "json-schema", "json-object", "strict-tools")


def documented_features() -> dict[str, frozenset[str]]:
    text = (DOCS / "adapters.md").read_text("utf-8")
    table = text[text.index("| adapter (preset) |") :].split("\n\n", 1)[0]
    out: dict[str, frozenset[str]] = {}
    for line in table.splitlines()[2:]:
        cells = [cell.strip() for cell in line.strip("|").split(" | ")]
        marks = cells[1:]
        features = frozenset(
            f for f, mark in zip(FEATURE_COLUMNS, marks, strict=True) if mark == "yes"
        )
        adapter, _, presets = cells[0].partition(" (")
        for preset in presets.rstrip(")").split(", ") if presets else [""]:
            out[f"{adapter.strip('`')}:{preset.strip('`')}"] = features
    return out


def test_the_adapters_table_in_the_docs_is_what_each_adapter_declares() -> None:
    from llmrt.adapters._presets import PRESETS
    from llmrt.adapters.scripted import ScriptedAdapter

    documented = documented_features()
    declared: dict[str, frozenset[str]] = {
        f"openai_chat:{name}": preset.dialect.features for name, preset in PRESETS.items()
    }
    declared["openai_responses:"] = OpenAIResponsesAdapter(
        environ=ENV, api_key_env="TEST_KEY"
    ).request_features("p", "m")
    declared["anthropic:"] = AnthropicAdapter(environ=ENV, api_key_env="TEST_KEY").request_features(
        "p", "m"
    )
    declared["gemini:"] = GeminiAdapter(environ=ENV, api_key_env="TEST_KEY").request_features(
        "p", "m"
    )
    declared["demo:"] = DemoAdapter().request_features("p", "m")
    declared["scripted:"] = ScriptedAdapter([]).request_features("p", "m")
    assert documented == declared


def test_the_vocabulary_example_runs_as_printed() -> None:
    text = (DOCS / "vocabulary.md").read_text("utf-8")
    start = text.index("### Optional request features")
    block = text[
        text.index("```python\n", start) + 10 : text.index(
            "```\n", text.index("```python\n", start) + 10
        )
    ]
    exec(compile(block, "docs/vocabulary.md", "exec"), {})


async def test_the_protocol_example_refusal_is_what_the_runtime_says() -> None:
    options = GenerateOptions(
        provider="demo",
        model="demo-1",
        messages=(llmrt.user_message("x"),),
        response_format=JsonObjectFormat(),
    )
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["demo"], DemoAdapter())
        async with rt.stream(options) as stream:
            chunks = [chunk async for chunk in stream]
    line = llmrt.encode(chunks[-1]).decode()
    assert line in (DOCS / "protocol.md").read_text("utf-8")


def test_the_new_fields_decode_beside_a_registered_block() -> None:
    # A request holding a plugin's block is decoded by the open decoder (a mirror of
    # GenerateOptions): the new fields must come out as the real classes there too.
    @llmrt.vocabulary.register_content_block
    class FeatureTestBlock(
        llmrt.vocabulary.Wire, frozen=True, tag_field="type", tag="feature-test-block"
    ):
        data: str

    raw = (
        b'{"provider":"p","model":"m","messages":[{"id":"m1","role":"user","content":'
        b'[{"type":"feature-test-block","data":"x"}],"source":{"kind":"user"}}],'
        b'"tools":[{"name":"f","description":"","parameters":{},"strict":true}],'
        b'"toolChoice":{"type":"tool","name":"f"},'
        b'"responseFormat":{"type":"json-schema","schema":{"type":"object"}}}'
    )
    options = llmrt.decode_request(raw)
    assert type(options.messages[0].content[0]) is FeatureTestBlock
    assert type(options.tool_choice) is NamedToolChoice
    assert type(options.response_format) is JsonSchemaFormat
    assert options.tools is not None and options.tools[0].strict is True
