"""The router: the published groups, each deployment's state, and the decision of a dispatch.

Groups are registered in sets (`GroupsHandle`, like adapter registrations):
each commit validates the whole set, then publishes a new immutable mapping
of `GroupPlan`s, so a call reads the plan once and keeps it; replacing a set
is atomic. State (`DeploymentState`) is kept per (group, deployment id), so
a replace that keeps a deployment keeps its cooldown and counts.

`acquire` is the routing decision: tiers in order, within a tier the
deployments that are not cooling and have room (in flight, rpm, tpm), and
the group's strategy among them. With local state it is synchronous and
allocates one `Ticket`; with Redis (`SharedState`) it is one script round
trip that charges the first deployment with room in the strategy's order.
A call that finds nothing waits in its group's `Turnstile` (FIFO).
"""

from __future__ import annotations

import itertools
import math
import os
import random
from collections.abc import Collection, Mapping, Sequence
from types import MappingProxyType

import attrs
import trio

from .._statistics import (
    DeploymentStatistics,
    GroupStatistics,
    RoutingStatistics,
    SharedStateStatistics,
)
from ._redis import SharedState
from ._spec import Group
from ._state import DeploymentState
from ._strategies import Strategy, builtin_strategies

__all__ = ["GroupPlan", "Router", "Ticket", "Turnstile", "FAILED", "NEUTRAL", "SUCCEEDED"]

#: How an attempt ended, for `Router.release`.
SUCCEEDED, FAILED, NEUTRAL = 0, 1, 2


class Ticket:
    """One dispatch: the deployment charged, and what to settle when the attempt ends."""

    __slots__ = ("bucket", "estimate", "shared", "state", "token")

    def __init__(
        self, state: DeploymentState, bucket: int, estimate: int, token: str, shared: bool
    ) -> None:
        self.state = state
        self.bucket = bucket
        self.estimate = estimate
        self.token = token
        self.shared = shared


@attrs.define(eq=False)
class _Waiter:
    woken: trio.Event = attrs.field(factory=trio.Event)


@attrs.define(eq=False)
class Turnstile:
    """The calls of one group waiting for a deployment, first come first served.

    Only the head tries again; it is woken when an attempt of the group ends
    (room may have freed), and the next waiter when the head leaves.
    """

    _queue: list[_Waiter] = attrs.field(factory=list)

    def __len__(self) -> int:
        return len(self._queue)

    def join(self) -> _Waiter:
        waiter = _Waiter()
        self._queue.append(waiter)
        return waiter

    def is_head(self, waiter: _Waiter) -> bool:
        return bool(self._queue) and self._queue[0] is waiter

    def leave(self, waiter: _Waiter) -> None:
        queue = self._queue
        head = bool(queue) and queue[0] is waiter
        try:
            queue.remove(waiter)
        except ValueError:
            return
        if head and queue:
            queue[0].woken.set()

    def kick(self) -> None:
        """Room may have freed: wake the head."""
        if self._queue:
            self._queue[0].woken.set()

    def kick_all(self) -> None:
        for waiter in self._queue:
            waiter.woken.set()


@attrs.frozen
class GroupPlan:
    """One published group: its spec, strategy, deployments by tier, and where state lives."""

    spec: Group
    strategy: Strategy
    states: tuple[DeploymentState, ...]
    tiers: tuple[tuple[DeploymentState, ...], ...]
    shared: SharedState | None
    turnstile: Turnstile
    counters: _GroupCounters
    #: Draws the strategy's random choices (one generator per registered set).
    rng: random.Random
    #: Some deployment has a ``tpm`` limit: calls estimate their tokens.
    charges_tokens: bool = False
    #: The strategy takes the first available deployment (``ordered``): stop looking there.
    first_available: bool = False


@attrs.define(eq=False, slots=True)
class _GroupCounters:
    calls: int = 0
    rate_limited: int = 0
    context_fallbacks: int = 0


def _tiers(states: Sequence[DeploymentState]) -> tuple[tuple[DeploymentState, ...], ...]:
    levels = sorted({state.spec.tier for state in states})
    return tuple(tuple(s for s in states if s.spec.tier == level) for level in levels)


@attrs.define(eq=False)
class Router:
    """Every registered group of one runtime (see the module docstring)."""

    #: The published plans by group name: replaced whole, never mutated.
    plans: Mapping[str, GroupPlan] = attrs.field(factory=lambda: MappingProxyType({}))
    closing: bool = False
    _states: dict[tuple[str, str], DeploymentState] = attrs.field(factory=dict)
    _turnstiles: dict[str, Turnstile] = attrs.field(factory=dict)
    _counters: dict[str, _GroupCounters] = attrs.field(factory=dict)
    _owners: dict[object, tuple[str, ...]] = attrs.field(factory=dict)
    _shared: dict[object, SharedState] = attrs.field(factory=dict)
    _tokens: itertools.count[int] = attrs.field(factory=itertools.count)
    _pid: str = attrs.field(factory=lambda: f"{os.getpid()}:{random.getrandbits(32):08x}")

    # ---- registrations -----------------------------------------------------------------

    def taken_by_others(self, owner: object) -> set[str]:
        """Group names registered by sets other than ``owner``."""
        return {name for o, names in self._owners.items() if o is not owner for name in names}

    def commit(
        self,
        owner: object,
        groups: Sequence[Group],
        strategies: Mapping[str, Strategy],
        shared: SharedState | None,
        rng: random.Random,
    ) -> None:
        """Publish ``owner``'s groups (checked by the caller), replacing its previous set.

        ``strategies``: the application's own, by name; the built-ins are made per group.
        """
        plans = {name: plan for name, plan in self.plans.items() if name not in self.owned(owner)}
        for group in groups:
            states = []
            for spec in group.deployments:
                key = (group.name, spec.id)
                state = self._states.get(key)
                if state is None:
                    state = self._states[key] = DeploymentState.new(group, spec)
                else:
                    state.adopt(group, spec)
                states.append(state)
            plans[group.name] = GroupPlan(
                spec=group,
                strategy=strategies.get(group.strategy)
                or builtin_strategies(group.explore)[group.strategy],
                states=tuple(states),
                tiers=_tiers(states),
                shared=shared,
                turnstile=self._turnstiles.setdefault(group.name, Turnstile()),
                counters=self._counters.setdefault(group.name, _GroupCounters()),
                rng=rng,
                charges_tokens=any(spec.tpm is not None for spec in group.deployments),
                first_available=group.strategy == "ordered" and group.strategy not in strategies,
            )
        self._owners[owner] = tuple(group.name for group in groups)
        if shared is not None:
            self._shared[owner] = shared
        self.plans = MappingProxyType(plans)
        self._forget_unused()

    def withdraw(self, owner: object) -> None:
        """Unpublish ``owner``'s groups (its waiting calls are woken to find them gone)."""
        names = self._owners.pop(owner, ())
        self._shared.pop(owner, None)
        self.plans = MappingProxyType({n: p for n, p in self.plans.items() if n not in names})
        for name in names:
            turnstile = self._turnstiles.get(name)
            if turnstile is not None:
                turnstile.kick_all()
        self._forget_unused()

    def owned(self, owner: object) -> tuple[str, ...]:
        return self._owners.get(owner, ())

    def _forget_unused(self) -> None:
        live = {(p.spec.name, s.id) for p in self.plans.values() for s in p.states}
        for key in [k for k in self._states if k not in live]:
            del self._states[key]

    def close(self) -> None:
        """The runtime is shutting down: every waiting call wakes (and ends ``ABORTED``)."""
        self.closing = True
        for turnstile in self._turnstiles.values():
            turnstile.kick_all()

    # ---- the decision ------------------------------------------------------------------

    def token(self) -> str:
        return f"{self._pid}:{next(self._tokens)}"

    def acquire_local(
        self, plan: GroupPlan, tried: Collection[str], tokens: int, now: float
    ) -> Ticket | float:
        """Charge a deployment of ``plan`` not in ``tried``, or say when one may have room.

        Returns a `Ticket`, or the earliest trio time at which an untried
        deployment may have room (inf: only an ending call can make room, or
        nothing is left to try).
        """
        earliest = math.inf
        first = plan.first_available
        for tier in plan.tiers:
            available = []
            for state in tier:
                if tried and state.key in tried:
                    continue
                # Inline for the common case (no limits, not cooling): this runs per call.
                at = state.available_at(now, tokens) if state.limited else state.cool_until
                if at <= now:
                    available.append(state)
                    if first:
                        break  # the strategy takes the first anyway
                elif at < earliest:
                    earliest = at
            if available:
                if len(available) > 1:
                    state = available[plan.strategy.choose(available, plan.rng)]
                else:
                    state = available[0]
                bucket = state.reserve(now, tokens)
                return Ticket(state, bucket, tokens, "", False)
        return earliest

    def order(self, plan: GroupPlan, tried: Collection[str]) -> list[DeploymentState]:
        """The untried deployments, tier by tier, each tier in the strategy's order."""
        out: list[DeploymentState] = []
        for tier in plan.tiers:
            left = [state for state in tier if state.key not in tried]
            while left:
                pick = plan.strategy.choose(left, plan.rng) if len(left) > 1 else 0
                out.append(left.pop(pick))
        return out

    async def acquire(self, plan: GroupPlan, tried: Collection[str], tokens: int) -> Ticket | float:
        """`acquire_local`, or through Redis when the plan's state is shared (one round trip).

        Redis away: the local decision, never a failure.
        """
        shared = plan.shared
        if shared is not None and shared.shared:
            candidates = self.order(plan, tried)
            if not candidates:
                return math.inf
            token = self.token()
            grant = await shared.acquire(plan.spec, candidates, token, tokens)
            if grant is not None:
                now = trio.current_time()
                if grant.chosen is None:
                    return now + grant.retry_in
                state = candidates[grant.chosen]
                state.local_in_flight += 1
                state.attempts += 1
                state.rpm_window.add(now, 1)
                state.tpm_window.add(now, tokens)
                return Ticket(state, grant.bucket, tokens, token, True)
        await trio.lowlevel.checkpoint()
        return self.acquire_local(plan, tried, tokens, trio.current_time())

    def release_local(
        self,
        plan: GroupPlan,
        ticket: Ticket,
        outcome: int,
        delay: float | None,
        used: int | None,
    ) -> None:
        """The local half of an attempt's end: counts, settlement, cooling; wakes a waiter."""
        state = ticket.state
        state.local_in_flight -= 1
        if used is not None and used != ticket.estimate:
            state.tpm_window.adjust(ticket.bucket, used - ticket.estimate)
        if outcome == FAILED:
            state.failed(plan.spec, trio.current_time(), delay)
        elif outcome == SUCCEEDED:
            state.cool_level = 0
        if plan.turnstile:
            plan.turnstile.kick()

    async def release(
        self,
        plan: GroupPlan,
        ticket: Ticket,
        outcome: int,
        delay: float | None,
        used: int | None,
    ) -> None:
        """End an attempt: `release_local`, and with shared state the Redis half (one round trip).

        A call dispatched through Redis that ends while Redis is away leaves
        its lease to expire (``in_flight_lease``); nothing waits on Redis then.
        """
        if not ticket.shared:
            self.release_local(plan, ticket, outcome, delay, used)
            return
        state = ticket.state
        state.local_in_flight -= 1
        if outcome == SUCCEEDED:
            state.cool_level = 0
        shared = plan.shared
        answered = None
        if shared is not None and shared.shared:
            correction = 0 if used is None else used - ticket.estimate
            answered = await shared.release(
                plan.spec, state, ticket.token, ticket.bucket, correction, outcome, delay
            )
        if answered is None and outcome == FAILED:
            # Redis did not count it: the local state does, as it would without Redis.
            state.failed(plan.spec, trio.current_time(), delay)
        plan.turnstile.kick()

    # ---- statistics --------------------------------------------------------------------

    def statistics(self) -> RoutingStatistics:
        now = trio.current_time()
        groups = []
        for name, plan in self.plans.items():
            deployments = []
            for state in plan.states:
                spec = state.spec
                left = state.cool_until - now
                deployments.append(
                    DeploymentStatistics(
                        group=name,
                        route=spec.route,
                        model=spec.model,
                        tier=spec.tier,
                        weight=spec.weight,
                        in_flight=state.local_in_flight,
                        shared=state.shared_in_flight is not None,
                        cooling=left > 0,
                        cooling_for=max(0.0, left),
                        cooldowns=state.cooldowns,
                        attempts=state.attempts,
                        served=state.served,
                        failovers=dict(state.failovers),
                        latency=state.latency,
                        rpm_used=state.rpm_used,
                        tpm_used=state.tpm_used,
                        rpm=spec.rpm,
                        tpm=spec.tpm,
                        max_in_flight=spec.max_in_flight,
                    )
                )
            counters = plan.counters
            groups.append(
                GroupStatistics(
                    name=name,
                    strategy=plan.spec.strategy,
                    calls=counters.calls,
                    waiting=len(plan.turnstile),
                    rate_limited=counters.rate_limited,
                    context_fallbacks=counters.context_fallbacks,
                    deployments=tuple(deployments),
                )
            )
        shared = [
            SharedStateStatistics(
                shared=1 if state.shared else 0,
                processes=1,
                errors=state.errors,
                degradations=state.degradations,
                round_trips=state.round_trips,
            )
            for state in self._shared.values()
        ]
        return RoutingStatistics(
            groups=tuple(groups), shared_state=shared[0] if len(shared) == 1 else _sum(shared)
        )


def _sum(parts: Sequence[SharedStateStatistics]) -> SharedStateStatistics | None:
    if not parts:
        return None
    return SharedStateStatistics(
        shared=sum(p.shared for p in parts),
        processes=sum(p.processes for p in parts),
        errors=sum(p.errors for p in parts),
        degradations=sum(p.degradations for p in parts),
        round_trips=sum(p.round_trips for p in parts),
    )
