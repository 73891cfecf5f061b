"""`AbortController` / `AbortSignal` for asyncio programs: abort calls from any asyncio task.

The same shape as `llmrt.AbortController`: ``controller.abort(reason)`` is
synchronous, idempotent, and aborts every call given ``signal=controller.signal``,
whichever `llmrt.aio` runtime (and so whichever trio run) each call runs in.
"""

from __future__ import annotations

import asyncio

import attrs

from .._abort import SignalBase

__all__ = ["AbortController", "AbortSignal"]


@attrs.define(eq=False)
class AbortSignal(SignalBase):
    """Read side of an `AbortController`; pass it as ``signal=`` to `llmrt.aio` calls.

    `wait` waits on an `asyncio.Event`. Not a `llmrt.AbortSignal`: a trio
    call cannot be given it, nor an `llmrt.aio` call a trio one.
    """

    def _new_event(self) -> asyncio.Event:
        return asyncio.Event()


@attrs.define(eq=False)
class AbortController:
    """Owns an `AbortSignal`; `abort` aborts every call that was given the signal."""

    signal: AbortSignal = attrs.field(factory=AbortSignal, init=False)

    def abort(self, reason: str | None = None) -> None:
        self.signal._fire(reason)
