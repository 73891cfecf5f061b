"""One idle-watchdog actor for all calls of a runtime.

A call records the (trio clock) time of its last chunk with a plain store;
the watchdog keeps a heap of due times and sleeps until the earliest. When
an entry comes due it re-reads the call's true due time: expired calls are
told so, the others go back on the heap. So a chunk costs one float store,
not a deadline update, and the runtime has one timer task, not one per call.
"""

from __future__ import annotations

import heapq
import math
from typing import Protocol

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

    def watch_expired(self) -> None: ...


@attrs.define(eq=False)
class Watchdog:
    _heap: list[tuple[float, int, Watched]] = attrs.field(factory=list, init=False)
    _seq: int = attrs.field(default=0, init=False)
    _sleep: trio.CancelScope | None = attrs.field(default=None, init=False)
    _done_entries: int = attrs.field(default=0, init=False)

    def watch(self, call: Watched) -> None:
        """Start watching ``call`` from its current ``watch_last``."""
        self._push(call.watch_last + call.idle_timeout, call)

    def forget(self) -> None:
        """Note that a watched call finished; compacts the heap when finished entries pile up."""
        self._done_entries += 1
        if self._done_entries > 256 and self._done_entries * 2 > len(self._heap):
            self._heap = [entry for entry in self._heap if not entry[2].watch_done]
            heapq.heapify(self._heap)
            self._done_entries = 0

    def _push(self, due: float, call: Watched) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (due, self._seq, call))
        if self._sleep is not None and due < self._sleep.deadline:
            self._sleep.deadline = due

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            with trio.CancelScope(deadline=self._heap[0][0] if self._heap else math.inf) as scope:
                self._sleep = scope
                await trio.sleep_forever()
            self._sleep = None
            heap = self._heap
            now = trio.current_time()
            while heap and heap[0][0] <= now:
                _, _, call = heapq.heappop(heap)
                if call.watch_done:
                    continue
                due = (now if call.watch_paused else call.watch_last) + call.idle_timeout
                if due <= now:
                    call.watch_expired()
                else:
                    self._seq += 1
                    heapq.heappush(heap, (due, self._seq, call))
