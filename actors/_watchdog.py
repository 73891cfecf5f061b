"""One idle-watchdog actor for all calls of a runtime.

A call records the (trio clock) time of its last chunk with a plain store;
the watchdog keeps a heap of due times and sleeps until the earliest. When
an entry comes due it re-reads the call's true due time: expired calls are
told so, the others go back on the heap. So a chunk costs one float store,
not a deadline update, and the runtime has one timer task, not one per call.

A heap entry is ``[due, seq, call]``; the call keeps its current entry in
``watch_entry``. Re-watching or forgetting a call clears the call out of its
old entry, so a finished call (and the request it holds) is freed at once
instead of waiting on the heap until its due time; the emptied entries are
dropped when they come due or when they make up most of the heap.
"""

from __future__ import annotations

import heapq
import math
from typing import Any, Protocol

import attrs
import trio

__all__ = ["Watchdog", "Watched"]


class Watched(Protocol):
    #: trio time of the last progress (start, or last chunk from the adapter).
    watch_last: float
    #: True while the call waits on its consumer (idle time does not count).
    watch_paused: bool
    #: True once the call no longer needs watching.
    watch_done: bool
    idle_timeout: float
    #: The call's live heap entry, kept by the watchdog (None when not watched).
    watch_entry: list[Any] | None

    def watch_expired(self) -> None: ...


#: Emptied heap entries are dropped in one pass once there are more than this
#: many and they make up over half of the heap.
_COMPACT_AFTER = 256


@attrs.define(eq=False)
class Watchdog:
    _heap: list[list[Any]] = attrs.field(factory=list, init=False)
    _seq: int = attrs.field(default=0, init=False)
    _sleep: trio.CancelScope | None = attrs.field(default=None, init=False)
    _dead: int = attrs.field(default=0, init=False)

    def watch(self, call: Watched) -> None:
        """Watch ``call`` from its current ``watch_last`` (again, if it was watched)."""
        self._clear(call)
        self._push(call.watch_last + call.idle_timeout, call)

    def forget(self, call: Watched) -> None:
        """Stop watching ``call`` (it finished); the heap no longer refers to it."""
        self._clear(call)

    def _clear(self, call: Watched) -> None:
        entry = call.watch_entry
        if entry is None:
            return
        entry[2] = None
        call.watch_entry = None
        self._dead += 1
        heap = self._heap
        if self._dead > _COMPACT_AFTER and self._dead * 2 > len(heap):
            heap[:] = [live for live in heap if live[2] is not None]
            heapq.heapify(heap)
            self._dead = 0

    def _push(self, due: float, call: Watched) -> None:
        self._seq += 1
        entry = [due, self._seq, call]
        call.watch_entry = entry
        heapq.heappush(self._heap, entry)
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
                call: Watched | None = heapq.heappop(heap)[2]
                if call is None:
                    self._dead -= 1
                    continue
                call.watch_entry = None
                due = (now if call.watch_paused else call.watch_last) + call.idle_timeout
                if due <= now:
                    call.watch_expired()
                else:
                    self._push(due, call)
            call = None  # this frame sleeps next: it must not keep the last call alive
