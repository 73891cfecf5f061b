"""The metadata budget: token buckets per connection and per peer address. No I/O.

Metadata frames (``list-providers``, ``list-configurable-providers``,
``list-models``, ``resolve-model``, ``discover-models``) cost the gateway
little, but some cost an upstream request carrying the operator's key (a
model list, a discovery). A client that opens several connections must not
multiply its budget, so each frame spends a token of its connection's bucket
*and* one of its address's; either empty refuses the frame (``RATE_LIMITED``).

A peer's bucket outlives its connections (reconnecting must not refill it),
so the buckets of all peers are a bounded map: a full bucket is as good as a
new one and is forgotten first; past `MAX_PEERS` addresses with spent budgets
(a flood from a whole address block) the least recently used are forgotten.
"""

from __future__ import annotations

from typing import Final

import attrs

from ._protocol import Limits, TokenBucket

__all__ = ["MAX_PEERS", "MetadataBudget", "PeerBuckets"]

#: The most peer addresses whose metadata buckets are remembered.
MAX_PEERS: Final = 4096


@attrs.define(eq=False)
class PeerBuckets:
    """One token bucket per peer address, at most ``max_peers`` of them."""

    rate: float
    burst: int
    max_peers: int = MAX_PEERS
    #: Least recently used first (re-inserted on every take).
    _buckets: dict[str, TokenBucket] = attrs.field(factory=dict, init=False)

    def __len__(self) -> int:
        return len(self._buckets)

    def take(self, peer: str, now: float) -> bool:
        """Spend a token of ``peer``'s bucket at ``now``; False when none is left."""
        bucket = self._buckets.pop(peer, None)
        if bucket is None:
            if len(self._buckets) >= self.max_peers:
                self._forget(now)
            bucket = TokenBucket(self.rate, self.burst)
        self._buckets[peer] = bucket
        return bucket.take(now)

    def give_back(self, peer: str) -> None:
        """Return the token ``peer`` just spent."""
        bucket = self._buckets.get(peer)
        if bucket is not None:
            bucket.give_back()

    def _forget(self, now: float) -> None:
        for peer in [p for p, b in self._buckets.items() if b.full(now)]:
            del self._buckets[peer]
        while len(self._buckets) >= self.max_peers:
            del self._buckets[next(iter(self._buckets))]


@attrs.define(eq=False)
class MetadataBudget:
    """One connection's metadata budget: its own bucket, and its address's in ``peers``."""

    limits: Limits
    peer: str
    peers: PeerBuckets
    _own: TokenBucket = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._own = TokenBucket(self.limits.metadata_per_second, self.limits.metadata_burst)

    def take(self, now: float) -> str | None:
        """Spend a token of both buckets at ``now``; else why not (nothing is spent then)."""
        limits = self.limits
        if not self._own.take(now):
            return (
                f"more than {limits.metadata_per_second:g} metadata requests per second "
                f"(burst {limits.metadata_burst}) on this connection"
            )
        if not self.peers.take(self.peer, now):
            self._own.give_back()
            return (
                f"more than {limits.metadata_per_peer_per_second:g} metadata requests per "
                f"second (burst {limits.metadata_per_peer_burst}) from this address"
            )
        return None
