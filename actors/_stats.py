"""Runtime statistics: cheap counters inside, an immutable snapshot outside.

Counting happens where the event happens, with plain increments: per call,
a few counter bumps and two histogram observations (a `bisect` and a list
increment each); per chunk, nothing beyond the counts the call path already
keeps. Metrics exporters read `LlmRuntime.statistics()` when they are
scraped, never on the call path.

Labels stay bounded whatever callers send: a call whose provider serves no
route is counted under `OTHER`, and each provider keeps at most
`MAX_MODELS_PER_PROVIDER` model names of its own (the first seen); later
ones, and overlong ones, are counted under `OTHER` too.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import Counter
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from .routing._stats import RoutingStatistics

__all__ = [
    "ABORT_BUCKETS",
    "LATENCY_BUCKETS",
    "MAX_MODELS_PER_PROVIDER",
    "OTHER",
    "CallSeries",
    "ConnectionPool",
    "Histogram",
    "HistogramSnapshot",
    "ProviderStatistics",
    "RuntimeStatistics",
    "StatsCounters",
]

#: Upper bounds (seconds) of the time-to-first-chunk and call-duration buckets.
LATENCY_BUCKETS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
    math.inf,
)  # fmt: skip
#: Upper bounds (seconds) of the abort-to-finish buckets: tens of microseconds up.
ABORT_BUCKETS: tuple[float, ...] = (
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
    0.1, 1.0, math.inf,
)  # fmt: skip
#: The provider label of calls to a provider that serves no route, and the model
#: label past a provider's cap. Not a valid provider route name.
OTHER = "(other)"
#: Distinct model labels one provider keeps.
MAX_MODELS_PER_PROVIDER = 100
#: Longer model names are counted under `OTHER`.
MAX_MODEL_LABEL = 200


@attrs.frozen
class HistogramSnapshot:
    """A histogram at one moment: per-bucket counts (not cumulative) and the sum."""

    #: Bucket upper bounds, ascending; the last is infinity.
    bounds: tuple[float, ...]
    #: ``counts[i]`` observations were at most ``bounds[i]`` and above ``bounds[i - 1]``.
    counts: tuple[int, ...]
    sum: float

    @property
    def count(self) -> int:
        return sum(self.counts)


@attrs.define(eq=False, slots=True)
class Histogram:
    """Fixed buckets, counted: `observe` costs a bisect and two stores."""

    bounds: tuple[float, ...]
    counts: list[int] = attrs.field(init=False)
    total: float = 0.0

    def __attrs_post_init__(self) -> None:
        assert self.bounds[-1] == math.inf
        self.counts = [0] * len(self.bounds)

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    def snapshot(self) -> HistogramSnapshot:
        return HistogramSnapshot(bounds=self.bounds, counts=tuple(self.counts), sum=self.total)


@attrs.define(eq=False, slots=True)
class _ProviderCounters:
    started: int = 0
    #: Ended calls by (finish kind or ``consumer-left``, failure code or "").
    finished: Counter[tuple[str, str]] = attrs.field(factory=Counter)
    chunks: int = 0


@attrs.define(eq=False, slots=True)
class CallSeries:
    """What one call counts into: its provider's counters and its model's timings.

    One instance per (provider label, model label), shared by every call of
    that pair, so a call holds one reference and records without lookups.
    """

    provider: str
    model: str
    counters: _ProviderCounters
    first_chunk: Histogram = attrs.field(factory=lambda: Histogram(LATENCY_BUCKETS))
    duration: Histogram = attrs.field(factory=lambda: Histogram(LATENCY_BUCKETS))


@attrs.frozen(kw_only=True)
class ProviderStatistics:
    """The calls of one provider label (see `OTHER`)."""

    calls_started: int
    calls_in_flight: int
    #: Ended calls by (finish kind or ``consumer-left``, failure code or ``""``).
    calls_finished: Mapping[tuple[str, str], int]
    chunks_forwarded: int


@attrs.frozen
class ConnectionPool:
    """An adapter's upstream connections: open (in use or idle) and, of those, idle."""

    open: int
    idle: int


@attrs.frozen(kw_only=True)
class RuntimeStatistics:
    """A snapshot of `LlmRuntime.statistics()`; immutable, mappings included."""

    calls_started: int
    calls_in_flight: int
    #: Finished calls by terminal finish kind (``stop``, ``tool-calls``, ``max-tokens``,
    #: ``aborted``, ``error``) plus ``consumer-left`` for calls whose consumer left
    #: before the terminal chunk was delivered.
    calls_finished: Mapping[str, int]
    #: ``error`` and ``aborted`` finishes by failure code.
    failures_by_code: Mapping[str, int]
    chunks_forwarded: int
    #: Chunks an adapter sent after its terminal ``finish`` (never forwarded).
    chunks_dropped: int
    #: Middleware exceptions re-raised in the consumer.
    middleware_errors: int
    registrations: int
    #: Retries scheduled by `stream_with_retry`, by the failure code that caused them.
    retries_by_code: Mapping[str, int]
    #: Calls run by `stream_with_retry`, by how many attempts they took.
    attempts_per_call: Mapping[int, int]
    #: The same calls by provider label.
    providers: Mapping[str, ProviderStatistics] = MappingProxyType({})
    #: Adapter start to first forwarded chunk, by (provider, model) label; calls
    #: that forwarded no chunk are not in it.
    time_to_first_chunk: Mapping[tuple[str, str], HistogramSnapshot] = MappingProxyType({})
    #: Adapter start to the terminal item, by (provider, model) label.
    call_duration: Mapping[tuple[str, str], HistogramSnapshot] = MappingProxyType({})
    #: Abort (of any cause but the idle watchdog) to the ``aborted`` finish handed
    #: to the consumer.
    abort_to_finish: HistogramSnapshot = HistogramSnapshot(
        bounds=ABORT_BUCKETS, counts=(0,) * len(ABORT_BUCKETS), sum=0.0
    )
    #: Calls the idle watchdog ended (``TIMEOUT``).
    watchdog_firings: int = 0
    #: Upstream connection pools of the adapters that report one, by the first
    #: provider route of their registration.
    connection_pools: Mapping[str, ConnectionPool] = MappingProxyType({})
    #: Routing groups and their deployments (None: no group is registered).
    routing: RoutingStatistics | None = None


@attrs.define(eq=False)
class StatsCounters:
    calls_started: int = 0
    calls_in_flight: int = 0
    finished: Counter[str] = attrs.field(factory=Counter)
    failures: Counter[str] = attrs.field(factory=Counter)
    chunks_forwarded: int = 0
    chunks_dropped: int = 0
    middleware_errors: int = 0
    retries: Counter[str] = attrs.field(factory=Counter)
    attempts: Counter[int] = attrs.field(factory=Counter)
    abort_to_finish: Histogram = attrs.field(factory=lambda: Histogram(ABORT_BUCKETS))
    watchdog_firings: int = 0
    _providers: dict[str, _ProviderCounters] = attrs.field(factory=dict)
    _series: dict[tuple[str, str], CallSeries] = attrs.field(factory=dict)
    _models: Counter[str] = attrs.field(factory=Counter)

    def series(self, provider: str, model: str, routed: bool) -> CallSeries:
        """The series a call to ``provider``/``model`` counts into (labels bounded).

        ``routed``: whether ``provider`` serves a route now; calls to one that
        does not are counted under `OTHER` (callers choose provider names).
        """
        found = self._series.get((provider, model))
        if found is not None:
            return found
        if not routed:
            provider = OTHER
        if (
            provider == OTHER
            or len(model) > MAX_MODEL_LABEL
            or self._models[provider] >= MAX_MODELS_PER_PROVIDER
        ):
            model = OTHER
        found = self._series.get((provider, model))
        if found is None:
            counters = self._providers.get(provider)
            if counters is None:
                counters = self._providers[provider] = _ProviderCounters()
            found = self._series[provider, model] = CallSeries(provider, model, counters)
            if model != OTHER:
                self._models[provider] += 1
        return found

    def snapshot(
        self, registrations: int, pools: Mapping[str, ConnectionPool] | None = None
    ) -> RuntimeStatistics:
        providers = {
            name: ProviderStatistics(
                calls_started=c.started,
                calls_in_flight=c.started - c.finished.total(),
                calls_finished=MappingProxyType(dict(c.finished)),
                chunks_forwarded=c.chunks,
            )
            for name, c in self._providers.items()
        }
        series = self._series.values()
        return RuntimeStatistics(
            calls_started=self.calls_started,
            calls_in_flight=self.calls_in_flight,
            calls_finished=MappingProxyType(dict(self.finished)),
            failures_by_code=MappingProxyType(dict(self.failures)),
            chunks_forwarded=self.chunks_forwarded,
            chunks_dropped=self.chunks_dropped,
            middleware_errors=self.middleware_errors,
            registrations=registrations,
            retries_by_code=MappingProxyType(dict(self.retries)),
            attempts_per_call=MappingProxyType(dict(self.attempts)),
            providers=MappingProxyType(providers),
            time_to_first_chunk=MappingProxyType(
                {(s.provider, s.model): s.first_chunk.snapshot() for s in series}
            ),
            call_duration=MappingProxyType(
                {(s.provider, s.model): s.duration.snapshot() for s in series}
            ),
            abort_to_finish=self.abort_to_finish.snapshot(),
            watchdog_firings=self.watchdog_firings,
            connection_pools=MappingProxyType(dict(pools or {})),
        )
