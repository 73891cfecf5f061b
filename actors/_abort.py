"""`AbortController` / `AbortSignal`: abort one or many calls from anywhere."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

import attrs
import trio

__all__ = ["AbortController", "AbortSignal"]

log = logging.getLogger("llmrt.actors")


class _Event(Protocol):
    def set(self) -> None: ...
    async def wait(self) -> object: ...


@attrs.define(eq=False)
class SignalBase:
    """An abort signal's state and listeners, whatever event library its waiters use.

    `AbortSignal` (trio) and `llmrt.aio.AbortSignal` (asyncio) differ only in
    `_new_event`.
    """

    _reason: str | None = attrs.field(default=None, init=False)
    _aborted: bool = attrs.field(default=False, init=False)
    _listeners: dict[int, Callable[[str | None], None]] = attrs.field(factory=dict, init=False)
    _event: _Event | None = attrs.field(default=None, init=False)
    _next_key: int = attrs.field(default=0, init=False)

    @property
    def aborted(self) -> bool:
        return self._aborted

    @property
    def reason(self) -> str | None:
        return self._reason

    def _new_event(self) -> _Event:
        raise NotImplementedError

    async def wait(self) -> None:
        """Wait until the signal is aborted."""
        if self._event is None:
            self._event = self._new_event()
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
class AbortSignal(SignalBase):
    """Read side of an `AbortController`; pass it as ``signal=`` to `LlmRuntime.stream`.

    One signal may be shared by many calls: aborting it aborts all of them.
    `wait` blocks until the signal is aborted (a checkpoint).
    """

    def _new_event(self) -> trio.Event:
        return trio.Event()


@attrs.define(eq=False)
class AbortController:
    """Owns an `AbortSignal`; `abort` aborts every call that was given the signal.

    Synchronous and safe to call from any task of the same trio run, any
    number of times (only the first call counts).
    """

    signal: AbortSignal = attrs.field(factory=AbortSignal, init=False)

    def abort(self, reason: str | None = None) -> None:
        self.signal._fire(reason)
