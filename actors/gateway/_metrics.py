"""``GET /metrics``: the runtime's statistics and the gateway's counters, read at scrape time.

Nothing here runs on the call path. `LlmRuntime.statistics()` and the
gateway's own counters become prometheus-client metric families when
Prometheus scrapes (nothing is registered process-wide), and `_exposition`
writes them in the text format prometheus-client writes, in a worker
thread. ``docs/operations.md`` lists every metric.

A process renders at most once per `CACHE_SECONDS` however many scrapers
ask: scrapes that arrive while a render runs share it (single flight), and
later ones within the period get the same text. Writing the text holds the
interpreter lock for as long as it takes (a few tens of milliseconds at the
label bound); sixteen scrapers polling in parallel used to pay it sixteen
times over, starving the streams of the process.

Label values are bounded: providers and models as the statistics bound them
(`llmrt.actors._stats.OTHER`), finish reasons by the closed set of finish
kinds, failure codes by the known codes (any other folds into ``(other)``),
refusal causes by `RefusalCause`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

import attrs
import msgspec
import trio
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from llmrt import ErrorCode

from .._statistics import (
    CallLogStatistics,
    GatewayStatistics,
    ModelHistogram,
    RuntimeStatistics,
)
from .._stats import OTHER
from ..routing._metrics import routing_families
from ._exposition import (
    ModelHistograms,
    Pace,
    Pacer,
    bucket_list,
    le_label,
    no_pace,
    write_exposition,
)
from ._protocol import GatewayErrorCode

if TYPE_CHECKING:
    from ._connection import GatewayState

__all__ = [
    "ATTEMPT_BUCKETS",
    "CACHE_SECONDS",
    "Figures",
    "GatewayMetrics",
    "Render",
    "metric_families",
    "write_exposition",
]

_KNOWN_CODES = frozenset(str(code) for code in (*ErrorCode, *GatewayErrorCode))
#: Bucket bounds of the retried calls' attempt counts.
ATTEMPT_BUCKETS = (1, 2, 3, 4, 5, 10)
#: How long one rendered ``/metrics`` answer serves later scrapes (trio's clock).
CACHE_SECONDS = 1.0


def _code(code: str) -> str:
    return code if not code or code in _KNOWN_CODES else OTHER


def _histograms(name: str, doc: str, series: Sequence[ModelHistogram]) -> ModelHistograms:
    return ModelHistograms(name, doc, series)  # sorted by label already


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
    for ps in stats.providers:
        provider = ps.provider
        started.add_metric([provider], ps.calls_started)
        in_flight.add_metric([provider], ps.calls_in_flight)
        chunks.add_metric([provider], ps.chunks_forwarded)
        folded: Counter[tuple[str, str]] = Counter()
        for entry in ps.calls_finished:
            folded[entry.reason, _code(entry.code)] += entry.count
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
        buckets=bucket_list(abort),
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
        (le_label(bound), float(sum(n for a, n in attempts if a <= bound)))
        for bound in ATTEMPT_BUCKETS
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
    for pool in stats.connection_pools:
        upstream.add_metric([pool.provider], pool.open)
        idle.add_metric([pool.provider], pool.idle)
    yield upstream
    yield idle
    cost = CounterMetricFamily(
        "llmrt_cost_usd",
        "US dollars the priced calls cost, by provider and model.",
        labels=["provider", "model"],
    )
    unpriced = CounterMetricFamily(
        "llmrt_unpriced_calls",
        "Calls that reported usage for a model with no known price, by provider and model.",
        labels=["provider", "model"],
    )
    for spent in stats.costs:  # a pair's series once it has something to count
        if spent.priced_calls:
            cost.add_metric([spent.provider, spent.model], spent.cost_usd)
        if spent.unpriced_calls:
            unpriced.add_metric([spent.provider, spent.model], spent.unpriced_calls)
    yield cost
    yield unpriced


def _gateway_families(gw: GatewayStatistics) -> Iterator[Metric]:
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
    gateway: GatewayStatistics
    #: When they were read (trio's clock): later figures of one gateway are never smaller.
    taken: float = 0.0

    def statistics(self) -> RuntimeStatistics:
        """The runtime's figures with the gateway's section: what a ``stats`` frame answers."""
        return msgspec.structs.replace(self.runtime, gateway=self.gateway)

    @classmethod
    def read(cls, state: GatewayState) -> Figures:
        return cls(
            state.version, state.runtime.statistics(), state.statistics(), trio.current_time()
        )


def metric_families(figures: Figures) -> list[Metric]:
    """Every metric family of one scrape. Reads only ``figures``: safe in any thread."""
    info = GaugeMetricFamily("llmrt_build_info", "The llmrt version serving.", labels=["version"])
    info.add_metric([figures.version], 1)
    return [
        info,
        *_runtime_families(figures.runtime),
        *routing_families(figures.runtime.routing),
        *_call_log_families(figures.runtime.call_log),
        *_gateway_families(figures.gateway),
    ]


def _call_log_families(log: CallLogStatistics | None) -> Iterator[Metric]:
    """The call log's records by outcome, its queue and bytes; nothing when it is off."""
    if log is None:
        return
    records = CounterMetricFamily(
        "llmrt_call_log_records_total",
        "Call log records, by outcome: written, dropped (queue full), failed (the sink "
        "raised, a full disk among them), oversized.",
        labels=["outcome"],
    )
    for outcome in ("written", "dropped", "failed", "oversized"):
        records.add_metric([outcome], getattr(log, outcome))
    yield records
    yield GaugeMetricFamily(
        "llmrt_call_log_queued", "Call log records waiting for the writer.", value=log.queued
    )
    yield CounterMetricFamily(
        "llmrt_call_log_bytes_total",
        "Bytes of JSON Lines the call log's sink accepted.",
        value=log.bytes_written,
    )


#: Writes the whole ``/metrics`` answer from this gateway's figures, e.g. summed
#: with other worker processes' (``llmrt.actors.app.workers``). Runs in the
#: scrape's worker thread, so it may read files. A gateway with such a writer
#: caches nothing itself beyond sharing one run among the scrapes that asked
#: during it: the writer keeps its own cache (one shared by the processes).
Render = Callable[[Figures], bytes]


def _own_exposition(figures: Figures, pace: Pace = no_pace) -> bytes:
    return write_exposition(metric_families(figures), pace)


def _paced_exposition(figures: Figures) -> bytes:
    return _own_exposition(figures, Pacer())


@attrs.define(eq=False)
class _Flight:
    """One render in progress; the scrapes that arrive meanwhile wait for its body."""

    done: trio.Event = attrs.field(factory=trio.Event)
    body: bytes | None = None


@attrs.define(eq=False)
class GatewayMetrics:
    """One gateway's ``/metrics``; `render` is the answer.

    The figures are read in the trio thread (a snapshot: cheap), the text is
    written in a worker thread: formatting thousands of samples takes
    milliseconds, which would otherwise stall every stream of the process.
    One render at a time, shared by every scrape that asks while it runs;
    its text serves the scrapes of the next `cache_seconds` too.
    """

    state: GatewayState
    #: None: this gateway's own figures; else see `Render`.
    write: Render | None = None
    #: How long a rendered answer is served again (default `CACHE_SECONDS`, and
    #: 0 with a `Render` of its own).
    cache_seconds: float | None = None
    _ttl: float = attrs.field(default=0.0, init=False)
    _cached: bytes | None = attrs.field(default=None, init=False)
    _cached_at: float = attrs.field(default=-math.inf, init=False)
    _flight: _Flight | None = attrs.field(default=None, init=False)

    def __attrs_post_init__(self) -> None:
        if self.cache_seconds is not None:
            self._ttl = self.cache_seconds
        else:
            self._ttl = CACHE_SECONDS if self.write is None else 0.0

    async def render(self) -> tuple[bytes, str]:
        """The exposition text and its content type. A checkpoint."""
        now = trio.current_time()
        if self._cached is not None and now - self._cached_at < self._ttl:
            await trio.lowlevel.checkpoint()
            return self._cached, CONTENT_TYPE_LATEST
        flight = self._flight
        if flight is not None:
            await flight.done.wait()
            if flight.body is None:
                raise RuntimeError("rendering /metrics failed")
            return flight.body, CONTENT_TYPE_LATEST
        flight = self._flight = _Flight()
        try:
            figures = Figures.read(self.state)
            write = self.write or _paced_exposition
            # Not cancellable: the scrapes sharing this render wait for its text.
            body = await trio.to_thread.run_sync(write, figures)
            flight.body = self._cached = body
            self._cached_at = figures.taken
        finally:
            self._flight = None
            flight.done.set()
        return body, CONTENT_TYPE_LATEST

    def render_now(self) -> bytes:
        """The exposition text, written now in this thread, uncached (tests, benchmarks)."""
        return (self.write or _own_exposition)(Figures.read(self.state))
