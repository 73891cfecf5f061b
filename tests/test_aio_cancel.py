"""Cancelling asyncio tasks mid-stream: each call ends aborted, its upstream closes, nothing leaks.

1,000 asyncio tasks each stream a call from an upstream that sends a little
and then holds the stream open; once each has seen text it is cancelled. The
runtime must record 1,000 ``aborted`` finishes, the upstream must see 1,000
connections closed by the client, and once the runtime is left no asyncio
task, no trio task and no socket may remain.
"""

from __future__ import annotations

import asyncio
import gc
import os
from typing import Any

import pytest
import trio
from _aio_support import threaded_upstream

import llmrt
import llmrt.aio
from llmrt import GenerateOptions, TextDelta, user_message
from llmrt.adapters.openai_chat import OpenAIChatAdapter
from llmrt.testing import SSEScript, openai_events

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(240)]

CALLS = 1000
WAVE = 100


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _sockets() -> set[str]:
    """The process's open sockets (their inodes)."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # closed while listing
        if link.startswith("socket:"):
            found.add(link)
    return found


async def _trio_tasks() -> list[str]:
    """The names of the tasks of the trio run this runs in, sorted."""

    def walk(task: trio.lowlevel.Task) -> list[str]:
        names = [task.name]
        for nursery in task.child_nurseries:
            for child in nursery.child_tasks:
                names.extend(walk(child))
        return names

    return sorted(walk(trio.lowlevel.current_root_task()))


@pytest.mark.parametrize("trio_host", ["guest", "thread"])
async def test_a_thousand_cancelled_tasks_abort_their_calls_and_leave_nothing(
    trio_host: Any,
) -> None:
    # Sockets that earlier tests in this process left unreachable would be closed
    # by the collector mid-test (a thousand calls trigger it), and the set would
    # lose them: finalize them before taking it (as tests/test_hostile_suite.py does).
    gc.collect()
    sockets_before = _sockets()
    tasks_before = asyncio.all_tasks()
    options = GenerateOptions(provider="p", model="m-1", messages=(user_message("hi"),))
    script = SSEScript(events=openai_events(["a", "b", "c"]), stall_after=2)
    async with asyncio.timeout(200):
        async with threaded_upstream(script, max_header_bytes=65536) as upstream:
            adapter = OpenAIChatAdapter(
                base_url=upstream.base_url + "/v1", api_key_env="K", environ={"K": "sk-c"}
            )
            async with llmrt.aio.open_runtime(trio_host=trio_host) as rt:
                await rt.register_adapter(["p"], adapter)
                host = rt._host
                idle_trio_tasks = await host.run(_trio_tasks)
                outcomes: list[BaseException | None] = []
                for _ in range(CALLS // WAVE):
                    streaming = asyncio.Semaphore(0)

                    async def consume(streaming: asyncio.Semaphore = streaming) -> None:
                        async with rt.stream(options) as call:
                            async for chunk in call:
                                if type(chunk) is TextDelta:
                                    streaming.release()
                        raise AssertionError("the stream ended before it was cancelled")

                    wave = [asyncio.create_task(consume()) for _ in range(WAVE)]
                    for _ in range(WAVE):
                        await streaming.acquire()
                    for task in wave:
                        task.cancel()
                    for result in await asyncio.gather(*wave, return_exceptions=True):
                        outcomes.append(result)  # type: ignore[arg-type]
                await upstream.wait_all_closed()
                stats = rt.statistics()
                trio_tasks_left = await host.run(_trio_tasks)
            records = upstream.upstream.connections
            closed_by = {record.closed_by for record in records}
    assert len(outcomes) == CALLS
    assert all(isinstance(o, asyncio.CancelledError) for o in outcomes)
    assert stats.calls_finished == {"aborted": CALLS}
    assert stats.failures_by_code == {"ABORTED": CALLS}
    assert stats.calls_in_flight == 0
    # Every call had its own connection, each closed by the client (no pooling of
    # a connection that was mid-stream).
    assert len(records) == CALLS and closed_by == {"client"}
    # No pump, no call task: what remains is what ran before the calls (the
    # transport's read deadlines live on the runtime's one deadline heap, no task
    # of their own).
    assert [n for n in trio_tasks_left if n not in idle_trio_tasks] == []
    assert "llmrt.aio.pump" not in trio_tasks_left and "llmrt.call" not in trio_tasks_left
    # The runtime's trio run has returned: no trio task at all.
    assert host.closed
    assert asyncio.all_tasks() == tasks_before
    assert _sockets() == sockets_before
