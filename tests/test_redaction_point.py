"""One redaction point (issue 21, finding 13): where the call task receives an adapter's failure.

Before, the finish text was redacted three times: by the HTTP adapters, by the
call actor and by the gateway connection, so an adapter that is not an HTTP
adapter (a plugin, the scripted one) relied on the call actor for its keys and
on the gateway for the gateway's token, and middleware saw unredacted text.
Now the call task removes, once, the serving adapter's keys and the secrets
the process holds (`LlmRuntime.redacting`: a serving gateway's token), before
middleware, consumers, retry events or frames see the failure.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import msgspec
import pytest
import trio
from trio_websocket import open_websocket_url

import llmrt
from llmrt import (
    Adapter,
    ErrorCode,
    Finish,
    FinishAborted,
    FinishError,
    GenerateOptions,
    LlmFailure,
    StreamChunk,
)
from llmrt.actors.gateway import GatewayServer, Limits, serve_gateway
from llmrt.adapter import REDACTED, Redactor
from llmrt.adapters.openai_chat import OpenAIChatAdapter
from llmrt.adapters.scripted import Raise, ScriptedAdapter
from llmrt.testing import ErrorScript, open_upstream

KEY = "Pl8gKey9Vx2Qm7Rt4Ws6Yz3"
TOKEN = "gw-Red4ct1onP01nt-9x8y7z"
#: How each kind of adapter failure quotes the secrets.
LEAK = f"upstream echoed key {KEY} and token {TOKEN}"


class PluginAdapter(Adapter):
    """An adapter as a third-party package writes one: no HTTP base, its own key.

    It declares its key (`redactor`) but never redacts its own failures.
    """

    def __init__(self, how: str) -> None:
        self.how = how

    def redactor(self) -> Redactor:
        return Redactor((KEY,))

    async def stream(self, options: GenerateOptions) -> AsyncIterator[StreamChunk]:
        await trio.lowlevel.checkpoint()
        failure = LlmFailure(message=LEAK, code=ErrorCode.SERVER_ERROR, request_id=KEY)
        if self.how == "raises":
            raise llmrt.LlmError.from_failure(failure)
        if self.how == "raises-foreign":
            raise RuntimeError(LEAK)
        if self.how == "in-band":
            yield Finish(reason=FinishError(failure=failure))
        else:
            yield Finish(reason=FinishAborted(failure=failure))


HOWS = ("raises", "raises-foreign", "in-band", "aborted")


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


async def raw_frames(server: GatewayServer, provider: str, retry: bool = False) -> list[str]:
    """Every text frame the gateway sends for one call, as received on the socket."""
    frames: list[str] = []
    subprotocols = ["llmrt.v1", f"llmrt.bearer.{TOKEN}"]
    async with open_websocket_url(server.url, subprotocols=subprotocols) as ws:
        frames.append(str(await ws.get_message()))  # hello
        call: dict[str, Any] = {
            "type": "call",
            "id": "c1",
            "request": msgspec.json.decode(llmrt.encode(request(provider))),
        }
        if retry:
            call["retry"] = {"mode": "normal", "maxRetries": 1, "initialDelayMs": 1}
        await ws.send_message(json.dumps(call))
        while True:
            frame = str(await ws.get_message())
            frames.append(frame)
            decoded = json.loads(frame)
            if decoded["type"] == "error" or (
                decoded["type"] == "chunk" and decoded["chunk"]["type"] == "finish"
            ):
                return frames


@pytest.mark.parametrize("how", HOWS)
async def test_a_secret_in_a_non_http_adapters_failure_reaches_no_consumer_and_no_frame(
    how: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    seen_by_middleware: list[StreamChunk] = []

    async def spy(options: GenerateOptions, nxt: llmrt.actors.Next) -> AsyncIterator[StreamChunk]:
        async for chunk in nxt(options):
            seen_by_middleware.append(chunk)
            yield chunk

    with trio.fail_after(30):
        async with llmrt.open_runtime() as rt:
            await rt.register_adapter(["plugin"], PluginAdapter(how))
            async with gateway(rt) as server:
                # A consumer in the gateway's process, without middleware ...
                async with rt.stream(request("plugin")) as call:
                    direct = [chunk async for chunk in call]
                    kept = call.adapter_error
                # ... the gateway's clients, one attempt and retried ...
                frames = await raw_frames(server, "plugin")
                frames += await raw_frames(server, "plugin", retry=True)
                # ... and a consumer behind middleware.
                rt.use(spy)
                async with rt.stream(request("plugin")) as call:
                    wrapped = [chunk async for chunk in call]
    for chunks in (direct, wrapped, seen_by_middleware):
        finish = chunks[-1]
        assert type(finish) is Finish and type(finish.reason) in (FinishError, FinishAborted)
        text = llmrt.encode(finish).decode()
        assert KEY not in text and TOKEN not in text, text
        assert REDACTED in text and "upstream echoed key" in text, text
    wire = "\n".join(frames)
    if how in ("raises", "in-band"):
        assert '"type":"retry"' in wire  # SERVER_ERROR: retried once, the retry frame too
    assert KEY not in wire and TOKEN not in wire, wire
    assert "upstream echoed key" in wire
    assert KEY not in caplog.text and TOKEN not in caplog.text
    if how == "raises":
        # In-process diagnostics keep the adapter's error, without the secret.
        assert isinstance(kept, llmrt.LlmError)
        assert KEY not in str(kept) and KEY not in repr(kept.failure)
        assert kept.__traceback__ is not None


async def test_the_token_is_held_only_while_the_gateway_serves() -> None:
    leaked = llmrt.LlmError(ErrorCode.SERVER_ERROR, f"saw {TOKEN}")
    with trio.fail_after(30):
        async with llmrt.open_runtime() as rt:
            await rt.register_adapter(["p"], ScriptedAdapter([Raise(leaked)]))
            async with gateway(rt):
                async with rt.stream(request("p")) as call:
                    during = [chunk async for chunk in call]
            async with rt.stream(request("p")) as call:
                after = [chunk async for chunk in call]
            assert TOKEN not in repr(rt._core.secrets)
    assert TOKEN not in llmrt.encode(during[-1]).decode()
    # Not a secret of this process any more: nothing hides it (a phrasing would).
    assert TOKEN in llmrt.encode(after[-1]).decode()


class CountingAdapter(OpenAIChatAdapter):
    """Counts how often its redactor is asked for: once per redaction pass."""

    asked = 0

    def redactor(self) -> Redactor:
        type(self).asked += 1
        return super().redactor()


async def test_an_http_adapters_failure_is_redacted_once() -> None:
    body = json.dumps({"error": {"message": f"rejected Bearer {KEY}", "type": "auth"}}).encode()
    CountingAdapter.asked = 0
    with trio.fail_after(30):
        async with open_upstream(ErrorScript(401, body=body), script_paths=None) as upstream:
            adapter = CountingAdapter(
                base_url=upstream.base_url, api_key_env="K", environ={"K": KEY}
            )
            async with llmrt.open_runtime() as rt:
                await rt.register_adapter(["openai"], adapter)
                async with rt.stream(request("openai")) as call:
                    chunks = [chunk async for chunk in call]
    finish = chunks[-1]
    assert type(finish) is Finish and type(finish.reason) is FinishError
    assert finish.reason.failure.code == ErrorCode.AUTH
    assert KEY not in llmrt.encode(finish).decode()
    assert CountingAdapter.asked == 1
