"""A bounded single-producer, single-consumer mailbox for one call's chunks.

A trio memory channel does the same job, but it is built for many senders
and receivers: it costs about 1.7 KiB per channel pair, and its non-blocking
calls still pay for that generality. A call has exactly one producer (its
task) and one consumer, so this is a deque, a capacity and at most one
parked task on each side. Taking or putting an item while the other side is
not parked is a deque operation; blocking uses trio's low-level parking
(`wait_task_rescheduled`), so it is cancellable like any trio wait.

The box is bounded twice: by item count (``capacity``) and by the text its
buffered deltas carry (``max_text``, in characters), so a provider sending
very large deltas to a slow consumer fills it after a few items, not after
``capacity`` of them. An item that arrives at an empty box is always taken.
Only buffered items are weighed (one handed straight to a parked consumer
costs nothing extra), and the text count is reset when the box drains
rather than decremented per item: once over the bound, the producer waits
until the consumer has taken everything, which keeps `take` free of it.

In interface it is a trio channel: a `trio.abc.Channel` (so both a
`trio.abc.SendChannel` and a `trio.abc.ReceiveChannel`) whose one object is
both ends, as a single-producer, single-consumer box can be. ``send`` /
``send_nowait`` and ``receive`` / ``receive_nowait`` behave as a memory
channel's: `trio.WouldBlock` when they cannot go on at once,
`trio.BrokenResourceError` for a send after the consumer left,
`trio.EndOfChannel` for a receive after the producer closed and the box
drained. ``close`` is the producer's end closing, ``leave`` the consumer's,
``aclose`` both. The call path uses the same state through its
exception-free spellings (`put_nowait` answers False rather than raising
`trio.WouldBlock`; the consumer parks in its own frame with `park_getter`),
which is what keeps a chunk at a deque operation.
"""

from __future__ import annotations

from typing import Any

import outcome
import trio

from llmrt._chunks import ReasoningDelta, TextDelta, ToolCallDelta

__all__ = ["Mailbox", "MAX_TEXT"]

_Task = trio.lowlevel.Task

#: The default bound on the text buffered in one box: 1 Mi characters (a few
#: MB at most), far above what a consumer that keeps up ever has waiting.
MAX_TEXT = 1 << 20


class Mailbox(trio.abc.Channel[Any]):
    """One call's chunks: a bounded single-producer, single-consumer trio channel."""

    __slots__ = (
        "_capacity",
        "_closed",
        "_getter",
        "_gone",
        "_head",
        "_items",
        "_max_text",
        "_putter",
        "_text",
    )

    def __init__(self, capacity: int, max_text: int = MAX_TEXT) -> None:
        # A list read from ``_head`` and reset once drained: O(1) both ways and far
        # smaller than a deque (600 B empty). Made on first need: while the
        # consumer keeps up, items are handed straight to it.
        self._items: list[Any] | None = None
        self._head = 0
        self._capacity = capacity
        self._getter: _Task | None = None
        self._putter: _Task | None = None
        #: The producer is done: after the buffered items, the consumer gets EndOfChannel.
        self._closed = False
        #: The consumer left: the producer's puts raise BrokenResourceError.
        self._gone = False
        #: Characters of delta text buffered now, and the bound on them.
        self._text = 0
        self._max_text = max_text

    # ---- producer side -------------------------------------------------------------------

    def put_nowait(self, item: Any) -> bool:
        """Hand ``item`` over unless the box is full; False when it is (or the consumer left)."""
        getter = self._getter
        if getter is not None:  # the consumer is parked, so the buffer is empty
            self._getter = None
            trio.lowlevel.reschedule(getter, outcome.Value(item))
            return True
        items = self._items
        if items is None:
            items = self._items = []
        buffered = len(items) - self._head
        if buffered >= self._capacity or self._gone:
            return False
        # Inline, not a function: this runs for every buffered chunk.
        cls = type(item)
        if cls is TextDelta or cls is ReasoningDelta:
            size = len(item.text)
        elif cls is ToolCallDelta:
            size = len(item.arguments_delta)
        else:
            size = 0
        if size:
            if buffered and self._text + size > self._max_text:
                return False
            self._text += size
        items.append(item)
        return True

    async def put(self, item: Any) -> None:
        """Append ``item``, waiting while the box is full. Raises `trio.BrokenResourceError`
        once the consumer has left."""
        while not self.put_nowait(item):
            if self._gone:
                raise trio.BrokenResourceError("the consumer left")
            self._putter = trio.lowlevel.current_task()
            await trio.lowlevel.wait_task_rescheduled(self._abort_put)

    async def send(self, value: Any) -> None:
        """`trio.abc.SendChannel.send`: `put`, refusing once this end is closed."""
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._closed:
            raise trio.ClosedResourceError("the producer closed the mailbox")
        if self.put_nowait(value):
            await trio.lowlevel.cancel_shielded_checkpoint()
        else:
            await self.put(value)  # parks: a checkpoint of its own

    def send_nowait(self, value: Any) -> None:
        """Hand ``value`` over at once, as `trio.MemorySendChannel.send_nowait` does."""
        if self._closed:
            raise trio.ClosedResourceError("the producer closed the mailbox")
        if not self.put_nowait(value):
            if self._gone:
                raise trio.BrokenResourceError("the consumer left")
            raise trio.WouldBlock

    def _abort_put(self, _: object) -> trio.lowlevel.Abort:
        self._putter = None
        return trio.lowlevel.Abort.SUCCEEDED

    def close(self) -> None:
        """The producer is done; a parked consumer wakes to the remaining items, then the end."""
        self._closed = True
        getter = self._getter
        if getter is not None:
            self._getter = None
            trio.lowlevel.reschedule(getter, outcome.Error(trio.EndOfChannel()))

    # ---- consumer side -------------------------------------------------------------------

    def receive_nowait(self) -> Any:
        """The oldest item at once, as `trio.MemoryReceiveChannel.receive_nowait` gives it."""
        if self._gone:
            raise trio.ClosedResourceError("the consumer left the mailbox")
        if self.ready:
            return self.take()
        if self._closed:
            raise trio.EndOfChannel
        raise trio.WouldBlock

    async def receive(self) -> Any:
        """`trio.abc.ReceiveChannel.receive`: the next item, waiting for one; a checkpoint."""
        await trio.lowlevel.checkpoint_if_cancelled()
        try:
            item = self.receive_nowait()
        except trio.WouldBlock:
            if self._getter is not None:
                raise trio.BusyResourceError("another task is receiving from the mailbox") from None
            self.park_getter()
            return await trio.lowlevel.wait_task_rescheduled(self)
        await trio.lowlevel.cancel_shielded_checkpoint()
        return item

    def take(self) -> Any:
        """Pop the oldest item; the caller checks `ready` first. Wakes a parked producer."""
        items: list[Any] = self._items  # type: ignore[assignment]
        item = items[self._head]
        self._head += 1
        if self._head == len(items):
            items.clear()
            self._head = 0
            self._text = 0
        putter = self._putter
        if putter is not None:
            self._putter = None
            trio.lowlevel.reschedule(putter)
        return item

    @property
    def ready(self) -> bool:
        return bool(self._items)  # drained lists are cleared: non-empty means ready

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def gone(self) -> bool:
        """The consumer left (`leave`): nothing put from now on reaches anyone."""
        return self._gone

    def park_getter(self) -> None:
        """Register the current task as the parked consumer; it must then
        ``await trio.lowlevel.wait_task_rescheduled(box.abort_get)``, which
        returns the next item or raises `trio.EndOfChannel`.

        The consumer parks in its own frame (no ``get`` frame per waiting call);
        call it only when `ready` and `closed` are False. The mailbox itself
        may stand for ``abort_get``.
        """
        self._getter = trio.lowlevel.current_task()

    def abort_get(self, _: object) -> trio.lowlevel.Abort:
        self._getter = None
        return trio.lowlevel.Abort.SUCCEEDED

    #: The mailbox is also the parked getter's abort function, so that parking
    #: makes no bound-method object: ``wait_task_rescheduled(box)``.
    __call__ = abort_get

    async def aclose(self) -> None:
        """Both ends closed: the producer is done and the consumer gone (a checkpoint)."""
        self.close()
        self.leave()
        await trio.lowlevel.checkpoint()

    def leave(self) -> None:
        """The consumer is gone: drop what is buffered and wake a parked producer."""
        self._gone = True
        self._items = None
        self._head = 0
        self._text = 0
        putter = self._putter
        if putter is not None:
            self._putter = None
            trio.lowlevel.reschedule(putter)
