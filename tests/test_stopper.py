"""Stopping many calls at once: waves of cancellation, and what they spare the collector."""

from __future__ import annotations

import gc
import itertools
from collections.abc import AsyncIterator
from typing import Any

import trio
import trio.testing
from conftest import make_options

import llmrt
from llmrt import BlockStart, ErrorCode, Finish, GenerateOptions, StreamChunk, TextDelta
from llmrt.actors import _stopper
from llmrt.actors._stopper import WAVE, Stopper
from llmrt.adapters.scripted import ScriptedAdapter, Stall, Step

STALL_AFTER_ONE: list[Step] = [
    BlockStart(index=0, block_type="text"),
    TextDelta(index=0, text="a"),
    Stall(),
]


class Passes(trio.abc.Instrument):
    """Samples how many stops wait for a wave, once per scheduler pass."""

    def __init__(self, stopper: Stopper) -> None:
        self.stopper = stopper
        self.queued: list[int] = []

    def before_io_wait(self, timeout: float) -> None:
        self.queued.append(self.stopper.queued)


async def start_stalled(
    rt: llmrt.LlmRuntime,
    n: int,
    signal: llmrt.AbortSignal,
    nursery: trio.Nursery,
    results: list[list[StreamChunk]],
    calls: list[llmrt.Call],
) -> None:
    async def consume() -> None:
        async with rt.stream(make_options(), signal=signal) as call:
            calls.append(call)
            results.append([c async for c in call])

    for _ in range(n):
        nursery.start_soon(consume)
    await trio.testing.wait_all_tasks_blocked()


def stopper_of(rt: llmrt.LlmRuntime) -> Stopper:
    return rt._core.stopper


async def test_a_mass_abort_cancels_in_waves_and_every_call_ends_once() -> None:
    n = 3 * WAVE + 5
    ctl = llmrt.AbortController()
    results: list[list[StreamChunk]] = []
    calls: list[llmrt.Call] = []
    with trio.fail_after(30):
        async with llmrt.open_runtime() as rt:
            adapter = ScriptedAdapter(STALL_AFTER_ONE)
            await rt.register_adapter(["p"], adapter)
            stopper = stopper_of(rt)
            passes = Passes(stopper)
            async with trio.open_nursery() as nursery:
                await start_stalled(rt, n, ctl.signal, nursery, results, calls)
                assert adapter.open_streams == n
                trio.lowlevel.add_instrument(passes)
                ctl.abort("enough")
                # The cause is every call's at once; the cancellations beyond one wave wait.
                assert all(call.stopped_by is not None for call in calls)
                assert stopper.queued == n - WAVE
                assert stopper.running == n
            trio.lowlevel.remove_instrument(passes)
            assert adapter.open_streams == 0
            assert stopper.queued == 0
            assert stopper.running == 0
    assert len(results) == n
    for chunks in results:
        finishes = [c for c in chunks if isinstance(c, Finish)]
        assert len(finishes) == 1 and chunks[-1] is finishes[0]
        assert finishes[0].reason.failure.code == ErrorCode.ABORTED  # type: ignore[union-attr]
        assert finishes[0].reason.failure.message == "enough"  # type: ignore[union-attr]
    # No pass cancelled more than one wave, and the queue emptied.
    seen = [n - WAVE, *passes.queued]
    assert all(a - b <= WAVE for a, b in itertools.pairwise(seen)), seen
    assert seen[-1] == 0 and len(set(seen)) >= 3, seen


async def test_a_lone_abort_is_cancelled_at_once(runtime: llmrt.LlmRuntime) -> None:
    adapter = ScriptedAdapter(STALL_AFTER_ONE)
    await runtime.register_adapter(["p"], adapter)
    stopper = stopper_of(runtime)
    with trio.fail_after(10):
        async with runtime.stream(make_options()) as call:
            async for chunk in call:
                if isinstance(chunk, TextDelta):
                    call.abort()
                    assert stopper.queued == 0
                    assert call._scope.cancel_called
    assert stopper.running == 0
    assert adapter.open_streams == 0


async def test_a_mass_abort_leaves_the_old_generations_alone() -> None:
    """The point of the waves: 2,000 calls aborted together cause no middle or full collection.

    The control, every scope cancelled in one loop as trio would, does cause
    them: it is the storm the waves exist to avoid.
    """
    assert gc.isenabled()

    async def middle_and_full_collections(wave: int) -> int:
        old = _stopper.WAVE
        _stopper.WAVE = wave
        try:
            ctl = llmrt.AbortController()
            seen: list[int] = []

            def count(phase: str, info: dict[str, Any]) -> None:
                if phase == "start":
                    seen.append(info["generation"])

            async with llmrt.open_runtime() as rt:
                await rt.register_adapter(["p"], ScriptedAdapter(STALL_AFTER_ONE))
                async with trio.open_nursery() as nursery:
                    await start_stalled(rt, 2_000, ctl.signal, nursery, [], [])
                    gc.collect()  # every generation's count starts at zero
                    gc.callbacks.append(count)
                    try:
                        ctl.abort()
                        await trio.testing.wait_all_tasks_blocked()
                    finally:
                        gc.callbacks.remove(count)
            return sum(1 for generation in seen if generation > 0)
        finally:
            _stopper.WAVE = old

    with trio.fail_after(60):
        assert await middle_and_full_collections(WAVE) == 0
        assert await middle_and_full_collections(10**9) > 0


async def test_stuck_calls_only_delay_later_stops_by_a_pass(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A wave of calls whose adapters hold on after the stop does not hold later aborts."""
    stuck_for = 100.0

    class Stubborn(ScriptedAdapter):
        async def stream(self, options: GenerateOptions) -> AsyncIterator[StreamChunk]:
            yield BlockStart(index=0, block_type="text")
            try:
                await trio.sleep_forever()
            finally:
                with trio.CancelScope(shield=True):
                    await trio.sleep(stuck_for)

    ctl = llmrt.AbortController()
    ended_at: list[float] = []
    with trio.fail_after(1_000):
        async with llmrt.open_runtime() as rt:
            await rt.register_adapter(["stuck"], Stubborn([]))
            await rt.register_adapter(["p"], ScriptedAdapter(STALL_AFTER_ONE))
            stopper = stopper_of(rt)
            async with trio.open_nursery() as nursery:
                stuck: list[llmrt.Call] = []

                async def hold() -> None:
                    async with rt.stream(make_options("stuck"), signal=ctl.signal) as call:
                        stuck.append(call)
                        async for _ in call:
                            pass

                for _ in range(WAVE):
                    nursery.start_soon(hold)
                await trio.testing.wait_all_tasks_blocked()
                ctl.abort()
                await trio.sleep(1)
                assert stopper.running == WAVE  # all unwinding, none ended
                start = trio.current_time()
                async with rt.stream(make_options()) as call:
                    async for chunk in call:
                        if isinstance(chunk, TextDelta):
                            call.abort()
                ended_at.append(trio.current_time() - start)
                assert call.stopped_by is not None
            assert stopper.running == 0
    assert ended_at[0] < stuck_for


async def test_stops_when_no_task_can_be_spawned_are_all_cancelled_at_once() -> None:
    async with trio.open_nursery() as closed:
        pass  # the runtime's nursery, once its owner left it: nothing can start in it
    stopper = Stopper(closed)
    scopes = [trio.CancelScope() for _ in range(WAVE + 3)]
    for scope in scopes:
        stopper.stop(scope)
    assert all(scope.cancel_called for scope in scopes)
    assert stopper.queued == 0
    assert stopper.running == WAVE + 3
    await trio.lowlevel.checkpoint()


async def test_aborting_a_call_never_entered_leaves_the_count_alone(
    runtime: llmrt.LlmRuntime,
) -> None:
    """A call aborted before ``async with`` has no task whose end would count it out."""
    await runtime.register_adapter(["p"], ScriptedAdapter(STALL_AFTER_ONE))
    stopper = stopper_of(runtime)
    never = runtime.stream(make_options())
    never.abort("not wanted")
    assert stopper.running == 0
    with trio.fail_after(10):
        async with runtime.stream(make_options()) as call:
            call.abort("entered first")
            assert stopper.running == 1
            chunks = [c async for c in call]
    assert stopper.running == 0
    assert chunks[-1].reason.failure.message == "entered first"  # type: ignore[union-attr]


async def test_the_wave_task_runs_in_the_runtimes_nursery_not_as_a_system_task() -> None:
    ctl = llmrt.AbortController()
    results: list[list[StreamChunk]] = []
    calls: list[llmrt.Call] = []
    with trio.fail_after(30):
        async with llmrt.open_runtime() as rt:
            await rt.register_adapter(["p"], ScriptedAdapter(STALL_AFTER_ONE))
            async with trio.open_nursery() as nursery:
                await start_stalled(rt, 2 * WAVE, ctl.signal, nursery, results, calls)
                ctl.abort()
                waves = [
                    task
                    for task in rt._core.nursery.child_tasks
                    if task.name == "llmrt.calls.stopper"
                ]
                assert len(waves) == 1  # held by the runtime's nursery, which waits for it
    assert len(results) == 2 * WAVE


async def test_an_outer_scope_cancelling_many_consumers_stops_their_calls_in_waves() -> None:
    n = 3 * WAVE + 5
    never = llmrt.AbortController()  # not aborted: the outer scope is what stops them
    results: list[list[StreamChunk]] = []
    calls: list[llmrt.Call] = []
    with trio.fail_after(30):
        async with llmrt.open_runtime() as rt:
            adapter = ScriptedAdapter(STALL_AFTER_ONE)
            await rt.register_adapter(["p"], adapter)
            stopper = stopper_of(rt)
            passes = Passes(stopper)
            with trio.CancelScope() as outer:
                async with trio.open_nursery() as nursery:
                    await start_stalled(rt, n, never.signal, nursery, results, calls)
                    assert adapter.open_streams == n
                    trio.lowlevel.add_instrument(passes)
                    outer.cancel()
            trio.lowlevel.remove_instrument(passes)
            # Every consumer left only once its call task ended.
            assert adapter.open_streams == 0
            assert stopper.queued == 0
            assert stopper.running == 0
            assert all(call.stopped_by is None for call in calls)  # left, not aborted
    assert results == []  # each consumer was cancelled inside its iteration
    # The leaving consumers' stops queued past one wave and drained a wave per pass.
    assert max(passes.queued) > 0, passes.queued
    assert all(a - b <= WAVE for a, b in itertools.pairwise(passes.queued)), passes.queued
    assert passes.queued[-1] == 0
