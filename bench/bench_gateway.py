"""The websocket gateway's costs: chunks/s and per-chunk latency, gateway vs in-process.

Run: ``python bench/bench_gateway.py [--quick]`` (about 30 s on 2 cores;
``--quick`` about 8 s). Prints one table per section and writes
``bench/results/gateway.json`` (``gateway-quick.json`` with ``--quick``).
Gateway and clients share one process and one trio loop (so one core does
both sides' work), over loopback.

1. ``throughput``: one call whose `ScriptedAdapter` yields N text deltas with
   no delays; µs per chunk and chunks/s for the consumer (median of R runs):
   in-process ``rt.stream``, then through the gateway with the Python client
   (JSON and MessagePack). Also: the frames the gateway sent per chunk
   (``chunks`` frames batch when the writer is behind).
2. ``multiplexed``: C calls of N/C chunks each on one connection at once;
   aggregate chunks/s.
3. ``latency``: an adapter paced at one chunk per millisecond stamps each
   chunk with ``perf_counter()``; the consumer's receive time minus the
   stamp, p50/p90/p99/max, in-process and through the gateway.
4. ``clients``: K clients, each on its own websocket, each streaming one
   call of N/K chunks at once; aggregate chunks/s, the median run of R
   (target >= 100,000 on one core). Measured twice: clients in the
   gateway's process (one core does both sides' work) and clients in a
   separate process (the gateway's core serves only the gateway).
5. ``abort``: a call whose adapter stalls after its first chunk; the client
   sends ``abort`` and waits for the ``aborted`` finish; p50/p99 of
   abort -> finish, over A aborts (target p99 < 2 ms).
"""

from __future__ import annotations

import argparse
import multiprocessing
import time
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import trio
from _common import environment, median, percentiles, table, write_json

import llmrt
from llmrt import (
    Adapter,
    BlockEnd,
    BlockStart,
    Finish,
    FinishAborted,
    FinishStop,
    GenerateOptions,
    StreamChunk,
    TextBlock,
    TextDelta,
    TokenUsage,
    UsageChunk,
)
from llmrt.actors.gateway import Limits, serve_gateway
from llmrt.actors.gateway.client import open_gateway_client
from llmrt.adapters.scripted import ScriptedAdapter, Stall, text_script


def options(provider: str) -> GenerateOptions:
    return GenerateOptions(provider=provider, model="m", messages=(llmrt.user_message("go"),))


class Stamped(Adapter):
    """One chunk per ``period`` seconds, each text holding its ``perf_counter()`` stamp."""

    def __init__(self, count: int, period: float) -> None:
        self.count = count
        self.period = period

    async def stream(self, options: GenerateOptions) -> AsyncIterator[StreamChunk]:
        yield BlockStart(index=0, block_type="text")
        for _ in range(self.count):
            await trio.sleep(self.period)
            yield TextDelta(index=0, text=repr(time.perf_counter()))
        yield BlockEnd(index=0, block=TextBlock(text=""))
        yield UsageChunk(usage=TokenUsage(input_tokens=1, output_tokens=self.count))
        yield Finish(reason=FinishStop())


async def consume(call: Any) -> int:
    n = 0
    async for _ in call:
        n += 1
    return n


async def throughput(rt: llmrt.LlmRuntime, url: str, n: int, runs: int) -> list[dict[str, Any]]:
    rows = []

    async def in_process() -> int:
        async with rt.stream(options("bulk")) as call:
            return await consume(call)

    async def gateway(msgpack: bool) -> int:
        async with open_gateway_client(url, msgpack=msgpack) as client:
            async with client.stream(options("bulk")) as call:
                return await consume(call)

    for name, fn in [
        ("in-process", in_process),
        ("gateway JSON", partial(gateway, False)),
        ("gateway MessagePack", partial(gateway, True)),
    ]:
        samples = []
        for _ in range(runs):
            started = time.perf_counter()
            got = await fn()
            samples.append((time.perf_counter() - started) / got)
        per = median(samples)
        rows.append({"path": name, "us_per_chunk": per * 1e6, "chunks_per_s": 1 / per})
    return rows


async def multiplexed(url: str, n: int, calls: int) -> dict[str, Any]:
    total = 0
    async with open_gateway_client(url) as client:

        async def one() -> None:
            nonlocal total
            async with client.stream(options("slice")) as call:
                got = await consume(call)  # not `total += await ...`: it reads total first
            total += got

        started = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(calls):
                nursery.start_soon(one)
        elapsed = time.perf_counter() - started
    return {"calls": calls, "chunks": total, "seconds": elapsed, "chunks_per_s": total / elapsed}


async def latency(rt: llmrt.LlmRuntime, url: str) -> list[dict[str, Any]]:
    async def measure(call: Any) -> list[float]:
        out = []
        async for chunk in call:
            if isinstance(chunk, TextDelta):
                out.append(time.perf_counter() - float(chunk.text))
        return out

    async with rt.stream(options("paced")) as call:
        local = await measure(call)
    async with open_gateway_client(url) as client, client.stream(options("paced")) as call:
        remote = await measure(call)
    return [
        {"path": name, **{k: v * 1e6 for k, v in percentiles(s).items()}}
        for name, s in (("in-process", local), ("gateway JSON", remote))
    ]


async def _clients_main(url: str, count: int) -> dict[str, Any]:
    total = 0

    async def one() -> None:
        nonlocal total
        async with open_gateway_client(url) as client, client.stream(options("slice")) as call:
            got = await consume(call)
        total += got

    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(count):
            nursery.start_soon(one)
    elapsed = time.perf_counter() - started
    return {"clients": count, "chunks": total, "seconds": elapsed, "chunks_per_s": total / elapsed}


def _clients_process(url: str, count: int, out: Any) -> None:
    out.send(trio.run(_clients_main, url, count))


async def clients(url: str, count: int, separate: bool) -> dict[str, Any]:
    """K websockets at once; in a separate process, the gateway's core serves only the gateway."""
    if not separate:
        return await _clients_main(url, count)
    context = multiprocessing.get_context("spawn")
    receive, send = context.Pipe(duplex=False)
    process = context.Process(target=_clients_process, args=(url, count, send))
    process.start()
    result: dict[str, Any] = await trio.to_thread.run_sync(receive.recv)
    await trio.to_thread.run_sync(process.join)
    return result


async def abort_latency(url: str, aborts: int) -> dict[str, Any]:
    samples: list[float] = []
    async with open_gateway_client(url) as client:
        for _ in range(aborts):
            async with client.stream(options("stall")) as call:
                started = 0.0
                async for chunk in call:
                    if isinstance(chunk, TextDelta):
                        started = time.perf_counter()
                        call.abort()
                    elif isinstance(chunk, Finish) and isinstance(chunk.reason, FinishAborted):
                        samples.append(time.perf_counter() - started)
    return {"aborts": len(samples), **{k: v * 1e6 for k, v in percentiles(samples).items()}}


async def main(quick: bool) -> None:
    n = 20_000 if quick else 100_000
    runs = 3 if quick else 7
    calls = 20 if quick else 100
    paced = 500 if quick else 2_000
    aborts = 100 if quick else 1_000
    # Generous call-rate limits: the benches start calls faster than a client should.
    limits = Limits(
        max_calls_per_connection=calls,
        call_burst=max(100, calls),
        calls_per_second=100_000,
        # The fan-out opens `calls` connections at once, all from loopback.
        max_connections_per_peer=max(64, calls),
    )
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["bulk"], ScriptedAdapter(text_script(["tok "] * n)))
        await rt.register_adapter(["slice"], ScriptedAdapter(text_script(["tok "] * (n // calls))))
        await rt.register_adapter(["paced"], Stamped(paced, 0.001))
        await rt.register_adapter(
            ["stall"], ScriptedAdapter([*text_script(["first"])[:2], Stall()])
        )
        async with trio.open_nursery() as nursery:
            server = await nursery.start(partial(serve_gateway, rt, limits=limits))
            report: dict[str, Any] = {"environment": environment(), "n": n, "runs": runs}
            report["throughput"] = await throughput(rt, server.url, n, runs)
            report["multiplexed"] = await multiplexed(server.url, n, calls)
            report["latency_us"] = await latency(rt, server.url)
            for separate in (False, True):
                fanouts = [await clients(server.url, calls, separate) for _ in range(runs)]
                middle = sorted(fanouts, key=lambda r: r["chunks_per_s"])[len(fanouts) // 2]
                middle["runs_chunks_per_s"] = [r["chunks_per_s"] for r in fanouts]
                report["clients_separate" if separate else "clients"] = middle
            report["abort_us"] = await abort_latency(server.url, aborts)
            nursery.cancel_scope.cancel()
    t = report["throughput"]
    print(f"\nthroughput: one call of {n:,} chunks (median of {runs})")
    print(
        table(
            ["path", "µs/chunk", "chunks/s"],
            [[r["path"], r["us_per_chunk"], r["chunks_per_s"]] for r in t],
        )
    )
    m = report["multiplexed"]
    print(f"\nmultiplexed: {m['calls']} calls on one connection")
    print(
        table(["chunks", "seconds", "chunks/s"], [[m["chunks"], m["seconds"], m["chunks_per_s"]]])
    )
    print(f"\nlatency: {paced:,} chunks paced at 1 ms, adapter yield -> consumer (µs)")
    lat = report["latency_us"]
    print(
        table(
            ["path", "p50", "p90", "p99", "max"],
            [[r["path"], r["p50"], r["p90"], r["p99"], r["max"]] for r in lat],
        )
    )
    rows = []
    for key, where in (("clients", "same process"), ("clients_separate", "separate process")):
        c = report[key]
        rows.append([where, c["clients"], c["chunks"], c["seconds"], c["chunks_per_s"]])
    print(f"\nclients: websockets, one call each (median of {runs})")
    print(table(["clients run in", "websockets", "chunks", "seconds", "chunks/s"], rows))
    a = report["abort_us"]
    print(f"\nabort frame -> aborted finish, {a['aborts']} aborts (µs)")
    print(table(["p50", "p90", "p99", "max"], [[a["p50"], a["p90"], a["p99"], a["max"]]]))
    path = write_json("gateway-quick.json" if quick else "gateway.json", report)
    print(f"\nwrote {path.name}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer runs")
    trio.run(main, parser.parse_args().quick)
