"""One deployment's routing state in this process, and the rules that read and change it. No I/O.

`DeploymentState` is what strategies see (its public read-only properties:
`route`, `model`, `weight`, `tier`, `in_flight`, `latency`, `rpm_used`, ...)
and what the local store decides on. The rules (`available_at`, `reserve`,
`release`, `cool`) take the time as an argument, so they are tested without
a clock. Times are trio time, in seconds.

With Redis, the shared figures a round trip returned (`mirror`) stand in
for the local ones in what strategies see, and cooldown deadlines learnt
from Redis are kept here too, so a process that loses Redis still knows
which deployments were cooling.
"""

from __future__ import annotations

import math
from collections import Counter

import attrs

from ._spec import Deployment, Group
from ._window import Window

__all__ = ["DeploymentState", "backoff"]


def backoff(group: Group, level: int) -> float:
    """The cooldown after ``level`` cooldowns in a row: doubling from ``cooldown``, capped."""
    return min(group.max_cooldown, group.cooldown * 2.0 ** min(level, 64))


@attrs.define(eq=False, slots=True)
class DeploymentState:
    """A deployment of a group as this process knows it (see the module docstring)."""

    group: str
    spec: Deployment
    rpm_window: Window
    tpm_window: Window
    failures: Window
    #: Calls of this process on the deployment now.
    local_in_flight: int = 0
    #: Until when (trio time) the deployment is cooling; -inf: it is not.
    cool_until: float = -math.inf
    #: Cooldowns in a row (the next one lasts `backoff` of it); a success resets it.
    cool_level: int = 0
    #: EWMA of the time to first chunk, seconds (None: never measured).
    latency: float | None = None
    #: Shared figures from the last Redis round trip (None: local state is what counts).
    shared_in_flight: int | None = None
    shared_rpm: int | None = None
    shared_tpm: int | None = None
    #: The spec's fields, copied: the decision and the strategies read them on every call
    #: (read-only: `adopt` sets them).
    route: str = attrs.field(default="", init=False)
    model: str = attrs.field(default="", init=False)
    weight: float = attrs.field(default=1.0, init=False)
    tier: int = attrs.field(default=1, init=False)
    key: str = attrs.field(default="", init=False)
    max_in_flight: int | None = attrs.field(default=None, init=False)
    rpm: int | None = attrs.field(default=None, init=False)
    tpm: int | None = attrs.field(default=None, init=False)
    #: Whether any limit is set (no limits: only the cooldown is checked).
    limited: bool = attrs.field(default=False, init=False)
    #: Counters for statistics.
    attempts: int = 0
    served: int = 0
    failovers: Counter[str] = attrs.field(factory=Counter)
    cooldowns: int = 0

    def __attrs_post_init__(self) -> None:
        self._copy(self.spec)

    def _copy(self, spec: Deployment) -> None:
        self.route = spec.route
        self.model = spec.model
        self.weight = spec.weight
        self.tier = spec.tier
        self.key = spec.id
        self.max_in_flight = spec.max_in_flight
        self.rpm = spec.rpm
        self.tpm = spec.tpm
        self.limited = (
            spec.max_in_flight is not None or spec.rpm is not None or spec.tpm is not None
        )

    @classmethod
    def new(cls, group: Group, spec: Deployment) -> DeploymentState:
        return cls(
            group=group.name,
            spec=spec,
            rpm_window=Window(group.window),
            tpm_window=Window(group.window),
            failures=Window(group.cooldown_window),
        )

    def adopt(self, group: Group, spec: Deployment) -> None:
        """Take a replaced group's spec, keeping counts and cooldowns where the windows allow."""
        self.spec = spec
        self._copy(spec)
        if self.rpm_window.length != group.window:
            self.rpm_window = Window(group.window)
            self.tpm_window = Window(group.window)
        if self.failures.length != group.cooldown_window:
            self.failures = Window(group.cooldown_window)

    # ---- what strategies read ----------------------------------------------------------

    @property
    def id(self) -> str:
        return self.key

    @property
    def in_flight(self) -> int:
        """Calls on the deployment now: every process's with Redis, else this one's."""
        shared = self.shared_in_flight
        return self.local_in_flight if shared is None else shared

    @property
    def rpm_used(self) -> int:
        shared = self.shared_rpm
        return self.rpm_window.total if shared is None else shared

    @property
    def tpm_used(self) -> int:
        shared = self.shared_tpm
        return self.tpm_window.total if shared is None else shared

    @property
    def headroom(self) -> float:
        """The smallest share of ``rpm``, ``tpm`` and ``max_in_flight`` left (1.0: no limits)."""
        room = 1.0
        if self.rpm is not None:
            used = self.rpm_window.total if self.shared_rpm is None else self.shared_rpm
            room = min(room, 1.0 - used / self.rpm)
        if self.tpm is not None:
            used = self.tpm_window.total if self.shared_tpm is None else self.shared_tpm
            room = min(room, 1.0 - used / self.tpm)
        if self.max_in_flight is not None:
            room = min(room, 1.0 - self.in_flight / self.max_in_flight)
        return room

    # ---- the local store's rules -------------------------------------------------------

    def available_at(self, now: float, tokens: int) -> float:
        """When a call charging ``tokens`` could be dispatched here: ``now`` if at once.

        Infinity when only a release can make room (in flight at its limit),
        or never (a request larger than ``tpm`` by itself).
        """
        at = self.cool_until
        if at < now:
            at = now
        if not self.limited:
            return at
        if self.max_in_flight is not None and self.local_in_flight >= self.max_in_flight:
            return math.inf
        if self.rpm is not None:
            room = self.rpm_window.room_at(now, 1, self.rpm)
            if room > at:
                at = room
        if self.tpm is not None:
            room = self.tpm_window.room_at(now, tokens, self.tpm)
            if room > at:
                at = room
        return at

    def reserve(self, now: float, tokens: int) -> int:
        """Count a dispatch charging ``tokens``; returns the tpm bucket to settle later."""
        self.local_in_flight += 1
        self.attempts += 1
        self.rpm_window.add(now, 1)
        return self.tpm_window.add(now, tokens)

    def settle(self, bucket: int, estimate: int, used: int | None) -> None:
        """Replace the tpm estimate by what the finish's usage says (kept when it says nothing)."""
        if used is not None and used != estimate:
            self.tpm_window.adjust(bucket, used - estimate)

    def cool(self, group: Group, now: float, delay: float | None) -> float:
        """Cool the deployment: the longer of its back-off and ``delay``; returns the deadline.

        Cooling again extends the deadline and never shortens it.
        """
        duration = backoff(group, self.cool_level)
        if delay is not None and delay > duration:
            duration = delay
        until = now + duration
        if until > self.cool_until:
            self.cool_until = until
        self.cool_level += 1
        self.cooldowns += 1
        self.failures.clear()
        return self.cool_until

    def failed(self, group: Group, now: float, delay: float | None) -> bool:
        """Count a failure (``delay``: the provider's, in seconds); True when it cooled it."""
        if delay is not None and delay > 0:
            self.cool(group, now, delay)
            return True
        self.failures.add(now, 1)
        if self.failures.total >= group.cooldown_after:
            self.cool(group, now, None)
            return True
        return False

    def learn_cooling(self, until: float) -> None:
        """A cooldown deadline another process set (through Redis): keep the later one."""
        if until > self.cool_until:
            self.cool_until = until

    def observe_latency(self, group: Group, seconds: float) -> None:
        previous = self.latency
        alpha = group.latency_alpha
        self.latency = seconds if previous is None else previous + alpha * (seconds - previous)
