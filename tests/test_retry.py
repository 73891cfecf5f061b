"""The retry executor: delays, Retry-After, modes, final codes, abort, and over real sockets."""

from __future__ import annotations

import random
from typing import Any

import msgspec
import pytest
import trio
import trio.testing

import llmrt
from llmrt import (
    AlwaysRetryPolicy,
    AttemptChunk,
    ErrorCode,
    Finish,
    FinishAborted,
    FinishError,
    FinishStop,
    GenerateOptions,
    LlmError,
    NormalRetryPolicy,
    RetryScheduled,
)
from llmrt.actors._retry import backoff_delay_ms, retry_delay_ms
from llmrt.adapters.openai_chat import OpenAIChatAdapter
from llmrt.adapters.scripted import Raise, ScriptedAdapter, Stall, text_script
from llmrt.testing import ErrorScript, SSEScript, open_upstream, openai_events

REQUEST = GenerateOptions(provider="p", model="m", messages=(llmrt.user_message("hi"),))


def failing(*codes: str, then: list[Any] | None = None, retry_after_ms: int | None = None) -> Any:
    """A script function: the n-th request fails with codes[n], later ones succeed."""
    count = {"n": 0}

    def script(request: GenerateOptions) -> list[Any]:
        n = count["n"]
        count["n"] += 1
        if n < len(codes):
            return [
                Raise(
                    LlmError(codes[n], f"attempt {n + 1}", provider_retry_after_ms=retry_after_ms)
                )
            ]
        return then if then is not None else text_script(["ok"])

    return script


async def run(
    rt: llmrt.LlmRuntime, **kw: Any
) -> tuple[list[llmrt.RetryEvent], list[tuple[float, llmrt.RetryEvent]]]:
    events: list[llmrt.RetryEvent] = []
    timed: list[tuple[float, llmrt.RetryEvent]] = []
    async with rt.stream_with_retry(REQUEST, **kw) as call:
        async for event in call:
            events.append(event)
            timed.append((trio.current_time(), event))
    return events, timed


def final(events: list[llmrt.RetryEvent]) -> Finish:
    last = events[-1]
    assert isinstance(last, AttemptChunk) and isinstance(last.chunk, Finish)
    assert sum(isinstance(e, AttemptChunk) and isinstance(e.chunk, Finish) for e in events) == 1
    return last.chunk


# ---- the pure policy arithmetic -------------------------------------------------------------


def test_backoff_doubles_up_to_the_cap_without_jitter() -> None:
    policy = NormalRetryPolicy(initial_delay_ms=500, max_delay_ms=3000, jitter_ratio=0)
    rng = random.Random(1)
    assert [backoff_delay_ms(policy, n, rng) for n in range(1, 6)] == [500, 1000, 2000, 3000, 3000]


def test_jitter_stays_in_its_band_and_is_reproducible_with_a_seed() -> None:
    policy = NormalRetryPolicy(initial_delay_ms=1000, max_delay_ms=60_000, jitter_ratio=0.25)
    first = [backoff_delay_ms(policy, 3, random.Random(42)) for _ in range(3)]
    assert first[0] == first[1] == first[2]
    rng = random.Random(7)
    samples = [backoff_delay_ms(policy, 3, rng) for _ in range(500)]
    assert all(3000 <= s <= 5000 for s in samples)
    assert max(samples) - min(samples) > 1000  # it does jitter


def test_final_codes_and_retry_after() -> None:
    policy = NormalRetryPolicy(max_retries=2, jitter_ratio=0)
    rng = random.Random(0)

    def failure(code: str, after: int | None = None) -> llmrt.LlmFailure:
        return llmrt.LlmFailure(message="x", code=code, provider_retry_after_ms=after)

    assert retry_delay_ms(policy, failure(ErrorCode.RATE_LIMIT), 0, rng) == 1000
    assert retry_delay_ms(policy, failure(ErrorCode.RATE_LIMIT, 2500), 0, rng) == 2500
    assert retry_delay_ms(policy, failure(ErrorCode.RATE_LIMIT, 500_000), 0, rng) is None
    assert retry_delay_ms(policy, failure(ErrorCode.RATE_LIMIT), 2, rng) is None  # out of retries
    for code in llmrt.NEVER_RETRIED_CODES:
        assert retry_delay_ms(policy, failure(code), 0, rng) is None
    narrow = NormalRetryPolicy(retryable_codes=(ErrorCode.OVERLOADED,))
    assert retry_delay_ms(narrow, failure(ErrorCode.RATE_LIMIT), 0, rng) is None


@pytest.mark.parametrize(
    "kwargs",
    [
        {"initial_delay_ms": -1},
        {"max_delay_ms": -5},
        {"initial_delay_ms": 10, "max_delay_ms": 5},
        {"jitter_ratio": 1.5},
        {"jitter_ratio": -0.1},
        {"max_retries": -1},
    ],
)
async def test_bad_policies_are_refused_at_registration(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        NormalRetryPolicy(**kwargs)
    # Nothing but the constructor makes a policy, and it refuses these; an
    # adapter that hands over something else shaped like one is refused at
    # registration, with the reason.
    shaped = {"mode": "normal", **{_camel(k): v for k, v in kwargs.items()}}
    async with llmrt.open_runtime() as rt:
        with pytest.raises(LlmError) as info:
            await rt.register_adapter(["p"], ScriptedAdapter([], retry_policy=shaped))  # type: ignore[arg-type]
        assert info.value.code == ErrorCode.INVALID_PROVIDER
        assert "provider_retry_policy" in str(info.value)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


# ---- the executor on a mock clock -----------------------------------------------------------


async def test_normal_policy_waits_the_exact_delays(autojump_clock: trio.testing.MockClock) -> None:
    policy = NormalRetryPolicy(initial_delay_ms=1000, max_delay_ms=8000, jitter_ratio=0)
    adapter = ScriptedAdapter(
        failing(ErrorCode.RATE_LIMIT, ErrorCode.OVERLOADED, ErrorCode.NETWORK)
    )
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], adapter, stream_idle_timeout=60)
        start = trio.current_time()
        events, timed = await run(rt, policy=policy)
    retries = [e for e in events if isinstance(e, RetryScheduled)]
    assert [r.delay_ms for r in retries] == [1000, 2000, 4000]
    assert [r.attempt for r in retries] == [1, 2, 3]
    assert [r.failure.code for r in retries] == ["RATE_LIMIT", "OVERLOADED", "NETWORK"]
    finish = final(events)
    assert finish.reason == FinishStop()
    assert events[-1].attempt == 4  # type: ignore[union-attr]
    first_chunk_of_4 = next(t for t, e in timed if isinstance(e, AttemptChunk) and e.attempt == 4)
    assert first_chunk_of_4 - start == pytest.approx(7.0)
    assert len(adapter.requests) == 4


async def test_policy_of_the_serving_registration_is_used(
    autojump_clock: trio.testing.MockClock,
) -> None:
    policy = NormalRetryPolicy(max_retries=1, initial_delay_ms=250, jitter_ratio=0)
    adapter = ScriptedAdapter(failing(*[ErrorCode.SERVER_ERROR] * 5), retry_policy=policy)
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], adapter)
        events, _ = await run(rt)
        stats = rt.statistics()
    retries = [e for e in events if isinstance(e, RetryScheduled)]
    assert [r.delay_ms for r in retries] == [250]
    reason = final(events).reason
    assert isinstance(reason, FinishError) and reason.failure.code == ErrorCode.SERVER_ERROR
    assert stats.retries_by_code == {"SERVER_ERROR": 1}
    assert stats.attempts_per_call == {2: 1}


async def test_retry_after_is_honoured_and_capped(autojump_clock: trio.testing.MockClock) -> None:
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(
            ["p"], ScriptedAdapter(failing(ErrorCode.RATE_LIMIT, retry_after_ms=4500))
        )
        events, _ = await run(rt, policy=NormalRetryPolicy(jitter_ratio=0))
        assert [e.delay_ms for e in events if isinstance(e, RetryScheduled)] == [4500]
        assert final(events).reason == FinishStop()
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(
            ["p"], ScriptedAdapter(failing(ErrorCode.RATE_LIMIT, retry_after_ms=4500))
        )
        events, _ = await run(rt, max_retry_after_ms=3000)
    assert not any(isinstance(e, RetryScheduled) for e in events)
    assert final(events).reason.failure.code == ErrorCode.RATE_LIMIT  # type: ignore[union-attr]


async def test_always_mode_keeps_going_until_success(
    autojump_clock: trio.testing.MockClock,
) -> None:
    policy = AlwaysRetryPolicy(initial_delay_ms=100, max_delay_ms=1000, jitter_ratio=0)
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], ScriptedAdapter(failing(*[ErrorCode.OVERLOADED] * 25)))
        events, _ = await run(rt, policy=policy)
    assert sum(isinstance(e, RetryScheduled) for e in events) == 25
    assert final(events).reason == FinishStop()
    assert events[-1].attempt == 26  # type: ignore[union-attr]


@pytest.mark.parametrize("code", sorted(llmrt.NEVER_RETRIED_CODES - {ErrorCode.ABORTED}))
async def test_non_retryable_codes_fail_at_once(code: str) -> None:
    policy = NormalRetryPolicy(retryable_codes=(code,), max_retries=10)  # even when listed
    adapter = ScriptedAdapter(failing(code))
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], adapter)
        events, _ = await run(rt, policy=policy)
    assert len(events) == 1
    assert final(events).reason.failure.code == code  # type: ignore[union-attr]
    assert len(adapter.requests) == 1


@pytest.mark.parametrize(
    "code",
    [ErrorCode.INSUFFICIENT_BALANCE, ErrorCode.AUTH, ErrorCode.INVALID_REQUEST, "VENDOR_SPECIFIC"],
)
async def test_always_mode_retries_every_code(
    code: str, autojump_clock: trio.testing.MockClock
) -> None:
    # As the contract has it: an always policy is back-off only, no code list.
    assert set(AlwaysRetryPolicy.__struct_fields__) == {
        "initial_delay_ms",
        "max_delay_ms",
        "jitter_ratio",
    }
    policy = AlwaysRetryPolicy(initial_delay_ms=100, max_delay_ms=1000, jitter_ratio=0)
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], ScriptedAdapter(failing(code, code, code)))
        events, _ = await run(rt, policy=policy)
    assert [e.failure.code for e in events if isinstance(e, RetryScheduled)] == [code] * 3
    assert final(events).reason == FinishStop()


def half_then_whole() -> ScriptedAdapter:
    """The first request streams half an answer, then drops; later ones answer whole."""

    def script(request: GenerateOptions) -> list[Any]:
        if len(adapter.requests) == 1:
            return [*text_script(["half"])[:2], Raise(LlmError(ErrorCode.NETWORK, "dropped"))]
        return text_script(["whole answer"])

    adapter = ScriptedAdapter(script)
    return adapter


async def test_partial_output_is_tagged_with_its_attempt(
    autojump_clock: trio.testing.MockClock,
) -> None:
    adapter = half_then_whole()
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], adapter)
        events, _ = await run(rt, policy=NormalRetryPolicy(jitter_ratio=0))
    retry_at = next(i for i, e in enumerate(events) if isinstance(e, RetryScheduled))
    assert all(e.attempt == 1 for e in events[:retry_at])  # type: ignore[union-attr]
    assert all(e.attempt == 2 for e in events[retry_at + 1 :])  # type: ignore[union-attr]
    assembler = llmrt.BlockAssembler()
    for event in events[retry_at + 1 :]:
        assembler.push(event.chunk)  # type: ignore[union-attr]
    assert assembler.blocks() == (llmrt.TextBlock(text="whole answer"),)


async def test_no_retry_after_output_when_asked(autojump_clock: trio.testing.MockClock) -> None:
    script = [*text_script(["half"])[:2], Raise(LlmError(ErrorCode.NETWORK, "dropped"))]
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], ScriptedAdapter(script))
        events, _ = await run(rt, retry_after_output=False)
    assert not any(isinstance(e, RetryScheduled) for e in events)
    assert final(events).reason.failure.code == ErrorCode.NETWORK  # type: ignore[union-attr]


async def test_next_chunk_gives_the_same_events_unwrapped(
    autojump_clock: trio.testing.MockClock,
) -> None:
    policy = NormalRetryPolicy(jitter_ratio=0)
    adapter = half_then_whole()
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], adapter)
        tagged, _ = await run(rt, policy=policy)
        adapter.requests.clear()
        bare: list[Any] = []
        async with rt.stream_with_retry(REQUEST, policy=policy) as call:
            while not bare or type(bare[-1]) is not Finish:
                bare.append(await call.next_chunk())
            with pytest.raises(StopAsyncIteration):
                await call.next_chunk()
    assert any(isinstance(e, RetryScheduled) for e in bare)
    assert bare == [e.chunk if isinstance(e, AttemptChunk) else e for e in tagged]


async def test_a_policy_with_no_retry_left_lets_chunks_through_at_once() -> None:
    # ``ready`` is the gateways' batching hint: it says the next chunk is here
    # only once no retry can follow (here: from the first chunk, the policy
    # allows none), and an error after it is the call's final answer.
    script = [*text_script(["a", "b"])[:3], Raise(LlmError(ErrorCode.SERVER_ERROR, "broke"))]
    policies = [NormalRetryPolicy(max_retries=0), NormalRetryPolicy(jitter_ratio=0)]
    seen: list[list[bool]] = []
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], ScriptedAdapter(script))
        for policy in policies:
            readiness: list[bool] = []
            async with rt.stream_with_retry(REQUEST, policy=policy) as call:
                async for event in call:
                    if isinstance(event, RetryScheduled):
                        break
                    await trio.testing.wait_all_tasks_blocked()
                    readiness.append(call.ready)
                    if isinstance(event.chunk, Finish):
                        code = event.chunk.reason.failure.code  # type: ignore[union-attr]
                        assert code == ErrorCode.SERVER_ERROR
            seen.append(readiness)
    assert seen[0][:3] == [True, True, True]  # no retry left: the chunks are here
    assert not any(seen[1])  # a retry may follow: never promised


async def test_abort_during_back_off_ends_at_once(autojump_clock: trio.testing.MockClock) -> None:
    policy = NormalRetryPolicy(initial_delay_ms=60_000, max_delay_ms=60_000, jitter_ratio=0)
    async with llmrt.open_runtime() as rt:
        adapter = ScriptedAdapter(failing(ErrorCode.OVERLOADED))
        await rt.register_adapter(["p"], adapter)
        async with rt.stream_with_retry(REQUEST, policy=policy) as call:
            first = await call.__anext__()
            assert isinstance(first, RetryScheduled)
            aborted_at = trio.current_time()
            async with trio.open_nursery() as nursery:
                events: list[llmrt.RetryEvent] = []

                async def consume() -> None:
                    events.extend([e async for e in call])

                nursery.start_soon(consume)
                await trio.testing.wait_all_tasks_blocked()
                call.abort("stop")
            assert trio.current_time() == aborted_at  # no virtual time passed: no back-off
    assert isinstance(final(events).reason, FinishAborted)
    assert len(adapter.requests) == 1


async def test_abort_during_an_attempt_and_by_signal(
    autojump_clock: trio.testing.MockClock,
) -> None:
    controller = llmrt.AbortController()
    async with llmrt.open_runtime() as rt:
        adapter = ScriptedAdapter([*text_script(["a"])[:2], Stall()])
        await rt.register_adapter(["p"], adapter)
        async with rt.stream_with_retry(REQUEST, signal=controller.signal) as call:
            events = []
            async for event in call:
                events.append(event)
                if isinstance(event, AttemptChunk) and isinstance(event.chunk, llmrt.TextDelta):
                    controller.abort()
        assert adapter.open_streams == 0
    reason = final(events).reason
    assert isinstance(reason, FinishAborted) and reason.failure.code == ErrorCode.ABORTED


async def test_shutdown_during_back_off_ends_the_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    policy = NormalRetryPolicy(initial_delay_ms=60_000, max_delay_ms=60_000, jitter_ratio=0)
    events: list[llmrt.RetryEvent] = []

    async def consume(rt: llmrt.LlmRuntime) -> None:
        async with rt.stream_with_retry(REQUEST, policy=policy) as call:
            events.extend([e async for e in call])

    async with trio.open_nursery() as nursery:
        async with llmrt.open_runtime() as rt:
            await rt.register_adapter(["p"], ScriptedAdapter(failing(ErrorCode.OVERLOADED)))
            nursery.start_soon(consume, rt)
            await trio.sleep(1.0)  # the consumer is in its 60 s back-off
        shut_at = trio.current_time()
    assert isinstance(final(events).reason, FinishAborted)
    assert shut_at < 10.0


# ---- over real sockets -----------------------------------------------------------------------


def adapter_for(base_url: str) -> OpenAIChatAdapter:
    return OpenAIChatAdapter(base_url=base_url, api_key_env="K", environ={"K": "sk-test-key-1"})


async def test_429_with_retry_after_then_success_over_loopback(
    mock_clock: trio.testing.MockClock,
) -> None:
    # Virtual time jumps only after 20 ms of real idleness, so loopback I/O
    # always lands before it moves: the 2 s Retry-After costs no real time.
    mock_clock.autojump_threshold = 0.02
    route = [
        ErrorScript(status=429, headers={"retry-after": "2"}, body={"error": {"message": "slow"}}),
        SSEScript(events=openai_events(["Bonjour", "!"])),
    ]
    async with open_upstream(route) as upstream, llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], adapter_for(upstream.base_url))
        events, _ = await run(rt, policy=NormalRetryPolicy(jitter_ratio=0))
        assert len(upstream.requests) == 2
        gap = upstream.requests[1].received_at - upstream.requests[0].received_at
    (retry,) = [e for e in events if isinstance(e, RetryScheduled)]
    assert retry.failure.code == ErrorCode.RATE_LIMIT
    assert retry.failure.status == 429
    assert retry.delay_ms == 2000
    assert gap == pytest.approx(2.0, abs=0.05)
    assembler = llmrt.BlockAssembler()
    for event in events:
        if isinstance(event, AttemptChunk) and event.attempt == 2:
            assembler.push(event.chunk)
    assert assembler.blocks() == (llmrt.TextBlock(text="Bonjour!"),)
    assert assembler.finish == FinishStop()


async def test_mid_stream_disconnect_then_success_over_loopback() -> None:
    route = [
        SSEScript(events=openai_events(["Hel", "lo", " wor"]), disconnect_after=3),
        SSEScript(events=openai_events(["Hello", " world"])),
    ]
    async with open_upstream(route) as upstream, llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], adapter_for(upstream.base_url))
        policy = NormalRetryPolicy(initial_delay_ms=10, jitter_ratio=0)
        with trio.fail_after(10):
            events, _ = await run(rt, policy=policy)
    (retry,) = [e for e in events if isinstance(e, RetryScheduled)]
    assert retry.failure.code == ErrorCode.NETWORK
    assembler = llmrt.BlockAssembler()
    for event in events:
        if isinstance(event, AttemptChunk) and event.attempt == 2:
            assembler.push(event.chunk)
    assert assembler.blocks() == (llmrt.TextBlock(text="Hello world"),)


async def test_cancelled_while_an_attempt_starts_leaves_at_once() -> None:
    # The consumer is cancelled at the checkpoint that starts the first
    # attempt: leaving must not wait on a call task that never started.
    async with llmrt.open_runtime() as rt:
        adapter = ScriptedAdapter(text_script(["x"]))
        await rt.register_adapter(["p"], adapter)
        with trio.CancelScope() as scope:
            async with rt.stream_with_retry(REQUEST) as call:
                scope.cancel()
                async for _ in call:
                    pytest.fail("no event can arrive: the scope was cancelled first")
        assert scope.cancelled_caught
        assert adapter.requests == []
        assert rt.statistics().calls_in_flight == 0


async def test_a_retried_call_checks_its_request_once(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The executor checks the request before its first attempt; the attempts'
    # calls do not check the same (immutable) request again, one check a request.
    from llmrt.actors import _dispatch, _retry

    checked: list[GenerateOptions] = []

    def counting(options: Any) -> str | None:
        checked.append(options)
        return None

    monkeypatch.setattr(_retry, "invalid_reason", counting)
    monkeypatch.setattr(_dispatch, "invalid_reason", counting)
    policy = NormalRetryPolicy(max_retries=2, initial_delay_ms=10, jitter_ratio=0)
    adapter = ScriptedAdapter(failing(ErrorCode.SERVER_ERROR), retry_policy=policy)
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], adapter)
        events, _ = await run(rt)
        async with rt.stream(REQUEST) as call:  # a plain call checks its own
            async for _ in call:
                pass
    assert isinstance(final(events).reason, FinishStop)
    assert len([e for e in events if isinstance(e, RetryScheduled)]) == 1
    assert checked == [REQUEST, REQUEST]


async def _chunks(context: Any) -> list[Any]:
    out = []
    async with context as call:
        while True:
            chunk = await call.next_chunk()
            out.append(chunk)
            if isinstance(chunk, Finish):
                return out


async def test_a_route_without_retries_streams_its_one_attempt_unwrapped(tmp_path: Any) -> None:
    from llmrt.actors._retry import OneAttempt, RetryCallContext

    none = NormalRetryPolicy(max_retries=0)
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(
            ["p"], ScriptedAdapter(text_script(["a", "b"]), retry_policy=none)
        )
        await rt.register_adapter(["q"], ScriptedAdapter(failing(ErrorCode.SERVER_ERROR)))
        single = rt.stream_or_retry(REQUEST)
        assert isinstance(single, OneAttempt)
        direct = await _chunks(single)
        wrapped = await _chunks(rt.stream_with_retry(REQUEST))
        assert direct == wrapped
        assert isinstance(direct[-1].reason, FinishStop)
        # A route that may retry keeps the executor, and it retries.
        retrying = rt.stream_or_retry(msgspec.structs.replace(REQUEST, provider="q"))
        assert isinstance(retrying, RetryCallContext)
        events = await _chunks(retrying)
        assert any(isinstance(e, RetryScheduled) for e in events)
        stats = rt.statistics()
    # Each call counts its attempts as the executor counts them.
    assert stats.attempts_per_call == {1: 2, 2: 1}
    # With the call log on, the executor writes the call's retry record: it stays.
    async with llmrt.open_runtime(call_log=tmp_path) as rt:
        await rt.register_adapter(["p"], ScriptedAdapter(text_script(["a"]), retry_policy=none))
        assert isinstance(rt.stream_or_retry(REQUEST), RetryCallContext)
