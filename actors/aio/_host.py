"""One trio run beside an asyncio loop, and the two ways across.

`open_host` starts a trio run for one `llmrt.aio` runtime and finishes it when
the block is left. The run lives either as a trio *guest* on the running
asyncio loop (`trio.lowlevel.start_guest_run`: trio's scheduler ticks run as
loop callbacks, its I/O wait in a helper thread) or in a thread of its own
(``mode="thread"``). docs/asyncio.md says which is the default and why
(measured by ``python -m bench asyncio``). A guest run holds its thread's
trio state for its whole life, so one loop hosts one guest run at a time:
with no mode given, a runtime opened while another one is a guest of the
loop gets a thread.

The crossings are the same in both modes:

* asyncio -> trio: `TrioHost.soon` (``TrioToken.run_sync_soon``): a callback
  run in the trio run's context, which is where `Call.abort` and cancel
  scopes may be touched; `TrioHost.run` awaits a trio coroutine as a task of
  the run (cancelling the asyncio awaiter cancels it, and waits for it);
* trio -> asyncio: `TrioHost.to_loop` (``call_soon`` on the loop in guest
  mode, where trio runs on the loop's thread, ``call_soon_threadsafe``
  otherwise).

The trio run's main task holds one nursery for the bridge's tasks (a call's
pump, an awaited method) inside the body given to `open_host`, e.g. the trio
runtime's ``async with``; leaving the block cancels that nursery, lets the
body finish and waits until the run has returned.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Literal, TypeVar

import attrs
import outcome
import trio

from llmrt.actors._misuse import not_in_asyncio

__all__ = ["DEFAULT_HOST", "HostMode", "TrioHost", "open_host", "running_loop", "wait_shielded"]

T = TypeVar("T")
HostMode = Literal["guest", "thread"]
#: Where a runtime's trio run lives unless ``trio_host=`` says otherwise (docs/asyncio.md).
DEFAULT_HOST: HostMode = "guest"

#: How long the loop waits for a finished trio thread to exit.
_JOIN_TIMEOUT = 5.0


def running_loop(api: str) -> asyncio.AbstractEventLoop:
    """The running asyncio loop, or `NotInAsyncioError` naming ``api`` and the trio API."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        raise not_in_asyncio(api) from None


async def wait_shielded(future: asyncio.Future[T]) -> T:
    """Await ``future`` to its end even if the awaiting task is cancelled meanwhile.

    A cancellation that arrives while waiting is re-raised once the future is
    done, so ``asyncio.timeout`` and task cancellation still see it.
    """
    cancelled = False
    while not future.done():
        try:
            await asyncio.shield(future)
        except asyncio.CancelledError:
            if future.done():
                break
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    return future.result()


@attrs.define(eq=False)
class _Task:
    """An awaited trio coroutine: its scope (to cancel it) and its asyncio future."""

    future: asyncio.Future[Any]
    scope: trio.CancelScope | None = None
    cancel_requested: bool = False


@attrs.define(eq=False)
class TrioHost:
    """The trio run of one `llmrt.aio` runtime, as the asyncio side reaches it."""

    loop: asyncio.AbstractEventLoop
    mode: HostMode
    token: trio.lowlevel.TrioToken = attrs.field(init=False)
    nursery: trio.Nursery = attrs.field(init=False)
    #: asyncio -> the loop from trio code: plain ``call_soon`` when trio runs on the loop's thread.
    to_loop: Callable[..., object] = attrs.field(init=False)
    thread: threading.Thread | None = attrs.field(default=None, init=False)
    _closed: bool = attrs.field(default=False, init=False)

    def __attrs_post_init__(self) -> None:
        self.to_loop = (
            self.loop.call_soon if self.mode == "guest" else self.loop.call_soon_threadsafe
        )

    @property
    def closed(self) -> bool:
        return self._closed

    def soon(self, fn: Callable[..., object], *args: Any) -> None:
        """Run ``fn(*args)`` in the trio run, soon. A no-op once the run has finished."""
        with contextlib.suppress(trio.RunFinishedError):
            self.token.run_sync_soon(fn, *args)

    def now(self, fn: Callable[[], T]) -> T:
        """``fn()`` in the trio run's context, returning its result (synchronous).

        In guest mode trio's state lives on this thread and nothing of it
        runs between two loop callbacks, so ``fn`` is called at once; in
        thread mode the loop's thread waits for the trio thread to run it.
        """
        if self.mode == "guest":
            return fn()
        return trio.from_thread.run_sync(fn, trio_token=self.token)

    async def run(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Await ``fn(*args)`` as a task of the trio run; its result or exception, as raised.

        Cancelling the awaiting asyncio task cancels the trio task and waits
        for it to end before `asyncio.CancelledError` is raised.
        """
        if self._closed:
            raise RuntimeError("this llmrt.aio runtime is closed")
        task = _Task(self.loop.create_future())
        self.soon(self._spawn, task, fn, args)
        try:
            return await asyncio.shield(task.future)
        except asyncio.CancelledError:
            if task.future.done() and not task.future.cancelled():
                raise
            self.soon(self._cancel, task)
            with contextlib.suppress(asyncio.CancelledError, BaseException):
                await wait_shielded(task.future)
            raise

    def _spawn(self, task: _Task, fn: Callable[..., Awaitable[Any]], args: tuple[Any, ...]) -> None:
        try:
            self.nursery.start_soon(self._run_task, task, fn, args)
        except RuntimeError:  # the bridge's nursery is closed: the runtime is leaving
            self._settle(task, None, RuntimeError("this llmrt.aio runtime is closed"))

    def _cancel(self, task: _Task) -> None:
        task.cancel_requested = True
        if task.scope is not None:
            task.scope.cancel()

    async def _run_task(
        self, task: _Task, fn: Callable[..., Awaitable[Any]], args: tuple[Any, ...]
    ) -> None:
        result: Any = None
        error: BaseException | None = None
        with trio.CancelScope() as scope:
            task.scope = scope
            if task.cancel_requested:
                scope.cancel()
            try:
                result = await fn(*args)
            except trio.Cancelled:
                # Cancelled for its awaiter, or by the runtime closing under it.
                closing = RuntimeError("this llmrt.aio runtime closed while the call ran")
                error = asyncio.CancelledError() if task.cancel_requested else closing
                raise
            except BaseException as exc:
                error = exc
            finally:
                self._settle(task, result, error)

    def _settle(self, task: _Task, result: Any, error: BaseException | None) -> None:
        def settle() -> None:
            future = task.future
            if future.done():
                return
            if error is None:
                future.set_result(result)
            elif isinstance(error, asyncio.CancelledError):
                future.cancel()
            else:
                future.set_exception(error)

        self.to_loop(settle)


def _start_guest(
    loop: asyncio.AbstractEventLoop,
    main: Callable[[], Awaitable[None]],
    done: Callable[[Any], None],
) -> None:
    trio.lowlevel.start_guest_run(
        main,
        run_sync_soon_threadsafe=loop.call_soon_threadsafe,
        run_sync_soon_not_threadsafe=loop.call_soon,
        done_callback=done,
        host_uses_signal_set_wakeup_fd=True,
        restrict_keyboard_interrupt_to_checkpoints=True,
    )


@asynccontextmanager
async def open_host(
    body: Callable[[], AbstractAsyncContextManager[T]], *, mode: HostMode | None, api: str
) -> AsyncIterator[tuple[TrioHost, T]]:
    """Start a trio run that enters ``body()``; yield the host and what ``body`` yielded.

    Leaving the block cancels the bridge's tasks, leaves ``body`` and
    returns once the trio run has returned. An exception raised while
    entering ``body`` (e.g. `ValueError` for a bad argument) is raised here,
    as raised. ``api`` names the entry point in `NotInAsyncioError`.
    """
    loop = running_loop(api)
    # A thread holds one trio run at a time, and a guest run holds the loop's
    # thread for its whole life: a second runtime on this loop gets a thread.
    taken = trio.lowlevel.in_trio_run()
    if mode is None:
        mode = "thread" if taken else DEFAULT_HOST
    elif mode not in ("guest", "thread"):
        raise ValueError(f"trio_host must be 'guest' or 'thread', got {mode!r}")
    elif mode == "guest" and taken:
        raise RuntimeError(
            "this loop's thread already hosts a trio guest run (another llmrt.aio runtime "
            "or client): a second one runs in a thread of its own; leave trio_host unset "
            "to get one, or pass trio_host='thread'"
        )
    host = TrioHost(loop, mode)
    entered: asyncio.Future[T] = loop.create_future()
    finished: asyncio.Future[None] = loop.create_future()
    stop = trio.Event()

    def settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
        if future.done():
            return
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)

    async def main() -> None:
        host.token = trio.lowlevel.current_trio_token()
        try:
            async with body() as value, trio.open_nursery() as bridge:
                host.nursery = bridge
                host.to_loop(settle, entered, value, None)
                await stop.wait()
                bridge.cancel_scope.cancel()
        except BaseException as exc:
            host.to_loop(settle, entered, None, exc)
            raise

    def done(result: Any) -> None:  # trio's outcome of main, from trio's done callback
        def finish() -> None:
            host._closed = True
            try:
                result.unwrap()
            except BaseException as exc:
                settle(entered, None, exc)
                settle(finished, None, exc)
            else:
                settle(entered, None, RuntimeError("the trio run ended before it started"))
                settle(finished, None, None)

        loop.call_soon_threadsafe(finish)

    if mode == "guest":
        _start_guest(loop, main, done)
    else:

        def run_thread() -> None:
            done(outcome.capture(trio.run, main))

        host.thread = threading.Thread(target=run_thread, name="llmrt.aio trio", daemon=True)
        host.thread.start()
    try:
        value = await wait_shielded(entered)
    except BaseException:
        with contextlib.suppress(BaseException):
            await wait_shielded(finished)
        raise
    try:
        yield host, value
    finally:
        host.soon(stop.set)
        try:
            await wait_shielded(finished)
        finally:
            host._closed = True
            if host.thread is not None:
                # Its run has returned (``finished`` came from its last line): a short join.
                host.thread.join(_JOIN_TIMEOUT)
