"""The clients of ``bench_scaleout.py``'s scale-out rows, run as a separate process.

``python bench/_load_client.py URL SECONDS CONNECTIONS`` opens CONNECTIONS
websockets to the gateway at URL, and when all are open runs calls on each
back to back for SECONDS on the route ``fast`` (the demo model unpaced, as
the benchmark configures it: its chunks come as fast as the serving path
carries them), counting the chunks received. One more
connection probes latency meanwhile: a call every 20 ms, timed from sending
it to its first chunk, which the demo produces at once, so the time is what
the serving path adds (network hops, the gateway's scheduling, queueing
behind the load). Prints one JSON object on stdout.
"""

from __future__ import annotations

import json
import sys
import time

import trio

import llmrt
from llmrt.actors.gateway.client import open_gateway_client

OPTIONS = llmrt.GenerateOptions(
    provider="fast", model="demo-1", messages=(llmrt.user_message("hello"),)
)
PROBE_EVERY = 0.02


async def run(url: str, seconds: float, connections: int) -> dict[str, object]:
    chunks = calls = 0
    first_chunk_s: list[float] = []
    opened = trio.Semaphore(0)
    go = trio.Event()
    end = 0.0

    async def load() -> None:
        nonlocal chunks, calls
        async with open_gateway_client(url, connect_timeout=60) as client:
            opened.release()
            await go.wait()
            while time.perf_counter() < end:
                async with client.stream(OPTIONS) as call:
                    async for _ in call:
                        chunks += 1
                calls += 1

    async def probe() -> None:
        async with open_gateway_client(url, connect_timeout=60) as client:
            opened.release()
            await go.wait()
            while time.perf_counter() < end:
                sent = time.perf_counter()
                first = True
                async with client.stream(OPTIONS) as call:
                    async for _ in call:
                        if first:
                            first_chunk_s.append(time.perf_counter() - sent)
                            first = False
                await trio.sleep(PROBE_EVERY)

    async with trio.open_nursery() as nursery:
        for _ in range(connections):
            nursery.start_soon(load)
        nursery.start_soon(probe)
        with trio.fail_after(120):
            for _ in range(connections + 1):
                await opened.acquire()
        started = time.perf_counter()
        end = started + seconds
        go.set()
    elapsed = time.perf_counter() - started
    return {"chunks": chunks, "calls": calls, "seconds": elapsed, "first_chunk_s": first_chunk_s}


def main(argv: list[str]) -> int:
    url, seconds, connections = argv[0], float(argv[1]), int(argv[2])
    print(json.dumps(trio.run(run, url, seconds, connections)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
