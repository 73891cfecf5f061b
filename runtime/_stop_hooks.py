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

The runtime finds the call through a context variable its call task sets
in its own context, once, before the adapter runs (`enter_call`): no
table of running calls anywhere, and nothing to remove when the task ends,
since its context ends with it. A task the adapter starts from inside its
stream inherits the variable, so a closer registered there is the call's too.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from typing import Protocol

__all__ = ["close_on_stop"]


class _Stoppable(Protocol):
    def _close_on_stop(self, close: Callable[[], None]) -> None: ...


#: The call the current task runs: set by the runtime in each call task's own context.
CURRENT_CALL: contextvars.ContextVar[_Stoppable] = contextvars.ContextVar("llmrt_call")


def close_on_stop(close: Callable[[], None]) -> None:
    """Call ``close`` the moment the current call is stopped, if it is.

    ``close`` must be synchronous, idempotent and cheap, and should not
    raise (an exception is logged and ignored). It is dropped when the call
    ends; a call that ends normally never calls it. Outside a call task of
    the runtime (an adapter iterated directly) this does nothing: the
    adapter's own ``finally`` blocks are then the only cleanup, as always.
    """
    call = CURRENT_CALL.get(None)
    if call is not None:
        call._close_on_stop(close)


def enter_call(call: _Stoppable) -> None:
    """The runtime's half, in the call task: this task (and what it starts) runs ``call``."""
    CURRENT_CALL.set(call)
