"""Model lists kept per route for a while, with one fetch in flight per route.

An adapter's ``list_models`` usually costs an upstream request carrying the
operator's key (``GET /models``). A server that answers many clients (the
gateway) asks `LlmRuntime.list_models` with a ``max_age``: a list fetched at
most that long ago is answered again, and asks that arrive while a fetch is
in flight wait for that fetch instead of starting their own (single flight),
so however many clients ask at once, one request reaches the upstream.

An entry belongs to the registration that produced it: a route replaced by
another registration never answers with the old adapter's list. Failures are
not kept: the asks that waited for the failed fetch get its error, the next
ask fetches again. A fetch runs in the task of the ask that started it; when
that task is cancelled (its client left), one of the waiting asks fetches
instead, so an abandoned ask costs the others nothing but the restart.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import attrs
import trio

from llmrt._errors import LlmError
from llmrt._request import ModelInfo

__all__ = ["ModelListCache"]

Models = tuple[ModelInfo, ...]


@attrs.define(eq=False)
class _Flight:
    """One fetch in flight; its askers wait on ``done``."""

    done: trio.Event = attrs.field(factory=trio.Event)
    models: Models | None = None
    error: Exception | None = None


@attrs.define(eq=False)
class _Entry:
    #: The registration the list came from (compared by identity).
    owner: object
    models: Models | None = None
    #: When ``models`` was fetched, on trio's clock.
    at: float = 0.0
    flight: _Flight | None = None


@attrs.define(eq=False)
class ModelListCache:
    """The model lists of one runtime's routes, by provider name. Only its trio run touches it."""

    _entries: dict[str, _Entry] = attrs.field(factory=dict, init=False)
    #: Upstream fetches started (what the cache saves is asks minus this).
    fetches: int = attrs.field(default=0, init=False)

    def __len__(self) -> int:
        return len(self._entries)

    async def get(
        self, provider: str, owner: object, fetch: Callable[[], Awaitable[Models]], max_age: float
    ) -> Models:
        """``provider``'s list: one kept at most ``max_age``, the fetch in flight, or ``fetch()``.

        ``owner`` is the registration now serving ``provider``. Raises what
        ``fetch`` raised (to every ask that waited for it). A checkpoint.
        """
        while True:
            now = trio.current_time()
            entry = self._entries.get(provider)
            if entry is None or entry.owner is not owner:
                self._prune(now, max_age)
                entry = self._entries[provider] = _Entry(owner)
            if entry.models is not None and now - entry.at <= max_age:
                await trio.lowlevel.checkpoint()
                return entry.models
            flight = entry.flight
            if flight is None:
                return await self._fetch(provider, entry, fetch)
            await flight.done.wait()
            if flight.models is not None:
                return flight.models
            if isinstance(flight.error, LlmError):
                # A fresh exception per ask: one instance raised in many tasks
                # would collect all their tracebacks.
                raise LlmError.from_failure(flight.error.failure) from None
            if flight.error is not None:
                raise flight.error
            # The fetching ask was cancelled: fetch again (or wait for whoever does).

    async def _fetch(
        self, provider: str, entry: _Entry, fetch: Callable[[], Awaitable[Models]]
    ) -> Models:
        flight = entry.flight = _Flight()
        self.fetches += 1
        try:
            models = await fetch()
        except Exception as exc:
            flight.error = exc
            raise
        else:
            flight.models = models
            if self._entries.get(provider) is entry:
                entry.models, entry.at = models, trio.current_time()
            return models
        finally:
            if entry.flight is flight:
                entry.flight = None
            flight.done.set()

    def _prune(self, now: float, max_age: float) -> None:
        """Forget lists older than ``max_age`` with no fetch in flight (routes come and go)."""
        stale = [
            name
            for name, entry in self._entries.items()
            if entry.flight is None and (entry.models is None or now - entry.at > max_age)
        ]
        for name in stale:
            del self._entries[name]
