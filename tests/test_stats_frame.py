"""The ``stats`` frame: a gateway's statistics snapshot, raw and through the Python client."""

from __future__ import annotations

import json
import math
from functools import partial

import msgspec
import trio
from trio_websocket import open_websocket_url

import llmrt
from llmrt.actors._stats import ConnectionPool, StatsCounters
from llmrt.actors.gateway import serve_gateway
from llmrt.actors.gateway._snapshot import StatisticsValue, statistics_value
from llmrt.actors.gateway.client import open_gateway_client
from llmrt.adapters.demo import DemoAdapter
from llmrt.adapters.scripted import ScriptedAdapter, text_script


async def test_stats_frame_answers_the_runtime_and_gateway_figures() -> None:
    async with llmrt.open_runtime() as rt, trio.open_nursery() as nursery:
        await rt.register_adapter(["p"], ScriptedAdapter(text_script(["a", "b"])))
        server = await nursery.start(partial(serve_gateway, rt))
        options = llmrt.GenerateOptions(
            provider="p", model="m", messages=(llmrt.user_message("hi"),)
        )
        async with open_gateway_client(server.url) as client:
            async with client.stream(options) as call:
                chunks = [chunk async for chunk in call]
            value = await client.stats()
        assert value.calls_started == 1 and value.chunks_forwarded == len(chunks) - 1
        assert value.calls_finished == {"stop": 1}
        [provider] = value.providers
        assert (provider.provider, provider.calls_started) == ("p", 1)
        assert [(f.reason, f.code, f.count) for f in provider.calls_finished] == [("stop", "", 1)]
        [ttfc] = value.time_to_first_chunk
        assert (ttfc.provider, ttfc.model, ttfc.histogram.count) == ("p", "m", 1)
        assert len(ttfc.histogram.counts) == len(ttfc.histogram.bounds) + 1
        assert value.gateway is not None
        assert value.gateway.ready and value.gateway.accepted == 1
        # hello and the call's chunk frames went out before the stats frame came in.
        assert value.gateway.frames_received == 2 and value.gateway.frames_sent >= 2
        # The in-process snapshot has the same runtime figures (no gateway part).
        local = statistics_value(rt.statistics())
        assert local.providers == value.providers and local.gateway is None

        async with open_websocket_url(server.url) as ws:
            assert json.loads(await ws.get_message())["type"] == "hello"
            await ws.send_message(json.dumps({"type": "stats", "id": "s1"}))
            reply = json.loads(await ws.get_message())
        assert reply["type"] == "result" and reply["id"] == "s1"
        assert reply["value"]["callsStarted"] == 1
        assert reply["value"]["gateway"]["accepted"] == 2
        assert reply["value"]["providers"][0]["callsFinished"] == [
            {"reason": "stop", "code": "", "count": 1}
        ]
        nursery.cancel_scope.cancel()


async def test_stats_frame_needs_an_id() -> None:
    async with llmrt.open_runtime() as rt, trio.open_nursery() as nursery:
        await rt.register_adapter(["demo"], DemoAdapter())
        server = await nursery.start(partial(serve_gateway, rt))
        async with open_websocket_url(server.url) as ws:
            await ws.get_message()
            await ws.send_message(json.dumps({"type": "stats"}))
            reply = json.loads(await ws.get_message())
        assert reply["type"] == "error" and reply["code"] == "BAD_FRAME"
        assert "missing required field `id`" in reply["message"]
        nursery.cancel_scope.cancel()


def test_the_statistics_value_round_trips_in_both_encodings() -> None:
    counters = StatsCounters()
    counters.attempts[2] += 1
    counters.retries["RATE_LIMIT"] += 1
    series = counters.series("p", "m", routed=True)
    series.counters.finished["error", "TIMEOUT"] += 1
    series.first_chunk.observe(0.3)
    counters.abort_to_finish.observe(0.00002)
    value = statistics_value(counters.snapshot(1, {"p": ConnectionPool(open=3, idle=1)}))
    assert value.attempts_per_call == {2: 1}
    assert value.abort_to_finish is not None and value.abort_to_finish.counts[1] == 1
    assert math.inf not in value.time_to_first_chunk[0].histogram.bounds
    assert [(p.provider, p.open, p.idle) for p in value.connection_pools] == [("p", 3, 1)]
    for codec in (msgspec.json, msgspec.msgpack):
        assert codec.Decoder(StatisticsValue).decode(codec.encode(value)) == value
