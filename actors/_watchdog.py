"""One idle-watchdog actor for all calls of a runtime.

A call records the (trio clock) time of its last chunk with a plain store;
the watchdog keeps a heap of due times and sleeps until the earliest. When
an entry comes due it re-reads the call's true due time: expired calls are
told so, the others go back on the heap. So a chunk costs one float store,
not a deadline update, and the runtime has one timer task, not one per call.

A heap entry is ``[due, seq, call]`` and belongs to the watchdog; the call
holds the entry `watch` returned and hands it back to re-watch or `forget`.
Forgetting clears the call out of its entry, so a finished call (and the
request it holds) is freed at once instead of waiting on the heap until its
due time; the emptied entries are dropped when they come due or when they
make up most of the heap. The watchdog reads nothing of a call but one
method, `Watched.idle_check`: the call keeps its own bookkeeping private.
"""

from __future__ import annotations

import heapq
import math
from typing import Any, Protocol

import attrs
import trio

__all__ = ["Watchdog", "Watched"]


class Watched(Protocol):
    def idle_check(self, now: float) -> float | None:
        """When the call is next due, or None when it timed out at ``now`` (it then stopped)."""
        ...


#: A heap entry: ``[due, seq, call]``; ``call`` is None once the entry was cleared.
Entry = list[Any]


#: Emptied heap entries are dropped in one pass once there are more than this
#: many and they make up over half of the heap.
_COMPACT_AFTER = 256


@attrs.define(eq=False)
class Watchdog:
    _heap: list[list[Any]] = attrs.field(factory=list, init=False)
    _seq: int = attrs.field(default=0, init=False)
    _sleep: trio.CancelScope | None = attrs.field(default=None, init=False)
    _dead: int = attrs.field(default=0, init=False)

    #: Calls the watchdog stopped for idling, since the runtime opened.
    firings: int = attrs.field(default=0, init=False)

    def watch(self, call: Watched, due: float, old: Entry | None) -> Entry:
        """Watch ``call`` until ``due`` (replacing its ``old`` entry); the entry to hand back."""
        if old is not None:
            self.forget(old)
        self._seq += 1
        entry = [due, self._seq, call]
        self._push(entry)
        return entry

    def forget(self, entry: Entry) -> None:
        """Stop watching through ``entry``; the heap no longer refers to its call."""
        if entry[2] is None:
            return  # cleared already, or popped by the watchdog
        entry[2] = None
        self._dead += 1
        heap = self._heap
        if self._dead > _COMPACT_AFTER and self._dead * 2 > len(heap):
            heap[:] = [live for live in heap if live[2] is not None]
            heapq.heapify(heap)
            self._dead = 0

    def _push(self, entry: Entry) -> None:
        heapq.heappush(self._heap, entry)
        due = entry[0]
        if self._sleep is not None and due < self._sleep.deadline:
            self._sleep.deadline = due

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        heap = self._heap  # compaction keeps this list object
        while True:
            with trio.CancelScope(deadline=heap[0][0] if heap else math.inf) as scope:
                self._sleep = scope
                await trio.sleep_forever()
            self._sleep = None
            now = trio.current_time()
            while heap and heap[0][0] <= now:
                entry = heapq.heappop(heap)
                call: Watched | None = entry[2]
                if call is None:
                    self._dead -= 1
                    continue
                due = call.idle_check(now)
                if due is None:
                    entry[2] = None  # popped: a later forget() has nothing to clear
                    self.firings += 1
                else:
                    # The same entry goes back: the call's reference to it stays valid.
                    self._seq += 1
                    entry[0] = due
                    entry[1] = self._seq
                    self._push(entry)
            entry = []
            call = None  # this frame sleeps next: it must not keep the last call alive
