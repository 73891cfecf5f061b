"""The statistics snapshot as a wire value: the answer to a ``stats`` frame. No I/O.

`LlmRuntime.statistics()` holds mappings keyed by tuples and histograms
bounded by infinity, which JSON cannot carry; `StatisticsValue` is the same
figures as frozen msgspec structs (camelCase, like every protocol value):
lists of labelled entries instead of tuple keys, and histogram bounds
without the infinite last one (the last count is for larger values).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import msgspec

from .._stats import HistogramSnapshot, RuntimeStatistics
from ..routing._stats import RoutingStatistics

__all__ = [
    "FinishedCount",
    "GatewayValue",
    "HistogramValue",
    "ModelHistogram",
    "PoolValue",
    "ProviderValue",
    "StatisticsValue",
    "statistics_value",
]


class _Value(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    pass


class HistogramValue(_Value, frozen=True):
    #: Finite bucket upper bounds in seconds, ascending.
    bounds: tuple[float, ...]
    #: Observations per bucket (not cumulative); one more than ``bounds``: the
    #: last counts values above the last bound.
    counts: tuple[int, ...]
    sum: float

    @property
    def count(self) -> int:
        return sum(self.counts)


class ModelHistogram(_Value, frozen=True):
    provider: str
    model: str
    histogram: HistogramValue


class FinishedCount(_Value, frozen=True):
    #: A finish kind, or ``consumer-left``.
    reason: str
    #: The failure code of ``error`` and ``aborted`` finishes, else ``""``.
    code: str
    count: int


class ProviderValue(_Value, frozen=True):
    provider: str
    calls_started: int
    calls_in_flight: int
    calls_finished: tuple[FinishedCount, ...]
    chunks_forwarded: int


class PoolValue(_Value, frozen=True):
    #: The first provider route of the adapter's registration.
    provider: str
    open: int
    idle: int


class GatewayValue(_Value, frozen=True):
    ready: bool
    connections: int
    accepted: int
    live_requests: int
    refused: dict[str, int]
    frames_received: int
    frames_sent: int
    bytes_received: int
    bytes_sent: int
    http_requests: dict[str, int]


class StatisticsValue(_Value, frozen=True):
    """`RuntimeStatistics` on the wire, plus the gateway's own figures when a gateway answers."""

    calls_started: int
    calls_in_flight: int
    calls_finished: dict[str, int]
    failures_by_code: dict[str, int]
    chunks_forwarded: int
    chunks_dropped: int
    middleware_errors: int
    registrations: int
    retries_by_code: dict[str, int]
    attempts_per_call: dict[int, int]
    watchdog_firings: int = 0
    providers: tuple[ProviderValue, ...] = ()
    time_to_first_chunk: tuple[ModelHistogram, ...] = ()
    call_duration: tuple[ModelHistogram, ...] = ()
    abort_to_finish: HistogramValue | None = None
    connection_pools: tuple[PoolValue, ...] = ()
    gateway: GatewayValue | None = None
    #: Routing groups and their deployments (docs/routing.md); absent without groups.
    routing: RoutingStatistics | None = None


def _histogram(snapshot: HistogramSnapshot) -> HistogramValue:
    bounds = tuple(b for b in snapshot.bounds if b != math.inf)
    return HistogramValue(bounds=bounds, counts=snapshot.counts, sum=snapshot.sum)


def _by_model(series: Mapping[tuple[str, str], HistogramSnapshot]) -> tuple[ModelHistogram, ...]:
    return tuple(
        ModelHistogram(provider=provider, model=model, histogram=_histogram(snapshot))
        for (provider, model), snapshot in sorted(series.items())
    )


def statistics_value(
    stats: RuntimeStatistics, gateway: GatewayValue | None = None
) -> StatisticsValue:
    """The wire value of a statistics snapshot (and of the gateway's figures)."""
    return StatisticsValue(
        calls_started=stats.calls_started,
        calls_in_flight=stats.calls_in_flight,
        calls_finished=dict(stats.calls_finished),
        failures_by_code=dict(stats.failures_by_code),
        chunks_forwarded=stats.chunks_forwarded,
        chunks_dropped=stats.chunks_dropped,
        middleware_errors=stats.middleware_errors,
        registrations=stats.registrations,
        retries_by_code=dict(stats.retries_by_code),
        attempts_per_call=dict(stats.attempts_per_call),
        watchdog_firings=stats.watchdog_firings,
        providers=tuple(
            ProviderValue(
                provider=name,
                calls_started=ps.calls_started,
                calls_in_flight=ps.calls_in_flight,
                calls_finished=tuple(
                    FinishedCount(reason=reason, code=code, count=count)
                    for (reason, code), count in sorted(ps.calls_finished.items())
                ),
                chunks_forwarded=ps.chunks_forwarded,
            )
            for name, ps in sorted(stats.providers.items())
        ),
        time_to_first_chunk=_by_model(stats.time_to_first_chunk),
        call_duration=_by_model(stats.call_duration),
        abort_to_finish=_histogram(stats.abort_to_finish),
        connection_pools=tuple(
            PoolValue(provider=name, open=pool.open, idle=pool.idle)
            for name, pool in sorted(stats.connection_pools.items())
        ),
        gateway=gateway,
        routing=stats.routing,
    )
