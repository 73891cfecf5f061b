"""A windowed counter: requests or tokens in the last ``window`` seconds, in buckets. No I/O.

The window is cut into `BUCKETS` buckets; a bucket counts as long as any part
of it lies within the window (so ``BUCKETS + 1`` of them count at once), so
the count is never below the true sliding count: a limit checked against it
is never exceeded in any window of that length (at the price of refusing up
to one bucket's worth early). Advancing
clears expired buckets, so reading and adding cost O(1) amortized. Redis
keeps the same buckets (`_scripts.py`), so both stores count alike.
"""

from __future__ import annotations

import math

import attrs

__all__ = ["BUCKETS", "Window"]

#: Buckets per window: a tenth of the window is the refusal's granularity.
BUCKETS = 10
#: Buckets that count at once: the window's, and the one its start lies in.
_SLOTS = BUCKETS + 1


@attrs.define(eq=False, slots=True)
class Window:
    """Counts over the last ``length`` seconds of trio time (see the module docstring)."""

    length: float
    width: float = attrs.field(init=False)
    total: int = attrs.field(default=0, init=False)
    _counts: list[int] = attrs.field(init=False)
    _cur: int = attrs.field(default=-(2**62), init=False)

    def __attrs_post_init__(self) -> None:
        self.width = self.length / BUCKETS
        self._counts = [0] * _SLOTS

    def _advance(self, now: float) -> int:
        index = int(now // self.width)
        cur = self._cur
        if index > cur:
            counts = self._counts
            if index - cur >= _SLOTS:
                for slot in range(_SLOTS):
                    counts[slot] = 0
                self.total = 0
            else:
                for i in range(cur + 1, index + 1):
                    slot = i % _SLOTS
                    self.total -= counts[slot]
                    counts[slot] = 0
            self._cur = index
        return self._cur

    def used(self, now: float) -> int:
        """The count within the window ending ``now``."""
        self._advance(now)
        return self.total

    def add(self, now: float, amount: int) -> int:
        """Count ``amount`` now; returns the bucket it went to (for `adjust`)."""
        index = int(now // self.width)
        if index != self._cur:
            index = self._advance(now)
        self._counts[index % _SLOTS] += amount
        self.total += amount
        return index

    def adjust(self, bucket: int, delta: int) -> None:
        """Correct what `add` put in ``bucket`` by ``delta`` (not below zero), if still counted."""
        if bucket < self._cur - BUCKETS or bucket > self._cur:
            return  # expired already: nothing of it counts any more
        slot = bucket % _SLOTS
        delta = max(delta, -self._counts[slot])
        self._counts[slot] += delta
        self.total += delta

    def clear(self) -> None:
        for slot in range(_SLOTS):
            self._counts[slot] = 0
        self.total = 0

    def room_at(self, now: float, need: int, limit: int) -> float:
        """The earliest time at which ``need`` more fits under ``limit`` (``now`` if it does).

        Infinity when it never fits (``need`` alone is over ``limit``).
        """
        if int(now // self.width) == self._cur and self.total + need <= limit:
            return now  # the common case, without advancing
        if need > limit:
            return math.inf
        self._advance(now)
        excess = self.total + need - limit
        if excess <= 0:
            return now
        cur = self._cur
        for age in range(BUCKETS, -1, -1):
            bucket = cur - age
            excess -= self._counts[bucket % _SLOTS]
            if excess <= 0:
                # Bucket ``bucket`` stops counting once the window starts after its end.
                return (bucket + _SLOTS) * self.width
        return (cur + _SLOTS) * self.width
