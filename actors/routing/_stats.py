"""Routing statistics added up over processes (``llmrt serve --workers``). No I/O.

The section itself, `RoutingStatistics`, is ``LlmRuntime.statistics().routing``
in the one statistics tree (``llmrt.actors._statistics``); the workers' sum
(``llmrt.actors.app.workers._sum``) adds the sections with `merge_routing`
and keeps a dead worker's with `retired_routing`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import msgspec

from .._statistics import (
    DeploymentStatistics,
    GroupStatistics,
    RoutingStatistics,
    SharedStateStatistics,
)

__all__ = ["merge_routing", "retired_routing"]


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
