"""Secrets never leave: an upstream that echoes the key, through a real gateway to a client.

The key below has no provider shape (no ``sk-``) and the upstream quotes it in
the phrasings a real provider or proxy uses; only redaction by exact value
catches all of them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

import pytest
import trio
from _cli_process import kill, spawn_cli

import llmrt
from llmrt import ErrorCode, Finish, FinishError, GenerateOptions, StreamChunk
from llmrt.actors.app import config as configuration
from llmrt.actors.gateway import GatewayServer, Limits, serve_gateway
from llmrt.actors.gateway.client import open_gateway_client
from llmrt.adapter import REDACTED, Redactor
from llmrt.adapters.anthropic import AnthropicAdapter
from llmrt.adapters.gemini import GeminiAdapter
from llmrt.adapters.openai_chat import OpenAIChatAdapter
from llmrt.adapters.openai_responses import OpenAIResponsesAdapter
from llmrt.adapters.scripted import Raise, ScriptedAdapter
from llmrt.testing import ErrorScript, SSEScript, open_upstream, sse_data

KEY = "Zq9xLw7Rt2Vb8NmK4pHs6Yd3"
TOKEN = "gw-T0ken_4b8c15d16e23f42"
ENV = {"ECHO_KEY": KEY}

#: The five phrasings of an echoed key (issue 10, finding 2), one 401 body each.
ECHOES: dict[str, bytes] = {
    "bearer": json.dumps(
        {"error": {"message": f"rejected header Authorization: Bearer {KEY}", "type": "auth"}}
    ).encode(),
    "x-api-key": json.dumps(
        {"error": {"message": f"x-api-key: {KEY} is not valid", "type": "authentication_error"}}
    ).encode(),
    "token": json.dumps({"error": {"message": f"token {KEY} has expired"}}).encode(),
    "json-field": json.dumps(
        {"error": {"message": "bad credentials", "code": KEY}, "request_id": KEY}
    ).encode(),
    "html-title": f"<html><head><title>401 for key {KEY}</title></head><body/></html>".encode(),
}


def request(provider: str) -> GenerateOptions:
    return GenerateOptions(provider=provider, model="m", messages=(llmrt.user_message("hi"),))


@asynccontextmanager
async def gateway(rt: llmrt.LlmRuntime) -> AsyncIterator[GatewayServer]:
    async with trio.open_nursery() as nursery:
        limits = Limits(shutdown_grace=0.2, close_timeout=2.0)
        server = await nursery.start(partial(serve_gateway, rt, limits=limits, token=TOKEN))
        try:
            yield server
        finally:
            nursery.cancel_scope.cancel()


async def remote_chunks(server: GatewayServer, provider: str) -> list[StreamChunk]:
    async with (
        open_gateway_client(server.url, token=TOKEN) as client,
        client.stream(request(provider)) as call,
    ):
        return [chunk async for chunk in call]


def adapters(base_url: str) -> dict[str, llmrt.Adapter]:
    return {
        "openai": OpenAIChatAdapter(base_url=base_url, api_key_env="ECHO_KEY", environ=ENV),
        "anthropic": AnthropicAdapter(base_url=base_url, api_key_env="ECHO_KEY", environ=ENV),
        "gemini": GeminiAdapter(base_url=base_url, api_key_env="ECHO_KEY", environ=ENV),
        "responses": OpenAIResponsesAdapter(base_url=base_url, api_key_env="ECHO_KEY", environ=ENV),
    }


@pytest.mark.parametrize("echo", sorted(ECHOES))
async def test_an_echoed_key_never_reaches_a_gateway_client(
    echo: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with open_upstream(ErrorScript(401, body=ECHOES[echo]), script_paths=None) as upstream:
        routes = adapters(upstream.base_url)
        async with llmrt.open_runtime() as rt:
            for provider, adapter in routes.items():
                await rt.register_adapter([provider], adapter)
            async with gateway(rt) as server:
                received = {p: await remote_chunks(server, p) for p in routes}
                stats = repr(rt.statistics())
            models = []
            for provider in routes:
                with pytest.raises(llmrt.LlmError) as info:
                    await rt.list_models(provider)
                models.append(str(info.value) + repr(info.value.failure))
    for provider, chunks in received.items():
        (finish,) = chunks
        assert isinstance(finish, Finish) and isinstance(finish.reason, FinishError)
        assert finish.reason.failure.code == ErrorCode.AUTH, provider
        text = llmrt.encode(finish).decode()
        assert KEY not in text, (provider, text)
        assert REDACTED in text, text  # the echo was there, and it was removed
    assert all(KEY not in m for m in models), models
    assert KEY not in caplog.text
    assert KEY not in stats
    for adapter in routes.values():
        assert KEY not in repr(adapter)
        assert KEY not in repr(adapter.redactor())


async def test_an_in_band_error_echoing_the_key_is_redacted() -> None:
    body = SSEScript(events=[sse_data({"error": {"message": f"Bearer {KEY} was revoked"}})])
    async with open_upstream(body) as upstream:
        adapter = OpenAIChatAdapter(base_url=upstream.base_url, api_key_env="ECHO_KEY", environ=ENV)
        async with llmrt.open_runtime() as rt:
            await rt.register_adapter(["p"], adapter)
            async with gateway(rt) as server:
                chunks = await remote_chunks(server, "p")
    text = llmrt.encode(chunks[-1]).decode()
    assert "revoked" in text and KEY not in text


async def test_the_runtime_redacts_what_an_adapter_forgot() -> None:
    class Leaky(ScriptedAdapter):
        """Knows its key but forgets to redact its own failures."""

        def redactor(self) -> Redactor:
            return Redactor((KEY,))

    leaked = llmrt.LlmError(ErrorCode.AUTH, f"the upstream said: {KEY}")
    in_band = Finish(reason=FinishError(failure=leaked.failure))
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["raises"], Leaky([Raise(leaked)]))
        await rt.register_adapter(["in-band"], Leaky([in_band]))
        for provider in ("raises", "in-band"):
            async with rt.stream(request(provider)) as call:
                chunks = [chunk async for chunk in call]
            assert KEY not in llmrt.encode(chunks[-1]).decode()


async def test_the_gateway_removes_its_token_from_what_it_sends() -> None:
    leaked = llmrt.LlmError(ErrorCode.SERVER_ERROR, f"upstream saw {TOKEN}")
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], ScriptedAdapter([Raise(leaked)]))
        async with gateway(rt) as server:
            chunks = await remote_chunks(server, "p")
    text = llmrt.encode(chunks[-1]).decode()
    assert "upstream saw" in text and TOKEN not in text


def test_config_and_adapters_built_from_it_hold_no_key_in_their_repr() -> None:
    environ = {"DEEPSEEK_API_KEY": KEY, "ANTHROPIC_API_KEY": KEY}
    config = configuration.load_config(None, environ=environ)
    assert KEY not in repr(config)
    for spec in config.routes:
        adapter = configuration.build_adapter(spec, environ=environ)
        assert KEY not in repr(adapter)


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        (f"Authorization: Bearer {KEY}", "Authorization: Bearer "),
        (f'{{"x-api-key": "{KEY}"}}', '{"x-api-key": "'),
        (f"token={KEY}", "token="),
        (f"cut short: {KEY[:9]}\u2026", "cut short: "),
        (f"as json: {json.dumps(KEY + '/')}", "as json: "),
    ],
)
def test_redactor_removes_exact_values_their_forms_and_phrasings(text: str, kept: str) -> None:
    redactor = Redactor((KEY + "/",)).with_secrets((KEY, None))
    out = redactor.redact(text)
    assert KEY[:6] not in out
    assert out.startswith(kept) and REDACTED in out
    assert KEY not in repr(redactor)


@pytest.mark.parametrize(
    "prose",
    [
        "the token limit is 4096",
        "Bearer required",
        "prompt is too long: 210000 tokens > 200000 maximum",
        "max_tokens: 12345678 is out of range",
    ],
)
def test_phrasings_leave_prose_alone(prose: str) -> None:
    assert Redactor().redact(prose) == prose


async def test_llmrt_call_via_a_gateway_prints_no_echoed_key() -> None:
    body = b"".join(ECHOES.values())  # not JSON: classified by status, quoting the body
    async with open_upstream(ErrorScript(401, body=body)) as upstream:
        async with llmrt.open_runtime() as rt:
            await rt.register_adapter(["openai"], adapters(upstream.base_url)["openai"])
            async with gateway(rt) as server:
                cli = await spawn_cli(
                    "call",
                    "hi",
                    "--via",
                    server.url,
                    "-p",
                    "openai",
                    "-m",
                    "m",
                    "--no-color",
                    env={"LLMRT_GATEWAY_TOKEN": TOKEN},
                )
                try:
                    with trio.fail_after(30):
                        code, out, err = await cli.finish()
                finally:
                    await kill(cli)
    assert code == 1, (out, err)
    # The finish is on stderr: stdout carries only an answer, and there is none.
    assert "error AUTH" in err and REDACTED in err and out == ""
    assert KEY not in out + err and TOKEN not in out + err
