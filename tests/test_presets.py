"""The OpenAI-compatible presets as data, and the battery every preset passes over loopback.

Per preset: the request body as the upstream received it, field by field;
User-Agent and credentials on every request (chat and model list); abort and
the idle watchdog close the upstream socket; ``list_models`` from the
endpoint, falling back on the preset's table. Transcripts and error bodies
per preset are in ``test_wire_shapes.py``.
"""

from __future__ import annotations

import io
import pathlib
import re
from typing import Any

import pytest
import trio

import llmrt
from llmrt import ErrorCode, Finish, FinishAborted, FinishError, GenerateOptions, StreamChunk
from llmrt.actors.app.cli import main
from llmrt.actors.app.config import describe, load_config
from llmrt.adapters._openai_wire import DIALECTS
from llmrt.adapters._presets import PRESETS
from llmrt.adapters.anthropic import AnthropicAdapter
from llmrt.adapters.openai_chat import OpenAIChatAdapter
from llmrt.testing import (
    ErrorScript,
    SSEScript,
    Upstream,
    anthropic_events,
    open_upstream,
    openai_events,
)

KEY = "sk-preset-test-0123456789"
NAMES = sorted(PRESETS)
HOSTED = [name for name in NAMES if PRESETS[name].api_key_env]
LOCAL = [name for name in NAMES if PRESETS[name].local]


def adapter(preset: str, upstream: Upstream, **kw: Any) -> OpenAIChatAdapter:
    key_env = PRESETS[preset].api_key_env
    return OpenAIChatAdapter(
        preset=preset,
        base_url=upstream.base_url,
        environ={key_env: KEY} if key_env else {},
        **kw,
    )


def request(**kw: Any) -> GenerateOptions:
    kw.setdefault("messages", (llmrt.user_message("hello"),))
    return GenerateOptions(provider="p", model=kw.pop("model", "m"), **kw)


async def run_call(
    preset: str, upstream: Upstream, options: GenerateOptions | None = None
) -> list[StreamChunk]:
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], adapter(preset, upstream))
        async with rt.stream(options or request()) as call:
            return [chunk async for chunk in call]


# ---- the data --------------------------------------------------------------------------------


def test_every_preset_is_complete() -> None:
    assert {"openrouter", "groq", "cerebras", "mistral", "xai", "together", "fireworks"} <= set(
        HOSTED
    )
    assert set(LOCAL) == {"vllm", "ollama", "llama.cpp", "lmstudio"}
    for name, preset in PRESETS.items():
        assert preset.name == name
        assert preset.kind in DIALECTS, name
        assert preset.dialect.name == preset.kind
        if preset.local:
            assert preset.api_key_env is None and preset.route is None
            assert preset.base_url is not None and preset.base_url.startswith("http://localhost:")
        elif preset.base_url is not None:
            assert preset.base_url.startswith("https://"), name
            assert preset.api_key_env and re.fullmatch(r"[A-Z]+_API_KEY", preset.api_key_env)
            assert preset.route
        ids = [spec.id for spec in preset.models]
        assert len(ids) == len(set(ids)), f"{name}: duplicate model ids"


def test_hosted_presets_are_detected_from_their_keys(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    environ = {"GROQ_API_KEY": KEY, "XAI_API_KEY": KEY, "MISTRAL_API_KEY": ""}
    config = load_config(environ=environ)
    assert [(s.route, s.preset, s.api_key_env) for s in config.routes] == [
        ("groq", "groq", "GROQ_API_KEY"),
        ("xai", "xai", "XAI_API_KEY"),
        ("demo", None, None),
    ]
    out = io.StringIO()
    assert main(["providers"], out=out, environ=environ) == 0
    text = out.getvalue()
    assert "openai_chat/groq" in text and "openai_chat/xai" in text
    assert "mistral" not in text and "ollama" not in text
    assert KEY not in text


def test_a_local_server_is_listed_when_the_file_declares_it(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "llmrt.toml"
    path.write_text('[[provider]]\nroute = "local"\nadapter = "openai_chat"\npreset = "ollama"\n')
    config = load_config(path, environ={})
    (line, _demo) = describe(config)
    assert line.split()[:4] == ["local", "openai_chat/ollama", "key:", "none"]
    spec = config.routes[0]
    built = OpenAIChatAdapter(preset=spec.preset or "", base_url=spec.base_url)
    assert built.base_url == "http://localhost:11434/v1"


# ---- what goes over the wire -----------------------------------------------------------------


@pytest.mark.parametrize("preset", NAMES)
async def test_request_body_and_headers_as_the_upstream_received_them(preset: str) -> None:
    options = request(system="Be brief.", temperature=0.3, max_tokens=77, stop=("END",))
    async with open_upstream(SSEScript(events=openai_events(["hi"]))) as upstream:
        chunks = await run_call(preset, upstream, options)
    assert isinstance(chunks[-1], Finish) and not isinstance(chunks[-1].reason, FinishError)
    (sent,) = upstream.requests
    assert sent.method == "POST" and sent.path == "/chat/completions"
    assert sent.headers["user-agent"] == llmrt.adapter.attribution_headers()["User-Agent"]
    assert sent.headers["content-type"] == "application/json"
    if PRESETS[preset].api_key_env:
        assert sent.headers["authorization"] == f"Bearer {KEY}"
    else:
        assert "authorization" not in sent.headers
    dialect = PRESETS[preset].dialect
    want: dict[str, Any] = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hello"},
        ],
        "stream": True,
        "temperature": 0.3,
        "max_tokens": 77,
        "stop": ["END"],
    }
    if dialect.stream_usage:
        want["stream_options"] = {"include_usage": True}
    assert sent.json == want


@pytest.mark.parametrize("preset", NAMES)
async def test_a_tool_loop_goes_out_field_by_field(preset: str) -> None:
    weather = llmrt.ToolSchema(
        name="get_weather",
        description="Weather for a city",
        parameters={"type": "object", "properties": {"city": {"type": "string"}}},
    )
    assistant = llmrt.Message(
        id="a1",
        role="assistant",
        content=(
            llmrt.ReasoningBlock(text="Weather wanted."),
            llmrt.TextBlock(text="Checking."),
            llmrt.ToolCallBlock(id="call_1", name="get_weather", arguments='{"city":"Paris"}'),
        ),
        source=llmrt.ModelSource(provider="p", model="m"),
    )
    options = request(
        messages=(
            llmrt.user_message("Weather in Paris?"),
            assistant,
            llmrt.tool_result_message("call_1", "18 C", tool="get_weather"),
        ),
        tools=(weather,),
    )
    async with open_upstream(SSEScript(events=openai_events(["ok"]))) as upstream:
        await run_call(preset, upstream, options)
    (sent,) = upstream.requests
    user, said, result = sent.json["messages"]
    assert user == {"role": "user", "content": "Weather in Paris?"}
    back = PRESETS[preset].dialect.reasoning_back_field
    assert said == {
        "role": "assistant",
        "content": "Checking.",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
            }
        ],
        **({back: "Weather wanted."} if back else {}),
    }
    assert result == {"role": "tool", "tool_call_id": "call_1", "content": "18 C"}
    assert sent.json["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather for a city",
                "parameters": weather.parameters,
            },
        }
    ]


def test_llmrt_call_defaults_to_a_presets_first_model(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from llmrt.actors.app._setup import default_model

    monkeypatch.chdir(tmp_path)  # no llmrt.toml here
    config = load_config(environ={"GROQ_API_KEY": KEY})
    assert default_model(config, "groq") == PRESETS["groq"].models[0].id
    with pytest.raises(SystemExit):
        default_model(load_config(environ={"TOGETHER_API_KEY": KEY}), "together")


@pytest.mark.parametrize(
    ("preset", "model", "effort", "fields"),
    [
        ("deepseek-official", "deepseek-chat", "none", {"thinking": {"type": "disabled"}}),
        ("groq", "openai/gpt-oss-20b", "low", {"reasoning_effort": "low"}),
        ("xai", "grok-3-mini", "high", {"reasoning_effort": "high"}),
    ],
)
async def test_reasoning_effort_goes_as_the_dialect_says(
    preset: str, model: str, effort: str, fields: dict[str, Any]
) -> None:
    async with open_upstream(SSEScript(events=openai_events(["hi"]))) as upstream:
        await run_call(preset, upstream, request(model=model, reasoning_effort=effort))
    (sent,) = upstream.requests
    sent_fields = {k: v for k, v in sent.json.items() if k in ("thinking", "reasoning_effort")}
    assert sent_fields == fields


# ---- cancellation reaches the socket ---------------------------------------------------------


@pytest.mark.parametrize("preset", NAMES)
async def test_abort_closes_the_upstream_socket(preset: str) -> None:
    script = SSEScript(events=openai_events(["a", "b"]), stall_after=3)
    async with open_upstream(script) as upstream:
        async with llmrt.open_runtime() as rt:
            await rt.register_adapter(["p"], adapter(preset, upstream))
            async with rt.stream(request()) as call:
                async for chunk in call:
                    if isinstance(chunk, llmrt.TextDelta):
                        call.abort()
                    last = chunk
            assert isinstance(last, Finish) and isinstance(last.reason, FinishAborted)
            with trio.fail_after(5):
                record = await upstream.wait_connection_closed(0)
    assert record.closed_by == "client"


@pytest.mark.parametrize("preset", ["groq", "vllm", "mistral"])
async def test_idle_timeout_closes_the_upstream_socket(preset: str) -> None:
    script = SSEScript(events=openai_events(["a", "b"]), stall_after=2)
    async with open_upstream(script) as upstream:
        async with llmrt.open_runtime() as rt:
            await rt.register_adapter(["p"], adapter(preset, upstream), stream_idle_timeout=0.2)
            async with rt.stream(request()) as call:
                chunks = [c async for c in call]
            with trio.fail_after(5):
                await upstream.wait_connection_closed(0)
    last = chunks[-1]
    assert isinstance(last, Finish) and isinstance(last.reason, FinishError)
    assert last.reason.failure.code == ErrorCode.TIMEOUT


# ---- list_models -----------------------------------------------------------------------------


@pytest.mark.parametrize("preset", ["groq", "ollama"])
async def test_list_models_reads_the_endpoint(preset: str) -> None:
    async with open_upstream(SSEScript(events=()), models=("llama-3.3-70b-versatile", "x")) as up:
        models = await adapter(preset, up).list_models("p")
    known = "Llama 3.3 70B Versatile" if preset == "groq" else "llama-3.3-70b-versatile"
    assert [(m.id, m.name) for m in models] == [("llama-3.3-70b-versatile", known), ("x", "x")]
    (sent,) = up.requests
    assert sent.method == "GET" and sent.path == "/models"
    assert sent.headers["user-agent"] == llmrt.adapter.attribution_headers()["User-Agent"]
    if PRESETS[preset].api_key_env:
        assert sent.headers["authorization"] == f"Bearer {KEY}"
    else:
        assert "authorization" not in sent.headers


async def test_list_models_takes_the_names_the_list_gives() -> None:
    listing = {
        "data": [
            {"id": "anthropic/claude-sonnet-4.5", "name": "Anthropic: Claude Sonnet 4.5"},
            {"id": "llama-3.3-70b-versatile", "object": "model", "owned_by": "Meta"},
        ]
    }
    async with open_upstream(lambda request: ErrorScript(status=200, body=listing)) as upstream:
        models = await adapter("groq", upstream).list_models("p")
    assert [(m.id, m.name, m.input_modalities) for m in models] == [
        ("anthropic/claude-sonnet-4.5", "Anthropic: Claude Sonnet 4.5", None),
        ("llama-3.3-70b-versatile", "Llama 3.3 70B Versatile", ("text",)),
    ]


async def test_list_models_falls_back_on_the_table_without_an_endpoint() -> None:
    def no_list(request: Any) -> Any:
        return ErrorScript(status=404, body={"error": {"message": "Not Found"}})

    async with open_upstream(no_list) as upstream:
        models = await adapter("xai", upstream).list_models("p")
    assert [m.id for m in models] == [spec.id for spec in PRESETS["xai"].models]
    assert models[0].name == "Grok 4"
    async with open_upstream(no_list) as upstream:
        # Without a table there is nothing to fall back on: the 404 is the answer.
        with pytest.raises(llmrt.LlmError) as info:
            await adapter("vllm", upstream).list_models("p")
    assert info.value.failure.code == ErrorCode.INVALID_REQUEST


async def test_list_models_classifies_errors_and_refuses_garbage() -> None:
    unauthorized = ErrorScript(status=401, body={"error": {"message": "Invalid API Key"}})
    async with open_upstream(lambda request: unauthorized) as upstream:
        with pytest.raises(llmrt.LlmError) as info:
            await adapter("groq", upstream).list_models("p")
    assert info.value.failure.code == ErrorCode.AUTH and info.value.failure.status == 401
    garbage = ErrorScript(status=200, body={"models": ["not", "the", "shape"]})
    async with open_upstream(lambda request: garbage) as upstream:
        with pytest.raises(llmrt.LlmError) as info:
            await adapter("groq", upstream).list_models("p")
    assert info.value.failure.code == ErrorCode.PROTOCOL


async def test_anthropic_list_models_uses_the_same_helper() -> None:
    async with open_upstream(SSEScript(events=anthropic_events(["x"]))) as upstream:
        claude = AnthropicAdapter(base_url=upstream.base_url, environ={"ANTHROPIC_API_KEY": KEY})
        models = await claude.list_models("p")
    assert [m.id for m in models] == ["gpt-4.1-mini", "claude-sonnet-4-5"]
    assert models[1].input_modalities == ("text", "image")
    (sent,) = upstream.requests
    assert sent.path == "/v1/models" and sent.headers["x-api-key"] == KEY
    assert sent.headers["user-agent"] == llmrt.adapter.attribution_headers()["User-Agent"]
