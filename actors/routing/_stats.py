"""Routing statistics: one shape in process, on the ``stats`` frame and summed over workers. No I/O.

`RoutingStatistics` is `LlmRuntime.statistics().routing` and the ``routing``
member of the gateway's statistics value (camelCase on the wire);
`merge_routing` sums several processes' (``llmrt serve --workers``). Times
are seconds; ``coolingFor`` is what was left of a cooldown when the
snapshot was taken.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import msgspec

__all__ = [
    "DeploymentStatistics",
    "GroupStatistics",
    "RoutingStatistics",
    "SharedStateStatistics",
    "merge_routing",
    "retired_routing",
]


class _Value(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    pass


class DeploymentStatistics(_Value, frozen=True):
    group: str
    route: str
    model: str
    tier: int
    weight: float
    #: Attempts of this process (summed: of every process) on the deployment now.
    in_flight: int
    #: True when the figures below came from Redis (every process's), not this process's.
    shared: bool
    cooling: bool
    #: Seconds of cooldown left (0 when not cooling).
    cooling_for: float
    #: Times the deployment was cooled (by this process's calls).
    cooldowns: int
    #: Attempts dispatched here, and calls it served (its content reached the consumer).
    attempts: int
    served: int
    #: Attempts that moved on to another deployment, by the code that ended them.
    failovers: dict[str, int]
    #: EWMA of the time to first chunk (None: not measured yet).
    latency: float | None
    rpm_used: int
    tpm_used: int
    rpm: int | None = None
    tpm: int | None = None
    max_in_flight: int | None = None

    @property
    def id(self) -> str:
        return f"{self.route}/{self.model}"


class GroupStatistics(_Value, frozen=True):
    name: str
    strategy: str
    #: Calls made to the group.
    calls: int
    #: Calls waiting for a deployment now.
    waiting: int
    #: Calls the router ended ``RATE_LIMIT`` (nothing available within the wait).
    rate_limited: int
    #: Calls moved to the ``context_fallback`` group.
    context_fallbacks: int
    deployments: tuple[DeploymentStatistics, ...]


class SharedStateStatistics(_Value, frozen=True):
    """Redis as the routing state's home: how many processes use it now, how it failed."""

    #: Processes whose calls use Redis now (0 or 1 per process; summed over workers).
    shared: int
    #: Processes configured with Redis.
    processes: int
    #: Round trips that failed or timed out.
    errors: int
    #: Times a process went from Redis to local state.
    degradations: int
    round_trips: int


class RoutingStatistics(_Value, frozen=True):
    groups: tuple[GroupStatistics, ...] = ()
    #: None: routing state is local (no ``[routing] redis``).
    shared_state: SharedStateStatistics | None = None


def _merge_deployment(parts: Sequence[DeploymentStatistics]) -> DeploymentStatistics:
    first = parts[0]
    failovers: Counter[str] = Counter()
    for part in parts:
        failovers.update(part.failovers)
    shared = any(p.shared for p in parts)
    measured = [(p.latency, p.served or 1) for p in parts if p.latency is not None]
    latency = (
        sum(value * weight for value, weight in measured) / sum(w for _, w in measured)
        if measured
        else None
    )
    # Shared figures are every process's already: the largest is the newest, not a sum.
    used = max if shared else sum
    return msgspec.structs.replace(
        first,
        in_flight=sum(p.in_flight for p in parts),
        shared=shared,
        cooling=any(p.cooling for p in parts),
        cooling_for=max(p.cooling_for for p in parts),
        cooldowns=sum(p.cooldowns for p in parts),
        attempts=sum(p.attempts for p in parts),
        served=sum(p.served for p in parts),
        failovers=dict(failovers),
        latency=latency,
        rpm_used=used(p.rpm_used for p in parts),
        tpm_used=used(p.tpm_used for p in parts),
    )


def merge_routing(values: Sequence[RoutingStatistics | None]) -> RoutingStatistics | None:
    """Several processes' routing statistics as one (None when none has any)."""
    present = [value for value in values if value is not None]
    if not present:
        return None
    groups: dict[str, list[GroupStatistics]] = {}
    for value in present:
        for group in value.groups:
            groups.setdefault(group.name, []).append(group)
    merged = []
    for parts in groups.values():
        by_id: dict[str, list[DeploymentStatistics]] = {}
        for part in parts:
            for deployment in part.deployments:
                by_id.setdefault(deployment.id, []).append(deployment)
        merged.append(
            msgspec.structs.replace(
                parts[0],
                calls=sum(p.calls for p in parts),
                waiting=sum(p.waiting for p in parts),
                rate_limited=sum(p.rate_limited for p in parts),
                context_fallbacks=sum(p.context_fallbacks for p in parts),
                deployments=tuple(_merge_deployment(ds) for ds in by_id.values()),
            )
        )
    states = [v.shared_state for v in present if v.shared_state is not None]
    shared = None
    if states:
        shared = SharedStateStatistics(
            shared=sum(s.shared for s in states),
            processes=sum(s.processes for s in states),
            errors=sum(s.errors for s in states),
            degradations=sum(s.degradations for s in states),
            round_trips=sum(s.round_trips for s in states),
        )
    return RoutingStatistics(groups=tuple(merged), shared_state=shared)


def retired_routing(value: RoutingStatistics | None) -> RoutingStatistics | None:
    """A dead worker's routing figures as they stay in the sum: counters kept, gauges at zero."""
    if value is None:
        return None
    groups = tuple(
        msgspec.structs.replace(
            group,
            waiting=0,
            deployments=tuple(
                msgspec.structs.replace(
                    d, in_flight=0, cooling=False, cooling_for=0.0, rpm_used=0, tpm_used=0
                )
                for d in group.deployments
            ),
        )
        for group in value.groups
    )
    shared = value.shared_state
    if shared is not None:
        shared = msgspec.structs.replace(shared, shared=0, processes=0)
    return RoutingStatistics(groups=groups, shared_state=shared)
