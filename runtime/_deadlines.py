"""`DeadlineHeap`: one lazy timer task for many deadlines; `RuntimeServices`, what adapters get.

Many things wait with a deadline that moves far more often than it fires:
a call's idle timeout moves with every chunk, a connection's read timeout
with every network read. A cancel scope per wait, or a heap update per move,
would cost on every chunk. The heap is lazy instead: the owner of a deadline
keeps the true due time in its own state (a plain store per move) and
pushes an entry only when nothing watches it. The heap's task sleeps until
the earliest entry; when one comes due it asks the entry's ``check`` what
the owner's due time is now: a later time puts the entry back, None takes
it off (the check has done what a fired deadline does, or nothing is due).
So the task wakes about once per timeout per watched thing.

An entry is ``[due, seq, item, check]`` and belongs to the heap; the owner
keeps the entry `push` returned, to `forget` it (the heap then no longer
refers to the item, so a finished item is freed at once) or to see whether
it is still watched (``entry[2] is not None``). Forgotten entries are
dropped when they come due, or in one pass once they make up most of the
heap. The task runs where its owner starts it (`run`, in a nursery the
owner holds): the runtime for its calls' idle watchdog, a registration for
its adapter's connections (`RuntimeServices`).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from typing import Any

import attrs
import trio

__all__ = ["DeadlineHeap", "Entry", "RuntimeServices"]

#: A heap entry: ``[due, seq, item, check]``; ``item`` is None once the entry was cleared.
Entry = list[Any]
#: What the heap asks of a due entry: the item's due time now, or None to drop it.
Check = Callable[[Any, float], float | None]

#: Emptied heap entries are dropped in one pass once there are more than this
#: many and they make up over half of the heap.
_COMPACT_AFTER = 256


@attrs.define(eq=False)
class DeadlineHeap:
    """A lazy heap of deadlines served by one task (see the module docstring)."""

    _heap: list[Entry] = attrs.field(factory=list, init=False)
    _seq: int = attrs.field(default=0, init=False)
    _sleep: trio.CancelScope | None = attrs.field(default=None, init=False)
    _dead: int = attrs.field(default=0, init=False)
    #: True while `run` serves the heap; entries pushed otherwise never fire.
    running: bool = attrs.field(default=False, init=False)

    def __len__(self) -> int:
        """Entries on the heap, forgotten ones included until they are dropped."""
        return len(self._heap)

    def push(self, item: object, due: float, check: Check) -> Entry:
        """Watch ``item`` until ``due``: then ``check(item, now)`` decides. No I/O."""
        self._seq += 1
        entry = [due, self._seq, item, check]
        heapq.heappush(self._heap, entry)
        sleep = self._sleep
        if sleep is not None and due < sleep.deadline:
            sleep.deadline = due
        return entry

    def forget(self, entry: Entry) -> None:
        """Stop watching through ``entry``; the heap no longer refers to its item."""
        if entry[2] is None:
            return  # cleared already, or popped by the task
        entry[2] = None
        self._dead += 1
        heap = self._heap
        if self._dead > _COMPACT_AFTER and self._dead * 2 > len(heap):
            heap[:] = [live for live in heap if live[2] is not None]
            heapq.heapify(heap)
            self._dead = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve the heap until cancelled; every entry is cleared when it ends."""
        heap = self._heap  # compaction keeps this list object
        self.running = True
        task_status.started()
        try:
            while True:
                with trio.CancelScope(deadline=heap[0][0] if heap else math.inf) as scope:
                    self._sleep = scope
                    await trio.sleep_forever()
                self._sleep = None
                now = trio.current_time()
                while heap and heap[0][0] <= now:
                    entry = heapq.heappop(heap)
                    item = entry[2]
                    if item is None:
                        self._dead -= 1
                        continue
                    due = entry[3](item, now)
                    if due is None:
                        entry[2] = None  # popped: a later forget() has nothing to clear
                    else:
                        # The same entry goes back: the owner's reference to it stays valid.
                        self._seq += 1
                        entry[0] = due
                        entry[1] = self._seq
                        heapq.heappush(heap, entry)
                entry = []
                item = None  # this frame sleeps next: it must not keep the last item alive
        finally:
            self.running = False
            self._sleep = None
            for entry in heap:
                entry[2] = None
            heap.clear()
            self._dead = 0


@attrs.frozen(eq=False)
class RuntimeServices:
    """What a runtime lends an adapter while a registration holds it (`Adapter.attach_runtime`).

    ``nursery`` hosts the adapter's background tasks; ``deadlines`` is a
    running `DeadlineHeap` for the adapter's timeouts (its transport's read
    deadlines). In a runtime both are the runtime's: its nursery and its
    idle watchdog's heap, one for every registration; a registration used
    alone starts its own, ending before its adapter is closed.
    """

    nursery: trio.Nursery
    deadlines: DeadlineHeap

    @classmethod
    async def start(cls, nursery: trio.Nursery) -> RuntimeServices:
        """Services whose deadline heap runs in ``nursery`` (started before this returns)."""
        deadlines = DeadlineHeap()
        await nursery.start(deadlines.run)
        return cls(nursery=nursery, deadlines=deadlines)
