"""`HeldSecrets`: what a process holds beyond its adapters' keys, for the one redaction point.

Every failure an adapter reports, raised or in an ``error``/``aborted``
finish, is redacted once, where the call task receives it (`llmrt.actors._call`):
by the serving adapter's own `Redactor` (its keys), then by this one, which
removes by value the secrets components of the process registered for as
long as they hold them (a gateway's bearer token while it serves). So a
gateway's token never reaches an in-process consumer, a middleware or a
frame, whatever adapter echoed it, and nothing downstream redacts again.

A runtime's value (`RuntimeCore.secrets`), not module state: one runtime's
gateway does not affect another runtime of the same process.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import attrs

from llmrt._redact import Redactor

__all__ = ["HeldSecrets"]


@attrs.define(eq=False, repr=False)
class HeldSecrets:
    """The secret values held now, counted (two holders of one value hold it twice)."""

    _held: Counter[str] = attrs.field(factory=Counter, init=False)
    #: Removes every held secret by value, then credential-looking phrases.
    redactor: Redactor = attrs.field(factory=Redactor, init=False)

    def __repr__(self) -> str:
        return f"HeldSecrets(<{sum(self._held.values())} held>)"

    @contextmanager
    def holding(self, secrets: Iterable[str | None]) -> Iterator[None]:
        """Redact ``secrets`` (empty and None skipped) from every call failure inside the block."""
        values = [value for value in secrets if value]
        self._held.update(values)
        self._rebuild()
        try:
            yield
        finally:
            self._held.subtract(values)
            self._held = +self._held  # drop the values no one holds any more
            self._rebuild()

    def _rebuild(self) -> None:
        # A new value, not a mutation: a call that already took the redactor keeps a whole one.
        self.redactor = Redactor(self._held)
