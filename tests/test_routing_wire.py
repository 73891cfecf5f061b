"""Routing over real loopback sockets: local upstreams behind OpenAI-compatible routes.

Each test opens `llmrt.testing` upstreams (one per deployment), registers a
group over them and checks what the consumer sees (one call, one finish,
never two answers) and what each upstream received.
"""

from __future__ import annotations

import math
from collections import Counter

import attrs
import pytest
import trio
import trio.testing
from _routing import (
    OK,
    RATE_LIMITED,
    ask,
    finish_of,
    rate_limited,
    register_routes,
    served_by,
    text_of,
    upstreams,
)

import llmrt
from llmrt import ErrorCode, FinishError, FinishStop, RoutedAttempt
from llmrt.actors.routing import Deployment, Group, RoutingSettings
from llmrt.testing import RecordedRequest, Script, SSEScript, openai_events

BOUND = 30
#: The bound of the mock-clock tests, in their clock's seconds (the cooldowns they skip are long).
MOCK_BOUND = 600


@pytest.fixture
def settling_clock() -> trio.testing.MockClock:
    """A mock clock that jumps only after 50 ms of real time with every task waiting.

    Loopback I/O settles first, so only the waits the tests are about (a
    stalled upstream, a cooldown) are skipped.
    """
    return trio.testing.MockClock(autojump_threshold=0.05)


def group(*routes: str, **kw: object) -> Group:
    tiers = kw.pop("tiers", None)
    deployments = tuple(
        Deployment(route=route, model=f"m-{route}", tier=tiers[i] if tiers else 1)  # type: ignore[index]
        for i, route in enumerate(routes)
    )
    return Group(name="chat", deployments=deployments, **kw)  # type: ignore[arg-type]


async def test_a_429_storm_on_one_of_three_is_served_by_the_others() -> None:
    with trio.fail_after(BOUND):
        async with upstreams({"a": RATE_LIMITED, "b": OK, "c": OK}) as ups:
            async with llmrt.open_runtime() as rt:
                await register_routes(rt, ups)
                await rt.register_groups(
                    [group("a", "b", "c", strategy="weighted", cooldown=60.0)],
                    settings=RoutingSettings(seed=3),
                )
                results = [await ask(rt) for _ in range(12)]
                burst: list[list[llmrt.StreamChunk]] = []

                async def one() -> None:
                    burst.append(await ask(rt))

                async with trio.open_nursery() as nursery:
                    for _ in range(30):
                        nursery.start_soon(one)
                stats = rt.statistics().routing
    every = results + burst
    assert len(every) == 42
    assert all(isinstance(finish_of(chunks).reason, FinishStop) for chunks in every)
    assert all(text_of(chunks) == "Hello there" for chunks in every)
    assert {served_by(chunks) for chunks in every} <= {"b", "c"}
    # Three failures in the window cooled it (the group's cooldown_after): then none reached it.
    assert len(ups["a"].requests) == 3
    assert len(ups["b"].requests) + len(ups["c"].requests) == 42
    failed = [
        attempt
        for chunks in every
        for attempt in finish_of(chunks).routing.attempts  # type: ignore[union-attr]
        if attempt.code is not None
    ]
    assert failed == [RoutedAttempt(group="chat", route="a", model="m-a", code="RATE_LIMIT")] * 3
    assert stats is not None
    a = stats.groups[0].deployments[0]
    assert (a.route, a.cooling, a.cooldowns, a.failovers) == ("a", True, 1, {"RATE_LIMIT": 3})


async def test_a_black_hole_before_the_first_byte_fails_over_within_the_deadline(
    settling_clock: trio.testing.MockClock,
) -> None:
    black_hole = SSEScript(events=openai_events(["never"]), first_byte_delay=math.inf)
    with trio.fail_after(MOCK_BOUND):
        async with upstreams({"a": black_hole, "b": OK}) as ups:
            async with llmrt.open_runtime() as rt:
                await register_routes(rt, ups)
                await rt.register_groups([group("a", "b", first_chunk_timeout=2.0)])
                start = trio.current_time()
                chunks = await ask(rt)
                elapsed = trio.current_time() - start
                # The stalled attempt's connection was closed, not left open.
                await ups["a"].wait_all_closed()
    assert text_of(chunks) == "Hello there"
    routing = finish_of(chunks).routing
    assert routing is not None and routing.route == "b"
    assert [(a.route, a.code) for a in routing.attempts] == [("a", "TIMEOUT"), ("b", None)]
    assert 2.0 <= elapsed < 2.5
    assert len(ups["a"].requests) == 1


async def test_a_failure_after_content_is_an_error_finish_never_a_second_answer() -> None:
    cut = SSEScript(events=openai_events(["Hel", "lo", " world"]), disconnect_after=3)
    with trio.fail_after(BOUND):
        async with upstreams({"a": cut, "b": OK}) as ups:
            async with llmrt.open_runtime() as rt:
                await register_routes(rt, ups)
                await rt.register_groups([group("a", "b")])
                chunks = await ask(rt)
    finish = finish_of(chunks)
    assert isinstance(finish.reason, FinishError)
    assert finish.reason.failure.code in (ErrorCode.NETWORK, ErrorCode.PROTOCOL)
    # Only the first deployment's partial answer: nothing of "b" was asked for or added.
    assert text_of(chunks) == "Hello"
    assert ups["b"].requests == []
    assert finish.routing is not None and finish.routing.route == "a"
    assert [(a.route, a.code) for a in finish.routing.attempts] == [
        ("a", finish.reason.failure.code)
    ]


async def test_auth_never_fails_over() -> None:
    denied = llmrt.testing.ErrorScript(
        401, body={"error": {"message": "Incorrect API key provided", "type": "invalid_request"}}
    )
    with trio.fail_after(BOUND):
        async with upstreams({"a": denied, "b": OK}) as ups:
            async with llmrt.open_runtime() as rt:
                await register_routes(rt, ups)
                await rt.register_groups([group("a", "b")])
                chunks = await ask(rt)
    finish = finish_of(chunks)
    assert isinstance(finish.reason, FinishError)
    assert finish.reason.failure.code == ErrorCode.AUTH
    assert ups["b"].requests == []
    assert finish.routing is not None
    assert [(a.route, a.code) for a in finish.routing.attempts] == [("a", "AUTH")]


async def test_retry_after_cools_for_the_providers_delay(
    settling_clock: trio.testing.MockClock,
) -> None:
    # The first answer asks for 40 s; the deployment's own back-off would be 5 s.
    scripts: list[Script] = [rate_limited(40), OK, OK, OK]
    with trio.fail_after(MOCK_BOUND):
        async with upstreams({"a": scripts, "b": OK}) as ups:
            async with llmrt.open_runtime() as rt:
                await register_routes(rt, ups)
                await rt.register_groups([group("a", "b")])
                first = await ask(rt)
                stats = rt.statistics().routing
                assert stats is not None
                a = stats.groups[0].deployments[0]
                assert a.cooling and 39.9 < a.cooling_for <= 40.0
                await trio.sleep(39.0)
                during = await ask(rt)
                await trio.sleep(1.5)
                after = await ask(rt)
    assert [(x.route, x.code) for x in finish_of(first).routing.attempts] == [  # type: ignore[union-attr]
        ("a", "RATE_LIMIT"),
        ("b", None),
    ]
    assert served_by(during) == "b"
    assert served_by(after) == "a"
    assert len(ups["a"].requests) == 2


async def test_cooling_again_extends_and_never_shortens(
    settling_clock: trio.testing.MockClock,
) -> None:
    # Three calls reach "a" at once; its answers come at 1 s, 2 s and 3 s asking
    # for 60 s, 5 s and 100 s. The cooldown ends 61 s in, stays there (5 s does
    # not shorten it), then moves to 103 s.
    delays = iter([(1.0, 60), (2.0, 5), (3.0, 100)])

    def slow_429(_: RecordedRequest) -> Script:
        after, retry = next(delays)
        return attrs.evolve(rate_limited(retry), first_byte_delay=after)

    seen: list[float] = []
    with trio.fail_after(MOCK_BOUND):
        async with upstreams({"a": slow_429, "b": OK}) as ups:
            async with llmrt.open_runtime() as rt:
                await register_routes(rt, ups)
                await rt.register_groups([group("a", "b", tiers=(1, 2), cooldown_after=1)])
                start = trio.current_time()

                async def watch() -> None:
                    for at in (1.5, 2.5, 3.5):
                        await trio.sleep_until(start + at)
                        stats = rt.statistics().routing
                        assert stats is not None
                        a = stats.groups[0].deployments[0]
                        seen.append(round(trio.current_time() - start + a.cooling_for, 3))

                async with trio.open_nursery() as nursery:
                    for _ in range(3):
                        nursery.start_soon(ask, rt)
                    nursery.start_soon(watch)
    assert len(ups["a"].requests) == 3
    assert seen == [61.0, 61.0, 103.0]


@pytest.mark.parametrize("mode", ["wait", "fail"])
async def test_all_cooling_waits_for_the_earliest_or_ends_rate_limit(
    settling_clock: trio.testing.MockClock, mode: str
) -> None:
    with trio.fail_after(MOCK_BOUND):
        async with upstreams({"a": [rate_limited(10), OK], "b": [rate_limited(20), OK]}) as ups:
            async with llmrt.open_runtime() as rt:
                await register_routes(rt, ups)
                await rt.register_groups([group("a", "b", when_unavailable=mode)])
                first = await ask(rt)
                start = trio.current_time()
                second = await ask(rt)
                elapsed = trio.current_time() - start
    # Both failed over before any content: the last failure is the call's.
    reason = finish_of(first).reason
    assert isinstance(reason, FinishError) and reason.failure.code == ErrorCode.RATE_LIMIT
    if mode == "wait":
        assert served_by(second) == "a"
        assert 9.9 <= elapsed < 10.5
    else:
        reason = finish_of(second).reason
        assert isinstance(reason, FinishError) and reason.failure.code == ErrorCode.RATE_LIMIT
        assert reason.failure.provider_retry_after_ms is not None
        assert 9_900 <= reason.failure.provider_retry_after_ms <= 10_000
        assert elapsed < 0.1
        assert len(ups["a"].requests) == len(ups["b"].requests) == 1


async def test_a_caller_deadline_before_the_earliest_return_ends_rate_limit_at_once(
    settling_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(MOCK_BOUND):
        async with upstreams({"a": [rate_limited(30), OK]}) as ups:
            async with llmrt.open_runtime() as rt:
                await register_routes(rt, ups)
                await rt.register_groups([group("a")])
                await ask(rt)
                start = trio.current_time()
                with trio.move_on_after(5):
                    chunks = await ask(rt)
                elapsed = trio.current_time() - start
    reason = finish_of(chunks).reason
    assert isinstance(reason, FinishError) and reason.failure.code == ErrorCode.RATE_LIMIT
    assert reason.failure.provider_retry_after_ms is not None
    assert reason.failure.provider_retry_after_ms > 29_000
    assert elapsed < 0.1


async def test_weights_are_followed_within_a_seeded_bound() -> None:
    calls = 300
    with trio.fail_after(BOUND):
        async with upstreams({"a": OK, "b": OK, "c": OK}) as ups:
            async with llmrt.open_runtime() as rt:
                await register_routes(rt, ups)
                weights = {"a": 1.0, "b": 2.0, "c": 7.0}
                spec = Group(
                    name="chat",
                    strategy="weighted",
                    deployments=tuple(
                        Deployment(route=r, model="m", weight=w) for r, w in weights.items()
                    ),
                )
                await rt.register_groups([spec], settings=RoutingSettings(seed=11))
                served = Counter([served_by(await ask(rt)) for _ in range(calls)])
    assert sum(served.values()) == calls
    assert {name: len(up.requests) for name, up in ups.items()} == dict(served)
    # Each share within 4 standard deviations of its weight's (binomial, n = 300).
    for name, weight in weights.items():
        p = weight / 10
        sd = math.sqrt(p * (1 - p) / calls)
        assert abs(served[name] / calls - p) < 4 * sd, (name, served)


async def test_the_latency_strategy_prefers_the_faster_and_returns_to_a_recovered_one(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Under a mock clock the latencies the router measures are the scripted
    # delays alone: on a loaded machine, real time made a fast "a" look slow.
    slow = {"a": 0.06, "b": 0.0}

    def paced(name: str) -> object:
        def script(_: RecordedRequest) -> Script:
            return SSEScript(events=openai_events(["ok"]), first_byte_delay=slow[name])

        return script

    with trio.fail_after(MOCK_BOUND):
        async with upstreams({"a": paced("a"), "b": paced("b")}) as ups:  # type: ignore[dict-item]
            async with llmrt.open_runtime() as rt:
                await register_routes(rt, ups)
                spec = group("a", "b", strategy="lowest-latency", explore=0.1)
                await rt.register_groups([spec], settings=RoutingSettings(seed=4))
                first = [served_by(await ask(rt)) for _ in range(30)]
                slow.update(a=0.0, b=0.06)  # "a" recovered; "b" became slow
                second = [served_by(await ask(rt)) for _ in range(40)]
    assert first[10:].count("b") >= 16, "".join(map(str, first))
    assert second[-15:].count("a") >= 12, "".join(map(str, second))
