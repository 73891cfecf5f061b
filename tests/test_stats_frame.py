"""The ``stats`` frame: a gateway's statistics snapshot, raw and through the Python client."""

from __future__ import annotations

import json
import math
from functools import partial

import msgspec
import pytest
import trio
from trio_websocket import open_websocket_url

import llmrt
from llmrt.actors._statistics import ConnectionPool, GatewayStatistics, RuntimeStatistics
from llmrt.actors._stats import StatsCounters
from llmrt.actors.gateway import serve_gateway
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
        local = rt.statistics()
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
    value = counters.snapshot(1, [ConnectionPool(provider="p", open=3, idle=1)])
    assert value.attempts_per_call == {2: 1}
    assert value.abort_to_finish is not None and value.abort_to_finish.counts[1] == 1
    assert math.inf not in value.time_to_first_chunk[0].histogram.bounds
    assert [(p.provider, p.open, p.idle) for p in value.connection_pools] == [("p", 3, 1)]
    for codec in (msgspec.json, msgspec.msgpack):
        assert codec.Decoder(RuntimeStatistics).decode(codec.encode(value)) == value


def test_the_snapshot_reads_by_label_and_cannot_be_changed() -> None:
    counters = StatsCounters()
    series = counters.series("p", "m", routed=True)
    series.counters.started += 2
    series.ended("stop", "")
    series.ended("error", "TIMEOUT")
    series.worked(3, 1.0, 1.5, 2.0)
    counters.failures["TIMEOUT"] += 1
    stats = counters.snapshot(1, [ConnectionPool(provider="p", open=2, idle=1)])
    provider = stats.provider("p")
    assert provider is not None and (provider.calls_started, provider.calls_in_flight) == (2, 0)
    assert provider.finished("stop") == 1 and provider.finished("error", "TIMEOUT") == 1
    assert provider.finished("aborted") == 0 and stats.provider("q") is None
    first = stats.time_to_first_chunk_of("p", "m")
    assert first is not None and (first.count, first.sum) == (1, 0.5)
    duration = stats.call_duration_of("p", "m")
    assert duration is not None and duration.sum == 1.0
    assert stats.call_duration_of("p", "n") is None
    assert stats.pool("p") == ConnectionPool(provider="p", open=2, idle=1)
    assert stats.pool("q") is None
    # The maps are read-only, decoded ones too, and later counts do not reach them.
    with pytest.raises(TypeError):
        stats.failures_by_code["OTHER"] = 1  # type: ignore[index]
    decoded = msgspec.json.decode(msgspec.json.encode(stats), type=RuntimeStatistics)
    assert decoded == stats
    with pytest.raises(TypeError):
        decoded.failures_by_code.update(OTHER=1)  # type: ignore[attr-defined]
    counters.failures["TIMEOUT"] += 1
    assert stats.failures_by_code == {"TIMEOUT": 1}


def test_the_stats_frame_value_keeps_its_json_fields() -> None:
    # The protocol's "Statistics" table: the in-process snapshot is the frame's value.
    value = msgspec.structs.replace(StatsCounters().snapshot(0), gateway=GatewayStatistics())
    doc = json.loads(msgspec.json.encode(value))
    assert list(doc) == [
        "callsStarted",
        "callsInFlight",
        "callsFinished",
        "failuresByCode",
        "chunksForwarded",
        "chunksDropped",
        "middlewareErrors",
        "registrations",
        "retriesByCode",
        "attemptsPerCall",
        "watchdogFirings",
        "providers",
        "timeToFirstChunk",
        "callDuration",
        "abortToFinish",
        "connectionPools",
        "gateway",
        "routing",
        "callLog",
        "costs",
    ]
    abort = doc["abortToFinish"]
    assert len(abort["counts"]) == len(abort["bounds"]) + 1 and abort["bounds"][-1] == 1.0
    assert list(doc["gateway"]) == [
        "ready",
        "connections",
        "accepted",
        "liveRequests",
        "refused",
        "framesReceived",
        "framesSent",
        "bytesReceived",
        "bytesSent",
        "httpRequests",
    ]
