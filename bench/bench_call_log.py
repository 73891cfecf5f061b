"""What the call log costs: per chunk and per call, at 1,000 concurrent streams.

Run: ``python bench/bench_call_log.py [--quick]``. Writes
``bench/results/call-log.json`` (``call-log-quick.json`` with ``--quick``).

Each run opens a runtime, starts ``streams`` consumers at once, each
streaming one call from a `ScriptedAdapter` (no delays), and ends when every
call has ended **and** the call log has written every record to its JSON
Lines files (so the writer's encoding, redaction and file writes count, not
only the call path's share). The same run without the log is the floor;
runs alternate (off, on, off, on, ...) and the medians are compared:

* ``long`` calls (``chunks`` text deltas each): the cost per chunk is the
  difference per chunk, after taking away the per-call cost measured below;
* ``short`` calls (one text delta, five chunks): the cost per call is the
  difference per call.

Each way runs 25 times: with 9, one build on a quiet machine read anywhere
from 0.14 to 0.68 µs per chunk from one invocation to the next; with 25,
0.18 to 0.36.

Targets: ≤ 0.3 µs per chunk and ≤ 20 µs per call. No record may be dropped
(the queue holds every call of a run): a run that drops is reported broken.
"""

from __future__ import annotations

import argparse
import gc
import shutil
import sys
import tempfile
import time
from typing import Any

import trio
from _common import environment, median, sized, table, write_json

import llmrt
from llmrt.actors.call_log import CallLogSettings
from llmrt.adapters.scripted import ScriptedAdapter, text_script

FULL = {"streams": 1_000, "chunks": 200, "runs": 25}
QUICK = {"streams": 1_000, "chunks": 200, "runs": 3}


async def one_run(streams: int, parts: int, directory: str | None) -> dict[str, Any]:
    script = text_script([f"w{i} " for i in range(parts)])
    settings = None
    if directory is not None:
        settings = CallLogSettings(directory=directory, queue=max(4096, 2 * streams))
    options = llmrt.GenerateOptions(
        provider="p", model="m", messages=(llmrt.user_message("bench the call log"),)
    )
    delivered = 0
    gc.collect()
    started = time.perf_counter()
    cpu = time.process_time()
    async with llmrt.open_runtime(call_log=settings) as rt:
        await rt.register_adapter(["p"], ScriptedAdapter(script))

        async def consume() -> None:
            nonlocal delivered
            async with rt.stream(options) as call:
                async for _ in call:
                    delivered += 1

        async with trio.open_nursery() as nursery:
            for _ in range(streams):
                nursery.start_soon(consume)
        streamed = time.perf_counter() - started
        log = rt.statistics().call_log
        while log is not None and log.queued:
            await trio.sleep(0.001)
            log = rt.statistics().call_log
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu
    stats = rt.statistics().call_log
    return {
        "wall_s": wall,
        "streams_wall_s": streamed,
        "cpu_s": cpu,
        "chunks": delivered,
        "written": stats.written if stats is not None else 0,
        "dropped": (stats.dropped + stats.failed + stats.oversized) if stats is not None else 0,
        "bytes": stats.bytes_written if stats is not None else 0,
    }


def pair(streams: int, parts: int, runs: int) -> dict[str, Any]:
    off: list[dict[str, Any]] = []
    on: list[dict[str, Any]] = []
    for _ in range(runs):
        off.append(trio.run(one_run, streams, parts, None))
        folder = tempfile.mkdtemp(prefix="llmrt-call-log-")
        try:
            on.append(trio.run(one_run, streams, parts, folder))
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    return {
        "streams": streams,
        "chunks_per_call": parts + 4,
        "off_wall_s": median([r["wall_s"] for r in off]),
        "on_wall_s": median([r["wall_s"] for r in on]),
        "off_streams_wall_s": median([r["streams_wall_s"] for r in off]),
        "on_streams_wall_s": median([r["streams_wall_s"] for r in on]),
        "off_cpu_s": median([r["cpu_s"] for r in off]),
        "on_cpu_s": median([r["cpu_s"] for r in on]),
        "chunks": on[0]["chunks"],
        "written": min(r["written"] for r in on),
        "dropped": max(r["dropped"] for r in on),
        "bytes_per_run": on[0]["bytes"],
        "runs": {"off": off, "on": on},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    sizes = sized(QUICK if args.quick else FULL)
    streams, parts, runs = sizes["streams"], sizes["chunks"], sizes["runs"]
    print(f"call log: {streams} concurrent streams, {runs} runs each way", flush=True)
    short = pair(streams, 1, runs)
    print(f"  short calls done ({short['on_wall_s']:.3f} s on)", flush=True)
    long = pair(streams, parts, runs)
    print(f"  long calls done ({long['on_wall_s']:.3f} s on)", flush=True)
    chunks = streams * long["chunks_per_call"]

    def costs(key: str) -> tuple[float, float]:
        """(µs per call, µs per chunk) from the on - off medians of ``key``."""
        call = 1e6 * (short[f"on_{key}"] - short[f"off_{key}"]) / streams
        chunk = 1e6 * ((long[f"on_{key}"] - long[f"off_{key}"]) - streams * call / 1e6) / chunks
        return call, chunk

    per_call_us, per_chunk_us = costs("wall_s")
    streams_call_us, streams_chunk_us = costs("streams_wall_s")
    per_call_cpu_us = 1e6 * (short["on_cpu_s"] - short["off_cpu_s"]) / streams
    per_chunk_cpu_us = (
        1e6 * ((long["on_cpu_s"] - long["off_cpu_s"]) - streams * per_call_cpu_us / 1e6) / chunks
    )
    broken = []
    for name, section in (("short", short), ("long", long)):
        if section["dropped"] or section["written"] != streams:
            broken.append(f"{name}: written {section['written']}, dropped {section['dropped']}")
        if section["chunks"] != streams * section["chunks_per_call"]:
            broken.append(f"{name}: {section['chunks']} chunks delivered")
    report = {
        "environment": environment(),
        "sizes": sizes,
        "short": short,
        "long": long,
        "per_call_us": per_call_us,
        "per_chunk_us": per_chunk_us,
        "per_call_cpu_us": per_call_cpu_us,
        "streams_per_call_us": streams_call_us,
        "streams_per_chunk_us": streams_chunk_us,
        "per_chunk_cpu_us": per_chunk_cpu_us,
        "targets": {"per_chunk_us": 0.3, "per_call_us": 20.0},
        "met": {"per_chunk_us": per_chunk_us <= 0.3, "per_call_us": per_call_us <= 20.0},
        "broken": broken,
    }
    rows = [
        [
            name,
            section["chunks_per_call"],
            f"{1000 * section['off_wall_s']:.1f}",
            f"{1000 * section['on_wall_s']:.1f}",
            f"{section['on_wall_s'] / section['off_wall_s']:.3f}",
            section["written"],
            section["dropped"],
        ]
        for name, section in (("short", short), ("long", long))
    ]
    print(table(["calls", "chunks/call", "off ms", "on ms", "on/off", "written", "dropped"], rows))
    print(
        f"streams alone (until the last call ended): {streams_chunk_us:.3f} µs per chunk, "
        f"{streams_call_us:.2f} µs per call"
    )
    print(
        f"call log cost: {per_chunk_us:.3f} µs per chunk (target ≤ 0.3), "
        f"{per_call_us:.2f} µs per call (target ≤ 20); CPU {per_chunk_cpu_us:.3f} µs per chunk, "
        f"{per_call_cpu_us:.2f} µs per call"
    )
    name = "call-log-quick.json" if args.quick else "call-log.json"
    print(f"wrote {write_json(name, report)}")
    if broken:
        print("BROKEN: " + "; ".join(broken), file=sys.stderr)
        raise SystemExit(1)


if __name__ == "__main__":
    main()
