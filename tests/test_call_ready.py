"""``ready``: whether a call's next chunk is already here (`Call`, `RetryCall`, a routed call).

What the HTTP front door reads to write the events one upstream read held
in one write (tests/test_http_api_calls.py); true only when taking the next
item cannot wait.
"""

from __future__ import annotations

import trio
import trio.testing
from _routing import request

import llmrt
from llmrt import AttemptChunk, Finish
from llmrt.actors.routing import Deployment, Group
from llmrt.adapters.scripted import Delay, ScriptedAdapter, text_script


async def test_a_call_is_ready_while_chunks_wait_in_its_mailbox(
    runtime: llmrt.LlmRuntime, autojump_clock: trio.testing.MockClock
) -> None:
    script = text_script(["a", "b"])
    await runtime.register_adapter(["s"], ScriptedAdapter([*script[:2], Delay(1.0), *script[2:]]))
    async with runtime.stream(request("s")) as call:
        assert not call.ready  # the call's task has not run yet
        first = await call.__anext__()
        # The block start and "a" came in one step of the call task; then it waits.
        assert call.ready
        second = await call.__anext__()
        assert (type(first), type(second)) == (llmrt.BlockStart, llmrt.TextDelta)
        assert not call.ready  # the rest is a second away
        rest = [chunk async for chunk in call]
        assert not call.ready
    assert type(rest[-1]) is Finish


async def test_a_retrying_call_is_ready_only_once_no_retry_can_follow(
    runtime: llmrt.LlmRuntime,
) -> None:
    await runtime.register_adapter(["s"], ScriptedAdapter(text_script(["a", "b", "c"])))
    for after_output, expected in ((False, True), (True, False)):
        async with runtime.stream_with_retry(request("s"), retry_after_output=after_output) as call:
            assert not call.ready  # no attempt yet
            event = await call.__anext__()
            assert isinstance(event, AttemptChunk)
            # The rest of the script is buffered; with retries after output still
            # possible, an error finish could mean a back-off, so it says no.
            seen = [call.ready]
            async for _ in call:
                pass
            assert not call.ready
        assert seen == [expected], after_output


async def test_a_routed_call_is_ready_once_committed(runtime: llmrt.LlmRuntime) -> None:
    await runtime.register_adapter(["a"], ScriptedAdapter(text_script(["x", "y"])))
    group = Group(name="chat", deployments=(Deployment(route="a", model="m"),))
    await runtime.register_groups([group])
    async with runtime.stream(request()) as call:
        assert not call.ready  # before dispatch: taking a chunk may mean a fail-over
        await call.__anext__()
        assert call.ready
        chunks = [chunk async for chunk in call]
        assert not call.ready
    assert type(chunks[-1]) is Finish
