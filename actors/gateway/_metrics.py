"""``GET /metrics``: the runtime's statistics and the gateway's counters, read at scrape time.

Nothing here runs on the call path. A custom prometheus-client collector
turns `LlmRuntime.statistics()` and the gateway's `GatewayCounters` into
metric families when Prometheus scrapes; each gateway has its own
`CollectorRegistry` (no process-wide registry), and prometheus-client writes
the exposition format. ``docs/operations.md`` lists every metric.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import attrs
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import CollectorRegistry

if TYPE_CHECKING:
    from ._connection import GatewayState

__all__ = ["GatewayMetrics"]


@attrs.define(eq=False)
class _Collector:
    state: GatewayState

    def collect(self) -> Iterable[Metric]:
        stats = self.state.runtime.statistics()
        yield CounterMetricFamily(
            "llmrt_calls_started_total", "Calls started.", value=stats.calls_started
        )
        yield GaugeMetricFamily(
            "llmrt_calls_in_flight", "Calls started and not yet ended.", value=stats.calls_in_flight
        )
        yield CounterMetricFamily(
            "llmrt_chunks_forwarded_total",
            "Chunks forwarded from adapters to consumers.",
            value=stats.chunks_forwarded,
        )
        counters = self.state.counters
        yield GaugeMetricFamily(
            "llmrt_gateway_connections", "Open websockets.", value=len(self.state.connections)
        )
        yield CounterMetricFamily(
            "llmrt_gateway_connections_accepted_total",
            "Websocket handshakes accepted.",
            value=counters.accepted,
        )
        refused = CounterMetricFamily(
            "llmrt_gateway_refused_total",
            "Requests and websocket handshakes refused, by cause.",
            labels=["cause"],
        )
        for cause, count in sorted(counters.refusals.items()):
            refused.add_metric([cause], count)
        yield refused


@attrs.define(eq=False)
class GatewayMetrics:
    """One gateway's metrics registry; `render` is the ``/metrics`` answer."""

    state: GatewayState
    registry: CollectorRegistry = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(self.state))

    def render(self) -> tuple[bytes, str]:
        """The exposition text and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
