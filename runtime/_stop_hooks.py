"""`close_on_stop`: let a call close an adapter's resource the moment it is stopped.

A stopped call (``abort()``, the idle watchdog, the consumer leaving early,
shutdown) cancels its task; the adapter's ``finally`` blocks then close what
it opened, but only once the scheduler runs that task again, which with
thousands of streams is a whole pass of the run queue later. An adapter
that holds something whose closing is synchronous and cannot fail (a
socket) registers it here, and the runtime calls it at the stop itself,
before the task is even rescheduled: the provider sees its connection close
at once. The adapter's own cleanup still runs afterwards, so a closer must
be idempotent.

The runtime finds the call by its task (a dict entry per running call task,
no object per call): a context variable set per call cost each call a
context mapping and a bound method for its whole life, which the collector
scanned at 10,000 calls.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import trio

__all__ = ["close_on_stop"]


class _Stoppable(Protocol):
    def _close_on_stop(self, close: Callable[[], None]) -> None: ...


#: The runtime's running call tasks: task -> its call.
_CALLS: dict[trio.lowlevel.Task, _Stoppable] = {}


def close_on_stop(close: Callable[[], None]) -> None:
    """Call ``close`` the moment the current call is stopped, if it is.

    ``close`` must be synchronous, idempotent and cheap, and should not
    raise (an exception is logged and ignored). It is dropped when the call
    ends; a call that ends normally never calls it. Outside a call task of
    the runtime (an adapter iterated directly) this does nothing: the
    adapter's own ``finally`` blocks are then the only cleanup, as always.
    """
    call = _CALLS.get(trio.lowlevel.current_task())
    if call is not None:
        call._close_on_stop(close)


def enter_call(task: trio.lowlevel.Task, call: _Stoppable) -> None:
    """The runtime's half: ``task`` runs ``call`` (until `exit_call`)."""
    _CALLS[task] = call


def exit_call(task: trio.lowlevel.Task) -> None:
    _CALLS.pop(task, None)
