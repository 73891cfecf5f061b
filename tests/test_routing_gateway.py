"""Routing seen from outside: the gateway's finish frame, the stats frame, ``/metrics``, routes."""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import trio
from _routing import request
from prometheus_client.parser import text_string_to_metric_families
from trio_websocket import open_websocket_url

import llmrt
from llmrt import ErrorCode, LlmError
from llmrt.actors._statistics import RuntimeStatistics
from llmrt.actors.app.cli.routes import format_routes
from llmrt.actors.gateway import GatewayServer, serve_gateway
from llmrt.actors.gateway.client import open_gateway_client
from llmrt.actors.routing import Deployment, Group
from llmrt.adapters.scripted import Raise, ScriptedAdapter, text_script

BOUND = 20


@asynccontextmanager
async def served() -> AsyncIterator[tuple[llmrt.LlmRuntime, GatewayServer]]:
    busy = Raise(LlmError(ErrorCode.OVERLOADED, "busy", provider_retry_after_ms=30_000))
    async with llmrt.open_runtime() as rt, trio.open_nursery() as nursery:
        await rt.register_adapter(["a"], ScriptedAdapter([busy]))
        await rt.register_adapter(["b"], ScriptedAdapter(text_script(["from b"])))
        await rt.register_groups(
            [
                Group(
                    name="chat",
                    deployments=(
                        Deployment(route="a", model="ma", rpm=100),
                        Deployment(route="b", model="mb", tier=2),
                    ),
                )
            ]
        )
        server = await nursery.start(partial(serve_gateway, rt))
        try:
            yield rt, server
        finally:
            nursery.cancel_scope.cancel()


async def test_the_finish_frame_names_the_serving_deployment_and_every_attempt() -> None:
    with trio.fail_after(BOUND):
        async with served() as (_, server):
            async with open_websocket_url(server.url, subprotocols=["llmrt.v1"]) as ws:
                json.loads(await ws.get_message())  # hello
                call = {"type": "call", "id": "r1", "request": json.loads(llmrt.encode(request()))}
                await ws.send_message(json.dumps(call))
                chunks: list[dict[str, Any]] = []
                while not chunks or chunks[-1]["type"] != "finish":
                    frame = json.loads(await ws.get_message())
                    chunks += [frame["chunk"]] if frame["type"] == "chunk" else frame["chunks"]
    assert chunks[-1] == {
        "type": "finish",
        "reason": {"kind": "stop"},
        "routing": {
            "group": "chat",
            "route": "b",
            "model": "mb",
            "attempts": [
                {"group": "chat", "route": "a", "model": "ma", "code": "OVERLOADED"},
                {"group": "chat", "route": "b", "model": "mb"},
            ],
        },
    }


async def test_the_client_and_list_providers_see_the_group() -> None:
    with trio.fail_after(BOUND):
        async with served() as (_, server), open_gateway_client(server.url) as client:
            providers = [p.id for p in await client.list_providers()]
            async with client.stream(request()) as call:
                chunks = [chunk async for chunk in call]
            stats = await client.stats()
    assert providers == ["a", "b", "chat"]
    finish = chunks[-1]
    assert isinstance(finish, llmrt.Finish) and finish.routing is not None
    assert finish.routing.route == "b"
    assert stats.routing is not None
    (group,) = stats.routing.groups
    assert (group.name, group.calls) == ("chat", 1)
    a, b = group.deployments
    assert (a.cooling, a.failovers, b.served) == (True, {"OVERLOADED": 1}, 1)


async def test_metrics_and_routes_show_each_deployment() -> None:
    with trio.fail_after(BOUND):
        async with served() as (rt, server):
            async with rt.stream(request()) as call:
                async for _ in call:
                    pass
            text = server.metrics_text().decode()
            value = rt.statistics()
    found = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    a = (("deployment", "a/ma"), ("group", "chat"))
    b = (("deployment", "b/mb"), ("group", "chat"))
    assert found["llmrt_routing_calls_total", (("group", "chat"),)] == 1
    assert found["llmrt_routing_failovers_total", (("code", "OVERLOADED"), *a)] == 1
    assert found["llmrt_routing_deployment_cooling", a] == 1
    assert 29 < found["llmrt_routing_deployment_cooldown_seconds", a] <= 30
    assert found["llmrt_routing_deployment_served_total", b] == 1
    assert found["llmrt_routing_deployment_requests_in_window", a] == 1
    assert ("llmrt_routing_deployment_latency_seconds", b) in found
    lines = format_routes(value)
    assert lines[0].startswith("group chat: ordered, calls 1")
    assert any(line.split()[:2] == ["a/ma", "tier"] and "cooling" in line for line in lines)
    round_trip = RuntimeStatistics.__struct_fields__  # the value carries routing on the wire
    assert "routing" in round_trip


async def test_llmrt_routes_via_a_gateway() -> None:
    from llmrt.actors.app.cli import main

    with trio.fail_after(BOUND):
        async with served() as (rt, server):
            async with rt.stream(request()) as call:
                async for _ in call:
                    pass
            out = io.StringIO()
            code = await trio.to_thread.run_sync(
                lambda: main(["routes", "--via", server.url], out=out, environ={})
            )
    assert code == 0
    text = out.getvalue()
    assert "group chat: ordered" in text
    assert "a/ma" in text and "cooling" in text and "OVERLOADED 1" in text
