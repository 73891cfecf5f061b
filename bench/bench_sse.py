"""Throughput of `llmrt.adapters._sse.SSEParser` versus httpx's `Response.aiter_lines()`.

Both consume IDENTICAL bytes: a body of ~20,000 OpenAI-style chunk events (the
events of ``tests/wire/openai_text.sse``, cycled), cut into reads of 4 KiB and
64 KiB. Every consumer looks at each ``data`` payload and drops it, as an
adapter would; an untimed pass first checks that all of them yield exactly
the same payloads. Timed under trio:

- ``feed``: ``SSEParser.feed`` over the list of reads (the parser alone);
- ``aiter_raw+feed``: ``async for raw in response.aiter_raw(): parser.feed(raw)``,
  which is how an adapter drives it;
- ``aiter_raw+feed_data``: the same with ``feed_data`` (payloads, no event objects);
- ``httpx aiter_lines``: ``async for line in response.aiter_lines()`` plus the
  minimal ``data:`` extraction an SSE consumer built on it needs.

The runners take turns within each of 7 rounds (load on a shared machine falls
on all alike). Prints MB/s and microseconds per event (median of 7 runs) and
the ratios, and writes them to ``bench/results/sse.json``. Run: ``python bench/bench_sse.py``.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import httpx
import trio

from llmrt.adapters._sse import SSEParser

HERE = Path(__file__).resolve().parent
TRANSCRIPT = HERE.parent / "tests" / "wire" / "openai_text.sse"
RESULTS = Path(os.environ.get("LLMRT_BENCH_RESULTS") or HERE / "results") / "sse.json"
EVENTS = 20_000
RUNS = 7
READ_SIZES = (4 * 1024, 64 * 1024)


class ReplayStream(httpx.AsyncByteStream):
    """An httpx response stream that yields a fixed list of reads."""

    def __init__(self, reads: list[bytes]) -> None:
        self._reads = reads

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self._reads:
            yield chunk


def build_body() -> tuple[bytes, list[bytes]]:
    """The body and its expected payloads: transcript events cycled to EVENTS events."""
    events = [e for e in TRANSCRIPT.read_bytes().split(b"\n\n") if e.startswith(b"data: {")]
    payloads = [events[i % len(events)][6:] for i in range(EVENTS)]
    body = b"".join(b"data: " + p + b"\n\n" for p in payloads) + b"data: [DONE]\n\n"
    return body, [*payloads, b"[DONE]"]


def cut(body: bytes, size: int) -> list[bytes]:
    return [body[i : i + size] for i in range(0, len(body), size)]


# Each runner consumes every payload the way an adapter would (it looks at it
# and drops it), and returns (payload count, payload bytes). With `keep`, it
# also collects the payloads, for the untimed check that all three agree.


async def run_parser(reads: list[bytes], keep: list[bytes] | None = None) -> tuple[int, int]:
    parser = SSEParser()
    n = size = 0
    for raw in reads:
        for event in parser.feed(raw):
            data = event.data
            n += 1
            size += len(data)
            if keep is not None:
                keep.append(data)
    parser.close()
    return n, size


async def run_parser_raw(reads: list[bytes], keep: list[bytes] | None = None) -> tuple[int, int]:
    response = httpx.Response(200, stream=ReplayStream(reads))
    parser = SSEParser()
    n = size = 0
    async for raw in response.aiter_raw():
        for event in parser.feed(raw):
            data = event.data
            n += 1
            size += len(data)
            if keep is not None:
                keep.append(data)
    parser.close()
    return n, size


async def run_parser_data(reads: list[bytes], keep: list[bytes] | None = None) -> tuple[int, int]:
    response = httpx.Response(200, stream=ReplayStream(reads))
    parser = SSEParser()
    n = size = 0
    async for raw in response.aiter_raw():
        for data in parser.feed_data(raw):
            n += 1
            size += len(data)
            if keep is not None:
                keep.append(data)
    parser.close()
    return n, size


async def run_httpx(reads: list[bytes], keep: list[bytes] | None = None) -> tuple[int, int]:
    response = httpx.Response(
        200,
        headers={"content-type": "text/event-stream; charset=utf-8"},
        stream=ReplayStream(reads),
    )
    n = size = 0
    async for line in response.aiter_lines():
        # The least an SSE consumer of aiter_lines must do to get the payloads.
        if line.startswith("data:"):
            data = line[6:] if line.startswith("data: ") else line[5:]
            n += 1
            size += len(data)
            if keep is not None:
                keep.append(data.encode())
    return n, size


Runner = Callable[[list[bytes], "list[bytes] | None"], Coroutine[Any, Any, tuple[int, int]]]


def check(runner: Runner, reads: list[bytes], expected: list[bytes]) -> None:
    """Untimed: the runner yields exactly the expected payloads."""
    kept: list[bytes] = []
    trio.run(runner, reads, kept)
    if kept != expected:
        raise SystemExit(f"{runner.__name__} produced different payloads")


def run_once(runner: Runner, reads: list[bytes], expected: tuple[int, int]) -> float:
    """Wall time of one run in a fresh ``trio.run``."""
    result: list[tuple[int, int]] = []
    elapsed: list[float] = []

    async def main() -> None:
        t0 = time.perf_counter()
        out = await runner(reads, None)
        elapsed.append(time.perf_counter() - t0)
        result.append(out)

    trio.run(main)
    if result[0] != expected:
        raise SystemExit(f"{runner.__name__} counted {result[0]}, expected {expected}")
    return elapsed[0]


def measure(
    runners: dict[str, Runner], reads: list[bytes], expected: list[bytes]
) -> dict[str, float]:
    """Median wall time of RUNS runs per runner.

    The runners take turns within each round, so that load from other
    processes on a shared machine falls on all of them alike.
    """
    times: dict[str, list[float]] = {name: [] for name in runners}
    for runner in runners.values():
        check(runner, reads, expected)
    totals = (len(expected), sum(map(len, expected)))
    for _ in range(RUNS):
        for name, runner in runners.items():
            times[name].append(run_once(runner, reads, totals))
    return {name: statistics.median(ts) for name, ts in times.items()}


def main() -> None:
    body, expected = build_body()
    mb = len(body) / 1e6
    n = len(expected)
    report: dict[str, Any] = {
        "events": n,
        "body_bytes": len(body),
        "runs": RUNS,
        "statistic": "median",
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "httpx": httpx.__version__,
        "read_sizes": {},
    }
    runners: dict[str, Runner] = {
        "feed": run_parser,
        "aiter_raw+feed": run_parser_raw,
        "aiter_raw+feed_data": run_parser_data,
        "httpx aiter_lines": run_httpx,
    }
    for size in READ_SIZES:
        reads = cut(body, size)
        row: dict[str, Any] = {}
        for name, secs in measure(runners, reads, expected).items():
            row[name] = {
                "seconds": round(secs, 6),
                "MB_per_s": round(mb / secs, 1),
                "us_per_event": round(secs / n * 1e6, 3),
            }
        base = row["httpx aiter_lines"]["seconds"]
        row["speedup_vs_aiter_lines"] = {
            name: round(base / row[name]["seconds"], 2)
            for name in runners
            if name != "httpx aiter_lines"
        }
        report["read_sizes"][str(size)] = row
        print(f"reads of {size // 1024} KiB ({len(reads)} reads, {mb:.2f} MB, {n} events):")
        for name in runners:
            r = row[name]
            print(f"  {name:20s} {r['MB_per_s']:8.1f} MB/s  {r['us_per_event']:7.3f} us/event")
        speedups = ", ".join(f"{k} {v}x" for k, v in row["speedup_vs_aiter_lines"].items())
        print(f"  speedup over aiter_lines: {speedups}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {RESULTS.relative_to(HERE.parent)}")


if __name__ == "__main__":
    main()
