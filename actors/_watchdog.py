"""One idle-watchdog actor for all calls of a runtime.

A call records the (trio clock) time of its last chunk with a plain store;
the watchdog is a `llmrt._deadlines.DeadlineHeap` (the lazy heap the
transport's read deadlines use too): it sleeps until the earliest due time
and then re-reads the call's true due time: expired calls are told so, the
others go back on the heap. So a chunk costs one float store, not a deadline
update, and the runtime has one timer task, not one per call.

The call holds the entry `watch` returned and hands it back to re-watch or
`forget`. Forgetting clears the call out of its entry, so a finished call
(and the request it holds) is freed at once instead of waiting on the heap
until its due time. The watchdog reads nothing of a call but one method,
`Watched.idle_check`: the call keeps its own bookkeeping private.
"""

from __future__ import annotations

from typing import Any, Protocol

import attrs

from llmrt._deadlines import DeadlineHeap, Entry

__all__ = ["Entry", "Watchdog", "Watched"]


class Watched(Protocol):
    def idle_check(self, now: float) -> float | None:
        """When the call is next due, or None when it timed out at ``now`` (it then stopped)."""
        ...


@attrs.define(eq=False)
class Watchdog(DeadlineHeap):
    """The runtime's idle watchdog: a `DeadlineHeap` of calls, counting its firings."""

    #: Calls the watchdog stopped for idling, since the runtime opened.
    firings: int = attrs.field(default=0, init=False)
    _check: Any = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        self._check = self._idle_check  # one bound method for every entry

    def watch(self, call: Watched, due: float, old: Entry | None) -> Entry:
        """Watch ``call`` until ``due`` (replacing its ``old`` entry); the entry to hand back."""
        if old is not None:
            self.forget(old)
        return self.push(call, due, self._check)

    def _idle_check(self, call: Watched, now: float) -> float | None:
        due = call.idle_check(now)
        if due is None:
            self.firings += 1
        return due
