"""The streaming call path: ordering, abort, watchdog, failures, exits, middleware."""

from __future__ import annotations

import gc
import math
import random
import weakref
from collections.abc import AsyncIterator

import msgspec
import pytest
import trio
import trio.testing

import llmrt
from llmrt import (
    BlockStart,
    ErrorCode,
    Finish,
    FinishAborted,
    FinishError,
    FinishStop,
    GenerateOptions,
    LlmError,
    StreamChunk,
    TextDelta,
    TokenUsage,
    UsageChunk,
)
from llmrt.adapters.scripted import Delay, Raise, ScriptedAdapter, Stall, text_script


def make(provider: str = "p", text: str = "hi", **kw: object) -> GenerateOptions:
    return GenerateOptions(
        provider=provider,
        model="m",
        messages=(llmrt.user_message(text),),
        **kw,  # type: ignore[arg-type]
    )


async def collect(
    rt: llmrt.LlmRuntime, options: GenerateOptions, signal: llmrt.AbortSignal | None = None
) -> list[StreamChunk]:
    async with rt.stream(options, signal=signal) as call:
        return [chunk async for chunk in call]


def finish_of(chunks: list[StreamChunk]) -> Finish:
    assert chunks, "no chunk at all"
    last = chunks[-1]
    assert isinstance(last, Finish), f"last chunk is {last!r}"
    assert sum(isinstance(c, Finish) for c in chunks) == 1
    return last


def code_of(chunks: list[StreamChunk]) -> str:
    reason = finish_of(chunks).reason
    assert isinstance(reason, FinishError | FinishAborted), reason
    return reason.failure.code


STALL_AFTER_ONE = [BlockStart(index=0, block_type="text"), TextDelta(index=0, text="a"), Stall()]


# ---- ordering and protocol corrections ------------------------------------------------------


async def test_one_terminal_finish_last_with_usage_before_it() -> None:
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], ScriptedAdapter(text_script(["Hel", "lo"])))
        chunks = await collect(rt, make())
    assert isinstance(finish_of(chunks).reason, FinishStop)
    kinds = [type(c).__name__ for c in chunks]
    assert kinds == ["BlockStart", "TextDelta", "TextDelta", "BlockEnd", "UsageChunk", "Finish"]
    assembler = llmrt.BlockAssembler()
    for chunk in chunks:
        assembler.push(chunk)
    assert assembler.blocks() == (llmrt.TextBlock(text="Hello"),)


async def test_chunks_after_finish_are_dropped_and_counted() -> None:
    script = [
        *text_script(["x"]),
        TextDelta(index=0, text="late"),
        UsageChunk(usage=TokenUsage(input_tokens=9, output_tokens=9)),
        Finish(reason=FinishStop()),
    ]
    async with llmrt.open_runtime() as rt:
        adapter = ScriptedAdapter(script)
        await rt.register_adapter(["p"], adapter)
        chunks = await collect(rt, make())
        stats = rt.statistics()
    assert finish_of(chunks).reason == FinishStop()
    assert all(c != TextDelta(index=0, text="late") for c in chunks)
    assert [c for c in chunks if isinstance(c, UsageChunk)] == [
        UsageChunk(usage=TokenUsage(input_tokens=1, output_tokens=1))
    ]
    assert stats.chunks_dropped == 3
    assert adapter.open_streams == 0


async def test_stop_without_content_is_empty_response() -> None:
    script = [
        UsageChunk(usage=TokenUsage(input_tokens=3, output_tokens=0)),
        Finish(reason=FinishStop()),
    ]
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], ScriptedAdapter(script))
        chunks = await collect(rt, make())
    assert code_of(chunks) == ErrorCode.EMPTY_RESPONSE
    assert isinstance(chunks[0], UsageChunk)  # the usage still reaches the consumer


async def test_stream_ending_without_finish_is_a_protocol_error() -> None:
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], ScriptedAdapter(text_script(["a"])[:-1]))
        chunks = await collect(rt, make())
    assert code_of(chunks) == ErrorCode.PROTOCOL


async def test_non_chunk_from_adapter_is_a_protocol_error() -> None:
    async with llmrt.open_runtime() as rt:
        script = [BlockStart(index=0, block_type="text"), {"type": "text-delta"}]
        await rt.register_adapter(["p"], ScriptedAdapter(script))  # type: ignore[list-item]
        chunks = await collect(rt, make())
    assert code_of(chunks) == ErrorCode.PROTOCOL
    assert "dict" in finish_of(chunks).reason.failure.message  # type: ignore[union-attr]


# ---- failures -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (
            LlmError(ErrorCode.RATE_LIMIT, "slow down", status=429, provider_retry_after_ms=2000),
            ErrorCode.RATE_LIMIT,
        ),
        (ValueError("bug"), ErrorCode.INTERNAL),
        (ConnectionResetError("reset"), ErrorCode.NETWORK),
    ],
)
@pytest.mark.parametrize("when", ["before", "mid"])
async def test_adapter_exceptions_become_one_error_finish(
    exc: Exception, code: str, when: str
) -> None:
    prefix = [] if when == "before" else STALL_AFTER_ONE[:2]
    async with llmrt.open_runtime() as rt:
        adapter = ScriptedAdapter([*prefix, Raise(exc)])
        await rt.register_adapter(["p"], adapter)
        chunks = await collect(rt, make())
    assert code_of(chunks) == code
    assert len(chunks) == len(prefix) + 1
    if isinstance(exc, LlmError):
        assert finish_of(chunks).reason.failure == exc.failure  # type: ignore[union-attr]


async def test_in_band_error_finish_passes_through() -> None:
    failure = llmrt.LlmFailure(message="Overloaded", code=ErrorCode.OVERLOADED, status=200)
    script = [*STALL_AFTER_ONE[:2], Finish(reason=FinishError(failure=failure))]
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], ScriptedAdapter(script))
        chunks = await collect(rt, make())
    assert finish_of(chunks).reason == FinishError(failure=failure)


async def test_no_adapter_before_any_io() -> None:
    async with llmrt.open_runtime() as rt:
        adapter = ScriptedAdapter(text_script(["x"]))
        await rt.register_adapter(["other"], adapter)
        chunks = await collect(rt, make("missing"))
    assert code_of(chunks) == ErrorCode.NO_ADAPTER
    assert len(chunks) == 1
    assert adapter.requests == []


# ---- abort ----------------------------------------------------------------------------------


async def test_abort_gives_one_aborted_finish_after_upstream_closed() -> None:
    async with llmrt.open_runtime() as rt:
        adapter = ScriptedAdapter(STALL_AFTER_ONE)
        await rt.register_adapter(["p"], adapter)
        chunks: list[StreamChunk] = []
        open_at_finish = None
        async with rt.stream(make()) as call:
            async for chunk in call:
                chunks.append(chunk)
                if isinstance(chunk, TextDelta):
                    call.abort("user pressed stop")
                if isinstance(chunk, Finish):
                    open_at_finish = adapter.open_streams
    assert code_of(chunks) == ErrorCode.ABORTED
    assert "user pressed stop" in finish_of(chunks).reason.failure.message  # type: ignore[union-attr]
    assert open_at_finish == 0
    assert len(adapter.closed_at) == 1


async def test_shared_abort_signal_aborts_every_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    controller = llmrt.AbortController()
    results: list[list[StreamChunk]] = []

    async def consume(rt: llmrt.LlmRuntime) -> None:
        async with rt.stream(make(), signal=controller.signal) as call:
            results.append([c async for c in call])

    async with llmrt.open_runtime() as rt:
        adapter = ScriptedAdapter(STALL_AFTER_ONE)
        await rt.register_adapter(["p"], adapter)
        async with trio.open_nursery() as nursery:
            for _ in range(5):
                nursery.start_soon(consume, rt)
            await trio.testing.wait_all_tasks_blocked()
            assert adapter.open_streams == 5
            controller.abort("shutdown")
        assert adapter.open_streams == 0
    assert len(results) == 5
    assert all(code_of(r) == ErrorCode.ABORTED for r in results)
    assert controller.signal.aborted and controller.signal.reason == "shutdown"


async def test_signal_aborted_before_start_does_no_io() -> None:
    controller = llmrt.AbortController()
    controller.abort()
    async with llmrt.open_runtime() as rt:
        adapter = ScriptedAdapter(text_script(["x"]))
        await rt.register_adapter(["p"], adapter)
        async with rt.stream(make(), signal=controller.signal) as call:
            chunks = [c async for c in call]
    assert code_of(chunks) == ErrorCode.ABORTED
    assert adapter.requests == []


async def test_abort_while_consumer_is_behind_still_ends_with_one_finish() -> None:
    many = [BlockStart(index=0, block_type="text")] + [
        TextDelta(index=0, text=str(i)) for i in range(50)
    ]
    async with llmrt.open_runtime(channel_size=4) as rt:
        adapter = ScriptedAdapter([*many, Stall()])
        await rt.register_adapter(["p"], adapter)
        async with rt.stream(make()) as call:
            await trio.testing.wait_all_tasks_blocked()  # the producer is blocked on a full buffer
            call.abort()
            chunks = [c async for c in call]
    assert code_of(chunks) == ErrorCode.ABORTED
    assert len(chunks) <= 4 + 1 + 1  # what was buffered, one in hand, then the finish
    assert adapter.open_streams == 0


async def test_abort_after_finish_is_a_no_op() -> None:
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], ScriptedAdapter(text_script(["x"])))
        async with rt.stream(make()) as call:
            chunks = [c async for c in call]
            call.abort()
    assert finish_of(chunks).reason == FinishStop()


# ---- idle watchdog --------------------------------------------------------------------------


async def test_idle_watchdog_times_out_a_stalled_adapter(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with llmrt.open_runtime() as rt:
        adapter = ScriptedAdapter(STALL_AFTER_ONE)
        await rt.register_adapter(["p"], adapter, stream_idle_timeout=7.0)
        start = trio.current_time()
        chunks = await collect(rt, make())
        elapsed = trio.current_time() - start
    assert code_of(chunks) == ErrorCode.TIMEOUT
    assert elapsed == pytest.approx(7.0)
    assert adapter.closed_at == [pytest.approx(start + 7.0)]


async def test_idle_watchdog_counts_from_the_last_chunk(
    autojump_clock: trio.testing.MockClock,
) -> None:
    script = [BlockStart(index=0, block_type="text")]
    for i in range(3):
        script += [Delay(4.0), TextDelta(index=0, text=str(i))]
    script.append(Stall())
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], ScriptedAdapter(script), stream_idle_timeout=5.0)
        start = trio.current_time()
        chunks = await collect(rt, make())
        elapsed = trio.current_time() - start
    assert code_of(chunks) == ErrorCode.TIMEOUT
    assert sum(isinstance(c, TextDelta) for c in chunks) == 3
    assert elapsed == pytest.approx(12.0 + 5.0)


async def test_a_finished_call_is_freed_before_its_watchdog_entry_comes_due() -> None:
    # The route's idle timeout differs from the default, so the call was put on
    # the watchdog's heap twice; neither entry may keep it (and its request) alive.
    async with llmrt.open_runtime(stream_idle_timeout=300.0) as rt:
        await rt.register_adapter(["p"], ScriptedAdapter(text_script(["x"])), stream_idle_timeout=9)
        async with rt.stream(make()) as call:
            chunks = [chunk async for chunk in call]
        assert isinstance(finish_of(chunks).reason, FinishStop)
        ref = weakref.ref(call)
        heap = rt._core.watchdog._heap
        assert len(heap) == 2 and all(entry[2] is None for entry in heap)
        del call
        gc.collect()
        assert ref() is None


async def test_slow_consumer_does_not_trip_the_watchdog(
    autojump_clock: trio.testing.MockClock,
) -> None:
    parts = [str(i) for i in range(20)]
    async with llmrt.open_runtime(channel_size=2) as rt:
        await rt.register_adapter(
            ["p"], ScriptedAdapter(text_script(parts)), stream_idle_timeout=1.0
        )
        chunks = []
        async with rt.stream(make()) as call:
            async for chunk in call:
                chunks.append(chunk)
                await trio.sleep(10.0)  # ten idle timeouts per chunk, all on the consumer's side
    assert finish_of(chunks).reason == FinishStop()


async def test_first_cause_wins_abort_then_timeout(autojump_clock: trio.testing.MockClock) -> None:
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], ScriptedAdapter(STALL_AFTER_ONE), stream_idle_timeout=5.0)
        async with rt.stream(make()) as call:
            call.abort()
            call.idle_check(math.inf)  # the watchdog firing right after must not win
            chunks = [c async for c in call]
    assert code_of(chunks) == ErrorCode.ABORTED


async def test_first_cause_wins_timeout_then_abort(autojump_clock: trio.testing.MockClock) -> None:
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], ScriptedAdapter(STALL_AFTER_ONE), stream_idle_timeout=5.0)
        async with rt.stream(make()) as call:
            chunks = []
            async for chunk in call:
                chunks.append(chunk)
                if isinstance(chunk, TextDelta):
                    await trio.sleep(6.0)  # the watchdog fires while we sleep
                    call.abort()
    assert code_of(chunks) == ErrorCode.TIMEOUT


# ---- leaving the async with ----------------------------------------------------------------


async def test_leaving_early_closes_the_adapter_stream() -> None:
    async with llmrt.open_runtime() as rt:
        adapter = ScriptedAdapter(STALL_AFTER_ONE)
        await rt.register_adapter(["p"], adapter)
        async with rt.stream(make()) as call:
            async for chunk in call:
                if isinstance(chunk, TextDelta):
                    break
        assert adapter.open_streams == 0
        assert len(adapter.closed_at) == 1
        stats = rt.statistics()
    assert stats.calls_in_flight == 0
    assert stats.calls_finished.get("consumer-left") == 1


async def test_leaving_by_exception_propagates_it_unchanged() -> None:
    class Boom(Exception):
        pass

    async with llmrt.open_runtime() as rt:
        adapter = ScriptedAdapter(STALL_AFTER_ONE)
        await rt.register_adapter(["p"], adapter)
        with pytest.raises(Boom):
            async with rt.stream(make()) as call:
                async for _ in call:
                    raise Boom
        assert adapter.open_streams == 0


async def test_outer_cancellation_stops_the_call_before_returning(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with llmrt.open_runtime() as rt:
        adapter = ScriptedAdapter(STALL_AFTER_ONE)
        await rt.register_adapter(["p"], adapter)
        start = trio.current_time()
        with trio.move_on_after(3.0) as scope:
            async with rt.stream(make()) as call:
                async for _ in call:
                    pass
        assert scope.cancelled_caught
        assert adapter.open_streams == 0
        assert adapter.closed_at == [pytest.approx(start + 3.0)]
        assert rt.statistics().calls_in_flight == 0


async def test_leaving_before_the_task_ran_still_cleans_up() -> None:
    async with llmrt.open_runtime() as rt:
        adapter = ScriptedAdapter(STALL_AFTER_ONE)
        await rt.register_adapter(["p"], adapter)
        async with rt.stream(make()):
            pass
        assert adapter.open_streams == 0
        assert rt.statistics().calls_in_flight == 0


async def test_a_call_streams_once() -> None:
    async with llmrt.open_runtime() as rt:
        adapter = ScriptedAdapter(text_script(["x"]))
        await rt.register_adapter(["p"], adapter)
        stream = rt.stream(make())
        async with stream as call:
            chunks = [chunk async for chunk in call]
        assert isinstance(finish_of(chunks).reason, FinishStop)
        with pytest.raises(RuntimeError, match="already streamed"):
            async with stream:
                pass
        assert len(adapter.requests) == 1
        assert rt.statistics().calls_started == 1


# ---- middleware ------------------------------------------------------------------------------


async def test_middleware_wraps_the_chunk_stream() -> None:
    async def shout(request: GenerateOptions, nxt: llmrt.actors.Next) -> AsyncIterator[StreamChunk]:
        async for chunk in nxt(request):
            if isinstance(chunk, TextDelta):
                chunk = TextDelta(index=chunk.index, text=chunk.text.upper())
            yield chunk

    async with llmrt.open_runtime() as rt:
        rt.use(shout)
        await rt.register_adapter(["p"], ScriptedAdapter(text_script(["ab", "c"])))
        chunks = await collect(rt, make())
    assert [c.text for c in chunks if isinstance(c, TextDelta)] == ["AB", "C"]
    assert finish_of(chunks).reason == FinishStop()


async def test_middleware_short_circuit_never_looks_up_an_adapter() -> None:
    async def cached(
        request: GenerateOptions, nxt: llmrt.actors.Next
    ) -> AsyncIterator[StreamChunk]:
        for chunk in text_script(["from cache"]):
            yield chunk  # type: ignore[misc]

    async with llmrt.open_runtime() as rt:
        rt.use(cached)
        chunks = await collect(rt, make("not-registered"))
    assert finish_of(chunks).reason == FinishStop()
    assert [c.text for c in chunks if isinstance(c, TextDelta)] == ["from cache"]


async def test_adapter_lookup_happens_at_the_innermost_next() -> None:
    async def reroute(
        request: GenerateOptions, nxt: llmrt.actors.Next
    ) -> AsyncIterator[StreamChunk]:
        async for chunk in nxt(msgspec.structs.replace(request, provider="real")):
            yield chunk

    async with llmrt.open_runtime() as rt:
        rt.use(reroute)
        adapter = ScriptedAdapter(text_script(["ok"]))
        await rt.register_adapter(["real"], adapter)
        chunks = await collect(rt, make("alias"))
    assert finish_of(chunks).reason == FinishStop()
    assert adapter.requests[0].provider == "real"


async def test_middleware_sees_adapter_failures_as_a_finish() -> None:
    seen: list[StreamChunk] = []

    async def spy(request: GenerateOptions, nxt: llmrt.actors.Next) -> AsyncIterator[StreamChunk]:
        async for chunk in nxt(request):
            seen.append(chunk)
            yield chunk

    async with llmrt.open_runtime() as rt:
        rt.use(spy)
        await rt.register_adapter(["p"], ScriptedAdapter([Raise(ValueError("bad"))]))
        chunks = await collect(rt, make())
    assert code_of(chunks) == ErrorCode.INTERNAL
    assert seen == chunks


async def test_middleware_exception_reaches_the_consumer_and_the_runtime_serves_on() -> None:
    class MiddlewareBug(Exception):
        pass

    async def broken(
        request: GenerateOptions, nxt: llmrt.actors.Next
    ) -> AsyncIterator[StreamChunk]:
        async for chunk in nxt(request):
            yield chunk
            raise MiddlewareBug("oops")

    async with llmrt.open_runtime() as rt:
        rt.use(broken)
        adapter = ScriptedAdapter(STALL_AFTER_ONE)
        await rt.register_adapter(["p"], adapter)
        with pytest.raises(MiddlewareBug):
            await collect(rt, make())
        assert adapter.open_streams == 0
        assert rt.statistics().middleware_errors == 1
        # The runtime still serves: a middleware-free path through another runtime
        # is not needed; the same runtime streams again (and fails the same way).
        with pytest.raises(MiddlewareBug):
            await collect(rt, make())


async def test_middleware_sees_a_frozen_request() -> None:
    errors: list[Exception] = []

    async def mutate(
        request: GenerateOptions, nxt: llmrt.actors.Next
    ) -> AsyncIterator[StreamChunk]:
        try:
            request.model = "other"  # type: ignore[misc]
        except AttributeError as exc:
            errors.append(exc)
        async for chunk in nxt(request):
            yield chunk

    async with llmrt.open_runtime() as rt:
        rt.use(mutate)
        adapter = ScriptedAdapter(text_script(["x"]))
        await rt.register_adapter(["p"], adapter)
        await collect(rt, make())
    assert len(errors) == 1
    assert adapter.requests[0].model == "m"
    assert isinstance(adapter.requests[0].messages, tuple)


async def test_middleware_order_outermost_last() -> None:
    order: list[str] = []

    def tag(name: str) -> llmrt.Middleware:
        async def mw(
            request: GenerateOptions, nxt: llmrt.actors.Next
        ) -> AsyncIterator[StreamChunk]:
            order.append(name)
            async for chunk in nxt(request):
                yield chunk

        return mw

    async with llmrt.open_runtime() as rt:
        rt.use(tag("first"))
        rt.use(tag("second"))
        await rt.register_adapter(["p"], ScriptedAdapter(text_script(["x"])))
        await collect(rt, make())
    assert order == ["first", "second"]


# ---- no leaks under a storm ----------------------------------------------------------------


async def test_two_thousand_mixed_calls_leave_nothing_behind(
    autojump_clock: trio.testing.MockClock,
) -> None:
    rng = random.Random(20261130)
    outcomes: dict[str, int] = {}
    alive: weakref.WeakSet[llmrt.Call] = weakref.WeakSet()

    def script(request: GenerateOptions) -> list[object]:
        kind = request.messages[0].content[0].text  # type: ignore[union-attr]
        if kind == "ok":
            return [Delay(rng.random()), *text_script(["a", "b"])]
        if kind == "raise":
            return [*STALL_AFTER_ONE[:2], Delay(rng.random()), Raise(RuntimeError("x"))]
        return list(STALL_AFTER_ONE)  # "stall": ends by abort, timeout or consumer exit

    async def consumer(rt: llmrt.LlmRuntime, kind: str, action: str) -> None:
        async with rt.stream(make(text=kind)) as call:
            alive.add(call)
            finishes = 0
            async for chunk in call:
                if isinstance(chunk, Finish):
                    finishes += 1
                if isinstance(chunk, TextDelta) and action == "abort":
                    call.abort()
                if isinstance(chunk, TextDelta) and action == "leave":
                    outcomes["left"] = outcomes.get("left", 0) + 1
                    return
            assert finishes == 1
            outcomes["finished"] = outcomes.get("finished", 0) + 1

    async with llmrt.open_runtime() as rt:
        adapter = ScriptedAdapter(script)  # type: ignore[arg-type]
        await rt.register_adapter(["p"], adapter, stream_idle_timeout=2.0)
        async with trio.open_nursery() as nursery:
            for _ in range(2000):
                kind = rng.choice(["ok", "raise", "stall"])
                action = rng.choice(["read", "abort", "leave"]) if kind == "stall" else "read"
                nursery.start_soon(consumer, rt, kind, action)
        stats = rt.statistics()
        assert stats.calls_in_flight == 0
        assert stats.calls_started == 2000
        assert outcomes["finished"] + outcomes["left"] == 2000
        assert sum(stats.calls_finished.values()) == 2000
        assert stats.calls_finished["consumer-left"] == outcomes["left"]
        assert adapter.open_streams == 0
        # Only the runtime's own actors are left: the registry and the watchdog.
        names = sorted(task.name for task in rt._core.nursery.child_tasks)
        assert len(names) == 2, names
        assert len(rt._core.calls) == 0
        # Nothing holds on to a finished call (the watchdog's heap included,
        # whose entries come due only an idle timeout later): all are freed.
        assert all(entry[2] is None for entry in rt._core.watchdog._heap)
        gc.collect()
        assert len(alive) == 0


async def test_one_scripted_exception_raised_by_many_calls_keeps_none_of_them() -> None:
    # Re-raising one instance chains each raise's traceback onto the last, and
    # with it every earlier call's frames: the scripted adapter resets it.
    script = [*STALL_AFTER_ONE[:2], Raise(RuntimeError("shared"))]
    alive: weakref.WeakSet[llmrt.Call] = weakref.WeakSet()
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], ScriptedAdapter(script))
        for _ in range(3):
            async with rt.stream(make()) as call:
                alive.add(call)
                chunks = [chunk async for chunk in call]
            assert code_of(chunks) == ErrorCode.INTERNAL
        del call
        gc.collect()
        assert len(alive) <= 1  # the last raise's traceback may still hold the last call


async def test_a_closed_runtime_still_ends_calls_with_one_finish() -> None:
    async with llmrt.open_runtime() as rt:
        adapter = ScriptedAdapter(text_script(["x"]))
        await rt.register_adapter(["p"], adapter)
    chunks = await collect(rt, make())
    assert code_of(chunks) == ErrorCode.ABORTED
    assert adapter.requests == []
    assert adapter.aclosed
    with pytest.raises(trio.ClosedResourceError):
        await rt.register_adapter(["q"], ScriptedAdapter([]))
    assert rt.statistics().calls_in_flight == 0


async def test_an_abort_reason_that_is_not_a_string_still_aborts() -> None:
    # The finish per reason is cached; an unhashable reason must not break abort().
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], ScriptedAdapter(STALL_AFTER_ONE))
        ctl = llmrt.AbortController()
        async with rt.stream(make(), signal=ctl.signal) as call:
            chunks = []
            async for chunk in call:
                chunks.append(chunk)
                if len(chunks) == 2:
                    ctl.abort({"why": "a dict"})  # type: ignore[arg-type]
    assert code_of(chunks) == ErrorCode.ABORTED
    reason = finish_of(chunks).reason
    assert isinstance(reason, FinishAborted) and "a dict" in reason.failure.message


async def test_a_failing_abort_listener_does_not_spare_the_other_calls(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(reason: str | None) -> None:
        raise RuntimeError("listener bug")

    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], ScriptedAdapter(STALL_AFTER_ONE))
        ctl = llmrt.AbortController()
        ctl.signal._subscribe(broken)
        codes: list[str] = []

        async def run() -> None:
            codes.append(code_of(await collect(rt, make(), signal=ctl.signal)))

        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(run)
            await trio.testing.wait_all_tasks_blocked()
            ctl.abort("stop")
    assert codes == [ErrorCode.ABORTED] * 3
    assert "an abort listener failed" in caplog.text
