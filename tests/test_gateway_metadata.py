"""Issue 21, finding 6: metadata requests are budgeted, model lists cached, discovery pooled.

Wire behaviour over real loopback websockets and a real local upstream
(`llmrt.testing`, which records every request and connection); the budget's
refill and the cache's expiry on trio's mock clock, without sockets.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from _settle import wait_until
from trio_websocket import WebSocketConnection, open_websocket_url

import llmrt
from llmrt import ErrorCode, LlmError, ModelInfo
from llmrt.actors.app.cli import parse_args
from llmrt.actors.app.cli._serving import gateway_limits
from llmrt.actors.app.config import ConfigError, load_config
from llmrt.actors.gateway import GatewayServer, Limits, serve_gateway
from llmrt.actors.gateway._budget import MetadataBudget, PeerBuckets
from llmrt.actors.gateway.client import open_gateway_client
from llmrt.adapter import ModelDiscoveryRequest
from llmrt.adapters.openai_chat import DiscoveryEndpoint, EndpointDiscovery, OpenAIChatAdapter
from llmrt.adapters.scripted import ScriptedAdapter, text_script
from llmrt.testing import ErrorScript, RecordedRequest, SSEScript, open_upstream

FAST = {"shutdown_grace": 0.1, "close_timeout": 1.0}
#: A refill so slow that no token comes back during a test: what is refused is the burst's doing.
NEVER = 1e-6


@asynccontextmanager
async def gateway(rt: llmrt.LlmRuntime, **limits: Any) -> AsyncIterator[GatewayServer]:
    async with trio.open_nursery() as nursery:
        server = await nursery.start(partial(serve_gateway, rt, limits=Limits(**FAST, **limits)))
        try:
            yield server
        finally:
            nursery.cancel_scope.cancel()


async def ask(ws: WebSocketConnection, frame: dict[str, Any]) -> dict[str, Any]:
    await ws.send_message(json.dumps(frame))
    while True:
        reply: dict[str, Any] = json.loads(await ws.get_message())
        if reply.get("id") == frame["id"]:
            return reply


# ---- the rate budget ------------------------------------------------------------------------


async def test_a_metadata_flood_gets_coded_errors_and_the_connection_lives_on() -> None:
    budget = {
        "metadata_per_second": NEVER,
        "metadata_burst": 3,
        "metadata_per_peer_per_second": NEVER,
        "metadata_per_peer_burst": 5,
    }
    async with llmrt.open_runtime() as rt, gateway(rt, **budget) as server:
        await rt.register_adapter(["ok"], ScriptedAdapter(text_script(["fine"])))
        kinds = [
            {"type": "list-providers"},
            {"type": "list-models", "provider": "ok"},
            {"type": "resolve-model", "provider": "ok", "model": "m"},
            {"type": "list-configurable-providers"},
            {"type": "discover-models", "settingsNs": "none"},
        ]
        with trio.fail_after(10):
            async with open_websocket_url(server.url) as first:
                hello = json.loads(await first.get_message())
                announced = hello["limits"]
                assert announced["metadataBurst"] == 3
                assert announced["metadataPerPeerBurst"] == 5
                assert announced["modelListTtl"] == 60.0
                replies = [await ask(first, {**kinds[n], "id": f"a{n}"}) for n in range(5)]
                assert [r["type"] for r in replies] == ["result"] * 3 + ["error"] * 2
                assert {r["code"] for r in replies[3:]} == {"RATE_LIMITED"}
                assert "on this connection" in replies[3]["message"]
                # A second connection from the same address shares the address's budget.
                async with open_websocket_url(server.url) as second:
                    await second.get_message()  # hello
                    more = [await ask(second, {**kinds[0], "id": f"b{n}"}) for n in range(4)]
                    assert [r["type"] for r in more] == ["result"] * 2 + ["error"] * 2
                    assert "from this address" in more[2]["message"]
                # The flooding connection lives on: calls have their own budget.
                options = llmrt.GenerateOptions(
                    provider="ok", model="m", messages=(llmrt.user_message("hi"),)
                )
                call = {"type": "call", "id": "c", "request": json.loads(llmrt.encode(options))}
                await first.send_message(json.dumps(call))
                chunks: list[dict[str, Any]] = []
                while not chunks or chunks[-1]["type"] != "finish":
                    frame = json.loads(await first.get_message())
                    chunks += frame.get("chunks", [frame.get("chunk")] if "chunk" in frame else [])
                assert chunks[-1]["reason"]["kind"] == "stop"
                assert (await ask(first, {"type": "ping", "id": "p"}))["type"] == "pong"


def test_the_budget_refills_at_its_rate_and_forgets_full_buckets() -> None:
    limits = Limits(
        metadata_per_second=1.0,
        metadata_burst=2,
        metadata_per_peer_per_second=2.0,
        metadata_per_peer_burst=3,
    )
    peers = PeerBuckets(2.0, 3, max_peers=2)
    one = MetadataBudget(limits, "p", peers)
    assert one.take(0.0) is None and one.take(0.0) is None
    refused = one.take(0.0)
    assert refused is not None and "on this connection" in refused
    assert one.take(1.0) is None  # a token per second; the address refilled to 3, spent 1
    other = MetadataBudget(limits, "p", peers)
    assert other.take(1.0) is None and other.take(1.0) is None  # the address's last two
    third = MetadataBudget(limits, "p", peers)
    refused = third.take(1.0)
    assert refused is not None and "from this address" in refused
    # Refused by the address, the connection kept its own token: its burst of 2
    # is whole, so with the address's refill it takes one now and two a second later.
    assert third.take(1.5) is None
    assert third.take(2.5) is None and third.take(2.5) is None
    # A bounded map: a third address makes room by forgetting full (or the oldest) buckets.
    assert peers.take("q", 100.0) and peers.take("r", 100.0)
    assert len(peers) <= 2


# ---- model lists: one upstream request however many ask -------------------------------------


async def test_concurrent_list_models_produce_one_upstream_get_models() -> None:
    served = ("gpt-a", "gpt-b")
    slow = ErrorScript(
        status=200,
        body={"data": [{"id": m, "object": "model"} for m in served]},
        first_byte_delay=0.25,
    )

    def router(request: RecordedRequest) -> Any:
        return slow if request.path == "/models" else None

    async with open_upstream(router) as up, llmrt.open_runtime() as rt:
        adapter = OpenAIChatAdapter(base_url=up.base_url, api_key_env=None)
        await rt.register_adapter(["up"], adapter)
        async with gateway(rt) as server:
            answers: list[tuple[ModelInfo, ...]] = []
            with trio.fail_after(10):
                async with trio.open_nursery() as nursery:
                    for _ in range(4):
                        nursery.start_soon(partial(ask_many, server.url, 6, answers))
            assert len(answers) == 24
            assert all([m.id for m in each] == list(served) for each in answers)
            # Later asks within the TTL are answered from the cache too.
            async with open_gateway_client(server.url) as client:
                assert [m.id for m in await client.list_models("up")] == list(served)
    assert [(r.method, r.path) for r in up.requests] == [("GET", "/models")]


async def ask_many(url: str, n: int, into: list[tuple[ModelInfo, ...]]) -> None:
    async with open_gateway_client(url) as client, trio.open_nursery() as nursery:

        async def one() -> None:
            into.append(await client.list_models("up"))

        for _ in range(n):
            nursery.start_soon(one)


@attrs.define(eq=False)
class GatedLists(ScriptedAdapter):
    """A scripted adapter whose model list waits for ``gate`` and counts its askers."""

    gate: trio.Event = attrs.field(factory=trio.Event)
    asked: int = 0
    fail: bool = False

    async def list_models(self, provider: str) -> Sequence[ModelInfo]:
        self.asked += 1
        await self.gate.wait()
        if self.fail:
            raise LlmError(ErrorCode.AUTH, "the endpoint refused the key")
        return (ModelInfo(provider=provider, id="one", name="one"),)


async def test_asks_in_flight_share_one_fetch_and_its_failure() -> None:
    adapter = GatedLists(text_script(["x"]), fail=True)
    async with llmrt.open_runtime() as rt, gateway(rt) as server:
        await rt.register_adapter(["gated"], adapter)
        async with open_gateway_client(server.url) as client:
            errors: list[str] = []

            async def one() -> None:
                with pytest.raises(LlmError) as info:
                    await client.list_models("gated")
                errors.append(info.value.code)

            with trio.fail_after(10):
                async with trio.open_nursery() as nursery:
                    for _ in range(8):
                        nursery.start_soon(one)
                    await wait_until(lambda: server.live_requests == 8)
                    assert adapter.asked == 1
                    adapter.gate.set()
            assert errors == ["AUTH"] * 8
            # A failure is not kept: the next ask goes to the adapter again.
            adapter.fail = False
            with trio.fail_after(10):
                assert [m.id for m in await client.list_models("gated")] == ["one"]
            assert adapter.asked == 2


async def test_a_model_list_is_kept_for_its_ttl_and_for_its_route_only(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with llmrt.open_runtime() as rt:
        adapter = GatedLists(text_script(["x"]))
        adapter.gate.set()
        handle = await rt.register_adapter(["p"], adapter)
        for _ in range(3):
            assert [m.id for m in await rt.list_models("p", max_age=60)] == ["one"]
        await trio.sleep(59)
        await rt.list_models("p", max_age=60)
        assert adapter.asked == 1
        await trio.sleep(2)
        await rt.list_models("p", max_age=60)
        assert adapter.asked == 2
        # Without max_age the adapter is asked every time, as before.
        await rt.list_models("p")
        assert adapter.asked == 3
        # Another registration under the same name never answers with the old list.
        await handle.dispose()
        other = GatedLists(text_script(["x"]))
        other.gate.set()
        await rt.register_adapter(["p"], other)
        await rt.list_models("p", max_age=60)
        assert (adapter.asked, other.asked) == (3, 1)


async def test_an_abandoned_fetch_is_taken_over_by_an_ask_that_waited(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with llmrt.open_runtime() as rt:
        adapter = GatedLists(text_script(["x"]))
        await rt.register_adapter(["p"], adapter)
        got: list[str] = []
        async with trio.open_nursery() as nursery:
            first = trio.CancelScope()

            async def leaving() -> None:
                with first:
                    await rt.list_models("p", max_age=60)

            async def staying() -> None:
                got.extend(m.id for m in await rt.list_models("p", max_age=60))

            nursery.start_soon(leaving)
            await wait_until(lambda: adapter.asked == 1)
            nursery.start_soon(staying)
            await trio.testing.wait_all_tasks_blocked()
            first.cancel()
            await wait_until(lambda: adapter.asked == 2)
            adapter.gate.set()
        assert got == ["one"]


# ---- discovery: pooled connections ----------------------------------------------------------


async def test_discovery_reuses_its_upstream_connection_and_closes_it_with_the_runtime() -> None:
    async with open_upstream(SSEScript(events=()), models=("found",)) as up:
        async with llmrt.open_runtime() as rt:
            discovery = EndpointDiscovery(routes={"mine": DiscoveryEndpoint(up.base_url)})
            await rt.register_model_discovery("home", discovery)
            async with gateway(rt) as server, open_gateway_client(server.url) as client:
                request = ModelDiscoveryRequest(provider="mine")
                with trio.fail_after(10):
                    for _ in range(10):
                        found = await client.discover_models("home", request)
                        assert [m.id for m in found] == ["found"]
            assert [r.path for r in up.requests] == ["/models"] * 10
            assert len(up.connections) == 1
        # The runtime closed the discovery, and with it the kept connection.
        with trio.fail_after(10):
            await up.wait_all_closed()
        assert up.connections[0].closed_by == "client"


def test_the_new_bounds_come_from_llmrt_toml(tmp_path: pathlib.Path) -> None:
    file = tmp_path / "gw.toml"
    file.write_text(
        "[gateway]\nmax_pre_head_connections = 32\nmax_pre_head_bytes = 65536\n"
        "metadata_per_second = 2.5\nmetadata_burst = 5\n"
        "metadata_per_peer_per_second = 7\nmetadata_per_peer_burst = 9\nmodel_list_ttl = 0\n"
    )
    limits = gateway_limits(parse_args(["serve"]), load_config(file, environ={}).gateway)
    assert (limits.max_pre_head_connections, limits.max_pre_head_bytes) == (32, 65536)
    assert (limits.metadata_per_second, limits.metadata_burst) == (2.5, 5)
    assert (limits.metadata_per_peer_per_second, limits.metadata_per_peer_burst) == (7, 9)
    assert limits.model_list_ttl == 0
    file.write_text("[gateway]\nmodel_list_ttl = -1\n")
    with pytest.raises(ConfigError, match=r"gw.toml:2"):
        load_config(file, environ={})
    with pytest.raises(ValueError, match="metadata_per_second"):
        Limits(metadata_per_second=0)
