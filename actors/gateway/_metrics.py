"""``GET /metrics``: the runtime's statistics and the gateway's counters, read at scrape time.

Nothing here runs on the call path. A custom prometheus-client collector
turns `LlmRuntime.statistics()` and the gateway's own counters into metric
families when Prometheus scrapes; each gateway has its own
`CollectorRegistry` (no process-wide registry), and prometheus-client writes
the exposition format, in a worker thread. ``docs/operations.md`` lists every metric.

Label values are bounded: providers and models as the statistics bound them
(`llmrt.actors._stats.OTHER`), finish reasons by the closed set of finish
kinds, failure codes by the known codes (any other folds into ``(other)``),
refusal causes by `RefusalCause`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

import attrs
import trio
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import CollectorRegistry

from llmrt import ErrorCode

from .._stats import OTHER, HistogramSnapshot, RuntimeStatistics
from ..routing._metrics import routing_families
from ._protocol import GatewayErrorCode
from ._snapshot import GatewayValue

if TYPE_CHECKING:
    from ._connection import GatewayState

__all__ = ["GatewayMetrics", "ATTEMPT_BUCKETS", "Combine", "Figures", "metric_families"]

_KNOWN_CODES = frozenset(str(code) for code in (*ErrorCode, *GatewayErrorCode))
#: Bucket bounds of the retried calls' attempt counts.
ATTEMPT_BUCKETS = (1, 2, 3, 4, 5, 10)


def _code(code: str) -> str:
    return code if not code or code in _KNOWN_CODES else OTHER


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(float(bound))


def _buckets(snapshot: HistogramSnapshot) -> list[tuple[str, float]]:
    """prometheus-client's bucket list: cumulative counts by upper bound."""
    out: list[tuple[str, float]] = []
    running = 0
    for bound, count in zip(snapshot.bounds, snapshot.counts, strict=True):
        running += count
        out.append((_le(bound), running))
    return out


def _histograms(
    name: str, doc: str, series: Mapping[tuple[str, str], HistogramSnapshot]
) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, doc, labels=["provider", "model"], unit="seconds")
    for (provider, model), snapshot in sorted(series.items()):
        family.add_metric([provider, model], _buckets(snapshot), snapshot.sum)
    return family


def _runtime_families(stats: RuntimeStatistics) -> Iterator[Metric]:
    started = CounterMetricFamily(
        "llmrt_calls_started_total", "Calls started, by provider.", labels=["provider"]
    )
    in_flight = GaugeMetricFamily(
        "llmrt_calls_in_flight",
        "Calls started and not yet ended, by provider.",
        labels=["provider"],
    )
    finished = CounterMetricFamily(
        "llmrt_calls_finished_total",
        "Calls ended, by provider, finish reason (or consumer-left) and failure code.",
        labels=["provider", "reason", "code"],
    )
    chunks = CounterMetricFamily(
        "llmrt_chunks_forwarded_total",
        "Chunks forwarded from adapters to consumers, by provider.",
        labels=["provider"],
    )
    for provider, ps in sorted(stats.providers.items()):
        started.add_metric([provider], ps.calls_started)
        in_flight.add_metric([provider], ps.calls_in_flight)
        chunks.add_metric([provider], ps.chunks_forwarded)
        folded: Counter[tuple[str, str]] = Counter()
        for (reason, code), count in ps.calls_finished.items():
            folded[reason, _code(code)] += count
        for (reason, code), count in sorted(folded.items()):
            finished.add_metric([provider, reason, code], count)
    yield from (started, in_flight, finished, chunks)
    yield CounterMetricFamily(
        "llmrt_chunks_dropped_total",
        "Chunks adapters sent after their terminal finish (never forwarded).",
        value=stats.chunks_dropped,
    )
    yield CounterMetricFamily(
        "llmrt_middleware_errors_total",
        "Middleware exceptions raised to consumers.",
        value=stats.middleware_errors,
    )
    yield _histograms(
        "llmrt_time_to_first_chunk_seconds",
        "Adapter start to the first forwarded chunk, by provider and model.",
        stats.time_to_first_chunk,
    )
    yield _histograms(
        "llmrt_call_duration_seconds",
        "Adapter start to the terminal finish, by provider and model.",
        stats.call_duration,
    )
    abort = stats.abort_to_finish
    yield HistogramMetricFamily(
        "llmrt_abort_to_finish_seconds",
        "Abort to the aborted finish handed to the consumer.",
        buckets=_buckets(abort),
        sum_value=abort.sum,
        unit="seconds",
    )
    retries = CounterMetricFamily(
        "llmrt_retries_total",
        "Retries scheduled, by the failure code that caused them.",
        labels=["code"],
    )
    folded_retries: Counter[str] = Counter()
    for code, count in stats.retries_by_code.items():
        folded_retries[_code(code)] += count
    for code, count in sorted(folded_retries.items()):
        retries.add_metric([code], count)
    yield retries
    attempts = sorted(stats.attempts_per_call.items())
    cumulative = [
        (_le(bound), float(sum(n for a, n in attempts if a <= bound))) for bound in ATTEMPT_BUCKETS
    ]
    cumulative.append(("+Inf", float(sum(n for _, n in attempts))))
    yield HistogramMetricFamily(
        "llmrt_retried_call_attempts",
        "Attempts per call run with retries.",
        buckets=cumulative,
        sum_value=float(sum(a * n for a, n in attempts)),
    )
    yield CounterMetricFamily(
        "llmrt_idle_timeouts_total",
        "Calls the idle watchdog ended (no chunk within stream_idle_timeout).",
        value=stats.watchdog_firings,
    )
    yield GaugeMetricFamily(
        "llmrt_registrations", "Adapter registrations.", value=stats.registrations
    )
    upstream = GaugeMetricFamily(
        "llmrt_upstream_connections",
        "Upstream connections open (in use or idle), by the first provider of the adapter.",
        labels=["provider"],
    )
    idle = GaugeMetricFamily(
        "llmrt_upstream_connections_idle",
        "Upstream connections idle in the pool, by the first provider of the adapter.",
        labels=["provider"],
    )
    for provider, pool in sorted(stats.connection_pools.items()):
        upstream.add_metric([provider], pool.open)
        idle.add_metric([provider], pool.idle)
    yield upstream
    yield idle


def _gateway_families(gw: GatewayValue) -> Iterator[Metric]:
    yield GaugeMetricFamily(
        "llmrt_gateway_ready", "1 while accepting calls; 0 draining or stopping.", gw.ready
    )
    yield GaugeMetricFamily("llmrt_gateway_connections", "Open websockets.", value=gw.connections)
    yield CounterMetricFamily(
        "llmrt_gateway_connections_accepted_total",
        "Websocket handshakes accepted.",
        value=gw.accepted,
    )
    yield GaugeMetricFamily(
        "llmrt_gateway_live_requests",
        "Live calls and metadata requests over all websockets.",
        value=gw.live_requests,
    )
    refused = CounterMetricFamily(
        "llmrt_gateway_refused_total",
        "Requests and websocket handshakes refused, by cause.",
        labels=["cause"],
    )
    for cause, count in sorted(gw.refused.items()):
        refused.add_metric([cause], count)
    yield refused
    frames = CounterMetricFamily(
        "llmrt_gateway_frames_total", "Protocol frames, by direction.", labels=["direction"]
    )
    frames.add_metric(["received"], gw.frames_received)
    frames.add_metric(["sent"], gw.frames_sent)
    yield frames
    wire = CounterMetricFamily(
        "llmrt_gateway_frame_bytes_total",
        "Bytes of protocol frame payloads (UTF-8 for text frames), by direction.",
        labels=["direction"],
    )
    wire.add_metric(["received"], gw.bytes_received)
    wire.add_metric(["sent"], gw.bytes_sent)
    yield wire
    http = CounterMetricFamily(
        "llmrt_gateway_http_requests_total",
        "Plain HTTP requests answered, by route.",
        labels=["route"],
    )
    for route, count in sorted(gw.http_requests.items()):
        http.add_metric([route], count)
    yield http


@attrs.frozen
class Figures:
    """Everything one scrape exports, read at once in the trio thread (immutable)."""

    version: str
    runtime: RuntimeStatistics
    gateway: GatewayValue

    @classmethod
    def read(cls, state: GatewayState) -> Figures:
        return cls(state.version, state.runtime.statistics(), state.statistics())


def metric_families(figures: Figures) -> list[Metric]:
    """Every metric family of one scrape. Reads only ``figures``: safe in any thread."""
    info = GaugeMetricFamily("llmrt_build_info", "The llmrt version serving.", labels=["version"])
    info.add_metric([figures.version], 1)
    return [
        info,
        *_runtime_families(figures.runtime),
        *routing_families(figures.runtime.routing),
        *_gateway_families(figures.gateway),
    ]


#: Turns this gateway's figures into every family a scrape exports, e.g. summed
#: with other worker processes' (``llmrt.actors._workers``). Runs in the
#: scrape's worker thread, so it may read files.
Combine = Callable[[Figures], Sequence[Metric]]


@attrs.define(eq=False)
class _Collector:
    """Exports the figures of the scrape in progress (`GatewayMetrics` sets them)."""

    combine: Combine | None = None
    figures: Figures | None = None

    def collect(self) -> Iterable[Metric]:
        if self.figures is None:
            return []
        if self.combine is not None:
            return self.combine(self.figures)
        return metric_families(self.figures)


@attrs.define(eq=False)
class GatewayMetrics:
    """One gateway's metrics registry; `render` is the ``/metrics`` answer.

    The figures are read in the trio thread (a snapshot: cheap), the text is
    written in a worker thread: formatting thousands of samples takes
    milliseconds, which would otherwise stall every stream of the process.
    Scrapes take turns.
    """

    state: GatewayState
    #: None: this gateway's own figures; else see `Combine`.
    combine: Combine | None = None
    registry: CollectorRegistry = attrs.field(init=False)
    _collector: _Collector = attrs.field(factory=_Collector, init=False)
    _turn: trio.Lock = attrs.field(factory=trio.Lock, init=False)

    def __attrs_post_init__(self) -> None:
        self._collector.combine = self.combine
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self._collector)

    async def render(self) -> tuple[bytes, str]:
        """The exposition text and its content type. A checkpoint."""
        async with self._turn:
            self._collector.figures = Figures.read(self.state)
            try:
                body = await trio.to_thread.run_sync(generate_latest, self.registry)
            finally:
                self._collector.figures = None
        return body, CONTENT_TYPE_LATEST

    def render_now(self) -> bytes:
        """The exposition text, written in this thread (tests, benchmarks)."""
        if self._turn.locked():
            raise RuntimeError("a scrape is in progress")
        self._collector.figures = Figures.read(self.state)
        try:
            return generate_latest(self.registry)
        finally:
            self._collector.figures = None
