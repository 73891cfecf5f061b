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
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable

__all__ = ["close_on_stop"]

Registrar = Callable[[Callable[[], None]], None]

#: Set by the runtime in each call task: where `close_on_stop` registers.
_REGISTRAR: contextvars.ContextVar[Registrar | None] = contextvars.ContextVar(
    "llmrt_close_on_stop", default=None
)


def close_on_stop(close: Callable[[], None]) -> None:
    """Call ``close`` the moment the current call is stopped, if it is.

    ``close`` must be synchronous, idempotent and cheap, and should not
    raise (an exception is logged and ignored). It is dropped when the call
    ends; a call that ends normally never calls it. Outside a call run by
    the runtime (an adapter iterated directly) this does nothing: the
    adapter's own ``finally`` blocks are then the only cleanup, as always.
    """
    registrar = _REGISTRAR.get()
    if registrar is not None:
        registrar(close)


def set_registrar(registrar: Registrar) -> None:
    """The runtime's half: route `close_on_stop` in this context to ``registrar``."""
    _REGISTRAR.set(registrar)
