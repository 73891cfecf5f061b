"""Runtime statistics, counted: cheap counters inside; `snapshot` makes the value outside.

Counting happens where the event happens, with plain increments: per call,
a few counter bumps and two histogram observations (a `bisect` and a list
increment each); per chunk, nothing beyond the counts the call path already
keeps. Metrics exporters read `LlmRuntime.statistics()` when they are
scraped, never on the call path; the value it returns, `RuntimeStatistics`,
is defined in `llmrt.actors._statistics`.

Labels stay bounded whatever callers send: a call whose provider serves no
route is counted under `OTHER`, and each provider keeps at most
`MAX_MODELS_PER_PROVIDER` model names of its own (the first seen); later
ones, and overlong ones, are counted under `OTHER` too.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import Counter
from collections.abc import Sequence

import attrs

from ._statistics import (
    ABORT_BUCKETS,
    LATENCY_BUCKETS,
    ConnectionPool,
    FinishedCount,
    HistogramSnapshot,
    ModelCost,
    ModelHistogram,
    ProviderStatistics,
    RuntimeStatistics,
    read_only,
)

__all__ = [
    "ABORT_BUCKETS",
    "LATENCY_BUCKETS",
    "MAX_MODELS_PER_PROVIDER",
    "OTHER",
    "CallSeries",
    "Histogram",
    "StatsCounters",
]

#: The provider label of calls to a provider that serves no route, and the model
#: label past a provider's cap. Not a valid provider route name.
OTHER = "(other)"
#: Distinct model labels one provider keeps.
MAX_MODELS_PER_PROVIDER = 100
#: Longer model names are counted under `OTHER`.
MAX_MODEL_LABEL = 200


@attrs.define(eq=False, slots=True)
class Histogram:
    """Fixed buckets, counted: `observe` costs a bisect and two stores."""

    #: Bucket upper bounds, ascending; the last is infinity.
    bounds: tuple[float, ...]
    counts: list[int] = attrs.field(init=False)
    total: float = 0.0
    _finite: tuple[float, ...] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        assert self.bounds[-1] == math.inf
        self.counts = [0] * len(self.bounds)
        self._finite = self.bounds[:-1]

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    def snapshot(self) -> HistogramSnapshot:
        return HistogramSnapshot(bounds=self._finite, counts=tuple(self.counts), sum=self.total)


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
    #: US dollars of the priced usage chunks, and how many were priced and not.
    cost: float = 0.0
    priced_calls: int = 0
    unpriced_calls: int = 0

    # The per-series recording, apart from the runtime's global counts (which
    # count inline): ``bench/bench_scaleout.py`` prices it by switching these off.

    def ended(self, kind: str, code: str) -> None:
        """Count one ended call: its finish kind (or ``consumer-left``) and failure code."""
        self.counters.finished[kind, code] += 1

    def priced(self, cost: float | None) -> None:
        """Count one usage chunk's price (None: no price is known for the model)."""
        if cost is None:
            self.unpriced_calls += 1
        else:
            self.priced_calls += 1
            self.cost += cost

    def worked(self, forwarded: int, started: float, first: float, ended: float) -> None:
        """Count a call's adapter work: chunks, time to the first one (if any), duration."""
        self.counters.chunks += forwarded
        if forwarded:
            self.first_chunk.observe(first - started)
        self.duration.observe(ended - started)


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
        self, registrations: int, pools: Sequence[ConnectionPool] = ()
    ) -> RuntimeStatistics:
        """The figures now, as one immutable value (``pools``: sorted by provider)."""
        providers = tuple(
            ProviderStatistics(
                provider=name,
                calls_started=c.started,
                calls_in_flight=c.started - c.finished.total(),
                calls_finished=tuple(
                    FinishedCount(reason=reason, code=code, count=count)
                    for (reason, code), count in sorted(c.finished.items())
                ),
                chunks_forwarded=c.chunks,
            )
            for name, c in sorted(self._providers.items())
        )
        first_chunk = []
        duration = []
        costs = []
        for (provider, model), s in sorted(self._series.items()):
            if s.priced_calls or s.unpriced_calls:
                costs.append(
                    ModelCost(
                        provider=provider,
                        model=model,
                        cost_usd=s.cost,
                        priced_calls=s.priced_calls,
                        unpriced_calls=s.unpriced_calls,
                    )
                )
            first_chunk.append(
                ModelHistogram(provider=provider, model=model, histogram=s.first_chunk.snapshot())
            )
            duration.append(
                ModelHistogram(provider=provider, model=model, histogram=s.duration.snapshot())
            )
        return RuntimeStatistics(
            calls_started=self.calls_started,
            calls_in_flight=self.calls_in_flight,
            calls_finished=read_only(self.finished),
            failures_by_code=read_only(self.failures),
            chunks_forwarded=self.chunks_forwarded,
            chunks_dropped=self.chunks_dropped,
            middleware_errors=self.middleware_errors,
            registrations=registrations,
            retries_by_code=read_only(self.retries),
            attempts_per_call=read_only(self.attempts),
            watchdog_firings=self.watchdog_firings,
            providers=providers,
            time_to_first_chunk=tuple(first_chunk),
            call_duration=tuple(duration),
            abort_to_finish=self.abort_to_finish.snapshot(),
            connection_pools=tuple(pools),
            costs=tuple(costs),
        )
