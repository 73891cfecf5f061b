"""Routing in process: registration, budgets, waiting, fallbacks, and the rules themselves.

Scripted adapters stand in for providers here (the wire cases are in
``test_routing_wire.py``); timing cases run on the autojump clock.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

import pytest
import trio
import trio.testing
from _routing import ask, finish_of, request, served_by, text_of
from _settle import wait_until

import llmrt
from llmrt import (
    AttemptChunk,
    ErrorCode,
    FinishAborted,
    FinishError,
    FinishStop,
    LlmError,
    TokenUsage,
    UsageChunk,
)
from llmrt.actors.routing import (
    Deployment,
    DeploymentState,
    Group,
    Ordered,
    Weighted,
)
from llmrt.actors.routing._window import Window
from llmrt.adapters.scripted import Delay, Raise, ScriptedAdapter, Stall, text_script

BOUND = 600  # mock-clock seconds


def rate_limit(ms: int | None = None) -> Raise:
    return Raise(LlmError(ErrorCode.RATE_LIMIT, "slow down", provider_retry_after_ms=ms))


async def scripted(rt: llmrt.LlmRuntime, **scripts: Any) -> dict[str, ScriptedAdapter]:
    adapters = {}
    for name, script in scripts.items():
        adapters[name] = ScriptedAdapter(script)
        await rt.register_adapter([name], adapters[name])
    return adapters


def chat(*routes: str, name: str = "chat", **kw: Any) -> Group:
    limits = kw.pop("limits", {})
    deployments = tuple(
        Deployment(route=route, model="m", **limits.get(route, {})) for route in routes
    )
    return Group(name=name, deployments=deployments, **kw)


# ---- the rules, without a runtime -------------------------------------------------------


def test_a_window_never_counts_less_than_the_sliding_count() -> None:
    window = Window(10.0)
    rng = random.Random(1)
    events: list[float] = []
    now = 0.0
    for _ in range(2000):
        now += rng.expovariate(5.0)
        window.add(now, 1)
        events.append(now)
        sliding = sum(1 for t in events if t > now - 10.0)
        # Never below the true count, and never above it by more than one bucket's worth.
        assert sliding <= window.used(now)
        assert window.used(now) <= sum(1 for t in events if t > now - 11.0)


def test_room_at_is_when_enough_buckets_expire() -> None:
    window = Window(10.0)
    window.add(0.5, 2)  # bucket 0
    window.add(3.2, 3)  # bucket 3
    # Bucket 0 ([0, 1)) counts while the window (now - 10, now] reaches into it: until 11 s.
    assert window.room_at(4.0, 1, 5) == 11.0
    assert window.room_at(4.0, 3, 5) == 14.0
    assert window.room_at(4.0, 6, 5) == math.inf
    assert window.room_at(10.5, 1, 5) == 11.0
    assert window.room_at(12.0, 3, 5) == 14.0
    assert window.room_at(12.0, 2, 5) == 12.0


def test_cooling_extends_and_never_shortens() -> None:
    group = chat("a", cooldown=5.0, max_cooldown=40.0)
    state = DeploymentState.new(group, group.deployments[0])
    assert state.cool(group, 0.0, None) == 5.0  # the back-off
    assert state.cool(group, 1.0, 2.0) == 11.0  # the next back-off (10 s) beats 2 s
    assert state.cool(group, 2.0, 3.0) == 22.0  # 20 s back-off
    assert state.cool(group, 3.0, 1.0) == 43.0  # capped at 40 s
    assert state.cool(group, 4.0, 1.0) == 44.0
    state.cool_level = 0
    assert state.cool(group, 5.0, 1.0) == 44.0  # 10 s would end sooner: kept
    assert state.cool(group, 6.0, 100.0) == 106.0  # the provider's delay is longer


def test_failures_in_a_window_cool_after_n() -> None:
    group = chat("a", cooldown_after=3, cooldown_window=10.0)
    state = DeploymentState.new(group, group.deployments[0])
    assert not state.failed(group, 0.0, None)
    assert not state.failed(group, 1.0, None)
    assert not state.failed(group, 12.0, None)  # the first two left the window
    assert not state.failed(group, 13.0, None)
    assert state.failed(group, 14.0, None)
    assert state.cool_until == 19.0
    # A provider's delay cools at once.
    other = DeploymentState.new(group, group.deployments[0])
    assert other.failed(group, 0.0, 30.0) and other.cool_until == 30.0


def test_the_weighted_strategy_follows_weights() -> None:
    group = Group(
        name="g",
        deployments=(Deployment(route="a", model="m", weight=3), Deployment(route="b", model="m")),
    )
    states = [DeploymentState.new(group, spec) for spec in group.deployments]
    rng = random.Random(0)
    picks = [Weighted().choose(states, rng) for _ in range(4000)]
    assert 0.72 < picks.count(0) / 4000 < 0.78
    assert Ordered().choose(states, rng) == 0


# ---- registration ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("groups", "message"),
    [
        ([chat("nope")], "group[0].deployment[0].route: deployment route 'nope'"),
        ([chat("a", "a")], "listed twice"),
        ([chat("a", name="a")], "has the name of a provider route"),
        ([chat("a"), chat("a")], "group[1].name: group 'chat' is declared twice"),
        ([chat("a", strategy="fastest")], "unknown strategy 'fastest'"),
        ([chat("a", failover_on=("ABORTED",))], "ABORTED never fails over"),
        ([chat("a", failover_on=("NOPE",))], "unknown error code 'NOPE'"),
        ([chat("a", context_fallback="big")], "context_fallback 'big' is not another group"),
        ([chat("a", cooldown=10.0, max_cooldown=5.0)], "max_cooldown must be at least cooldown"),
        ([chat("a", first_chunk_timeout=-1.0)], "Expected `float` > 0.0"),
        ([Group(name="chat")], "has no deployment"),
        ([chat("a", name="bad name")], "invalid group name"),
    ],
)
async def test_a_bad_set_is_refused_whole(
    runtime: llmrt.LlmRuntime, groups: Sequence[Group], message: str
) -> None:
    await scripted(runtime, a=text_script(["x"]))
    with pytest.raises(LlmError) as raised:
        await runtime.register_groups(groups)
    assert raised.value.code == ErrorCode.INVALID_PROVIDER
    assert message in raised.value.failure.message
    assert [p.id for p in runtime.list_providers()] == ["a"]


async def test_groups_are_providers_replaced_atomically_and_disposed(
    runtime: llmrt.LlmRuntime,
) -> None:
    await scripted(runtime, a=text_script(["from a"]), b=text_script(["from b"]))
    handle = await runtime.register_groups([chat("a")])
    assert [p.id for p in runtime.list_providers()] == ["a", "b", "chat"]
    assert [m.id for m in await runtime.list_models("chat")] == ["m"]
    assert text_of(await ask(runtime)) == "from a"
    with pytest.raises(LlmError):
        await handle.replace([chat("b"), chat("missing", name="other")])
    assert text_of(await ask(runtime)) == "from a"  # the bad replacement changed nothing
    await handle.replace([chat("b")])
    assert text_of(await ask(runtime)) == "from b"
    with pytest.raises(LlmError) as raised:
        await runtime.register_adapter(["chat"], ScriptedAdapter(text_script(["x"])))
    assert raised.value.code == ErrorCode.DUPLICATE_ADAPTER
    with pytest.raises(LlmError) as twice:
        await runtime.register_groups([chat("a")])
    assert "declared twice" in twice.value.failure.message
    await handle.dispose()
    reason = finish_of(await ask(runtime)).reason
    assert isinstance(reason, FinishError) and reason.failure.code == ErrorCode.NO_ADAPTER
    with pytest.raises(LlmError) as disposed:
        await handle.replace([chat("a")])
    assert disposed.value.code == ErrorCode.REGISTRATION_DISPOSED


async def test_an_applications_strategy_by_name(runtime: llmrt.LlmRuntime) -> None:
    class Last:
        def choose(self, candidates: Sequence[DeploymentState], rng: random.Random) -> int:
            return len(candidates) - 1

    await scripted(runtime, a=text_script(["a"]), b=text_script(["b"]))
    await runtime.register_groups([chat("a", "b", strategy="last")], strategies={"last": Last()})
    assert served_by(await ask(runtime)) == "b"


# ---- failover rules -------------------------------------------------------------------


async def test_usage_before_content_of_a_failed_attempt_is_dropped(
    runtime: llmrt.LlmRuntime,
) -> None:
    early = UsageChunk(usage=TokenUsage(input_tokens=99, output_tokens=0))
    await scripted(
        runtime,
        a=[early, Raise(LlmError(ErrorCode.OVERLOADED, "busy"))],
        b=text_script(["fine"], usage=TokenUsage(input_tokens=3, output_tokens=1)),
    )
    await runtime.register_groups([chat("a", "b")])
    chunks = await ask(runtime)
    usages = [c.usage.input_tokens for c in chunks if isinstance(c, UsageChunk)]
    assert usages == [3]
    assert served_by(chunks) == "b"


async def test_usage_before_a_final_failure_is_delivered_before_the_finish(
    runtime: llmrt.LlmRuntime,
) -> None:
    early = UsageChunk(usage=TokenUsage(input_tokens=7, output_tokens=0))
    await scripted(runtime, a=[early, Raise(LlmError(ErrorCode.AUTH, "bad key"))])
    await runtime.register_groups([chat("a")])
    chunks = await ask(runtime)
    assert isinstance(chunks[0], UsageChunk) and chunks[0].usage.input_tokens == 7
    reason = finish_of(chunks).reason
    assert isinstance(reason, FinishError) and reason.failure.code == ErrorCode.AUTH


async def test_context_window_exceeded_moves_to_the_fallback_group(
    runtime: llmrt.LlmRuntime,
) -> None:
    too_long = Raise(LlmError(ErrorCode.CONTEXT_WINDOW_EXCEEDED, "maximum context length"))
    adapters = await scripted(
        runtime, small=[too_long], other=text_script(["x"]), big=text_script(["long answer"])
    )
    await runtime.register_groups(
        [chat("small", "other", context_fallback="large"), chat("big", name="large")]
    )
    chunks = await ask(runtime)
    routing = finish_of(chunks).routing
    assert routing is not None
    assert (routing.group, routing.route) == ("large", "big")
    assert [(a.group, a.route, a.code) for a in routing.attempts] == [
        ("chat", "small", "CONTEXT_WINDOW_EXCEEDED"),
        ("large", "big", None),
    ]
    assert adapters["other"].requests == []  # the same prompt fits no deployment of "chat"


async def test_the_route_and_model_sent_are_the_deployments(runtime: llmrt.LlmRuntime) -> None:
    adapters = await scripted(runtime, a=text_script(["x"]))
    await runtime.register_groups([chat("a")])
    await ask(runtime, request(prompt="hello"))
    sent = adapters["a"].requests[0]
    assert (sent.provider, sent.model) == ("a", "m")


async def test_stream_with_retry_retries_the_whole_group(
    runtime: llmrt.LlmRuntime, autojump_clock: trio.testing.MockClock
) -> None:
    busy = Raise(LlmError(ErrorCode.OVERLOADED, "busy"))
    calls = {"n": 0}

    def flaky(_: llmrt.GenerateOptions) -> list[Any]:
        calls["n"] += 1
        return [busy] if calls["n"] <= 1 else text_script(["ok"])

    await scripted(runtime, a=flaky, b=[busy])
    await runtime.register_groups([chat("a", "b", cooldown_after=100)])
    policy = llmrt.NormalRetryPolicy(initial_delay_ms=10, max_delay_ms=10, jitter_ratio=0)
    async with runtime.stream_with_retry(request(), policy=policy) as call:
        events = [event async for event in call]
    last = events[-1]
    assert isinstance(last, AttemptChunk) and last.attempt == 2
    assert isinstance(last.chunk, llmrt.Finish) and isinstance(last.chunk.reason, FinishStop)
    assert last.chunk.routing is not None and last.chunk.routing.route == "a"


# ---- budgets and waiting --------------------------------------------------------------


async def test_in_flight_budget_queues_first_come_first_served(
    runtime: llmrt.LlmRuntime, autojump_clock: trio.testing.MockClock
) -> None:
    await scripted(runtime, a=[Delay(1.0), *text_script(["x"])])
    await runtime.register_groups([chat("a", limits={"a": {"max_in_flight": 1}})])
    order: list[int] = []

    async def one(n: int, task_status: trio.TaskStatus[None]) -> None:
        async with runtime.stream(request()) as call:
            task_status.started()
            async for _ in call:
                pass
        order.append(n)

    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        for n in range(4):
            await nursery.start(one, n)
    assert order == [0, 1, 2, 3]
    assert trio.current_time() - start == pytest.approx(4.0)
    stats = runtime.statistics().routing
    assert stats is not None and stats.groups[0].waiting == 0


async def test_a_bounded_wait_then_rate_limit_with_the_delay(
    runtime: llmrt.LlmRuntime, autojump_clock: trio.testing.MockClock
) -> None:
    await scripted(runtime, a=text_script(["x"]))
    await runtime.register_groups([chat("a", window=60.0, max_wait=20.0, limits={"a": {"rpm": 2}})])
    first = [served_by(await ask(runtime)) for _ in range(2)]
    start = trio.current_time()
    chunks = await ask(runtime)
    reason = finish_of(chunks).reason
    assert first == ["a", "a"]
    # The window frees room in 60 s, beyond the group's 20 s wait: refused at once.
    assert isinstance(reason, FinishError) and reason.failure.code == ErrorCode.RATE_LIMIT
    assert reason.failure.provider_retry_after_ms is not None
    # 60 s counted in 6 s buckets: the one the first calls went to counts for 66 s.
    assert 60_000 < reason.failure.provider_retry_after_ms <= 66_000
    assert trio.current_time() == start
    stats = runtime.statistics().routing
    assert stats is not None
    assert stats.groups[0].rate_limited == 1 and stats.groups[0].deployments[0].rpm_used == 2


async def test_rpm_waits_for_the_window_when_the_wait_allows(
    runtime: llmrt.LlmRuntime, autojump_clock: trio.testing.MockClock
) -> None:
    await scripted(runtime, a=text_script(["x"]))
    await runtime.register_groups([chat("a", window=10.0, limits={"a": {"rpm": 2}})])
    start = trio.current_time()
    served = [served_by(await ask(runtime)) for _ in range(5)]
    assert served == ["a"] * 5
    # Two per ten-second window (counted in tenths): the fifth waited two windows.
    assert trio.current_time() - start == pytest.approx(22.0)


async def test_tpm_is_charged_by_estimate_and_settled_by_usage(
    runtime: llmrt.LlmRuntime, autojump_clock: trio.testing.MockClock
) -> None:
    usage = TokenUsage(input_tokens=10, output_tokens=20)
    await scripted(runtime, a=[Delay(1.0), *text_script(["x"], usage=usage)])
    await runtime.register_groups([chat("a", limits={"a": {"tpm": 1000}})])
    async with runtime.stream(request(prompt="x" * 400, max_tokens=500)) as call:
        await call.__anext__()
        stats = runtime.statistics().routing
        assert stats is not None
        assert stats.groups[0].deployments[0].tpm_used == 600  # 400 chars / 4 + max_tokens
        async for _ in call:
            pass
    stats = runtime.statistics().routing
    assert stats is not None and stats.groups[0].deployments[0].tpm_used == 30
    # A request estimated above the whole budget waits the group's bound, then is refused.
    reason = finish_of(await ask(runtime, request(max_tokens=5000))).reason
    assert isinstance(reason, FinishError) and reason.failure.code == ErrorCode.RATE_LIMIT


async def test_abort_while_waiting_ends_at_once(
    runtime: llmrt.LlmRuntime, autojump_clock: trio.testing.MockClock
) -> None:
    await scripted(runtime, a=[Stall()])
    await runtime.register_groups([chat("a", limits={"a": {"max_in_flight": 1}})])
    controller = llmrt.AbortController()
    results: list[list[llmrt.StreamChunk]] = []

    async def one(signal: llmrt.AbortSignal) -> None:
        results.append(await ask_with(runtime, signal))

    async with trio.open_nursery() as nursery:
        holder = llmrt.AbortController()
        nursery.start_soon(one, holder.signal)
        await wait_until(lambda: deployment(runtime).in_flight == 1)
        nursery.start_soon(one, controller.signal)
        await trio.sleep(5)
        stats = runtime.statistics().routing
        assert stats is not None and stats.groups[0].waiting == 1
        start = trio.current_time()
        controller.abort("enough")
        await wait_until(lambda: len(results) == 1)
        assert trio.current_time() == start
        holder.abort()
    reason = finish_of(results[0]).reason
    assert isinstance(reason, FinishAborted) and reason.failure.message == "enough"


def deployment(rt: llmrt.LlmRuntime, index: int = 0) -> Any:
    stats = rt.statistics().routing
    assert stats is not None
    return stats.groups[0].deployments[index]


async def ask_with(rt: llmrt.LlmRuntime, signal: llmrt.AbortSignal) -> list[llmrt.StreamChunk]:
    async with rt.stream(request(), signal=signal) as call:
        return [chunk async for chunk in call]


async def test_shutdown_ends_waiting_calls_aborted(autojump_clock: trio.testing.MockClock) -> None:
    results: list[list[llmrt.StreamChunk]] = []
    with trio.fail_after(BOUND):
        async with llmrt.open_runtime(shutdown_grace=1.0) as rt:
            await scripted(rt, a=[Stall()])
            await rt.register_groups([chat("a", limits={"a": {"max_in_flight": 1}})])

            async def one() -> None:
                results.append(await ask(rt))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(one)
                nursery.start_soon(one)
                await trio.sleep(1)
                await rt._core.shutdown(1.0)
    assert len(results) == 2
    for chunks in results:
        assert isinstance(finish_of(chunks).reason, FinishAborted)


async def test_a_full_queue_refuses_at_once(
    runtime: llmrt.LlmRuntime, autojump_clock: trio.testing.MockClock
) -> None:
    await scripted(runtime, a=[Stall()])
    await runtime.register_groups([chat("a", max_queue=1, limits={"a": {"max_in_flight": 1}})])
    results: list[list[llmrt.StreamChunk]] = []
    async with trio.open_nursery() as nursery:

        async def one() -> None:
            results.append(await ask(runtime))

        for _ in range(3):
            nursery.start_soon(one)
        await trio.sleep(1)
        assert len(results) == 1
        reason = finish_of(results[0]).reason
        assert isinstance(reason, FinishError) and reason.failure.code == ErrorCode.RATE_LIMIT
        assert "too many calls are waiting" in reason.failure.message
        nursery.cancel_scope.cancel()


# ---- the Redis URL ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("redis://127.0.0.1:6379/0", None),
        ("rediss://:pw@cache.internal:6380/1", None),
        ("unix:///run/redis.sock?db=2", None),
        ("redis+cluster://node-1:7000", None),
        ("redis+sentinel://s1:26379,s2:26379/mymaster/0", None),
        ("http://127.0.0.1:6379", "redis must be a redis://"),
        ("redis://:pw@host:port/0", "port is not a number"),
        ("redis+sentinel://s1:26379", "names the service"),
        ("redis+sentinel://s1/main", "each sentinel is HOST:PORT"),
    ],
)
def test_redis_urls_are_checked_without_quoting_them(url: str, problem: str | None) -> None:
    from llmrt.actors.routing._redis_url import password_of, url_problem

    found = url_problem(url)
    if problem is None:
        assert found is None
    else:
        assert found is not None and problem in found
        assert "pw" not in found and url not in found
    if ":pw@" in url:
        assert password_of(url) == "pw"
