"""`Call`: a trio call's chunks, consumed by an asyncio task.

``async with rt.stream(options) as call: async for chunk in call`` works as
the trio API does. Entering starts a *pump*, a task of the runtime's trio
run that enters the trio call (`llmrt.Call`, a retried call, a gateway
call), iterates it and appends each chunk to a deque the asyncio side pops.
The chunks are the trio call's own objects, never copied.

The crossings cost one wake-up of the consumer per batch, not per chunk: in
guest mode the pump (running inside a loop callback) resolves the parked
consumer's future itself; in thread mode it schedules a flush on the loop
only when none is pending. The consumer takes every chunk already in the
deque without waiting. The deque is bounded
(``channel_size`` of the runtime): a full one parks the pump, which stops
reading its trio call, whose own bounded buffer then stops the adapter, so
a slow asyncio consumer slows the upstream down as in trio.

Leaving the block early (``break``, an exception, the task cancelled,
``asyncio.timeout``) aborts the trio call: it ends with its one ``aborted``
finish, the pump leaves the trio call's ``async with`` (which returns once
the adapter's iterator, and so the upstream connection, is closed), and only
then does ``__aexit__`` return. A cancellation arriving meanwhile is
re-raised after that.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import Any, Generic, Protocol, TypeVar

import trio

from llmrt._chunks import Finish, FinishAborted
from llmrt._errors import ErrorCode, LlmFailure
from llmrt.actors._misuse import concurrent_iteration, not_entered

from ._host import TrioHost, wait_shielded

__all__ = ["Call", "Abortable"]

T = TypeVar("T")

#: The reason of the abort that leaving a call's block early sends.
LEFT = "the consumer left the call (asyncio)"
CANCELLED = "the consuming asyncio task was cancelled"


class Abortable(Protocol):
    """What the pump iterates: a trio call, a retried call or a gateway call."""

    def __aiter__(self) -> AsyncIterator[Any]: ...

    def abort(self, reason: str | None = None) -> None: ...


class _End:
    """The pump has left the trio call; ``error`` is what it raised (None: nothing).

    ``lost``: the pump was cancelled (the runtime closed past its grace)
    before the call delivered its finish; the consumer gets one all the same.
    """

    __slots__ = ("error", "lost")

    def __init__(self, error: BaseException | None, lost: bool = False) -> None:
        self.error = error
        self.lost = lost


_LOST = Finish(
    reason=FinishAborted(
        failure=LlmFailure(message="the runtime shut down", code=ErrorCode.ABORTED)
    )
)


class Call(Generic[T]):
    """One call seen from asyncio: ``async with`` starts it, ``async for`` reads it.

    ``T`` is the item type: `llmrt.StreamChunk` for ``rt.stream``,
    `llmrt.RetryEvent` for ``rt.stream_with_retry``. The trio call is
    reachable as `trio_call` once entered (read-only use: its properties
    such as ``retry_policy`` and ``stopped_by``).
    """

    __slots__ = (
        "_abort_reason",
        "_discard",
        "_done",
        "_ended",
        "_entered",
        "_flush_pending",
        "_form",
        "_host",
        "_it",
        "_left",
        "_limit",
        "_pump_parked",
        "_queue",
        "_source",
        "_space",
        "_waiter",
        "options",
    )

    def __init__(
        self,
        host: TrioHost,
        source: AbstractAsyncContextManager[Any],
        options: Any,
        *,
        form: str,
        limit: int,
    ) -> None:
        self._host = host
        self._source = source
        self._form = form
        self._limit = max(2, limit)
        self._queue: collections.deque[Any] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None
        #: Written by the pump, cleared by the flush on the loop (see the module docstring).
        self._flush_pending = False
        self._pump_parked = False
        self._space: trio.Event | None = None
        self._entered = False
        self._ended = False
        self._done: asyncio.Future[None] | None = None
        self._it: Abortable | None = None
        #: An abort asked for before the pump entered the trio call.
        self._abort_reason: tuple[str | None] | None = None
        #: Set once the consumer left: the pump drops what it reads.
        self._discard = False
        self._left = False
        #: The request this call was made for.
        self.options = options

    @property
    def trio_call(self) -> Any:
        """The trio call behind this one (None until the pump entered it)."""
        return self._it

    def __getattr__(self, name: str) -> Any:
        # The trio call's read-only properties (``retry_policy``, ``stopped_by``,
        # ``adapter_error``, ``labels``, ``policy``), read where they are kept.
        if name.startswith("_"):
            raise AttributeError(name)
        it = object.__getattribute__(self, "_it")
        if it is None:
            if name in ("retry_policy", "stopped_by", "adapter_error"):
                return None
            raise AttributeError(name)
        return getattr(it, name)

    # ---- ``async with`` ----------------------------------------------------------------

    async def __aenter__(self) -> Call[T]:
        """Start the call's pump in the trio run. A checkpoint. A call is entered once."""
        if self._entered:
            raise RuntimeError("this call was already streamed; ask rt.stream() for a new one")
        host = self._host
        if asyncio.get_running_loop() is not host.loop:
            raise RuntimeError("an llmrt.aio call is used on the loop its runtime was opened on")
        if host.closed:
            raise RuntimeError("this llmrt.aio runtime is closed")
        self._entered = True
        self._done = host.loop.create_future()
        host.soon(self._spawn)
        await asyncio.sleep(0)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        """Stop the call if it still runs; return once the upstream is closed.

        Waits through a cancellation of the task, and re-raises it afterwards.
        """
        done = self._done
        if done is None:
            return
        if not done.done():
            self._left = True
            cancelled = isinstance(exc_info[1], asyncio.CancelledError)
            self._host.soon(self._stop, CANCELLED if cancelled else LEFT)
            await wait_shielded(done)

    def abort(self, reason: str | None = None) -> None:
        """Abort the call: it ends with one ``aborted`` finish (code ``ABORTED``).

        Synchronous and idempotent; the trio call is aborted at the trio run's
        next step, so chunks already on their way may still arrive first.
        """
        text = None if reason is None else str(reason)
        if self._done is None:  # not entered yet: the call starts aborted, as in trio
            if self._abort_reason is None:
                self._abort_reason = (text,)
        elif not self._done.done():
            self._host.soon(self._abort_in_trio, text)

    # ---- the consumer -------------------------------------------------------------------

    def __aiter__(self) -> Call[T]:
        if not self._entered:
            raise not_entered(self._form)
        return self

    async def __anext__(self) -> T:
        """The next item; waits (a suspension point) only when none is ready."""
        if self._ended:
            raise StopAsyncIteration
        queue = self._queue
        while not queue:
            if not self._entered:
                raise not_entered(self._form)
            if self._waiter is not None:
                raise concurrent_iteration("async for chunk in call")
            waiter = self._waiter = self._host.loop.create_future()
            try:
                if not queue:  # the pump may have appended before the waiter was set
                    await waiter
            finally:
                self._waiter = None
        item = queue.popleft()
        if self._pump_parked and len(queue) <= self._limit // 2:
            self._pump_parked = False
            self._host.soon(self._resume)
        if type(item) is _End:
            self._ended = True
            if item.error is not None:
                raise item.error
            if item.lost:
                return _LOST  # type: ignore[return-value]
            raise StopAsyncIteration
        if type(item) is Finish:
            self._ended = True
        return item  # type: ignore[no-any-return]

    def _flush(self) -> None:
        """On the loop: wake the parked consumer (the deque already holds the items)."""
        self._flush_pending = False
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # ---- the pump (trio side) -----------------------------------------------------------

    def _spawn(self) -> None:
        try:
            self._host.nursery.start_soon(self._pump, name="llmrt.aio.pump")
        except RuntimeError:  # the runtime is closing: the call never runs
            self._push(_End(None, lost=True))
            self._finished()

    def _push(self, item: object) -> None:
        self._queue.append(item)
        if self._host.mode == "guest":
            # trio runs inside a loop callback on the loop's thread: wake the
            # consumer here, without a callback of its own per batch.
            waiter = self._waiter
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
        elif not self._flush_pending:
            self._flush_pending = True
            self._host.to_loop(self._flush)

    def _finished(self) -> None:
        def settle() -> None:
            done = self._done
            if done is not None and not done.done():
                done.set_result(None)

        self._host.to_loop(settle)

    async def _pump(self) -> None:
        error: BaseException | None = None
        lost = False
        try:
            async with self._source as it:
                self._it = it
                if self._abort_reason is not None:
                    it.abort(self._abort_reason[0])
                queue = self._queue
                limit = self._limit
                async for item in it:
                    if self._discard:
                        continue
                    self._push(item)
                    if len(queue) >= limit:
                        space = self._space = trio.Event()
                        self._pump_parked = True
                        if len(queue) >= limit and not self._discard:
                            await space.wait()
                        self._pump_parked = False
        except trio.Cancelled:
            lost = True
            raise  # the runtime is closing: the consumer gets the lost finish
        except BaseException as exc:
            error = exc
        finally:
            self._push(_End(error, lost))
            self._finished()

    def _resume(self) -> None:
        space = self._space
        if space is not None:
            space.set()

    def _abort_in_trio(self, reason: str | None) -> None:
        it = self._it
        if it is None:
            if self._abort_reason is None:
                self._abort_reason = (reason,)
        else:
            it.abort(reason)

    def _stop(self, reason: str) -> None:
        """The consumer left: abort, drop what still comes, unpark the pump."""
        self._discard = True
        self._abort_in_trio(reason)
        self._resume()
