"""Prometheus metrics: values equal the runtime's statistics, labels stay bounded.

The exposition is parsed back with prometheus-client's own parser, so what
is checked is what Prometheus would store.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import trio
from prometheus_client.parser import text_string_to_metric_families

import llmrt
from llmrt import (
    BlockStart,
    ErrorCode,
    GenerateOptions,
    LlmError,
    NormalRetryPolicy,
    TextDelta,
)
from llmrt.actors._statistics import HistogramSnapshot
from llmrt.actors._stats import (
    ABORT_BUCKETS,
    LATENCY_BUCKETS,
    MAX_MODELS_PER_PROVIDER,
    OTHER,
    StatsCounters,
)
from llmrt.actors.gateway import GatewayServer, serve_gateway
from llmrt.adapters.openai_chat import OpenAIChatAdapter
from llmrt.adapters.scripted import Delay, Raise, ScriptedAdapter, Stall, Step, text_script
from llmrt.testing import SSEScript, open_upstream, openai_events

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@asynccontextmanager
async def gateway(rt: llmrt.LlmRuntime) -> AsyncIterator[GatewayServer]:
    async with trio.open_nursery() as nursery:
        server = await nursery.start(partial(serve_gateway, rt))
        try:
            yield server
        finally:
            nursery.cancel_scope.cancel()


def scrape(server: GatewayServer) -> Samples:
    samples: Samples = {}
    for family in text_string_to_metric_families(server.metrics_text().decode()):
        for s in family.samples:
            samples[s.name, frozenset(s.labels.items())] = s.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[name, frozenset(labels.items())]


def series_of(samples: Samples, name: str) -> list[dict[str, str]]:
    return [dict(labels) for sample, labels in samples if sample == name]


def script(options: GenerateOptions) -> list[Step]:
    match options.model:
        case "ok":
            return [Delay(0.5), *text_script(["a", "b"])]
        case "limited":
            return [Raise(LlmError(ErrorCode.RATE_LIMIT, "slow down", status=429))]
        case "stall":
            return [BlockStart(index=0, block_type="text"), TextDelta(index=0, text="x"), Stall()]
        case _:
            return text_script(["fine"])


def opts(model: str, provider: str = "p") -> GenerateOptions:
    return GenerateOptions(provider=provider, model=model, messages=(llmrt.user_message("hi"),))


async def drain(call: Any) -> list[Any]:
    async with call as c:
        return [chunk async for chunk in c]


def check_histogram(samples: Samples, name: str, snap: HistogramSnapshot, **labels: str) -> None:
    running = 0
    for bound, count in zip(snap.upper_bounds, snap.counts, strict=True):
        running += count
        le = "+Inf" if bound == float("inf") else repr(float(bound))
        assert value(samples, name + "_bucket", le=le, **labels) == running
    assert value(samples, name + "_count", **labels) == snap.count
    assert value(samples, name + "_sum", **labels) == snap.sum


async def test_metrics_after_scripted_calls_equal_the_runtime_statistics(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], ScriptedAdapter(script), stream_idle_timeout=5.0)
        for _ in range(2):
            await drain(rt.stream(opts("ok")))
        await drain(rt.stream(opts("limited")))
        async with rt.stream(opts("stall")) as call:
            await call.__anext__()
            await call.__anext__()
            call.abort()
            assert [type(c).__name__ async for c in call] == ["Finish"]
        await drain(rt.stream(opts("stall")))  # the idle watchdog ends it after 5 s
        await drain(rt.stream(opts("m", provider="nope")))
        policy = NormalRetryPolicy(max_retries=1, retryable_codes=("RATE_LIMIT",))
        await drain(rt.stream_with_retry(opts("limited"), policy=policy))

        async with gateway(rt) as server:
            samples = scrape(server)
        stats = rt.statistics()

        # The figures the script implies...
        def finished(provider: str, reason: str, code: str) -> float:
            return value(
                samples, "llmrt_calls_finished_total", provider=provider, reason=reason, code=code
            )

        assert value(samples, "llmrt_calls_started_total", provider="p") == 7
        assert finished("p", "stop", "") == 2
        assert finished("p", "error", "RATE_LIMIT") == 3
        assert finished("p", "aborted", "ABORTED") == 1
        assert finished("p", "error", "TIMEOUT") == 1
        assert value(samples, "llmrt_calls_started_total", provider=OTHER) == 1
        assert finished(OTHER, "error", "NO_ADAPTER") == 1
        assert value(samples, "llmrt_idle_timeouts_total") == 1
        assert value(samples, "llmrt_retries_total", code="RATE_LIMIT") == 1
        assert value(samples, "llmrt_retried_call_attempts_bucket", le="1.0") == 0
        assert value(samples, "llmrt_retried_call_attempts_bucket", le="2.0") == 1
        ttfc = "llmrt_time_to_first_chunk_seconds"
        assert value(samples, ttfc + "_bucket", provider="p", model="ok", le="0.25") == 0
        assert value(samples, ttfc + "_bucket", provider="p", model="ok", le="0.5") == 2
        assert value(samples, ttfc + "_sum", provider="p", model="ok") == 1.0
        # Mock time stands still between the abort and its finish.
        assert value(samples, "llmrt_abort_to_finish_seconds_bucket", le="1e-05") == 1
        # ... equal the runtime's statistics, series by series.
        assert value(samples, "llmrt_calls_in_flight", provider="p") == 0
        assert stats.calls_started == 8 and stats.watchdog_firings == 1
        for ps in stats.providers:
            provider = ps.provider
            started = value(samples, "llmrt_calls_started_total", provider=provider)
            assert started == ps.calls_started
            forwarded = value(samples, "llmrt_chunks_forwarded_total", provider=provider)
            assert forwarded == ps.chunks_forwarded
            for entry in ps.calls_finished:
                reason, code, count = entry.reason, entry.code, entry.count
                assert finished(provider, reason, code) == count
        assert sum(ps.chunks_forwarded for ps in stats.providers) == (stats.chunks_forwarded)
        for entry in stats.time_to_first_chunk:
            provider, model, snap = entry.provider, entry.model, entry.histogram
            check_histogram(samples, ttfc, snap, provider=provider, model=model)
        for entry in stats.call_duration:
            provider, model, snap = entry.provider, entry.model, entry.histogram
            check_histogram(
                samples, "llmrt_call_duration_seconds", snap, provider=provider, model=model
            )
        check_histogram(samples, "llmrt_abort_to_finish_seconds", stats.abort_to_finish)
        assert value(samples, "llmrt_registrations") == stats.registrations == 1


async def test_labels_stay_bounded_under_a_thousand_model_and_provider_names() -> None:
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], ScriptedAdapter(script))
        for i in range(1000):
            await drain(rt.stream(opts(f"model-{i}")))
            await drain(rt.stream(opts("m", provider=f"nobody-{i}")))
        await drain(rt.stream(opts("x" * 1000)))  # too long for a label, even early on
        async with gateway(rt) as server:
            samples = scrape(server)
    durations = series_of(samples, "llmrt_call_duration_seconds_count")
    models = {labels["model"] for labels in durations if labels["provider"] == "p"}
    assert len(models) == MAX_MODELS_PER_PROVIDER + 1
    assert {f"model-{i}" for i in range(MAX_MODELS_PER_PROVIDER)} | {OTHER} == models
    assert {labels["provider"] for labels in durations} == {"p", OTHER}
    count = "llmrt_call_duration_seconds_count"
    assert value(samples, count, provider="p", model=OTHER) == 1000 - MAX_MODELS_PER_PROVIDER + 1
    assert value(samples, count, provider=OTHER, model=OTHER) == 1000
    assert value(samples, "llmrt_calls_started_total", provider=OTHER) == 1000
    # Two histograms of (buckets + count + sum) samples per series, plus a few
    # hundred others: the size does not grow with the names callers send.
    per_histogram = (MAX_MODELS_PER_PROVIDER + 2) * (len(LATENCY_BUCKETS) + 2)
    assert len(samples) < 2 * per_histogram + 200


async def test_unknown_failure_codes_fold_into_one_label() -> None:
    odd = [Raise(LlmError("SOMETHING_NEW_" + str(i), "odd")) for i in range(5)]
    async with llmrt.open_runtime() as rt:
        for i, step in enumerate(odd):
            await rt.register_adapter([f"p{i}"], ScriptedAdapter([step]))
            await drain(rt.stream(opts("m", provider=f"p{i}")))
        async with gateway(rt) as server:
            samples = scrape(server)
    codes = {labels["code"] for labels in series_of(samples, "llmrt_calls_finished_total")}
    assert codes == {OTHER}
    assert rt.statistics().failures_by_code["SOMETHING_NEW_0"] == 1  # the statistics keep them


def test_series_are_shared_per_label_pair_and_bounded_per_provider() -> None:
    counters = StatsCounters()
    first = counters.series("p", "m", routed=True)
    assert counters.series("p", "m", routed=True) is first
    assert counters.series("q", "m", routed=False).provider == OTHER
    for i in range(MAX_MODELS_PER_PROVIDER + 5):
        counters.series("p", f"n{i}", routed=True)
    assert counters.series("p", "late", routed=True).model == OTHER
    assert counters.series("p", "m", routed=True) is first  # kept models keep their label
    assert first.first_chunk.bounds == LATENCY_BUCKETS


def test_histogram_buckets_count_values_at_most_each_bound() -> None:
    counters = StatsCounters()
    hist = counters.abort_to_finish
    for v in (0.0, 0.00001, 0.0000100001, 5.0):
        hist.observe(v)
    snap = hist.snapshot()
    assert snap.upper_bounds == ABORT_BUCKETS
    assert snap.counts[0] == 2 and snap.counts[1] == 1 and snap.counts[-1] == 1
    assert snap.count == 4 and snap.sum == 0.0 + 0.00001 + 0.0000100001 + 5.0


async def test_upstream_connection_pools_are_read_at_scrape_time() -> None:
    done = SSEScript(events=openai_events(["one", "two"]))
    stalled = SSEScript(events=openai_events(["one", "two"]), stall_after=2)
    async with open_upstream([done, stalled]) as upstream, llmrt.open_runtime() as rt:
        adapter = OpenAIChatAdapter(
            base_url=upstream.base_url, api_key_env="K", environ={"K": "sk-test-key-1"}
        )
        await rt.register_adapter(["up", "up-too"], adapter)
        await rt.register_adapter(["p"], ScriptedAdapter(script))  # keeps no pool
        assert rt.statistics().pool("up").open == 0
        await drain(rt.stream(opts("m", provider="up")))
        pools = rt.statistics().connection_pools
        assert {p.provider for p in pools} == {"up"}  # one entry per adapter, under its first route
        assert (pools[0].open, pools[0].idle) == (1, 1)  # back in the pool
        async with gateway(rt) as server, rt.stream(opts("m", provider="up")) as call:
            await call.__anext__()  # the stalled response holds the connection
            samples = scrape(server)
            assert value(samples, "llmrt_upstream_connections", provider="up") == 1
            assert value(samples, "llmrt_upstream_connections_idle", provider="up") == 0
            call.abort()
        # Aborted mid-body: the connection is closed, not pooled.
        pool = rt.statistics().pool("up")
        assert (pool.open, pool.idle) == (0, 0)


async def test_abort_to_finish_counts_an_abort_at_time_zero(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], ScriptedAdapter(script))
        assert trio.current_time() == 0.0
        async with rt.stream(opts("stall")) as call:
            call.abort()  # before the call task ran: no adapter work at all
            assert [type(c).__name__ async for c in call] == ["Finish"]
        snap = rt.statistics().abort_to_finish
        assert snap.count == 1 and snap.sum == 0.0
        # A call aborted before its adapter started has no duration to report.
        assert rt.statistics().call_duration_of("p", "stall").count == 0
