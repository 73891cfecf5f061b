"""Summing several gateway processes' statistics (``llmrt serve --workers``). No I/O.

A worker's figures travel as the `RuntimeStatistics` the runtime returns,
its `gateway` section filled in (the ``stats`` frame's value); `merge_values`
adds several up into one of the same shape, `retired` is what a dead worker
leaves in the sum, `admit_models` and `fold_models` keep the sum within the
model-label bound, and `worker_families` shows the workers themselves.

Why the sum needs its own label bound: each worker keeps its first
`MAX_MODELS_PER_PROVIDER` model names, but two workers that saw different
names would export the union, and so would every worker that ever retired.
The names the sum keeps are chosen once (`admit_models`, the busiest new
names while there is room) and never given back, so a model's series never
moves into ``(other)`` later, which would make both counters go down.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

import msgspec
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from ..._statistics import (
    CallLogStatistics,
    ConnectionPool,
    FinishedCount,
    GatewayStatistics,
    HistogramSnapshot,
    ModelCost,
    ModelHistogram,
    ProviderStatistics,
    RuntimeStatistics,
)
from ..._stats import MAX_MODELS_PER_PROVIDER, OTHER
from ...routing._stats import merge_routing, retired_routing

__all__ = [
    "SUMMED_FIELDS",
    "admit_models",
    "fold_models",
    "merge_values",
    "retired",
    "worker_families",
]

#: Every field of `RuntimeStatistics` that `merge_values` sums (a test checks
#: this is all of them: a new section must say how workers add it up).
SUMMED_FIELDS = frozenset(
    {
        "calls_started",
        "calls_in_flight",
        "calls_finished",
        "failures_by_code",
        "chunks_forwarded",
        "chunks_dropped",
        "middleware_errors",
        "registrations",
        "retries_by_code",
        "attempts_per_call",
        "watchdog_firings",
        "providers",
        "time_to_first_chunk",
        "call_duration",
        "abort_to_finish",
        "connection_pools",
        "gateway",
        "routing",
        "call_log",
        "costs",
    }
)


def _add(into: Counter[str], items: Iterable[tuple[str, int]]) -> None:
    for key, count in items:
        into[key] += count


def _histogram_sum(values: Sequence[HistogramSnapshot]) -> HistogramSnapshot:
    first = values[0]
    counts = [0] * len(first.counts)
    total = 0.0
    for value in values:
        if value.bounds != first.bounds:
            continue  # another llmrt version's buckets: cannot be summed bucket by bucket
        for i, count in enumerate(value.counts):
            counts[i] += count
        total += value.sum
    return HistogramSnapshot(bounds=first.bounds, counts=tuple(counts), sum=total)


def _by_model(
    series: Iterable[Sequence[ModelHistogram]], keep: Mapping[str, frozenset[str]] | None = None
) -> tuple[ModelHistogram, ...]:
    """The entries summed by label pair; with ``keep``, models not kept count under `OTHER`."""
    grouped: dict[tuple[str, str], list[HistogramSnapshot]] = {}
    for entries in series:
        for entry in entries:
            model = entry.model
            if keep is not None and model not in keep.get(entry.provider, frozenset()):
                model = OTHER
            grouped.setdefault((entry.provider, model), []).append(entry.histogram)
    return tuple(
        ModelHistogram(provider=provider, model=model, histogram=_histogram_sum(values))
        for (provider, model), values in sorted(grouped.items())
    )


def _costs(
    series: Iterable[Sequence[ModelCost]], keep: Mapping[str, frozenset[str]] | None = None
) -> tuple[ModelCost, ...]:
    """The cost entries summed by label pair; with ``keep``, models not kept count under `OTHER`."""
    grouped: dict[tuple[str, str], list[ModelCost]] = {}
    for entries in series:
        for entry in entries:
            model = entry.model
            if keep is not None and model not in keep.get(entry.provider, frozenset()):
                model = OTHER
            grouped.setdefault((entry.provider, model), []).append(entry)
    return tuple(
        ModelCost(
            provider=provider,
            model=model,
            cost_usd=math.fsum(part.cost_usd for part in parts),
            priced_calls=sum(part.priced_calls for part in parts),
            unpriced_calls=sum(part.unpriced_calls for part in parts),
        )
        for (provider, model), parts in sorted(grouped.items())
    )


def _gateway_sum(values: Sequence[GatewayStatistics]) -> GatewayStatistics | None:
    if not values:
        return None
    refused: Counter[str] = Counter()
    http: Counter[str] = Counter()
    for value in values:
        _add(refused, value.refused.items())
        _add(http, value.http_requests.items())
    return GatewayStatistics(
        ready=all(value.ready for value in values),
        connections=sum(value.connections for value in values),
        accepted=sum(value.accepted for value in values),
        live_requests=sum(value.live_requests for value in values),
        refused=refused,
        frames_received=sum(value.frames_received for value in values),
        frames_sent=sum(value.frames_sent for value in values),
        bytes_received=sum(value.bytes_received for value in values),
        bytes_sent=sum(value.bytes_sent for value in values),
        http_requests=http,
    )


def _providers_sum(values: Sequence[RuntimeStatistics]) -> tuple[ProviderStatistics, ...]:
    providers: dict[str, list[ProviderStatistics]] = {}
    for value in values:
        for provider in value.providers:
            providers.setdefault(provider.provider, []).append(provider)
    merged = []
    for name, parts in sorted(providers.items()):
        by_finish: Counter[tuple[str, str]] = Counter()
        for part in parts:
            for entry in part.calls_finished:
                by_finish[entry.reason, entry.code] += entry.count
        merged.append(
            ProviderStatistics(
                provider=name,
                calls_started=sum(p.calls_started for p in parts),
                calls_in_flight=sum(p.calls_in_flight for p in parts),
                calls_finished=tuple(
                    FinishedCount(reason=reason, code=code, count=count)
                    for (reason, code), count in sorted(by_finish.items())
                ),
                chunks_forwarded=sum(p.chunks_forwarded for p in parts),
            )
        )
    return tuple(merged)


def merge_values(values: Sequence[RuntimeStatistics]) -> RuntimeStatistics:
    """The sum of several processes' statistics: counters, histograms and gauges
    add up; ``registrations`` is the largest (every worker registers the same
    routes); the gateway is ready only when every part is."""
    if not values:
        raise ValueError("nothing to merge")
    finished: Counter[str] = Counter()
    failures: Counter[str] = Counter()
    retries: Counter[str] = Counter()
    attempts: Counter[int] = Counter()
    pools: dict[str, tuple[int, int]] = {}
    for value in values:
        _add(finished, value.calls_finished.items())
        _add(failures, value.failures_by_code.items())
        _add(retries, value.retries_by_code.items())
        for tries, count in value.attempts_per_call.items():
            attempts[tries] += count
        for pool in value.connection_pools:
            open_, idle = pools.get(pool.provider, (0, 0))
            pools[pool.provider] = (open_ + pool.open, idle + pool.idle)
    gateways = [v.gateway for v in values if v.gateway is not None]
    return RuntimeStatistics(
        calls_started=sum(v.calls_started for v in values),
        calls_in_flight=sum(v.calls_in_flight for v in values),
        calls_finished=finished,
        failures_by_code=failures,
        chunks_forwarded=sum(v.chunks_forwarded for v in values),
        chunks_dropped=sum(v.chunks_dropped for v in values),
        middleware_errors=sum(v.middleware_errors for v in values),
        registrations=max(v.registrations for v in values),
        retries_by_code=retries,
        attempts_per_call=attempts,
        watchdog_firings=sum(v.watchdog_firings for v in values),
        providers=_providers_sum(values),
        time_to_first_chunk=_by_model(v.time_to_first_chunk for v in values),
        call_duration=_by_model(v.call_duration for v in values),
        abort_to_finish=_histogram_sum([v.abort_to_finish for v in values]),
        connection_pools=tuple(
            ConnectionPool(provider=name, open=open_, idle=idle)
            for name, (open_, idle) in sorted(pools.items())
        ),
        gateway=_gateway_sum(gateways),
        routing=merge_routing([v.routing for v in values]),
        call_log=_call_log_sum([v.call_log for v in values if v.call_log is not None]),
        costs=_costs(v.costs for v in values),
    )


def _call_log_sum(values: Sequence[CallLogStatistics]) -> CallLogStatistics | None:
    """Every field is a count (``queued`` a gauge, summed as one): field by field."""
    if not values:
        return None
    fields = msgspec.structs.fields(CallLogStatistics)
    return CallLogStatistics(**{f.name: sum(getattr(v, f.name) for v in values) for f in fields})


def retired(value: RuntimeStatistics) -> RuntimeStatistics:
    """A dead worker's snapshot as it stays in the sum: counters kept, gauges at zero
    (its calls, websockets and upstream connections died with it)."""
    gateway = value.gateway
    if gateway is not None:
        gateway = msgspec.structs.replace(gateway, ready=True, connections=0, live_requests=0)
    return msgspec.structs.replace(
        value,
        calls_in_flight=0,
        providers=tuple(msgspec.structs.replace(p, calls_in_flight=0) for p in value.providers),
        connection_pools=(),
        gateway=gateway,
        routing=retired_routing(value.routing),
        call_log=(
            None if value.call_log is None else msgspec.structs.replace(value.call_log, queued=0)
        ),
    )


#: The model labels a sum keeps, by provider, in the order they were admitted.
KeptModels = Mapping[str, Sequence[str]]


def admit_models(
    kept: KeptModels, value: RuntimeStatistics, limit: int = MAX_MODELS_PER_PROVIDER
) -> dict[str, tuple[str, ...]]:
    """``kept`` and, while a provider has fewer than ``limit``, the names new in ``value``.

    New names are admitted busiest first (by calls ended, then by name): the
    choice is the same whichever process makes it from the same figures.
    """
    out = {provider: tuple(models) for provider, models in kept.items()}
    calls: Counter[tuple[str, str]] = Counter()
    for entry in (*value.call_duration, *value.time_to_first_chunk):
        calls[entry.provider, entry.model] += 0
    for entry in value.call_duration:
        calls[entry.provider, entry.model] += entry.histogram.count
    candidates: dict[str, list[tuple[int, str]]] = {}
    for (provider, model), count in calls.items():
        if provider == OTHER or model == OTHER or model in out.get(provider, ()):
            continue
        candidates.setdefault(provider, []).append((-count, model))
    for provider, names in sorted(candidates.items()):
        have = out.get(provider, ())
        room = limit - len(have)
        if room > 0:
            out[provider] = (*have, *(model for _, model in sorted(names)[:room]))
    return out


def fold_models(value: RuntimeStatistics, kept: KeptModels) -> RuntimeStatistics:
    """``value`` with every model label not in ``kept`` counted under `OTHER`."""
    keep = {provider: frozenset(models) for provider, models in kept.items()}
    return msgspec.structs.replace(
        value,
        time_to_first_chunk=_by_model([value.time_to_first_chunk], keep),
        call_duration=_by_model([value.call_duration], keep),
        costs=_costs([value.costs], keep),
    )


def worker_families(live: Sequence[tuple[int, RuntimeStatistics]]) -> list[Metric]:
    """The families that show the live workers themselves, from (slot, figures) pairs."""
    workers = GaugeMetricFamily(
        "llmrt_gateway_workers", "Worker processes whose figures this scrape sums."
    )
    workers.add_metric([], len(live))
    connections = GaugeMetricFamily(
        "llmrt_gateway_worker_connections", "Open websockets, by worker.", labels=["worker"]
    )
    calls = CounterMetricFamily(
        "llmrt_gateway_worker_calls_started",
        "Calls started by the worker process now in the slot, by worker.",
        labels=["worker"],
    )
    for slot, value in sorted(live, key=lambda item: item[0]):
        gateway = value.gateway
        connections.add_metric([str(slot)], gateway.connections if gateway is not None else 0)
        calls.add_metric([str(slot)], value.calls_started)
    return [workers, connections, calls]
