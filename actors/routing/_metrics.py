"""The routing families of ``GET /metrics``, read from `RoutingStatistics` at scrape time.

Labels are bounded by the configuration: group names and deployment ids
(``route/model``) are what was registered; failure codes are the codes a
group fails over on. Summed over ``--workers`` like the other families
(`merge_routing`), so a gauge such as ``llmrt_routing_redis_shared`` counts
the processes on shared state.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from .._statistics import RoutingStatistics

__all__ = ["routing_families"]


def routing_families(stats: RoutingStatistics | None) -> Iterator[Metric]:
    """Every routing family of one scrape (none when no group is registered)."""
    if stats is None:
        return
    group_labels = ["group"]
    calls = CounterMetricFamily(
        "llmrt_routing_calls_total", "Calls made to a routing group.", labels=group_labels
    )
    limited = CounterMetricFamily(
        "llmrt_routing_rate_limited_total",
        "Calls a group ended RATE_LIMIT: no deployment available within the wait.",
        labels=group_labels,
    )
    waiting = GaugeMetricFamily(
        "llmrt_routing_waiting", "Calls waiting for a deployment of a group.", labels=group_labels
    )
    fallbacks = CounterMetricFamily(
        "llmrt_routing_context_fallbacks_total",
        "Calls moved to a group's context_fallback (CONTEXT_WINDOW_EXCEEDED).",
        labels=group_labels,
    )
    labels = ["group", "deployment"]
    in_flight = GaugeMetricFamily(
        "llmrt_routing_deployment_in_flight", "Attempts on a deployment now.", labels=labels
    )
    cooling = GaugeMetricFamily(
        "llmrt_routing_deployment_cooling", "1 while a deployment is cooling.", labels=labels
    )
    cooldown_left = GaugeMetricFamily(
        "llmrt_routing_deployment_cooldown_seconds",
        "Seconds of a deployment's cooldown left (0: not cooling).",
        labels=labels,
    )
    cooldowns = CounterMetricFamily(
        "llmrt_routing_deployment_cooldowns_total", "Times a deployment was cooled.", labels=labels
    )
    attempts = CounterMetricFamily(
        "llmrt_routing_deployment_attempts_total",
        "Attempts dispatched to a deployment.",
        labels=labels,
    )
    served = CounterMetricFamily(
        "llmrt_routing_deployment_served_total",
        "Calls a deployment served (its content reached the consumer).",
        labels=labels,
    )
    failovers = CounterMetricFamily(
        "llmrt_routing_failovers_total",
        "Attempts that moved on to another deployment, by the code that ended them.",
        labels=[*labels, "code"],
    )
    latency = GaugeMetricFamily(
        "llmrt_routing_deployment_latency_seconds",
        "Average (EWMA) time to first chunk of a deployment.",
        labels=labels,
    )
    rpm = GaugeMetricFamily(
        "llmrt_routing_deployment_requests_in_window",
        "Requests counted in a deployment's rpm window.",
        labels=labels,
    )
    tpm = GaugeMetricFamily(
        "llmrt_routing_deployment_tokens_in_window",
        "Tokens counted in a deployment's tpm window.",
        labels=labels,
    )
    for group in stats.groups:
        calls.add_metric([group.name], group.calls)
        limited.add_metric([group.name], group.rate_limited)
        waiting.add_metric([group.name], group.waiting)
        fallbacks.add_metric([group.name], group.context_fallbacks)
        for d in group.deployments:
            values = [group.name, d.id]
            in_flight.add_metric(values, d.in_flight)
            cooling.add_metric(values, 1 if d.cooling else 0)
            cooldown_left.add_metric(values, d.cooling_for)
            cooldowns.add_metric(values, d.cooldowns)
            attempts.add_metric(values, d.attempts)
            served.add_metric(values, d.served)
            for code, count in sorted(d.failovers.items()):
                failovers.add_metric([*values, code], count)
            if d.latency is not None:
                latency.add_metric(values, d.latency)
            rpm.add_metric(values, d.rpm_used)
            tpm.add_metric(values, d.tpm_used)
    yield from (calls, limited, waiting, fallbacks, in_flight, cooling, cooldown_left)
    yield from (cooldowns, attempts, served, failovers, latency, rpm, tpm)
    shared = stats.shared_state
    if shared is None:
        return
    yield GaugeMetricFamily(
        "llmrt_routing_redis_shared",
        "Processes whose routing state is in Redis now (0: on local state).",
        value=shared.shared,
    )
    yield GaugeMetricFamily(
        "llmrt_routing_redis_processes",
        "Processes configured with Redis for routing state.",
        value=shared.processes,
    )
    yield CounterMetricFamily(
        "llmrt_routing_redis_errors_total",
        "Redis round trips that failed or timed out (the call went on with local state).",
        value=shared.errors,
    )
    yield CounterMetricFamily(
        "llmrt_routing_redis_degradations_total",
        "Times a process went from Redis to local state.",
        value=shared.degradations,
    )
    yield CounterMetricFamily(
        "llmrt_routing_redis_round_trips_total",
        "Redis round trips made for routing.",
        value=shared.round_trips,
    )
