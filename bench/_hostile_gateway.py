"""The hostile *clients* of `bench_hostile.py`: floods against a gateway, from a child process.

`bench_hostile.py` runs the gateway (and the heartbeat that measures its
event loop) in its own process; what attacks it runs here, in a child, so
that the attacker's work is not measured as the gateway's. The flood child
lowers its own priority (``nice`` 10): on a 2-core machine an attacker at
full priority would take the gateway's core and show up as stalls that a
remote attacker could not cause. Every flood runs for ``seconds`` beside the
same *probe*, in a child of its own at normal priority: a well-behaved
client at another peer address (127.0.0.2) that opens a websocket, waits for
``hello``, asks ``list-models`` once and closes, every `PROBE_EVERY` seconds.
Each child prints one JSON line: the flood's counts, the probe's latencies.

    python bench/_hostile_gateway.py flood KIND PORT SIZES  # well-behaved, pre-head, metadata
    python bench/_hostile_gateway.py probe PORT SECONDS
    python bench/_hostile_gateway.py upstream               # a /models upstream that counts

Linux routes all of 127.0.0.0/8 to loopback: binding a socket to 127.0.x.y
before connecting makes it a client at that address.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from typing import Any

import trio
from trio_websocket import ConnectionClosed, HandshakeError, wrap_client_stream

#: Seconds between two probes, and the bound on one.
PROBE_EVERY = 0.05
PROBE_BOUND = 5.0
#: Where the probe and the floods come from.
PROBE_ADDRESS = "127.0.0.2"
SILENT_ADDRESS = "127.0.0.1"
#: A request head that never ends: just under the gateway's 16 KiB head bound.
PARTIAL_HEAD = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + b"a" * (16 * 1024 - 128)


async def _connect(source: str, port: int) -> trio.SocketStream:
    sock = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_STREAM)
    try:
        await sock.bind((source, 0))
        await sock.connect(("127.0.0.1", port))
    except BaseException:
        sock.close()
        raise
    return trio.SocketStream(sock)


async def _probe_once(port: int) -> float | None:
    """Seconds from connect to ``hello``, or None when refused or failed."""
    start = time.perf_counter()
    elapsed: float | None = None
    try:
        with trio.fail_after(PROBE_BOUND):
            stream = await _connect(PROBE_ADDRESS, port)
            async with trio.open_nursery() as nursery:
                ws = await wrap_client_stream(nursery, stream, "127.0.0.1", "/")
                await ws.get_message()  # hello
                elapsed = time.perf_counter() - start
                await ws.send_message('{"type":"list-models","id":"m","provider":"up"}')
                await ws.get_message()
                await ws.aclose()
    except* (OSError, trio.TooSlowError, HandshakeError, ConnectionClosed):
        elapsed = None
    return elapsed


async def _probe(port: int, until: float, out: dict[str, Any]) -> None:
    latencies: list[float] = []
    failed = 0
    while time.perf_counter() < until:
        got = await _probe_once(port)
        if got is None:
            failed += 1
        else:
            latencies.append(got * 1000)
        await trio.sleep(PROBE_EVERY)
    out["probe_ms"] = latencies
    out["probes_failed"] = failed


async def _hold(source: str, port: int, head: bytes, counts: dict[str, int]) -> None:
    """Keep one connection from ``source`` open, sending ``head`` and nothing more; reconnect."""
    while True:
        try:
            stream = await _connect(source, port)
        except OSError:
            counts["connect_failed"] += 1
            await trio.sleep(0.05)
            continue
        counts["opened"] += 1
        try:
            async with stream:
                if head:
                    await stream.send_all(head)
                while chunk := await stream.receive_some(65536):
                    if chunk.startswith(b"HTTP/1.1 503"):
                        counts["answered_503"] += 1
        except (trio.BrokenResourceError, OSError):
            pass
        counts["closed_by_gateway"] += 1
        await trio.sleep(0.01)  # the attacker reconnects at once, but does not spin


async def _pre_head(port: int, sizes: dict[str, Any], nursery: trio.Nursery) -> dict[str, int]:
    counts = dict.fromkeys(("opened", "connect_failed", "answered_503", "closed_by_gateway"), 0)
    for _ in range(sizes["silent"]):
        nursery.start_soon(_hold, SILENT_ADDRESS, port, b"", counts)
    for n in range(sizes["partial_heads"]):
        # Spread over many addresses: the per-address cap alone does not stop them.
        source = f"127.0.{1 + n // 250}.{1 + n % 250}"
        nursery.start_soon(_hold, source, port, PARTIAL_HEAD, counts)
    return counts


async def _metadata(port: int, sizes: dict[str, Any], nursery: trio.Nursery) -> dict[str, int]:
    counts = dict.fromkeys(("sent", "results", "rate_limited", "other_errors"), 0)

    async def connection(n: int) -> None:
        stream = await _connect(SILENT_ADDRESS, port)
        async with trio.open_nursery() as inner:
            ws = await wrap_client_stream(inner, stream, "127.0.0.1", "/")
            await ws.get_message()  # hello
            window = trio.Semaphore(sizes["in_flight"])

            async def reader() -> None:
                while True:
                    reply = json.loads(await ws.get_message())
                    if reply["type"] == "result":
                        counts["results"] += 1
                    elif reply.get("code") == "RATE_LIMITED":
                        counts["rate_limited"] += 1
                    else:
                        counts["other_errors"] += 1
                    window.release()

            inner.start_soon(reader)
            i = 0
            while True:
                await window.acquire()
                i += 1
                if i % 4:
                    frame = {"type": "list-models", "id": f"{n}-{i}", "provider": "up"}
                else:
                    frame = {
                        "type": "discover-models",
                        "id": f"{n}-{i}",
                        "settingsNs": "home",
                        "request": {"provider": "up"},
                    }
                await ws.send_message(json.dumps(frame))
                counts["sent"] += 1

    for n in range(sizes["connections"]):
        nursery.start_soon(connection, n)
    return counts


async def flood(kind: str, port: int, sizes: dict[str, Any]) -> None:
    out: dict[str, Any] = {"kind": kind}
    counts: dict[str, int] = {}
    try:
        async with trio.open_nursery() as nursery:
            if kind == "pre-head":
                counts = await _pre_head(port, sizes, nursery)
            elif kind == "metadata":
                counts = await _metadata(port, sizes, nursery)
            elif kind != "well-behaved":
                raise SystemExit(f"unknown flood {kind!r}")
            await trio.sleep(sizes["seconds"])
            nursery.cancel_scope.cancel()
    except* (ConnectionClosed, OSError) as group:
        out["flood_error"] = repr(group.exceptions[0])
    out["counts"] = counts
    print(json.dumps(out), flush=True)


async def probe(port: int, seconds: float) -> None:
    out: dict[str, Any] = {}
    await _probe(port, time.perf_counter() + seconds, out)
    print(json.dumps(out), flush=True)


async def upstream() -> None:
    """A local upstream listing models; ``count`` on stdin prints what it received."""
    from llmrt.testing import SSEScript, open_upstream, openai_events

    async with open_upstream(SSEScript(openai_events(["ok"])), models=("m1", "m2")) as up:
        print(up.port, flush=True)
        while line := await trio.to_thread.run_sync(sys.stdin.readline):
            if line.strip() == "count":
                gets = sum(1 for r in up.requests if r.path == "/models")
                print(json.dumps({"models_gets": gets, "connections": len(up.connections)}))
                sys.stdout.flush()


def main() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 16384), hard))
    if sys.argv[1] == "flood":
        os.nice(10)
        trio.run(flood, sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4]))
    elif sys.argv[1] == "probe":
        trio.run(probe, int(sys.argv[2]), float(sys.argv[3]))
    else:
        trio.run(upstream)


if __name__ == "__main__":
    main()
