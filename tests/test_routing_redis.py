"""Routing state in a real redis-server: shared by runtimes, one round trip each way, degrading.

Two runtimes in one process stand for two processes here (each has its own
router and its own Redis client); ``test_routing_serve.py`` does the same with
``llmrt serve`` processes. Each test uses its own key prefix on the session's
server; the outage test runs a server of its own.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
from _redis import RedisServer
from _routing import ask, finish_of, served_by
from _sdks import coredis
from _settle import wait_until

import llmrt
from llmrt import ErrorCode, FinishError, FinishStop, LlmError
from llmrt.actors.routing import Deployment, Group, RoutingSettings
from llmrt.actors.routing._redis import SharedState
from llmrt.actors.routing._spec import RoutingSettings as Settings
from llmrt.actors.routing._state import DeploymentState
from llmrt.adapters.scripted import Delay, Raise, ScriptedAdapter, Stall, text_script

BOUND = 30
#: The commands the routing scripts run inside Redis.
SCRIPT_COMMANDS = {
    "time", "hget", "hset", "hgetall", "hdel", "hincrby", "del", "pexpire",
    "zadd", "zrem", "zcard", "zremrangebyscore",
}  # fmt: skip


def settings(server: RedisServer, **kw: Any) -> RoutingSettings:
    return RoutingSettings(redis=server.url, key_prefix=f"t{uuid.uuid4().hex[:8]}", **kw)


@asynccontextmanager
async def runtime_with(
    group: Group, shared: RoutingSettings, **scripts: Any
) -> AsyncIterator[tuple[llmrt.LlmRuntime, dict[str, ScriptedAdapter]]]:
    async with llmrt.open_runtime() as rt:
        adapters = {}
        for name, script in scripts.items():
            adapters[name] = ScriptedAdapter(script)
            await rt.register_adapter([name], adapters[name])
        await rt.register_groups([group], settings=shared)
        yield rt, adapters


def chat(*deployments: Deployment, **kw: Any) -> Group:
    return Group(name="chat", deployments=deployments, **kw)


def shared_state(rt: llmrt.LlmRuntime) -> Any:
    stats = rt.statistics().routing
    assert stats is not None and stats.shared_state is not None
    return stats.shared_state


async def test_two_runtimes_share_one_rpm_budget(redis_server: RedisServer) -> None:
    group = chat(Deployment(route="a", model="m", rpm=10), when_unavailable="fail")
    shared = settings(redis_server)
    results: list[list[llmrt.StreamChunk]] = []
    with trio.fail_after(BOUND):
        async with runtime_with(group, shared, a=text_script(["x"])) as (one, left):
            async with runtime_with(group, shared, a=text_script(["x"])) as (two, right):

                async def call(rt: llmrt.LlmRuntime) -> None:
                    results.append(await ask(rt))

                async with trio.open_nursery() as nursery:
                    for n in range(30):
                        nursery.start_soon(call, one if n % 2 else two)
    served = [r for r in results if isinstance(finish_of(r).reason, FinishStop)]
    refused = [r for r in results if isinstance(finish_of(r).reason, FinishError)]
    assert len(served) == 10 and len(refused) == 20
    assert len(left["a"].requests) + len(right["a"].requests) == 10
    for chunks in refused:
        reason = finish_of(chunks).reason
        assert isinstance(reason, FinishError) and reason.failure.code == ErrorCode.RATE_LIMIT
        # The first calls' bucket (6 s of a 60 s window) counts for 66 s at most.
        assert 0 < (reason.failure.provider_retry_after_ms or 0) <= 66_000


async def test_a_cooldown_set_by_one_runtime_is_honoured_by_the_other(
    redis_server: RedisServer,
) -> None:
    slow_down = Raise(LlmError(ErrorCode.RATE_LIMIT, "429", provider_retry_after_ms=60_000))
    group = chat(Deployment(route="a", model="m"), Deployment(route="b", model="m", tier=2))
    shared = settings(redis_server)
    with trio.fail_after(BOUND):
        async with runtime_with(group, shared, a=[slow_down], b=text_script(["b"])) as (one, _):
            first = await ask(one)
            async with runtime_with(group, shared, a=text_script(["a"]), b=text_script(["b"])) as (
                two,
                adapters,
            ):
                later = [served_by(await ask(two)) for _ in range(5)]
                stats = two.statistics().routing
    assert [(a.route, a.code) for a in finish_of(first).routing.attempts] == [  # type: ignore[union-attr]
        ("a", "RATE_LIMIT"),
        ("b", None),
    ]
    assert later == ["b"] * 5
    assert adapters["a"].requests == []
    assert stats is not None
    a = stats.groups[0].deployments[0]
    assert a.cooling and 55 < a.cooling_for <= 60


async def test_in_flight_is_counted_for_every_runtime(redis_server: RedisServer) -> None:
    group = chat(Deployment(route="a", model="m", max_in_flight=1), when_unavailable="fail")
    shared = settings(redis_server)
    with trio.fail_after(BOUND):
        async with runtime_with(group, shared, a=[Stall()]) as (one, _):
            async with runtime_with(group, shared, a=text_script(["x"])) as (two, adapters):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(ask, one)
                    await wait_until(lambda: deployment(one).in_flight == 1)
                    refused = finish_of(await ask(two)).reason
                    nursery.cancel_scope.cancel()  # the consumer leaves: its lease is released
                served = await ask(two)
    assert isinstance(refused, FinishError) and refused.failure.code == ErrorCode.RATE_LIMIT
    assert isinstance(finish_of(served).reason, FinishStop)
    assert len(adapters["a"].requests) == 1


def deployment(rt: llmrt.LlmRuntime) -> Any:
    stats = rt.statistics().routing
    assert stats is not None
    return stats.groups[0].deployments[0]


async def test_one_round_trip_to_dispatch_and_one_at_the_end(redis_server: RedisServer) -> None:
    group = chat(Deployment(route="a", model="m", rpm=1000), Deployment(route="b", model="m"))
    async with coredis.Redis.from_url(redis_server.url) as client:
        with trio.fail_after(BOUND):
            async with runtime_with(
                group, settings(redis_server), a=text_script(["x"]), b=text_script(["y"])
            ) as (rt, _):
                await ask(rt)  # the scripts are loaded (a first EVALSHA may find none)
                before = await _commands(client)
                for _ in range(20):
                    await ask(rt)
                after = await _commands(client)
                trips = shared_state(rt).round_trips
    changed = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
    # Two script calls per call; every other command counted ran inside the scripts
    # (Redis counts those too), plus the INFO that read the counts.
    assert changed.pop("evalsha") == 40 and changed.pop("info") == 1
    assert set(changed) <= SCRIPT_COMMANDS, changed
    assert trips == 42


async def _commands(client: Any) -> dict[str, int]:
    info = await client.info("commandstats")
    counts: dict[str, int] = {}
    for key, value in info.items():
        name = key.decode() if isinstance(key, bytes) else str(key)
        if name.startswith("cmdstat_"):
            counts[name.removeprefix("cmdstat_")] = int(value["calls"])
    return counts


async def test_redis_away_degrades_to_local_state_and_comes_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = RedisServer().start()
    try:
        group = chat(Deployment(route="a", model="m", rpm=1000))
        shared = settings(server, redis_retry=0.3, redis_timeout=0.5)
        with trio.fail_after(BOUND):
            async with runtime_with(group, shared, a=text_script(["x"])) as (rt, _):
                assert isinstance(finish_of(await ask(rt)).reason, FinishStop)
                assert shared_state(rt).shared == 1
                server.stop()
                with caplog.at_level(logging.WARNING, logger="llmrt.routing"):
                    during = [finish_of(await ask(rt)).reason for _ in range(10)]
                away = shared_state(rt)
                warnings = [r for r in caplog.records if "using local state" in r.getMessage()]
                server.start()
                # Shared again once redis_retry has passed: wait on the clock Redis waits on.
                with trio.fail_after(10):
                    while True:
                        await ask(rt)
                        if shared_state(rt).shared == 1 and await _keys(server, shared):
                            break
                        await trio.sleep(0.05)
    finally:
        server.stop()
    assert all(isinstance(reason, FinishStop) for reason in during)
    assert away.shared == 0 and away.errors >= 1 and away.degradations == 1
    assert len(warnings) == 1  # one line per degraded interval, not one per call
    assert deployment(rt).rpm_used >= 1


async def _keys(server: RedisServer, shared: RoutingSettings) -> list[Any]:
    async with coredis.Redis.from_url(server.url) as client:
        return list(await client.keys(f"{shared.key_prefix}:*"))


async def test_a_redis_that_stops_answering_costs_a_call_one_timeout_at_most(
    redis_server: RedisServer,
) -> None:
    group = chat(Deployment(route="a", model="m", rpm=1000))
    shared = settings(redis_server, redis_timeout=0.2, redis_retry=0.3)
    with trio.fail_after(BOUND):
        async with runtime_with(group, shared, a=text_script(["x"])) as (rt, _):
            await ask(rt)
            async with coredis.Redis.from_url(redis_server.url) as admin:
                # Redis answers nobody for 1.5 s: a black hole, not a refusal.
                await admin.client_pause(1500)
                start = trio.current_time()
                reason = finish_of(await ask(rt)).reason
                took = trio.current_time() - start
                assert shared_state(rt).errors == 1
                # Past the pause the same client answers again (a timed-out request
                # left its connection usable): round trips succeed once more.
                state = shared_state(rt)
                answered = state.round_trips - state.errors
                with trio.fail_after(10):
                    while True:
                        await ask(rt)
                        state = shared_state(rt)
                        if state.round_trips - state.errors >= answered + 2:
                            break
                        await trio.sleep(0.1)
    assert isinstance(reason, FinishStop)
    assert took < 1.0  # one redis_timeout (0.2 s) and the call, not the 1.5 s pause


async def test_a_lease_a_dead_process_left_expires(redis_server: RedisServer) -> None:
    group = chat(Deployment(route="a", model="m", max_in_flight=1))
    shared = SharedState(Settings(redis=redis_server.url, key_prefix="lease", in_flight_lease=0.3))
    state = DeploymentState.new(group, group.deployments[0])
    with trio.fail_after(BOUND):
        async with trio.open_nursery() as nursery:
            await nursery.start(shared.run)
            first = await shared.acquire(group, [state], "dead:1", 0)
            second = await shared.acquire(group, [state], "live:1", 0)
            # "dead:1" is never released: Redis (its own clock) expires the lease.
            while (third := await shared.acquire(group, [state], "live:2", 0)) is not None:
                if third.chosen is not None:
                    break
                await trio.sleep(0.05)
            nursery.cancel_scope.cancel()
    assert first is not None and first.chosen == 0
    assert second is not None and second.chosen is None
    assert third is not None and third.chosen == 0


async def test_a_slow_upstream_is_not_a_redis_problem(redis_server: RedisServer) -> None:
    group = chat(Deployment(route="a", model="m"))
    with trio.fail_after(BOUND):
        async with runtime_with(
            group, settings(redis_server), a=[Delay(0.3), *text_script(["x"])]
        ) as (rt, _):
            assert isinstance(finish_of(await ask(rt)).reason, FinishStop)
            assert shared_state(rt).errors == 0
