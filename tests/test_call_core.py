"""The call's side of the narrow core: its own fallbacks, and nothing internal made public."""

from __future__ import annotations

import trio

import llmrt
from llmrt import Finish, FinishAborted, GenerateOptions, user_message
from llmrt.adapters.scripted import ScriptedAdapter, text_script


def make() -> GenerateOptions:
    return GenerateOptions(provider="p", model="m", messages=(user_message("hi"),))


async def test_a_call_entered_after_the_runtime_closed_gets_one_aborted_finish() -> None:
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], ScriptedAdapter(text_script(["a"])))
        late = rt.stream(make())
    # The runtime's nursery is closed: the call cannot start a task, and finishes by itself.
    with trio.fail_after(1):
        async with late as call:
            chunks = [chunk async for chunk in call]
    assert len(chunks) == 1
    finish = chunks[0]
    assert isinstance(finish, Finish) and isinstance(finish.reason, FinishAborted)
    assert finish.reason.failure.code == "ABORTED"
    stats = rt.statistics()
    assert stats.calls_in_flight == 0
    assert stats.calls_started == 1


async def test_a_late_call_leaving_early_still_ends() -> None:
    async with llmrt.open_runtime() as rt:
        late = rt.stream(make())
    with trio.fail_after(1):
        async with late:
            pass  # leaving without iterating must not wait for a task that never ran
    assert rt.statistics().calls_in_flight == 0


def test_the_watchdog_bookkeeping_is_not_public_on_call() -> None:
    public = {name for name in dir(llmrt.Call) if not name.startswith("_")}
    assert not {name for name in public if name.startswith("watch")}
    # What otel and the gateway read stays public.
    assert {"stopped_by", "labels", "adapter_error", "abort", "options"} <= public
