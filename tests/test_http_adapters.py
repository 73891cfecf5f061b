"""The HTTP adapters against the local upstream server, over real loopback sockets."""

from __future__ import annotations

import json
import pathlib
import random
from typing import Any

import pytest
import trio

import llmrt
from llmrt import ErrorCode, Finish, FinishAborted, FinishError, GenerateOptions, StreamChunk
from llmrt.adapters.anthropic import AnthropicAdapter
from llmrt.adapters.openai_chat import OpenAIChatAdapter
from llmrt.testing import (
    ErrorScript,
    SSEScript,
    Upstream,
    anthropic_events,
    open_upstream,
    openai_events,
    sse_data,
)

WIRE = pathlib.Path(__file__).parent / "wire"
EXPECTED: dict[str, Any] = json.loads((WIRE / "expected.json").read_text())
ERRORS: list[dict[str, Any]] = json.loads((WIRE / "errors.json").read_text())
KEY = "sk-test-0123456789abcdef"
ENV = {"TEST_KEY": KEY}


def adapter_for(kind: str, upstream: Upstream, **kw: Any) -> llmrt.Adapter:
    if kind == "anthropic":
        return AnthropicAdapter(
            base_url=upstream.base_url, api_key_env="TEST_KEY", environ=kw.pop("environ", ENV), **kw
        )
    preset = "deepseek-official" if kind == "deepseek" else "openai-compatible"
    return OpenAIChatAdapter(
        preset=preset,
        base_url=upstream.base_url,
        api_key_env="TEST_KEY",
        environ=kw.pop("environ", ENV),
        **kw,
    )


def request(model: str = "m", **kw: Any) -> GenerateOptions:
    kw.setdefault("messages", (llmrt.user_message("hello"),))
    return GenerateOptions(provider="p", model=model, **kw)


async def run_call(
    kind: str, upstream: Upstream, options: GenerateOptions | None = None, **kw: Any
) -> list[StreamChunk]:
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], adapter_for(kind, upstream, **kw))
        async with rt.stream(options or request()) as call:
            return [chunk async for chunk in call]


def failure_of(chunks: list[StreamChunk]) -> llmrt.LlmFailure:
    last = chunks[-1]
    assert isinstance(last, Finish)
    assert isinstance(last.reason, FinishError | FinishAborted), last.reason
    return last.reason.failure


# ---- recorded transcripts ---------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(EXPECTED))
async def test_transcript_over_loopback_gives_expected_blocks(name: str) -> None:
    expected = EXPECTED[name]
    kind = expected["provider"]
    async with open_upstream(SSEScript.from_transcript(WIRE / name)) as upstream:
        chunks = await run_call(kind, upstream)
        await upstream.wait_all_closed()
    assembler = llmrt.BlockAssembler()
    for chunk in chunks:
        assembler.push(chunk)
    assert isinstance(chunks[-1], Finish)
    want_blocks = expected["blocks"] if "blocks" in expected else expected["blocks_streamed"]
    blocks = llmrt.decode(json.dumps(want_blocks), tuple[llmrt.ContentBlock, ...])
    assert assembler.blocks() == blocks
    finish = llmrt.encode(assembler.finish)
    want = expected["finish"]
    got = json.loads(finish)
    assert got["kind"] == want["kind"]
    if "code" in want:
        assert got["failure"]["code"] == want["code"]
    if expected.get("usage") is not None:
        assert assembler.usage == llmrt.decode(json.dumps(expected["usage"]), llmrt.TokenUsage)


@pytest.mark.parametrize("case", ERRORS, ids=[c["id"] for c in ERRORS])
async def test_http_error_cases_give_their_codes(case: dict[str, Any]) -> None:
    script = ErrorScript(
        status=case["http_status"], headers=case["headers"], body=case["body"].encode()
    )
    async with open_upstream(script) as upstream:
        chunks = await run_call(case["provider"], upstream)
    failure = failure_of(chunks)
    assert len(chunks) == 1
    assert failure.code == case["expected_code"]
    assert failure.status == case["http_status"]
    assert failure.provider_retry_after_ms == case["expected_retry_after_ms"]
    assert KEY not in failure.message


# ---- what goes over the wire ----------------------------------------------------------------


@pytest.mark.parametrize("kind", ["openai", "deepseek", "anthropic"])
async def test_every_request_carries_attribution_and_credentials(kind: str) -> None:
    events = anthropic_events(["hi"]) if kind == "anthropic" else openai_events(["hi"])
    async with open_upstream(SSEScript(events=events)) as upstream:
        chunks = await run_call(kind, upstream)
    assert isinstance(chunks[-1], Finish)
    assert not isinstance(chunks[-1].reason, FinishError), chunks[-1]
    (sent,) = upstream.requests
    assert sent.headers["user-agent"] == llmrt.adapter.attribution_headers()["User-Agent"]
    if kind == "anthropic":
        assert sent.path == "/v1/messages"
        assert sent.headers["x-api-key"] == KEY
        assert sent.headers["anthropic-version"] == "2023-06-01"
        assert sent.json["max_tokens"] > 0
    else:
        assert sent.path == "/chat/completions"
        assert sent.headers["authorization"] == f"Bearer {KEY}"
        assert sent.json["stream"] is True
        assert sent.json["stream_options"] == {"include_usage": True}
    assert sent.json["messages"][-1]["content"] in ("hello", [{"type": "text", "text": "hello"}])


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
@pytest.mark.parametrize(
    ("environ", "code"),
    [
        ({}, ErrorCode.MISSING_CREDENTIAL),
        ({"TEST_KEY": "sk bad key\n"}, ErrorCode.INVALID_CREDENTIAL),
    ],
)
async def test_credentials_are_checked_before_any_io(
    kind: str, environ: dict[str, str], code: str
) -> None:
    async with open_upstream(SSEScript(events=openai_events(["x"]))) as upstream:
        chunks = await run_call(kind, upstream, environ=environ)
    assert failure_of(chunks).code == code
    assert upstream.connections == []
    assert "bad key" not in failure_of(chunks).message


async def test_thinking_signature_goes_back_to_anthropic() -> None:
    body = (WIRE / "anthropic_thinking_tool.sse").read_bytes()
    async with open_upstream([SSEScript.from_transcript(body)] * 2) as upstream:
        async with llmrt.open_runtime() as rt:
            await rt.register_adapter(["p"], adapter_for("anthropic", upstream))
            assembler = llmrt.BlockAssembler()
            async with rt.stream(request()) as call:
                async for chunk in call:
                    assembler.push(chunk)
            assert assembler.replay_state is not None
            reply = assembler.message(
                llmrt.ModelSource(provider="p", model="m", replay_state=assembler.replay_state)
            )
            follow_up = request(messages=(llmrt.user_message("hello"), reply))
            async with rt.stream(follow_up) as call:
                [c async for c in call]
    sent = upstream.requests[1].json["messages"][1]["content"]
    thinking = [block for block in sent if block["type"] == "thinking"]
    assert len(thinking) == 1
    assert thinking[0]["signature"]


# ---- bad provider input -------------------------------------------------------------------------


def _openai_prefix() -> list[bytes]:
    return openai_events(["Hello", " there"])[:3]


@pytest.mark.parametrize(
    ("script", "code"),
    [
        (SSEScript(events=openai_events(["a", "b", "c"]), disconnect_after=3), ErrorCode.NETWORK),
        (
            SSEScript(events=openai_events(["a", "b", "c"]), disconnect_after=3, reset=True),
            ErrorCode.NETWORK,
        ),
        (SSEScript(events=[*_openai_prefix(), b"data: {not json\n\n"]), ErrorCode.PROTOCOL),
        (
            SSEScript(events=[*_openai_prefix(), b"data: " + b"x" * (9 << 20) + b"\n\n"]),
            ErrorCode.PROTOCOL,
        ),
        (
            ErrorScript(status=200, body="<html><body>Bad gateway</body></html>"),
            ErrorCode.PROTOCOL,
        ),
        (
            ErrorScript(status=502, body="<html><title>502 Bad Gateway</title></html>"),
            ErrorCode.SERVER_ERROR,
        ),
    ],
    ids=["truncated", "reset", "invalid-json", "oversized-line", "html-200", "html-502"],
)
async def test_bad_provider_input_ends_in_a_clean_error(script: Any, code: str) -> None:
    async with open_upstream(script) as upstream:
        chunks = await run_call("openai", upstream)
        await upstream.wait_all_closed()
    assert failure_of(chunks).code == code
    assert sum(isinstance(c, Finish) for c in chunks) == 1


async def test_unknown_event_types_and_keepalives_are_ignored() -> None:
    events = anthropic_events(["ok"])
    events.insert(1, b'event: something_new\ndata: {"type": "something_new"}\n\n')
    events.insert(2, b": keep-alive\n\n")
    async with open_upstream(SSEScript(events=events)) as upstream:
        chunks = await run_call("anthropic", upstream)
    assert isinstance(chunks[-1], Finish)
    assert not isinstance(chunks[-1].reason, FinishError)


async def test_in_band_error_event_after_200() -> None:
    events = [*_openai_prefix(), sse_data({"error": {"message": "boom", "type": "server_error"}})]
    async with open_upstream(SSEScript(events=events)) as upstream:
        chunks = await run_call("openai", upstream)
    assert failure_of(chunks).code == ErrorCode.SERVER_ERROR


# ---- cancellation reaches the socket ---------------------------------------------------------


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_abort_closes_the_upstream_connection(kind: str) -> None:
    events = anthropic_events(["a", "b", "c"]) if kind == "anthropic" else openai_events(["a", "b"])
    async with open_upstream(SSEScript(events=events, stall_after=3)) as upstream:
        async with llmrt.open_runtime() as rt:
            await rt.register_adapter(["p"], adapter_for(kind, upstream))
            async with rt.stream(request()) as call:
                async for chunk in call:
                    if isinstance(chunk, llmrt.TextDelta | llmrt.BlockStart):
                        call.abort()
                    last = chunk
            assert isinstance(last, Finish) and isinstance(last.reason, FinishAborted)
            with trio.fail_after(5):
                record = await upstream.wait_connection_closed(0)
    assert record.closed_by == "client"


async def test_idle_watchdog_closes_a_stalled_upstream() -> None:
    async with open_upstream(
        SSEScript(events=openai_events(["a", "b"]), stall_after=2)
    ) as upstream:
        async with llmrt.open_runtime() as rt:
            await rt.register_adapter(
                ["p"], adapter_for("openai", upstream), stream_idle_timeout=0.2
            )
            async with rt.stream(request()) as call:
                chunks = [c async for c in call]
            with trio.fail_after(5):
                await upstream.wait_connection_closed(0)
    assert failure_of(chunks).code == ErrorCode.TIMEOUT


async def test_five_hundred_streams_aborted_at_random_leave_no_connection_open() -> None:
    rng = random.Random(7)
    events = openai_events([f"t{i}" for i in range(40)])
    async with open_upstream(SSEScript(events=events, delay=0.002)) as upstream:
        async with llmrt.open_runtime() as rt:
            await rt.register_adapter(["p"], adapter_for("openai", upstream))

            async def one(after: int) -> None:
                async with rt.stream(request()) as call:
                    seen = 0
                    last = None
                    async for chunk in call:
                        seen += 1
                        last = chunk
                        if seen == after:
                            call.abort()
                    assert isinstance(last, Finish)

            with trio.fail_after(60):
                async with trio.open_nursery() as nursery:
                    for _ in range(500):
                        nursery.start_soon(one, rng.randint(1, 30))
                await upstream.wait_all_closed()
        assert rt.statistics().calls_in_flight == 0
    assert len(upstream.requests) == 500
    assert all(c.closed.is_set() for c in upstream.connections)


def test_proxied_endpoints_keep_httpx_transport(monkeypatch: pytest.MonkeyPatch) -> None:
    from llmrt.adapters._http import make_client
    from llmrt.adapters._transport import TrioTransport

    for name in (
        "HTTPS_PROXY",
        "https_proxy",
        "HTTP_PROXY",
        "http_proxy",
        "ALL_PROXY",
        "all_proxy",
        "NO_PROXY",
        "no_proxy",
    ):
        monkeypatch.delenv(name, raising=False)
    direct = make_client("https://api.example.com", http2=False)
    assert isinstance(direct.transport, TrioTransport)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    proxied = make_client("https://api.example.com", http2=False)
    assert not isinstance(proxied.transport, TrioTransport)
    monkeypatch.setenv("NO_PROXY", "api.example.com")
    bypassed = make_client("https://api.example.com", http2=False)
    assert isinstance(bypassed.transport, TrioTransport)
    monkeypatch.delenv("NO_PROXY")
    assert isinstance(make_client("http://127.0.0.1:8000", http2=False).transport, TrioTransport)
