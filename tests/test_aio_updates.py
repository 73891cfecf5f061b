"""`llmrt.aio`'s ``adapters_updated``: the registry's commits, seen from asyncio, per host."""

from __future__ import annotations

import asyncio

import pytest
import trio
from _settle import wait_until

import llmrt.aio
from llmrt.adapters.scripted import ScriptedAdapter, text_script

pytestmark = pytest.mark.timeout(30)

HOSTS = pytest.mark.parametrize("host", ["guest", "thread"])


def _adapter() -> ScriptedAdapter:
    return ScriptedAdapter(text_script(["hi"]))


async def _settle(rt: llmrt.aio.Runtime) -> None:
    """Until every wake-up the trio run has for the loop is on it.

    The subscription's trio task is runnable from the commit on; after a few
    scheduler passes of a task of the same run it has run, and what it handed
    the loop is queued before this round trip's own answer.
    """

    async def passes() -> None:
        for _ in range(3):
            await trio.lowlevel.checkpoint()

    await rt._host.run(passes)


async def _nothing_pending(updates: llmrt.aio.Updates) -> None:
    waiting = asyncio.ensure_future(anext(updates))
    for _ in range(3):
        await asyncio.sleep(0)
    assert not waiting.done()
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting


async def _one_wake(rt: llmrt.aio.Runtime, updates: llmrt.aio.Updates) -> None:
    """Exactly one wake-up comes (payload-free), and no second one is pending."""
    await _settle(rt)
    async with asyncio.timeout(5):
        assert await anext(updates) is None
    await _nothing_pending(updates)


@HOSTS
def test_a_subscriber_wakes_after_every_commit_and_never_for_a_refused_one(host: str) -> None:
    async def main() -> None:
        async with llmrt.aio.open_runtime(trio_host=host) as rt:  # type: ignore[arg-type]
            async with rt.adapters_updated() as updates:
                handle = await rt.register_adapter(["p"], _adapter())
                await _one_wake(rt, updates)
                await handle.replace(["p", "q"])
                await _one_wake(rt, updates)
                await handle.dispose()
                await _one_wake(rt, updates)
                with pytest.raises(llmrt.LlmError):
                    await rt.register_adapter([""], _adapter())
                await _settle(rt)
                await _nothing_pending(updates)  # the refused registration woke nobody

    asyncio.run(main())


@HOSTS
def test_wake_ups_coalesce_for_a_subscriber_that_is_behind(host: str) -> None:
    async def main() -> None:
        async with llmrt.aio.open_runtime(trio_host=host) as rt:  # type: ignore[arg-type]
            async with rt.adapters_updated() as updates:
                handle = await rt.register_adapter(["p"], _adapter())
                for i in range(50):
                    await handle.replace(["p"] if i % 2 else ["q"])
                await _one_wake(rt, updates)
                assert [info.id for info in rt.list_providers()] == ["p"]

    asyncio.run(main())


@HOSTS
def test_leaving_the_block_ends_the_subscription_and_closing_ends_the_iteration(
    host: str,
) -> None:
    async def main() -> list[None]:
        async with llmrt.aio.open_runtime(trio_host=host) as rt:  # type: ignore[arg-type]
            registry = rt._rt._core.registry
            async with rt.adapters_updated():
                assert rt._host.now(lambda: registry.subscriber_count) == 1
            assert rt._host.now(lambda: registry.subscriber_count) == 0
            seen: list[None] = []
            woken = asyncio.Event()

            async def watch() -> None:
                async with rt.adapters_updated() as updates:
                    async for item in updates:
                        seen.append(item)
                        woken.set()

            watcher = asyncio.ensure_future(watch())
            # Until the watcher has subscribed: waited for in the trio run, where
            # the count changes (a count of loop turns is no bound on a loaded machine).
            await rt._host.run(
                lambda: wait_until(lambda: registry.subscriber_count > 0, settle=False)
            )
            assert rt._host.now(lambda: registry.subscriber_count) == 1
            await rt.register_adapter(["p"], _adapter())
            await _settle(rt)
            async with asyncio.timeout(5):
                await woken.wait()  # the watcher takes its wake-up
        # The runtime closed under the subscription: the iteration ended, no error.
        async with asyncio.timeout(5):
            await watcher
        return seen

    assert asyncio.run(main()) == [None]


@HOSTS
def test_two_tasks_waiting_on_one_subscription_are_refused(host: str) -> None:
    async def main() -> None:
        async with llmrt.aio.open_runtime(trio_host=host) as rt:  # type: ignore[arg-type]
            async with rt.adapters_updated() as updates:
                first = asyncio.ensure_future(anext(updates))
                await asyncio.sleep(0)
                with pytest.raises(llmrt.aio.ConcurrentIterationError):
                    await anext(updates)
                first.cancel()

    asyncio.run(main())
