"""`Updates`: the registry's commits, seen from asyncio (`Runtime.adapters_updated`).

A task of the trio run holds the registry subscription (`LlmRuntime.adapters_updated`)
and, per wake-up it receives, sets a flag on the loop and wakes the parked
iterator. The flag coalesces as the trio channel does: a consumer that is
behind gets one pending wake-up, never a backlog.
"""

from __future__ import annotations

import asyncio

from llmrt.actors._misuse import ConcurrentIterationError

__all__ = ["Updates"]


class Updates:
    """``async for _ in updates``: wakes after each registry commit, ends when the runtime does."""

    __slots__ = ("_ended", "_loop", "_pending", "_waiter")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._pending = False
        self._ended = False
        self._waiter: asyncio.Future[None] | None = None

    # ---- on the loop, from the trio task -----------------------------------------------

    def _wake(self) -> None:
        self._pending = True
        self._notify()

    def _end(self) -> None:
        self._ended = True
        self._notify()

    def _notify(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # ---- the consumer -------------------------------------------------------------------

    def __aiter__(self) -> Updates:
        return self

    async def __anext__(self) -> None:
        while not self._pending:
            if self._ended:
                raise StopAsyncIteration
            if self._waiter is not None:
                raise ConcurrentIterationError(
                    "two tasks are waiting on one adapters_updated() subscription: "
                    "give each task a subscription of its own"
                )
            waiter = self._waiter = self._loop.create_future()
            try:
                await waiter
            finally:
                self._waiter = None
        self._pending = False
