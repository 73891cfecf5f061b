"""Run one test body under trio and under asyncio: the backend-neutral pieces.

The contract tests are written once with anyio (``pytest.mark.anyio``, the
``anyio_backend`` fixture: ``"trio"`` or ``"asyncio"``) and open the runtime
through `open_rt`: `llmrt.open_runtime` under trio, `llmrt.aio.open_runtime`
under asyncio. The `llmrt.testing` upstream is a trio server: under trio it
runs in the test's own run; under asyncio in a trio run on a thread of its own
(`threaded_upstream`), reached through its `TrioToken`, so the waits on its
records (`Upstream.wait_connection_closed`, ...) are the same calls either way.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, TypeVar

import anyio
import trio

import llmrt
import llmrt.aio
from llmrt.testing import Route, Upstream, open_upstream

T = TypeVar("T")


def open_rt(backend: str, **kwargs: Any) -> AbstractAsyncContextManager[Any]:
    """The runtime under test: trio's `open_runtime`, or `llmrt.aio`'s under asyncio."""
    if backend == "trio":
        return llmrt.open_runtime(**kwargs)
    return llmrt.aio.open_runtime(**kwargs)


def abort_controller(backend: str) -> Any:
    return llmrt.AbortController() if backend == "trio" else llmrt.aio.AbortController()


class UpstreamProbe:
    """An `Upstream` and a way to await its trio coroutines from the test's backend."""

    def __init__(
        self, upstream: Upstream, call: Callable[[Callable[[], Awaitable[Any]]], Awaitable[Any]]
    ) -> None:
        self.upstream = upstream
        self._call = call

    @property
    def base_url(self) -> str:
        return self.upstream.base_url

    async def wait_connection_closed(self, n: int = 0) -> Any:
        return await self._call(lambda: self.upstream.wait_connection_closed(n))

    async def wait_all_closed(self) -> None:
        await self._call(self.upstream.wait_all_closed)

    async def wait_request(self, n: int = 0) -> Any:
        return await self._call(lambda: self.upstream.wait_request(n))

    def set_route(self, route: Route) -> None:
        self.upstream.set_route(route)


@asynccontextmanager
async def threaded_upstream(route: Route, **kwargs: Any) -> AsyncIterator[UpstreamProbe]:
    """`open_upstream` in a trio run on its own thread, for an asyncio test."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[tuple[Upstream, trio.lowlevel.TrioToken, trio.Event]] = (
        loop.create_future()
    )

    async def main() -> None:
        async with open_upstream(route, **kwargs) as upstream:
            stop = trio.Event()
            token = trio.lowlevel.current_trio_token()
            loop.call_soon_threadsafe(ready.set_result, (upstream, token, stop))
            await stop.wait()

    def run() -> None:
        try:
            trio.run(main)
        except BaseException as exc:  # reported to the test, not lost in the thread
            failed = exc

            def report() -> None:
                if not ready.done():
                    ready.set_exception(failed)

            loop.call_soon_threadsafe(report)

    thread = threading.Thread(target=run, name="test upstream", daemon=True)
    thread.start()
    upstream, token, stop = await ready

    async def call(fn: Callable[[], Awaitable[Any]]) -> Any:
        return await asyncio.to_thread(trio.from_thread.run, fn, trio_token=token)

    try:
        yield UpstreamProbe(upstream, call)
    finally:
        trio.from_thread.run_sync(stop.set, trio_token=token)
        await asyncio.to_thread(thread.join, 10)


@asynccontextmanager
async def serve_test_upstream(
    backend: str, route: Route, **kwargs: Any
) -> AsyncIterator[UpstreamProbe]:
    """A `llmrt.testing` upstream the test's backend can wait on."""
    if backend == "trio":

        async def call(fn: Callable[[], Awaitable[Any]]) -> Any:
            return await fn()

        async with open_upstream(route, **kwargs) as upstream:
            yield UpstreamProbe(upstream, call)
    else:
        async with threaded_upstream(route, **kwargs) as upstream:
            yield upstream


def fail_after(seconds: float) -> Any:
    """A time bound on a block, on either backend."""
    return anyio.fail_after(seconds)
