"""Strategies: which of a tier's available deployments a call goes to. No I/O.

A strategy is any object with ``choose(candidates, rng) -> index``: given the
deployments of one tier that could take the call now (never empty; in
declaration order) and the router's random generator, it returns the index
of the one to use. The router applies tiers first (a later tier only when
no deployment of an earlier one is available) and budgets and cooldowns
before asking, so a strategy only ranks. An application registers its own
by name (``rt.register_groups(..., strategies={"mine": Mine()})``).

With shared state the router asks repeatedly to rank a tier (the Redis
script then takes the first of that order that has room), so a strategy
must not assume one call per dispatch.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Protocol

import attrs

from ._state import DeploymentState

__all__ = [
    "Strategy",
    "Ordered",
    "Weighted",
    "FewestInFlight",
    "LowestLatency",
    "MostHeadroom",
    "builtin_strategies",
]


class Strategy(Protocol):
    """Chooses among the available deployments of one tier (see the module docstring)."""

    def choose(self, candidates: Sequence[DeploymentState], rng: random.Random) -> int:
        """The index in ``candidates`` (never empty) of the deployment to dispatch to."""
        ...


@attrs.frozen
class Ordered:
    """The first available deployment, in declaration order (tiers are the fallbacks)."""

    def choose(self, candidates: Sequence[DeploymentState], rng: random.Random) -> int:
        return 0


@attrs.frozen
class Weighted:
    """A random deployment, each in proportion to its ``weight`` (seed the rng to replay)."""

    def choose(self, candidates: Sequence[DeploymentState], rng: random.Random) -> int:
        if len(candidates) == 1:
            return 0
        total = 0.0
        for candidate in candidates:
            total += candidate.weight
        point = rng.random() * total
        index = 0
        for candidate in candidates:
            point -= candidate.weight
            if point < 0:
                return index
            index += 1
        return index - 1


@attrs.frozen
class FewestInFlight:
    """The deployment with the fewest calls in flight (the first of equals)."""

    def choose(self, candidates: Sequence[DeploymentState], rng: random.Random) -> int:
        best = 0
        fewest = candidates[0].in_flight
        for index in range(1, len(candidates)):
            count = candidates[index].in_flight
            if count < fewest:
                best, fewest = index, count
        return best


@attrs.frozen
class LowestLatency:
    """The lowest average time to first chunk; a share ``explore`` of calls goes elsewhere.

    A deployment never measured counts as the fastest, so each is tried; the
    exploration share is how a deployment that was slow and recovered gets
    measured again (the group's ``explore``, 0.05 by default).
    """

    explore: float = 0.05

    def choose(self, candidates: Sequence[DeploymentState], rng: random.Random) -> int:
        count = len(candidates)
        best = 0
        fastest = candidates[0].latency
        for index in range(1, count):
            latency = candidates[index].latency
            if fastest is None:
                break
            if latency is None or latency < fastest:
                best, fastest = index, latency
        if count > 1 and fastest is not None and rng.random() < self.explore:
            other = rng.randrange(count - 1)
            return other if other < best else other + 1
        return best


@attrs.frozen
class MostHeadroom:
    """The deployment with the largest share of its rpm, tpm and in-flight limits left."""

    def choose(self, candidates: Sequence[DeploymentState], rng: random.Random) -> int:
        best = 0
        most = candidates[0].headroom
        for index in range(1, len(candidates)):
            room = candidates[index].headroom
            if room > most:
                best, most = index, room
        return best


def builtin_strategies(explore: float) -> Mapping[str, Strategy]:
    """The built-in strategies by name (``explore``: the lowest-latency share)."""
    return {
        "ordered": Ordered(),
        "weighted": Weighted(),
        "fewest-in-flight": FewestInFlight(),
        "lowest-latency": LowestLatency(explore),
        "most-headroom": MostHeadroom(),
    }
