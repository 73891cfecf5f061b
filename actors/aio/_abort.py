"""`AbortController` / `AbortSignal` for asyncio programs: abort calls from any asyncio task.

The same shape as `llmrt.AbortController`: ``controller.abort(reason)`` is
synchronous, idempotent, and aborts every call given ``signal=controller.signal``,
whichever `llmrt.aio` runtime (and so whichever trio run) each call runs in.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import attrs

__all__ = ["AbortController", "AbortSignal"]

log = logging.getLogger("llmrt.actors")


@attrs.define(eq=False)
class AbortSignal:
    """Read side of an `AbortController`; pass it as ``signal=`` to `llmrt.aio` calls."""

    _reason: str | None = attrs.field(default=None, init=False)
    _aborted: bool = attrs.field(default=False, init=False)
    _listeners: dict[int, Callable[[str | None], None]] = attrs.field(factory=dict, init=False)
    _event: asyncio.Event | None = attrs.field(default=None, init=False)
    _next_key: int = attrs.field(default=0, init=False)

    @property
    def aborted(self) -> bool:
        return self._aborted

    @property
    def reason(self) -> str | None:
        return self._reason

    async def wait(self) -> None:
        """Wait until the signal is aborted."""
        if self._event is None:
            self._event = asyncio.Event()
            if self._aborted:
                self._event.set()
        await self._event.wait()

    def _subscribe(self, listener: Callable[[str | None], None]) -> int:
        key = self._next_key
        self._next_key += 1
        self._listeners[key] = listener
        return key

    def _unsubscribe(self, key: int) -> None:
        self._listeners.pop(key, None)

    def _fire(self, reason: str | None) -> None:
        if self._aborted:
            return
        self._aborted = True
        self._reason = reason
        if self._event is not None:
            self._event.set()
        listeners, self._listeners = self._listeners, {}
        for listener in listeners.values():
            try:
                listener(reason)
            except Exception:  # one failing listener must not spare the others
                log.exception("an abort listener failed")


@attrs.define(eq=False)
class AbortController:
    """Owns an `AbortSignal`; `abort` aborts every call that was given the signal."""

    signal: AbortSignal = attrs.field(factory=AbortSignal, init=False)

    def abort(self, reason: str | None = None) -> None:
        self.signal._fire(reason)
