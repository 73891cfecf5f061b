"""bench_hostile's gateway cases: ``/metrics`` scraped by many scrapers at once.

The gateway runs in the measuring process with a heartbeat beside it (the
same 1 ms heartbeat as the upstream cases: its worst lateness is the longest
the loop was held) and statistics at the label bound: 5 routes x 101 model
labels, about 1.6 MB of exposition. A child process (so that its own work
is not measured) runs the scrapers, each a loop of ``GET /metrics``, and a
websocket client that pings the gateway and times each pong.

Cases, in one run:

* ``metrics well-behaved``: one scraper, scraping once a second, as one
  Prometheus does: the floor;
* ``parallel scrapes``: 16 scrapers, each scraping again as soon as it has
  its answer (the render cache makes them share one render a second);
* ``parallel scrapes, no cache``: the same with the one-second cache off
  (scrapes that arrive during a render still share it), for comparison.

Before the cache and llmrt's own writer, one render took 125-320 ms in a
worker thread and every scrape had its own: 16 scrapers moved the ping
round trip from p50 1.5 / p99 2.3 ms to 12 / 48 ms.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import trio

import llmrt
from llmrt.actors.gateway import _metrics as gateway_metrics
from llmrt.actors.gateway import serve_gateway

__all__ = ["SCRAPE_CASES", "run_scrape_case"]

ROUTES = 5
MODELS = 101
SECONDS = 3.0
#: (label, scrapers, pause between one scraper's scrapes, render cache on)
SCRAPE_CASES: list[tuple[str, int, float, bool]] = [
    ("metrics well-behaved", 1, 1.0, True),
    ("parallel scrapes", 16, 0.0, True),
    ("parallel scrapes, no cache", 16, 0.0, False),
]


def _fill(rt: llmrt.LlmRuntime) -> None:
    """Statistics at the label bound: every route with 100 model names and ``(other)``."""
    stats = rt._core.stats
    for p in range(ROUTES):
        for m in range(MODELS):
            series = stats.series(f"route-{p}", f"model-{m}", routed=True)
            series.counters.started += 1
            series.counters.finished["stop", ""] += 1
            series.first_chunk.observe(0.2)
            series.duration.observe(3.0)


# ---- the child: scrapers and a pinging client -------------------------------------------------


async def _scraper(port: int, pause: float, until: float, done: list[int]) -> None:
    request = f"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    while trio.current_time() < until:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(request.encode())
            while await stream.receive_some(1 << 20):
                pass
        done[0] += 1
        await trio.sleep(pause)


async def _pinger(port: int, until: float, rtts: list[float]) -> None:
    from trio_websocket import open_websocket_url

    async with open_websocket_url(f"ws://127.0.0.1:{port}/", subprotocols=["llmrt.v1"]) as ws:
        await ws.get_message()  # hello
        n = 0
        while trio.current_time() < until:
            n += 1
            before = time.perf_counter()
            await ws.send_message(json.dumps({"type": "ping", "id": f"p{n}"}))
            await ws.get_message()  # pong
            rtts.append((time.perf_counter() - before) * 1000)
            await trio.sleep(0.005)


async def _child(port: int, scrapers: int, pause: float, seconds: float) -> None:
    until = trio.current_time() + seconds
    done = [0]
    rtts: list[float] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_pinger, port, until, rtts)
        for _ in range(scrapers):
            nursery.start_soon(_scraper, port, pause, until, done)
    print(json.dumps({"scrapes": done[0], "ping_ms": rtts}), flush=True)


def child_main(argv: list[str]) -> None:
    port, scrapers, pause, seconds = argv
    trio.run(_child, int(port), int(scrapers), float(pause), float(seconds))


# ---- the parent: the gateway and its heartbeat --------------------------------------------------


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def run_scrape_case(
    heartbeat: Callable[..., Any], repeats: int, scrapers: int, pause: float, cached: bool
) -> dict[str, Any]:
    """One case, ``repeats`` times: the worst stalls, ping round trips and scrape counts."""
    stalls: list[float] = []
    pings: list[float] = []
    scrapes: list[int] = []
    saved = gateway_metrics.CACHE_SECONDS
    # Read when the gateway's metrics are made: 0 renders every scrape (the old way).
    gateway_metrics.CACHE_SECONDS = saved if cached else 0.0
    try:
        async with llmrt.open_runtime() as rt:
            _fill(rt)
            async with trio.open_nursery() as nursery:
                server = await nursery.start(serve_gateway, rt)
                for _ in range(repeats):
                    worst = [0.0]
                    async with trio.open_nursery() as beat:
                        await beat.start(heartbeat, worst)
                        command = [sys.executable, __file__, str(server.port), str(scrapers)]
                        result = await trio.run_process(
                            [*command, str(pause), str(SECONDS)], capture_stdout=True
                        )
                        beat.cancel_scope.cancel()
                    report = json.loads(result.stdout)
                    stalls.append(worst[0] * 1000)
                    pings.extend(report["ping_ms"])
                    scrapes.append(report["scrapes"])
                nursery.cancel_scope.cancel()
    finally:
        gateway_metrics.CACHE_SECONDS = saved
    return {
        "misbehaviour": "scrapes",
        "options": {"scrapers": scrapers, "pause_s": pause, "cache": cached},
        "prompt_bytes": 0,
        "outcome": (
            f"{statistics.median(scrapes) / SECONDS:.0f} scrapes/s, ping p50 "
            f"{_percentile(pings, 0.5):.1f} / p99 {_percentile(pings, 0.99):.1f} ms"
        ),
        "worst_stall_ms": min(stalls),
        "worst_stall_ms_max_over_runs": max(stalls),
        "worst_stall_ms_runs": stalls,
        "ping_ms_p50": _percentile(pings, 0.5),
        "ping_ms_p99": _percentile(pings, 0.99),
        "seconds_per_run": SECONDS,
        "peak_rss_growth_kib": None,
    }


if __name__ == "__main__":
    child_main(sys.argv[1:])
