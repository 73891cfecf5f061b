"""The gateway's side of reloading: the ``reload`` frame's refusals and answer, and the
``providers-changed`` frame every connection gets when its runtime's providers change.
"""

from __future__ import annotations

import json
from functools import partial

import pytest
import trio
from trio_websocket import open_websocket_url

import llmrt
from llmrt import ErrorCode, LlmError, LlmFailure
from llmrt.actors.gateway import ReloadReport, WorkerReload, serve_gateway
from llmrt.actors.gateway._protocol import JSON, ProvidersChangedFrame
from llmrt.actors.gateway.client import open_gateway_client
from llmrt.adapters.scripted import ScriptedAdapter, text_script

TOKEN = "gateway-reload-token-0123"


def test_the_providers_changed_frame_is_payload_free() -> None:
    assert json.loads(JSON.encode(ProvidersChangedFrame())) == {"type": "providers-changed"}
    assert JSON.decode_server('{"type":"providers-changed"}') == ProvidersChangedFrame()


async def test_a_registration_reaches_connected_clients_as_providers_changed() -> None:
    with trio.fail_after(20):
        async with llmrt.open_runtime() as rt, trio.open_nursery() as nursery:
            server = await nursery.start(serve_gateway, rt)
            async with (
                open_gateway_client(server.url) as first,
                open_gateway_client(server.url) as second,
            ):
                async with first.providers_changed() as one, second.providers_changed() as two:
                    assert await first.list_providers() == ()
                    handle = await rt.register_adapter(["p"], ScriptedAdapter(text_script(["x"])))
                    await one.receive()
                    await two.receive()
                    assert [info.id for info in await first.list_providers()] == ["p"]
                    await handle.dispose()
                    await one.receive()
                    assert await first.list_providers() == ()
            # A raw websocket sees the frame itself, between its requests.
            async with open_websocket_url(server.url, subprotocols=["llmrt.v1"]) as ws:
                assert json.loads(await ws.get_message())["type"] == "hello"
                await rt.register_adapter(["q"], ScriptedAdapter(text_script(["y"])))
                assert json.loads(await ws.get_message()) == {"type": "providers-changed"}
            nursery.cancel_scope.cancel()


async def test_the_reload_frame_needs_a_token_and_a_file() -> None:
    with trio.fail_after(20):
        async with llmrt.open_runtime() as rt, trio.open_nursery() as nursery:
            calls = 0

            async def reload() -> ReloadReport:
                nonlocal calls
                calls += 1
                return ReloadReport(ok=True, workers=(WorkerReload(ok=True, added=("p",)),))

            open_server = await nursery.start(partial(serve_gateway, rt, reload=reload))
            async with open_gateway_client(open_server.url) as client:
                with pytest.raises(LlmError) as refused:
                    await client.reload()
                assert refused.value.code == ErrorCode.AUTH
            no_file = await nursery.start(partial(serve_gateway, rt, token=TOKEN))
            async with open_gateway_client(no_file.url, token=TOKEN) as client:
                with pytest.raises(LlmError) as refused:
                    await client.reload()
                assert refused.value.code == ErrorCode.INVALID_REQUEST
            assert calls == 0
            served = await nursery.start(partial(serve_gateway, rt, token=TOKEN, reload=reload))
            async with open_gateway_client(served.url, token=TOKEN, msgpack=True) as client:
                report = await client.reload()
                assert report == ReloadReport(
                    ok=True, workers=(WorkerReload(ok=True, added=("p",)),)
                )
            assert calls == 1
            nursery.cancel_scope.cancel()


async def test_a_failed_reload_reports_its_error_on_the_wire() -> None:
    failure = LlmFailure(message="llmrt.toml:3: unknown key", code="CONFIG_INVALID")
    refused = ReloadReport(ok=False, workers=(WorkerReload(ok=False, worker=0, error=failure),))
    with trio.fail_after(20):
        async with llmrt.open_runtime() as rt, trio.open_nursery() as nursery:

            async def reload() -> ReloadReport:
                return refused

            server = await nursery.start(partial(serve_gateway, rt, token=TOKEN, reload=reload))
            headers = [("Authorization", f"Bearer {TOKEN}")]
            async with open_websocket_url(
                server.url, subprotocols=["llmrt.v1"], extra_headers=headers
            ) as ws:
                assert json.loads(await ws.get_message())["type"] == "hello"
                await ws.send_message('{"type":"reload","id":"r1"}')
                assert json.loads(await ws.get_message()) == {
                    "type": "result",
                    "id": "r1",
                    "value": {
                        "ok": False,
                        "workers": [
                            {
                                "ok": False,
                                "worker": 0,
                                "error": {
                                    "message": "llmrt.toml:3: unknown key",
                                    "code": "CONFIG_INVALID",
                                },
                            }
                        ],
                    },
                }
            nursery.cancel_scope.cancel()
