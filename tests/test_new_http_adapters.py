"""The Gemini and OpenAI Responses adapters against the local upstream, over loopback sockets."""

from __future__ import annotations

import base64
import json
import pathlib
from typing import Any

import pytest
import trio

import llmrt
from llmrt import (
    ErrorCode,
    Finish,
    FinishAborted,
    FinishError,
    GenerateOptions,
    ImageBlock,
    Message,
    ModelSource,
    ReasoningBlock,
    StreamChunk,
    TextBlock,
    ToolCallBlock,
    ToolSchema,
)
from llmrt.adapters.gemini import GeminiAdapter
from llmrt.adapters.openai_responses import OpenAIResponsesAdapter
from llmrt.testing import ErrorScript, SSEScript, Upstream, open_upstream, sse_data

WIRE = pathlib.Path(__file__).parent / "wire" / "written"
EXPECTED: dict[str, Any] = json.loads((WIRE / "expected.json").read_text())
ERRORS: list[dict[str, Any]] = json.loads((WIRE / "errors.json").read_text())
KEY = "AIzaTest-0123456789abcdef"
ENV = {"TEST_KEY": KEY}
GEMINI_MODEL = "gemini-2.5-flash"
#: Where each adapter posts (the upstream answers scripts only there).
PATHS = {
    "gemini": f"/v1beta/models/{GEMINI_MODEL}:streamGenerateContent",
    "responses": "/v1/responses",
}
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n fake").decode()
WEATHER = ToolSchema(
    name="get_weather",
    description="Weather for a city",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "additionalProperties": False,
    },
)


def adapter_for(kind: str, upstream: Upstream, **kw: Any) -> llmrt.Adapter:
    environ = kw.pop("environ", ENV)
    if kind == "gemini":
        return GeminiAdapter(
            base_url=upstream.base_url, api_key_env="TEST_KEY", environ=environ, **kw
        )
    return OpenAIResponsesAdapter(
        base_url=upstream.base_url + "/v1", api_key_env="TEST_KEY", environ=environ, **kw
    )


def model_of(kind: str) -> str:
    return GEMINI_MODEL if kind == "gemini" else "o4-mini"


def request(kind: str, **kw: Any) -> GenerateOptions:
    kw.setdefault("messages", (llmrt.user_message("hello"),))
    return GenerateOptions(provider="p", model=kw.pop("model", model_of(kind)), **kw)


def text_body(kind: str, texts: list[str]) -> list[bytes]:
    """A minimal successful stream of ``texts`` in the provider's format."""
    if kind == "gemini":
        events = [
            sse_data({"candidates": [{"index": 0, "content": {"parts": [{"text": t}]}}]})
            for t in texts
        ]
        done = {"candidates": [{"index": 0, "content": {"parts": []}, "finishReason": "STOP"}]}
        return [*events, sse_data(done)]
    events = [
        sse_data({"type": "response.output_text.delta", "output_index": 0, "delta": t})
        for t in texts
    ]
    done = {"type": "response.completed", "response": {"id": "r", "status": "completed"}}
    return [*events, sse_data(done)]


async def run_call(
    kind: str, upstream: Upstream, options: GenerateOptions | None = None, **kw: Any
) -> list[StreamChunk]:
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], adapter_for(kind, upstream, **kw))
        async with rt.stream(options or request(kind)) as call:
            return [chunk async for chunk in call]


def failure_of(chunks: list[StreamChunk]) -> llmrt.LlmFailure:
    last = chunks[-1]
    assert isinstance(last, Finish)
    assert isinstance(last.reason, FinishError | FinishAborted), last.reason
    return last.reason.failure


def serve(kind: str, route: Any) -> Any:
    return open_upstream(route, script_paths={PATHS[kind]})


# ---- transcripts and errors ---------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(EXPECTED))
async def test_transcript_over_loopback_gives_expected_blocks(name: str) -> None:
    case = EXPECTED[name]
    kind = case["provider"]
    async with serve(kind, SSEScript.from_transcript(WIRE / name)) as upstream:
        chunks = await run_call(kind, upstream)
        await upstream.wait_all_closed()
    assembler = llmrt.BlockAssembler()
    for chunk in chunks:
        assembler.push(chunk)
    blocks = llmrt.decode(json.dumps(case["blocks"]), tuple[llmrt.ContentBlock, ...])
    assert assembler.blocks() == blocks
    got = json.loads(llmrt.encode(assembler.finish))
    assert got["kind"] == case["finish"]["kind"]
    if "code" in case["finish"]:
        assert got["failure"]["code"] == case["finish"]["code"]
    if case["usage"] is not None:
        assert assembler.usage == llmrt.decode(json.dumps(case["usage"]), llmrt.TokenUsage)


@pytest.mark.parametrize("case", ERRORS, ids=[c["id"] for c in ERRORS])
async def test_documented_error_bodies_give_their_codes(case: dict[str, Any]) -> None:
    kind = case["provider"]
    script = ErrorScript(
        status=case["http_status"], headers=case["headers"], body=case["body"].encode()
    )
    async with serve(kind, script) as upstream:
        chunks = await run_call(kind, upstream)
    failure = failure_of(chunks)
    assert len(chunks) == 1
    assert failure.code == case["expected_code"]
    assert failure.status == case["http_status"]
    assert failure.provider_retry_after_ms == case["expected_retry_after_ms"]
    assert KEY not in failure.message


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (
            {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"},
            "OVERLOADED",
        ),
        ({"message": "Quota exceeded.", "status": "RESOURCE_EXHAUSTED"}, "RATE_LIMIT"),
        ({"code": 500, "message": "Internal error.", "status": "INTERNAL"}, "SERVER_ERROR"),
    ],
)
async def test_gemini_error_inside_a_200_stream(error: dict[str, Any], code: str) -> None:
    events = [*text_body("gemini", ["partial"])[:1], sse_data({"error": error})]
    async with serve("gemini", SSEScript(events=events)) as upstream:
        chunks = await run_call("gemini", upstream)
    assert failure_of(chunks).code == code
    assert sum(isinstance(c, Finish) for c in chunks) == 1


async def test_gemini_json_error_with_a_success_status() -> None:
    error = {
        "error": {
            "code": 429,
            "message": "Resource has been exhausted (e.g. check quota).",
            "status": "RESOURCE_EXHAUSTED",
            "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "2s"}],
        }
    }
    async with serve("gemini", ErrorScript(status=200, body=error)) as upstream:
        chunks = await run_call("gemini", upstream)
    failure = failure_of(chunks)
    assert failure.code == ErrorCode.RATE_LIMIT
    assert failure.provider_retry_after_ms == 2000
    assert "RESOURCE_EXHAUSTED" in failure.message


@pytest.mark.parametrize("kind", ["gemini", "responses"])
async def test_a_body_cut_before_the_end_is_a_network_error(kind: str) -> None:
    script = SSEScript(events=text_body(kind, ["a", "b", "c"]), disconnect_after=2)
    async with serve(kind, script) as upstream:
        chunks = await run_call(kind, upstream)
        await upstream.wait_all_closed()
    assert failure_of(chunks).code == ErrorCode.NETWORK


# ---- what goes over the wire ----------------------------------------------------------------


@pytest.mark.parametrize("kind", ["gemini", "responses"])
async def test_every_request_carries_attribution_and_credentials(kind: str) -> None:
    async with serve(kind, SSEScript(events=text_body(kind, ["hi"]))) as upstream:
        chunks = await run_call(kind, upstream)
        async with llmrt.open_runtime() as rt:
            await rt.register_adapter(["p"], adapter_for(kind, upstream))
            assert await rt.list_models("p")  # a 404 here: the built-in table answers
    assert not isinstance(chunks[-1].reason, FinishError), chunks[-1]  # type: ignore[union-attr]
    assert len(upstream.requests) == 2
    for sent in upstream.requests:
        assert sent.headers["user-agent"] == llmrt.adapter.attribution_headers()["User-Agent"]
        assert KEY not in sent.target, "the key never goes in the URL"
        if kind == "gemini":
            assert sent.headers["x-goog-api-key"] == KEY
            assert "authorization" not in sent.headers
        else:
            assert sent.headers["authorization"] == f"Bearer {KEY}"
    post = upstream.requests[0]
    assert post.path == PATHS[kind]
    if kind == "gemini":
        assert post.query == "alt=sse"
        assert upstream.requests[1].path == "/v1beta/models"
    else:
        assert post.json["stream"] is True and post.json["store"] is False
        assert upstream.requests[1].path == "/v1/models"


@pytest.mark.parametrize("kind", ["gemini", "responses"])
@pytest.mark.parametrize(
    ("environ", "code"),
    [({}, ErrorCode.MISSING_CREDENTIAL), ({"TEST_KEY": "bad key\n"}, ErrorCode.INVALID_CREDENTIAL)],
)
async def test_credentials_are_checked_before_any_io(
    kind: str, environ: dict[str, str], code: str
) -> None:
    async with serve(kind, SSEScript(events=text_body(kind, ["x"]))) as upstream:
        chunks = await run_call(kind, upstream, environ=environ)
    assert failure_of(chunks).code == code
    assert upstream.connections == []
    assert "bad key" not in failure_of(chunks).message


# ---- list_models ------------------------------------------------------------------------------


async def test_gemini_list_models_reads_the_model_list() -> None:
    listing = {
        "models": [
            {
                "name": "models/gemini-2.5-flash",
                "displayName": "Gemini 2.5 Flash",
                "supportedGenerationMethods": ["generateContent", "countTokens"],
            },
            {"name": "models/text-embedding-004", "supportedGenerationMethods": ["embedContent"]},
            {"name": "models/gemini-new", "supportedGenerationMethods": ["generateContent"]},
        ]
    }

    def router(request: Any) -> Any:
        return ErrorScript(200, body=listing) if request.path == "/v1beta/models" else None

    async with open_upstream(router) as upstream, llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], adapter_for("gemini", upstream))
        models = await rt.list_models("p")
    assert [(m.id, m.name) for m in models] == [
        ("gemini-2.5-flash", "Gemini 2.5 Flash"),
        ("gemini-new", "gemini-new"),
    ]
    assert upstream.requests[0].query == "pageSize=1000"


async def test_responses_list_models_reads_the_openai_list() -> None:
    async with open_upstream(SSEScript(events=[]), models=("gpt-5", "o3")) as upstream:
        async with llmrt.open_runtime() as rt:
            await rt.register_adapter(["p"], adapter_for("responses", upstream))
            models = await rt.list_models("p")
    assert [m.id for m in models] == ["gpt-5", "o3"]
    assert models[0].name == "GPT-5"  # enriched from the built-in table


@pytest.mark.parametrize("kind", ["gemini", "responses"])
async def test_list_models_falls_back_to_the_table_without_a_list(kind: str) -> None:
    def router(request: Any) -> Any:
        return ErrorScript(404, body={"error": {"message": "no such path"}})

    async with open_upstream(router) as upstream, llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], adapter_for(kind, upstream))
        models = await rt.list_models("p")
    ids = [m.id for m in models]
    assert model_of(kind) in ids
    assert len(ids) >= 5


async def test_gemini_list_models_refuses_an_unreadable_list() -> None:
    def router(request: Any) -> Any:
        return ErrorScript(200, body={"models": "not a list"})

    async with open_upstream(router) as upstream, llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], adapter_for("gemini", upstream))
        with pytest.raises(llmrt.LlmError) as caught:
            await rt.list_models("p")
    assert caught.value.failure.code == ErrorCode.PROTOCOL


async def test_gemini_list_models_classifies_a_bad_key() -> None:
    case = next(c for c in ERRORS if c["id"] == "gemini_400_api_key_invalid")

    def router(request: Any) -> Any:
        return ErrorScript(400, body=case["body"].encode())

    async with open_upstream(router) as upstream, llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], adapter_for("gemini", upstream))
        with pytest.raises(llmrt.LlmError) as caught:
            await rt.list_models("p")
    assert caught.value.failure.code == ErrorCode.AUTH


# ---- cancellation reaches the socket ----------------------------------------------------------


@pytest.mark.parametrize("kind", ["gemini", "responses"])
async def test_abort_closes_the_upstream_connection(kind: str) -> None:
    script = SSEScript(events=text_body(kind, ["a", "b", "c"]), stall_after=2)
    async with serve(kind, script) as upstream:
        async with llmrt.open_runtime() as rt:
            await rt.register_adapter(["p"], adapter_for(kind, upstream))
            async with rt.stream(request(kind)) as call:
                async for chunk in call:
                    if isinstance(chunk, llmrt.TextDelta):
                        call.abort()
                    last = chunk
            assert isinstance(last, Finish) and isinstance(last.reason, FinishAborted)
            with trio.fail_after(5):
                record = await upstream.wait_connection_closed(0)
    assert record.closed_by == "client"


@pytest.mark.parametrize("kind", ["gemini", "responses"])
async def test_idle_watchdog_closes_a_stalled_upstream(kind: str) -> None:
    script = SSEScript(events=text_body(kind, ["a", "b"]), stall_after=1)
    async with serve(kind, script) as upstream:
        async with llmrt.open_runtime() as rt:
            await rt.register_adapter(["p"], adapter_for(kind, upstream), stream_idle_timeout=0.2)
            async with rt.stream(request(kind)) as call:
                chunks = [c async for c in call]
            with trio.fail_after(5):
                record = await upstream.wait_connection_closed(0)
    assert failure_of(chunks).code == ErrorCode.TIMEOUT
    assert record.closed_by == "client"


# ---- request bodies, field by field -------------------------------------------------------------


def conversation(provider: str, replay: llmrt.ReplayEnvelope | None) -> tuple[Message, ...]:
    assistant = Message(
        id="m2",
        role="assistant",
        content=(
            ReasoningBlock(text="The user wants weather."),
            TextBlock(text="Let me check."),
            ToolCallBlock(id="call_1", name="get_weather", arguments='{"city": "Paris"}'),
        ),
        source=ModelSource(provider=provider, model="m", replay_state=replay),
    )
    return (
        llmrt.system_message("Answer briefly.", id="m0"),
        llmrt.user_message(
            (TextBlock(text="Weather in Paris?"), ImageBlock(media_type="image/png", data=PNG)),
            id="m1",
        ),
        assistant,
        llmrt.tool_result_message("call_1", "18 C, sunny", tool="get_weather", id="m3"),
    )


async def test_gemini_request_body_field_by_field() -> None:
    replay = llmrt.ReplayEnvelope(
        response={"responseId": "r1"},
        blocks=({"signature": "sig-think"}, None, {"signature": "sig-call"}),
    )
    options = GenerateOptions(
        provider="p",
        model=GEMINI_MODEL,
        system="You are terse.",
        messages=conversation("p", replay),
        tools=(WEATHER,),
        temperature=0.4,
        max_tokens=512,
        stop=("END",),
        reasoning_effort="low",
    )
    async with serve("gemini", SSEScript(events=text_body("gemini", ["ok"]))) as upstream:
        await run_call("gemini", upstream, options)
    body = upstream.requests[0].json
    assert body["systemInstruction"] == {"parts": [{"text": "You are terse.\n\nAnswer briefly."}]}
    assert body["contents"] == [
        {
            "role": "user",
            "parts": [
                {"text": "Weather in Paris?"},
                {"inlineData": {"mimeType": "image/png", "data": PNG}},
            ],
        },
        {
            "role": "model",
            "parts": [
                {
                    "text": "The user wants weather.",
                    "thought": True,
                    "thoughtSignature": "sig-think",
                },
                {"text": "Let me check."},
                {
                    "functionCall": {
                        "name": "get_weather",
                        "args": {"city": "Paris"},
                        "id": "call_1",
                    },
                    "thoughtSignature": "sig-call",
                },
            ],
        },
        {
            "role": "user",
            "parts": [
                {
                    "functionResponse": {
                        "name": "get_weather",
                        "response": {"output": "18 C, sunny"},
                        "id": "call_1",
                    }
                }
            ],
        },
    ]
    assert body["tools"] == [
        {
            "functionDeclarations": [
                {
                    "name": "get_weather",
                    "description": "Weather for a city",
                    "parametersJsonSchema": WEATHER.parameters,
                }
            ]
        }
    ]
    assert body["generationConfig"] == {
        "temperature": 0.4,
        "maxOutputTokens": 512,
        "stopSequences": ["END"],
        "thinkingConfig": {"includeThoughts": True, "thinkingBudget": 1024},
    }
    assert set(body) == {"contents", "systemInstruction", "tools", "generationConfig"}


async def test_gemini_3_body_without_replay_state() -> None:
    options = GenerateOptions(
        provider="p",
        model="gemini-3-pro-preview",
        messages=conversation("other", None),
        reasoning_effort="high",
    )
    async with serve_model("gemini-3-pro-preview") as upstream:
        await run_call("gemini", upstream, options)
    body = upstream.requests[0].json
    model_turn = body["contents"][1]
    # Unsigned thoughts stay home; Gemini 3 gets Google's stand-in signature on the call.
    assert model_turn["parts"] == [
        {"text": "Let me check."},
        {
            "functionCall": {"name": "get_weather", "args": {"city": "Paris"}, "id": "call_1"},
            "thoughtSignature": "skip_thought_signature_validator",
        },
    ]
    assert body["generationConfig"] == {
        "maxOutputTokens": 65_536,  # the model's default, materialized by the runtime
        "thinkingConfig": {"includeThoughts": True, "thinkingBudget": 24_576},
    }


def serve_model(model: str) -> Any:
    script = SSEScript(events=text_body("gemini", ["ok"]))
    return open_upstream(script, script_paths={f"/v1beta/models/{model}:streamGenerateContent"})


async def test_responses_request_body_field_by_field() -> None:
    replay = llmrt.ReplayEnvelope(
        response={"id": "resp_1"},
        blocks=({"id": "rs_1", "encrypted": "gAAA-enc", "summary": ["Thinking."]}, None, None),
    )
    options = GenerateOptions(
        provider="p",
        model="o4-mini",
        system="You are terse.",
        messages=conversation("p", replay),
        tools=(WEATHER,),
        max_tokens=512,
        reasoning_effort="high",
        temperature=0.3,
    )
    async with serve("responses", SSEScript(events=text_body("responses", ["ok"]))) as upstream:
        await run_call("responses", upstream, options)
    body = upstream.requests[0].json
    assert body["model"] == "o4-mini"
    assert body["instructions"] == "You are terse.\n\nAnswer briefly."
    assert body["input"] == [
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "Weather in Paris?"},
                {
                    "type": "input_image",
                    "image_url": f"data:image/png;base64,{PNG}",
                    "detail": "auto",
                },
            ],
        },
        {
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": "Thinking."}],
            "encrypted_content": "gAAA-enc",
            "id": "rs_1",
        },
        {"type": "message", "role": "assistant", "content": "Let me check."},
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "get_weather",
            "arguments": '{"city": "Paris"}',
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "18 C, sunny"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": WEATHER.parameters,
            "strict": False,
        }
    ]
    assert body["max_output_tokens"] == 512
    assert body["reasoning"] == {"summary": "auto", "effort": "high"}
    assert body["include"] == ["reasoning.encrypted_content"]
    assert body["stream"] is True and body["store"] is False
    assert "temperature" not in body  # reasoning models refuse it
    assert set(body) == {
        "model", "input", "stream", "store", "instructions", "tools",
        "max_output_tokens", "reasoning", "include",
    }  # fmt: skip


async def test_responses_body_for_a_plain_model_keeps_temperature() -> None:
    options = request("responses", model="gpt-4.1", temperature=0.2)
    async with serve("responses", SSEScript(events=text_body("responses", ["ok"]))) as upstream:
        await run_call("responses", upstream, options)
    body = upstream.requests[0].json
    assert body["temperature"] == 0.2
    assert "reasoning" not in body and "include" not in body


async def test_responses_refuses_stop_sequences_before_any_io() -> None:
    options = request("responses", stop=("END",))
    async with serve("responses", SSEScript(events=text_body("responses", ["ok"]))) as upstream:
        chunks = await run_call("responses", upstream, options)
    assert failure_of(chunks).code == ErrorCode.INVALID_REQUEST
    assert upstream.connections == []


# ---- replay state round trips -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "transcript"),
    [("gemini", "gemini_function_calls.sse"), ("responses", "responses_reasoning_text.sse")],
)
async def test_replay_state_goes_back_on_the_next_turn(kind: str, transcript: str) -> None:
    body = (WIRE / transcript).read_bytes()
    scripts = [SSEScript.from_transcript(body), SSEScript(events=text_body(kind, ["ok"]))]
    async with serve(kind, scripts) as upstream:
        async with llmrt.open_runtime() as rt:
            await rt.register_adapter(["p"], adapter_for(kind, upstream))
            assembler = llmrt.BlockAssembler()
            async with rt.stream(request(kind)) as call:
                async for chunk in call:
                    assembler.push(chunk)
            assert assembler.replay_state is not None
            reply = assembler.message(
                ModelSource(provider="p", model=model_of(kind), replay_state=assembler.replay_state)
            )
            messages: tuple[Message, ...] = (llmrt.user_message("hello"), reply)
            for block in reply.content:
                if isinstance(block, ToolCallBlock):
                    messages += (llmrt.tool_result_message(block.id, "sunny"),)
            async with rt.stream(request(kind, messages=messages)) as call:
                [c async for c in call]
    sent = upstream.requests[1].json
    if kind == "gemini":
        parts = sent["contents"][1]["parts"]
        calls = [p for p in parts if "functionCall" in p]
        assert calls[0]["thoughtSignature"] == "CiQBcsjafFCALLsig1"
        assert "thoughtSignature" not in calls[1]
        assert all("id" not in p["functionCall"] for p in calls), "made-up ids stay home"
        responses = [p["functionResponse"] for p in sent["contents"][2]["parts"]]
        assert [r["name"] for r in responses] == ["get_weather", "get_weather"]
    else:
        reasoning = [item for item in sent["input"] if item.get("type") == "reasoning"]
        assert reasoning == [
            {
                "type": "reasoning",
                "summary": [
                    {
                        "type": "summary_text",
                        "text": "**Counting letters**\n\nI count the r's in strawberry.",
                    },
                    {"type": "summary_text", "text": "**Answering**\n\nThere are three."},
                ],
                "encrypted_content": "gAAAAABpENCRYPTEDreasoningBLOB_0123==",
                "id": "rs_6a1f0c2e11",
            }
        ]
