"""Operating llmrt: what metrics cost per chunk, and serving from workers and behind nginx.

Run: ``python bench/bench_scaleout.py [--quick] [--only SECTION]`` (full:
about 90 s on 2 cores; ``--quick``: about 40 s). The scale-out section needs
nginx (``apt-get install -y nginx``). Prints one table per section and
writes ``bench/results/scaleout.json`` (``scaleout-quick.json`` with
``--quick``).

1. ``metrics``: the statistics that ``/metrics`` reads are kept on the call
   path; this section prices them, in one run:

   * the bare call path, µs per chunk of ``async for chunk in call`` over a
     `ScriptedAdapter` (one long call, and many 100-chunk calls), and the same
     with the per-series recording switched off (`StatsCounters.series` and
     the `CallSeries` recording methods the runtime calls swapped for no-ops,
     in this process only; the runtime's global counters stay), taking
     turns; their paired difference is shown, but on a shared machine it is
     mostly noise: the recording is far below the run-to-run spread;
   * so each added operation is also timed alone (fastest of 50 short runs,
     which is what it costs on an idle core): per call, the series lookup, the
     per-provider finish count, the histogram observations and one more
     clock reading, charged to a short call of 100 chunks; per chunk, the
     one test added to the call loop; per frame, the gateway's frame and
     byte counts, charged as if every frame carried one chunk.
     Target: their sum at most 0.2 µs per chunk.
   * a scrape is not on the call path: its CPU milliseconds are shown for a
     typical runtime and for the label bound's worst case (500 series), with
     their share at 10,000 chunks/s and one scrape per 15 s; and the longest
     the trio loop stalls while one runs, with the text written in the loop's
     thread and in a worker thread (what ``/metrics`` does).

2. ``scaleout``: real processes, as deployed. Rows: one ``llmrt serve``
   process; ``llmrt serve --workers N`` for N = 1, 2, 4 (one port,
   SO_REUSEPORT); nginx (the distribution's package, the configuration of
   ``docs/deploy.md``) in front of two single-process gateways. The clients
   run in `LOAD_PROCESSES` other processes (``_load_client.py``): websockets
   that run unpaced demo calls back to back, counting chunks received per
   second, and one probe per client process timing a call's first chunk
   (the demo produces it at once, so that time is what the serving path adds
   under the load; p50 and p99). Each row shows its throughput per serving
   process next to the single process's, from the same run. On a machine
   with few cores the client processes compete with the workers for them:
   read the per-process column with ``cpus`` in mind.

3. ``otel``: the OpenTelemetry middleware (``llmrt.actors.otel``) over SDK
   providers set up as an application would, minus the export (every span
   sampled, recorded and dropped at its end; histograms aggregated in memory):

   * the call path, µs per chunk, with no middleware (bare), a pass-through
     middleware, the otel one over the API's no-op providers and over the SDK,
     for one long call, 100-chunk calls and one-token calls, taking turns,
     differences paired by round (noisy on a shared machine, as above);
   * timed alone (fastest of 50 runs, generator layers driven without trio):
     per chunk, what a generator middleware layer costs and what the otel
     middleware's checks add to it; per call, the span, its event and
     attributes, and the metric records, with the SDK, traces only, metrics
     only and the API alone. Target: the otel layer at most 1 µs per chunk.

``--only SECTION`` runs one section and writes ``scaleout-SECTION.json``
(``-quick`` appended with ``--quick``), leaving the full report alone.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time
import timeit
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AsyncExitStack, contextmanager
from pathlib import Path
from typing import Any

import trio
from _common import environment, median, sized, table, write_json

import llmrt
from llmrt import (
    GenerateOptions,
    open_runtime,
    user_message,
)
from llmrt.actors._runtime import RuntimeCore
from llmrt.actors._stats import CallSeries, StatsCounters
from llmrt.actors.gateway._connection import GatewayState
from llmrt.actors.gateway._counters import GatewayCounters, payload_bytes
from llmrt.actors.gateway._metrics import GatewayMetrics
from llmrt.actors.gateway._protocol import Limits
from llmrt.adapters.scripted import ScriptedAdapter, text_script

TARGET_METRICS_US_PER_CHUNK = 0.2
FULL = {
    "long_chunks": 100_000,
    "short_calls": 1_000,
    "short_chunks": 100,
    "runs": 10,
    "load_seconds": 3,
    "connections": 32,
    "rounds": 3,
}
QUICK = {
    "long_chunks": 20_000,
    "short_calls": 300,
    "short_chunks": 100,
    "runs": 6,
    "load_seconds": 2,
    "connections": 16,
    "rounds": 1,
}
#: Timings of one operation: the fastest of this many short runs. On a shared
#: machine the fastest short run is the one nothing preempted.
REPEAT = 50
#: The scrape's amortisation: this many chunks per second, one scrape per this many seconds.
CHUNKS_PER_S = 10_000
SCRAPE_INTERVAL_S = 15.0
#: Scraped runtimes: providers x models (a typical one, and the label bound's worst case).
SCRAPES = ((3, 5), (5, 100))


def request(model: str = "bench") -> GenerateOptions:
    return GenerateOptions(provider="bench", model=model, messages=(user_message("hi"),))


# ---- the runtime's counting without the metrics, for the A/B --------------------------------
#
# The per-series recording (what the metrics added to the global counters) is
# `StatsCounters.series` and the two `CallSeries` methods the runtime calls;
# switching them off leaves the runtime's own `call_started`/`call_ended`
# as they are, global counters included (no copy to drift). The
# switched-off methods are still called: what the A/B prices is their work.

_BARE_SERIES = StatsCounters().series("bench", "bench", routed=True)


def _no_series(self: StatsCounters, provider: str, model: str, routed: bool) -> CallSeries:
    return _BARE_SERIES


def _no_end(self: CallSeries, kind: str, code: str) -> None:
    pass


def _no_work(self: CallSeries, forwarded: int, started: float, first: float, ended: float) -> None:
    pass


@contextmanager
def metrics_off() -> Iterator[None]:
    saved = (StatsCounters.series, CallSeries.ended, CallSeries.worked)
    StatsCounters.series = _no_series  # type: ignore[method-assign]
    CallSeries.ended = _no_end  # type: ignore[method-assign]
    CallSeries.worked = _no_work  # type: ignore[method-assign]
    try:
        yield
    finally:
        StatsCounters.series, CallSeries.ended, CallSeries.worked = saved  # type: ignore[method-assign]


# ---- 1. metrics ----------------------------------------------------------------------------


async def _calls(rt: llmrt.LlmRuntime, calls: int, expect: int) -> tuple[float, int]:
    """Run ``calls`` calls one after another; seconds and chunks delivered."""
    options = request()
    chunks = 0
    start = time.perf_counter()
    for _ in range(calls):
        async with rt.stream(options) as call:
            async for _chunk in call:
                chunks += 1
    elapsed = time.perf_counter() - start
    if chunks != calls * expect:
        raise SystemExit(f"expected {calls * expect} chunks, got {chunks}")
    return elapsed, chunks


async def call_path(sizes: dict[str, int]) -> dict[str, Any]:
    long_script = text_script(["tok"] * sizes["long_chunks"])
    short_script = text_script(["tok"] * sizes["short_chunks"])
    cases: dict[str, tuple[str, list[Any], int, bool]] = {
        "long": ("one long call, metrics on", long_script, 1, True),
        "long-off": ("one long call, metric recording off", long_script, 1, False),
        "short": (f"{sizes['short_chunks']}-chunk calls, metrics on", short_script, 0, True),
        "short-off": (
            f"{sizes['short_chunks']}-chunk calls, metric recording off",
            short_script,
            0,
            False,
        ),
    }
    samples: dict[str, list[float]] = {key: [] for key in cases}
    async with open_runtime() as rt_long, open_runtime() as rt_short:
        await rt_long.register_adapter(["bench"], ScriptedAdapter(long_script))
        await rt_short.register_adapter(["bench"], ScriptedAdapter(short_script))

        async def run(key: str) -> float:
            _, script, _, on = cases[key]
            rt, calls = (rt_long, 1) if script is long_script else (rt_short, sizes["short_calls"])
            if on:
                elapsed, chunks = await _calls(rt, calls, len(script))
            else:
                with metrics_off():
                    elapsed, chunks = await _calls(rt, calls, len(script))
            return elapsed / chunks * 1e6

        for key in cases:  # warm-up
            await run(key)
        gc.collect()
        gc.freeze()
        # Cases take turns within each round, so that load from other
        # processes falls on all of them alike, in reversed order every other
        # round (a case's predecessor's garbage lands on it); differences are
        # paired by round.
        for round_ in range(sizes["runs"]):
            for key in cases if round_ % 2 == 0 else reversed(cases):
                samples[key].append(await run(key))
        gc.unfreeze()
    out: dict[str, Any] = {
        key: {
            "label": label,
            "us_per_chunk_median": median(samples[key]),
            "samples_us": samples[key],
        }
        for key, (label, *_rest) in cases.items()
    }
    for key in ("long", "short"):
        diffs = [a - b for a, b in zip(samples[key], samples[key + "-off"], strict=True)]
        out[key + "-recording"] = {
            "label": f"recording cost ({key} calls): paired difference",
            "us_per_chunk_median": median(diffs),
            "samples_us": diffs,
        }
    return out


def _noop() -> None:
    pass


def _best_ns(fn: Callable[[], object], number: int) -> float:
    """Fastest of several timings of ``fn``, in ns per call, less an empty call's.

    The fastest run is what the code costs on an idle core; the empty call
    is the timing harness, not the code.
    """
    best = min(timeit.repeat(fn, number=number, repeat=REPEAT))
    empty = min(timeit.repeat(_noop, number=number, repeat=REPEAT))
    return (best - empty) / number * 1e9


def per_chunk_test_ns(iterations: int) -> float:
    """The call loop's one added per-chunk operation (noting the first chunk's time), alone."""

    def with_test() -> None:
        forwarded = 0
        first = 0.0
        now = 1.0
        for _ in range(iterations):
            if not forwarded:
                first = now
            forwarded += 1  # noqa: SIM113 -- the call loop's own counter
        del first

    def without() -> None:
        forwarded = 0
        for _ in range(iterations):
            forwarded += 1  # noqa: SIM113

    return max(0.0, (_best_ns(with_test, 1) - _best_ns(without, 1)) / iterations)


async def per_call_ns() -> dict[str, float]:
    """What the metrics add per call, operation by operation: the per-series recording."""
    async with open_runtime() as rt:
        await rt.register_adapter(["bench"], ScriptedAdapter(text_script(["x"])))
        core: RuntimeCore = rt._core
        stats = core.stats
        routes = core.registry.topology.routes
        series = stats.series("bench", "bench", routed=True)
        clock = trio.lowlevel.current_clock()
        n = 20_000

        def start_extra() -> None:  # call_started's per-series lines
            series_ = stats.series("bench", "bench", "bench" in routes)
            series_.counters.started += 1

        parts = {
            "start: series lookup + started": _best_ns(start_extra, n),
            "end: per-provider finish count": _best_ns(lambda: series.ended("stop", ""), n),
            "work: chunks + two histogram observations": _best_ns(
                lambda: series.worked(100, 1.0, 1.2, 3.0), n
            ),
            "one more clock reading": _best_ns(clock.current_time, n),
        }
    return {key: max(0.0, value) for key, value in parts.items()}


#: The statements `Connection._writer` runs per frame sent, as written there.
_PER_FRAME = """
counters.frames_sent += 1
counters.bytes_sent += (
    len(data) if type(data) is bytes or data.isascii() else payload_bytes(data)
)
"""


def per_frame_ns(frames: int) -> float:
    """The gateway's counting per frame sent (frame count and UTF-8 payload length)."""
    names = {
        "counters": GatewayCounters(),
        "data": '{"type":"chunk","id":"c1","chunk":{"type":"text-delta","index":0,"text":"tok"}}',
        "payload_bytes": payload_bytes,
    }
    best = min(timeit.repeat(_PER_FRAME, globals=names, number=frames, repeat=REPEAT))
    empty = min(timeit.repeat("pass", globals=names, number=frames, repeat=REPEAT))
    return max(0.0, (best - empty) / frames * 1e9)


async def _max_gap_ms(work: Callable[[], Awaitable[object]]) -> float:
    """The longest the trio loop left a ticking task waiting while ``work`` ran."""
    gap = 0.0
    done = False

    async def tick() -> None:
        nonlocal gap
        last = time.perf_counter()
        while not done:
            await trio.lowlevel.checkpoint()
            now = time.perf_counter()
            gap = max(gap, now - last)
            last = now

    async with trio.open_nursery() as nursery:
        nursery.start_soon(tick)
        await trio.sleep(0.01)
        gap = 0.0
        await work()
        done = True
    return gap * 1e3


async def scrape_ms(providers: int, models: int) -> dict[str, Any]:
    """One ``/metrics`` render of a runtime with providers x models series."""
    async with open_runtime() as rt:
        stats: StatsCounters = rt._core.stats
        for p in range(providers):
            for m in range(models):
                series = stats.series(f"provider-{p}", f"model-{m}", routed=True)
                series.counters.started += 1
                series.counters.finished["stop", ""] += 1
                series.first_chunk.observe(0.2)
                series.duration.observe(3.0)
        state = GatewayState(runtime=rt, limits=Limits(), version=llmrt.__version__, token=None)
        metrics = GatewayMetrics(state)
        body = metrics.render_now()
        times = timeit.repeat(metrics.render_now, number=1, repeat=9)

        async def inline() -> None:
            metrics.render_now()

        async def threaded() -> None:
            await metrics.render()

        stall_inline = median([await _max_gap_ms(inline) for _ in range(5)])
        stall_threaded = median([await _max_gap_ms(threaded) for _ in range(5)])
    ms = min(times) * 1e3
    return {
        "series": providers * models,
        "bytes": len(body),
        "ms_best": ms,
        "us_per_chunk_amortised": ms * 1e3 / (CHUNKS_PER_S * SCRAPE_INTERVAL_S),
        "loop_stall_ms_if_inline": stall_inline,
        "loop_stall_ms_threaded": stall_threaded,
    }


async def metrics_section(sizes: dict[str, int]) -> dict[str, Any]:
    path = await call_path(sizes)
    calls = await per_call_ns()
    per_call = sum(calls.values())
    chunks_per_call = sizes["short_chunks"]
    test_ns = per_chunk_test_ns(20_000)
    frame_ns = per_frame_ns(20_000)
    scrapes = [await scrape_ms(p, m) for p, m in SCRAPES]
    hot = per_call / chunks_per_call / 1e3 + test_ns / 1e3 + frame_ns / 1e3
    return {
        "sizes": sizes,
        "call_path": path,
        "per_call_ns": calls,
        "per_call_ns_total": per_call,
        "chunks_per_call_charged": chunks_per_call,
        "per_chunk_test_ns": test_ns,
        "per_frame_counting_ns": frame_ns,
        "scrapes": scrapes,
        "scrape_amortisation": f"{CHUNKS_PER_S:,} chunks/s, one scrape per {SCRAPE_INTERVAL_S:g} s",
        "metrics_us_per_chunk": hot,
        "target_us_per_chunk": TARGET_METRICS_US_PER_CHUNK,
        "meets_target": hot <= TARGET_METRICS_US_PER_CHUNK,
    }


def print_metrics(section: dict[str, Any]) -> None:
    path = section["call_path"]
    print("\n1. metrics: the call path with and without metric recording (median of runs)")
    rows = [[key, case["label"], case["us_per_chunk_median"]] for key, case in path.items()]
    print(table(["case", "what", "µs/chunk"], rows))
    n = section["chunks_per_call_charged"]
    rows = [[f"per call: {key}", value / 1e3, value / n / 1e3]
            for key, value in section["per_call_ns"].items()]  # fmt: skip
    rows += [
        ["per chunk: the first-chunk test in the call loop", None,
         section["per_chunk_test_ns"] / 1e3],
        ["per frame: gateway frame and byte counts (1 chunk/frame)", None,
         section["per_frame_counting_ns"] / 1e3],
        ["metrics on the hot path, total", None, section["metrics_us_per_chunk"]],
        ["bare call path (one long call, median), for scale", None,
         path["long"]["us_per_chunk_median"]],
    ]  # fmt: skip
    print(
        f"\nmetrics cost, each part timed alone (fastest of {REPEAT} short runs), "
        f"per call charged to {n} chunks"
    )
    print(table(["part", "µs/call", "µs/chunk"], rows))
    verdict = "ok" if section["meets_target"] else "MISS"
    print(f"target metrics <= {section['target_us_per_chunk']} µs/chunk: {verdict}")
    rows = [[s["series"], s["bytes"], s["ms_best"], s["us_per_chunk_amortised"],
             s["loop_stall_ms_if_inline"], s["loop_stall_ms_threaded"]]
            for s in section["scrapes"]]  # fmt: skip
    print(
        f"\nscrape: CPU ms (fastest of 9), amortised at {section['scrape_amortisation']}; "
        "longest trio-loop stall while it runs (median of 5): written in the loop's "
        "thread vs in a worker thread (what /metrics does)"
    )
    print(
        table(["series", "bytes", "ms", "µs/chunk", "stall ms inline", "stall ms threaded"], rows)
    )


# ---- 2. scale-out ----------------------------------------------------------------------

#: The process helpers the scale-out tests use (``serving``, ``running_nginx``).
TESTS = Path(__file__).resolve().parent.parent / "tests"
LOAD_CLIENT = Path(__file__).resolve().parent / "_load_client.py"
#: Client processes of each row (each runs half the connections and one probe).
LOAD_PROCESSES = 2
FAST_CONFIG = '[[provider]]\nroute = "fast"\nadapter = "demo"\n'


def _percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def _load(url: str, seconds: float, connections: int) -> dict[str, Any]:
    """Run the load from `LOAD_PROCESSES` client processes at once; their sum."""
    results: list[dict[str, Any]] = []
    client = str(LOAD_CLIENT)
    share = max(1, connections // LOAD_PROCESSES)

    async def one() -> None:
        done = await trio.run_process(
            [sys.executable, client, url, str(seconds), str(share)], capture_stdout=True
        )
        results.append(json.loads(done.stdout))

    async with trio.open_nursery() as nursery:
        for _ in range(LOAD_PROCESSES):
            nursery.start_soon(one)
    first = [s for r in results for s in r["first_chunk_s"]]
    elapsed = max(r["seconds"] for r in results)
    chunks = sum(r["chunks"] for r in results)
    return {
        "chunks": chunks,
        "calls": sum(r["calls"] for r in results),
        "seconds": elapsed,
        "chunks_per_s": chunks / elapsed,
        "probes": len(first),
        "first_chunk_ms_p50": 1e3 * _percentile(first, 0.5),
        "first_chunk_ms_p99": 1e3 * _percentile(first, 0.99),
    }


async def scaleout_section(sizes: dict[str, int]) -> dict[str, Any]:
    sys.path.insert(0, str(TESTS))
    from _nginx import running_nginx
    from _serving import serving

    seconds, connections, rounds = sizes["load_seconds"], sizes["connections"], sizes["rounds"]
    loads: dict[str, list[dict[str, Any]]] = {}
    processes: dict[str, int] = {}
    urls: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        config = directory / "llmrt.toml"
        config.write_text(FAST_CONFIG)
        # Every row's servers run at once (idle ones cost nothing) and the rows
        # take turns, round after round: on a shared machine each row meets
        # the same spread of neighbours' load.
        async with AsyncExitStack() as stack:
            single = await stack.enter_async_context(serving("--config", str(config)))
            urls["single process"] = f"ws://127.0.0.1:{await single.port()}/"
            processes["single process"] = 1
            for n in (1, 2, 4):
                served = await stack.enter_async_context(
                    serving("--config", str(config), "--workers", str(n))
                )
                port = await served.port()
                await served.expect(rf"^workers ready: {n}$")
                urls[f"--workers {n}"] = f"ws://127.0.0.1:{port}/"
                processes[f"--workers {n}"] = n
            behind = [
                await stack.enter_async_context(
                    serving("--config", str(config), "--max-connections-per-peer", "1000")
                )
                for _ in range(2)
            ]
            ports = [await gateway.port() for gateway in behind]
            nginx = await stack.enter_async_context(running_nginx(ports, directory))
            urls["nginx -> 2 gateways"] = nginx.url
            processes["nginx -> 2 gateways"] = 2
            for _ in range(rounds):
                for name, url in urls.items():
                    loads.setdefault(name, []).append(await _load(url, seconds, connections))
    rows: dict[str, dict[str, Any]] = {}
    for name, runs in loads.items():
        rows[name] = {
            "processes": processes[name],
            "runs": runs,
            "chunks_per_s": median([r["chunks_per_s"] for r in runs]),
            "first_chunk_ms_p50": median([r["first_chunk_ms_p50"] for r in runs]),
            "first_chunk_ms_p99": median([r["first_chunk_ms_p99"] for r in runs]),
        }
    single_rate = rows["single process"]["chunks_per_s"]
    for row in rows.values():
        row["chunks_per_s_per_process"] = row["chunks_per_s"] / row["processes"]
        row["per_process_vs_single"] = row["chunks_per_s_per_process"] / single_rate
    return {
        "load_seconds": seconds,
        "connections": connections,
        "rounds": rounds,
        "client_processes": LOAD_PROCESSES,
        "cpus": os.cpu_count(),
        "rows": rows,
    }


def print_scaleout(section: dict[str, Any]) -> None:
    print(
        f"\n2. scale-out: {section['connections']} websockets from "
        f"{section['client_processes']} client processes, unpaced demo calls back to back "
        f"for {section['load_seconds']} s, plus one probe call per 20 ms per client process "
        f"(time to first chunk = what the serving path adds); median of {section['rounds']} "
        f"rounds, rows taking turns; {section['cpus']} CPUs"
    )
    rows = [
        [name, r["processes"], r["chunks_per_s"], r["chunks_per_s_per_process"],
         r["per_process_vs_single"], r["first_chunk_ms_p50"], r["first_chunk_ms_p99"]]
        for name, r in section["rows"].items()
    ]  # fmt: skip
    headers = ["serving", "processes", "chunks/s", "per process", "vs single",
               "added ms p50", "added ms p99"]  # fmt: skip
    print(table(headers, rows))


#: Sections of this benchmark: name -> (run, print).


# ---- 3. otel -------------------------------------------------------------------------------
#
# The OpenTelemetry middleware against the bare call path. The SDK is set up
# as an application would, minus the export: a TracerProvider (every span
# sampled and recorded, then dropped at its end: no processor) and a
# MeterProvider with an in-memory reader (the histograms aggregate on record).

TARGET_OTEL_US_PER_CHUNK = 1.0
#: Calls of a one-token answer (5 chunks): per-call cost dominates.
TINY = ["tok"]


async def _pass_through(
    request: GenerateOptions, nxt: Callable[[GenerateOptions], Any]
) -> Any:  # AsyncIterator[StreamChunk]
    async for chunk in nxt(request):
        yield chunk


def _sdk_otel(
    api_only: bool = False, traces: bool = True, metrics: bool = True
) -> tuple[Any, Callable[[], None]]:
    """The otel middleware over SDK providers (the API's no-op ones where not); a cleanup."""
    from opentelemetry.metrics import NoOpMeterProvider
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import NoOpTracerProvider

    from llmrt.actors.otel import otel_middleware

    tracer_provider: Any = NoOpTracerProvider()
    meter_provider: Any = NoOpMeterProvider()
    if traces and not api_only:
        tracer_provider = TracerProvider()
    if metrics and not api_only:
        meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])

    def close() -> None:
        for provider in (tracer_provider, meter_provider):
            shutdown = getattr(provider, "shutdown", None)
            if shutdown is not None:
                shutdown()

    return otel_middleware(tracer_provider=tracer_provider, meter_provider=meter_provider), close


async def otel_call_path(sizes: dict[str, int]) -> dict[str, Any]:
    """µs per chunk: bare / a pass-through middleware / otel, taking turns, paired."""
    long_script = text_script(["tok"] * sizes["long_chunks"])
    short_script = text_script(["tok"] * sizes["short_chunks"])
    tiny_script = text_script(TINY)
    scripts = {"long": (long_script, 1), "short": (short_script, sizes["short_calls"]),
               "tiny": (tiny_script, sizes["short_calls"])}  # fmt: skip
    otel, close = _sdk_otel()
    noop_otel, _ = _sdk_otel(api_only=True)
    stacks: dict[str, tuple[Any, ...]] = {
        "bare": (),
        "pass-through": (_pass_through,),
        "otel (API only, no SDK)": (noop_otel,),
        "otel (SDK)": (otel,),
    }
    samples: dict[tuple[str, str], list[float]] = {
        (shape, stack): [] for shape in scripts for stack in stacks
    }
    runtimes: dict[tuple[str, str], llmrt.LlmRuntime] = {}
    try:
        async with trio.open_nursery() as nursery:
            ready = trio.Event()
            done = trio.Event()

            async def hold(shape: str, stack: str) -> None:
                async with open_runtime() as rt:
                    for middleware in stacks[stack]:
                        rt.use(middleware)
                    await rt.register_adapter(["bench"], ScriptedAdapter(scripts[shape][0]))
                    runtimes[shape, stack] = rt
                    if len(runtimes) == len(samples):
                        ready.set()
                    await done.wait()

            for key in samples:
                nursery.start_soon(hold, *key)
            await ready.wait()

            async def run(shape: str, stack: str) -> float:
                script, calls = scripts[shape]
                elapsed, chunks = await _calls(runtimes[shape, stack], calls, len(script))
                return elapsed / chunks * 1e6

            for key in samples:  # warm-up
                await run(*key)
            gc.collect()
            gc.freeze()
            keys = list(samples)
            for round_ in range(sizes["runs"]):
                for key in keys if round_ % 2 == 0 else reversed(keys):
                    samples[key].append(await run(*key))
            gc.unfreeze()
            done.set()
    finally:
        close()
    out: dict[str, Any] = {}
    for shape, (script, _) in scripts.items():
        chunks = len(script)
        row: dict[str, Any] = {"chunks_per_call": chunks}
        for stack in stacks:
            row[stack] = median(samples[shape, stack])
        for stack in ("otel (SDK)", "otel (API only, no SDK)", "pass-through"):
            diffs = [
                a - b for a, b in zip(samples[shape, stack], samples[shape, "bare"], strict=True)
            ]
            row[f"{stack} - bare"] = median(diffs)
        diffs = [a - b for a, b in zip(samples[shape, "otel (SDK)"], samples[shape, "pass-through"],
                                       strict=True)]  # fmt: skip
        row["otel (SDK) - pass-through"] = median(diffs)
        row["otel (SDK) - bare, per call µs"] = row["otel (SDK) - bare"] * chunks
        out[shape] = row
    return out


def otel_per_chunk_ns(chunks: int) -> dict[str, float]:
    """The middleware's own per-chunk work, alone: generator layers driven without trio.

    An async generator that yields prebuilt chunks (never suspending) is
    consumed (a) directly, (b) through a pass-through middleware and (c)
    through the otel middleware; the fastest of `REPEAT` runs each. (b) - (a)
    is what any generator middleware costs per chunk; (c) - (b) is what the
    otel middleware's checks add to that; (c) - (a) is the otel layer in all.
    """
    otel, close = _sdk_otel()
    steps = text_script(["tok"] * chunks)

    def source(_request: GenerateOptions) -> Any:
        async def gen() -> Any:
            for step in steps:
                yield step

        return gen()

    async def drain(stream: Any) -> None:
        async for _ in stream:
            pass

    options = request()

    def drive(make: Callable[[], Any]) -> Callable[[], None]:
        def once() -> None:
            coro = drain(make())
            try:
                coro.send(None)
            except StopIteration:
                return
            raise RuntimeError("the pipeline suspended")

        return once

    timings = {}
    for name, make in (
        ("direct", lambda: source(options)),
        ("pass-through", lambda: _pass_through(options, source)),
        ("otel (SDK)", lambda: otel(options, source)),
    ):
        best = min(timeit.repeat(drive(make), number=1, repeat=REPEAT))
        timings[name] = best / len(steps) * 1e9
    close()
    return {
        "direct ns/chunk": timings["direct"],
        "pass-through layer ns/chunk": timings["pass-through"] - timings["direct"],
        "otel checks over pass-through ns/chunk": timings["otel (SDK)"] - timings["pass-through"],
        "otel layer in all ns/chunk": timings["otel (SDK)"] - timings["direct"],
    }


def _drive_calls(middleware: Any, calls: int) -> Callable[[], None]:
    """``calls`` one-token streams through ``middleware``, consumed without trio."""
    steps = text_script(TINY)
    options = request()

    def source(_request: GenerateOptions) -> Any:
        async def gen() -> Any:
            for step in steps:
                yield step

        return gen()

    async def drain_many() -> None:
        for _ in range(calls):
            async for _chunk in middleware(options, source):
                pass

    def once() -> None:
        coro = drain_many()
        try:
            coro.send(None)
        except StopIteration:
            return
        raise RuntimeError("the pipeline suspended")

    return once


def otel_per_call_us(calls: int) -> dict[str, float]:
    """The otel middleware's per-call work (span, event, attributes, metrics), alone.

    One-token streams (5 chunks) driven without trio: (otel - pass-through)
    per call, the fastest of `REPEAT` runs of ``calls`` calls each.
    """
    results = {}
    plain = min(timeit.repeat(_drive_calls(_pass_through, calls), number=1, repeat=REPEAT))
    for label, kw in (
        ("SDK", {}),
        ("SDK traces only", {"metrics": False}),
        ("SDK metrics only", {"traces": False}),
        ("API only, no SDK", {"api_only": True}),
    ):
        otel, close = _sdk_otel(**kw)
        traced = min(timeit.repeat(_drive_calls(otel, calls), number=1, repeat=REPEAT))
        close()
        results[label] = (traced - plain) / calls * 1e6
    return results


async def otel_section(sizes: dict[str, int]) -> dict[str, Any]:
    path = await otel_call_path(sizes)
    chunk = otel_per_chunk_ns(sizes["short_chunks"] * 10)
    per_call = otel_per_call_us(20)
    layer_us = chunk["otel layer in all ns/chunk"] / 1e3
    return {
        "sizes": sizes,
        "call_path": path,
        "per_chunk_alone": chunk,
        "per_call_us_alone": per_call,
        "otel_us_per_chunk": layer_us,
        "otel_us_per_chunk_end_to_end": path["long"]["otel (SDK) - bare"],
        "target_us_per_chunk": TARGET_OTEL_US_PER_CHUNK,
        "meets_target": max(layer_us, path["long"]["otel (SDK) - bare"])
        <= TARGET_OTEL_US_PER_CHUNK,
    }


def print_otel(section: dict[str, Any]) -> None:
    path = section["call_path"]
    stacks = ["bare", "pass-through", "otel (API only, no SDK)", "otel (SDK)"]
    print("\n2. otel: the call path with no middleware, a pass-through one, and the otel one")
    rows = [[shape, row["chunks_per_call"], *(row[s] for s in stacks),
             row["otel (SDK) - bare"], row["otel (SDK) - pass-through"]]
            for shape, row in path.items()]  # fmt: skip
    print(table(["calls", "chunks/call", "bare", "pass-through", "otel API only", "otel SDK",
                 "otel - bare", "otel - pass"], rows))  # fmt: skip
    print("(µs/chunk, medians; differences paired by round)")
    rows = [[key, value / 1e3] for key, value in section["per_chunk_alone"].items()]
    rows += [[f"per call: span + event + metrics ({key}), µs/call", value]
             for key, value in section["per_call_us_alone"].items()]  # fmt: skip
    print(f"\notel cost timed alone (fastest of {REPEAT} runs, no trio scheduling)")
    print(table(["part", "µs"], rows))
    verdict = "ok" if section["meets_target"] else "MISS"
    print(
        f"target otel <= {section['target_us_per_chunk']} µs/chunk "
        f"(layer alone {section['otel_us_per_chunk']:.3f}, "
        f"end to end {section['otel_us_per_chunk_end_to_end']:.3f}): {verdict}"
    )


#: Sections of this benchmark: name -> (run, print). The workers issue adds
#: its rows here.
SECTIONS: dict[
    str,
    tuple[Callable[[dict[str, int]], Awaitable[dict[str, Any]]], Callable[[dict[str, Any]], None]],
] = {
    "metrics": (metrics_section, print_metrics),
    "scaleout": (scaleout_section, print_scaleout),
    "otel": (otel_section, print_otel),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes (about 10 s)")
    parser.add_argument("--only", choices=list(SECTIONS), help="run one section")
    args = parser.parse_args(argv)
    sizes = sized(QUICK if args.quick else FULL)
    command = "python bench/bench_scaleout.py" + (" --quick" if args.quick else "")
    started = time.perf_counter()
    report: dict[str, Any] = {
        "benchmark": "scaleout",
        "command": command,
        "statistic": "median",
        "environment": environment(),
    }
    for name, (run, show) in SECTIONS.items():
        if args.only in (None, name):
            report[name] = trio.run(run, sizes)
            show(report[name])
    report["elapsed_s"] = time.perf_counter() - started
    # A partial run gets its own file: it never overwrites the full report.
    name = "scaleout" + (f"-{args.only}" if args.only else "") + ("-quick" if args.quick else "")
    path = write_json(f"{name}.json", report)
    print(f"\nwrote {path.relative_to(path.parents[2])} in {report['elapsed_s']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
