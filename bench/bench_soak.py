"""Memory over time: waves of mixed calls through one runtime. Does anything grow?

Run: ``python bench/bench_soak.py [--quick]`` (full: 100 waves of 2,000 calls,
about 2.5 minutes; ``--quick``: 20 waves of 500, not judged). Prints a
table and writes ``bench/results/soak.json`` (``soak-quick.json`` with
``--quick``).

Every wave starts its calls at once, one of each kind in turn: a demo
answer, a scripted answer, an adapter that raises mid-stream, a stall ended
by a shared `AbortController`, a stall ended by the idle watchdog (50 ms), a
consumer that leaves after the first chunk, a prepared call, a call through
`stream_with_retry`; three over HTTP (`OpenAIChatAdapter` against the
`llmrt.testing` upstream in the same trio run, on loopback): an answer, a
stalled stream aborted by the shared signal, a 500; and three through the
websocket gateway (`serve_gateway` on the same runtime, four client
connections opened anew every wave): an answer, a stall the client aborts,
a client that leaves after the first chunk. Every call passes one
pass-through middleware, and every call not aborted listens to one
`AbortSignal` that lives as long as the soak and never fires.

After each wave: a full collection, then RSS (also after glibc's
``malloc_trim(0)``, where available, since the C heap's fragmentation moves
raw RSS), the objects the collector tracks, the blocks Python's allocator
holds (``sys.getallocatedblocks()``: strings and bytes too), the runtime's
tasks and calls in flight, and the open upstream connections, all into an
array made up front so that recording adds nothing to the counts. The
scripted adapters and the local upstream record all traffic by design (they
are test tools), so their records are cleared after each wave.

Floor (same process, before the runtime starts): the same number of bare
trio task pairs per wave, a producer and a consumer over a memory channel,
the producer ending one way or another.

Growth is per 10,000 calls after warm-up: the lowest count of the second
fifth of the waves against the lowest of the last fifth (the counts swing a
little from wave to wave on top of what stays). Targets: tracked objects
grow by less than 10 (one object kept per call would be 10,000), allocated
blocks by less than 50; finer than that the method cannot tell, as the
windows' lowest counts differ by a few dozen from run to run. RSS is
reported beside the floor, not judged.
"""

from __future__ import annotations

import argparse
import array
import ctypes
import ctypes.util
import gc
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from functools import partial
from typing import Any

import trio
import trio.testing
from _common import environment, rss_kib, sized, table, write_json

import llmrt
from llmrt import (
    AbortController,
    Finish,
    GenerateOptions,
    LlmCallConfig,
    StreamChunk,
    user_message,
)
from llmrt.actors.gateway import Limits, serve_gateway
from llmrt.actors.gateway.client import GatewayClient, open_gateway_client
from llmrt.adapters.demo import DemoAdapter
from llmrt.adapters.openai_chat import OpenAIChatAdapter
from llmrt.adapters.scripted import Delay, Raise, ScriptedAdapter, Stall, text_script
from llmrt.testing import ErrorScript, RecordedRequest, SSEScript, open_upstream, openai_events

FULL = {"waves": 100, "calls_per_wave": 2_000}
QUICK = {"waves": 20, "calls_per_wave": 500}
IDLE_TIMEOUT = 0.05
#: One object kept per call would be 10,000 per 10,000 calls. The windows'
#: lowest counts still differ by a few dozen from run to run, so the method
#: resolves about one object per 1,000 calls and one block per 200.
TARGET_OBJECTS_PER_10K = 10.0
TARGET_BLOCKS_PER_10K = 50.0
KINDS = (
    "demo", "ok", "raise", "abort", "timeout", "leave", "prepared", "retry",
    "http", "http-abort", "http-error", "gateway", "gateway-abort", "gateway-leave",
)  # fmt: skip
#: Client connections to the gateway, opened anew for every wave.
GATEWAY_CLIENTS = 4
GATEWAY_LIMITS = Limits(max_calls_per_connection=1_000, calls_per_second=1e9, call_burst=10**9)

ANSWER = text_script(["Hello", ", ", "world"])
FAILING = [*ANSWER[:2], Delay(0.001), Raise(RuntimeError("adapter bug"))]
STALLING = [*ANSWER[:2], Stall()]

#: The local upstream's answer for each model the HTTP calls ask for.
HTTP_SCRIPTS = {
    "answer": SSEScript(events=openai_events(["Hello", ", ", "world"])),
    "stall": SSEScript(events=openai_events(["Hello", ", ", "world"]), stall_after=2),
    "error": ErrorScript(status=500, body={"error": {"message": "overloaded"}}),
}


#: Provider and model of each kind that is a plain ``rt.stream`` call.
TARGETS = {
    "demo": ("demo", "soak"),
    "ok": ("ok", "soak"),
    "raise": ("raise", "soak"),
    "abort": ("stall", "soak"),
    "timeout": ("stall-timeout", "soak"),
    "leave": ("stall", "soak"),
    "http": ("http", "answer"),
    "http-abort": ("http", "stall"),
    "http-error": ("http", "error"),
}


def route(recorded: RecordedRequest) -> SSEScript | ErrorScript:
    return HTTP_SCRIPTS[recorded.json["model"]]


def request(provider: str, model: str = "soak", **kw: Any) -> GenerateOptions:
    return GenerateOptions(
        provider=provider, model=model, messages=(user_message("how are you?"),), **kw
    )


async def passthrough(
    options: GenerateOptions, nxt: Callable[[GenerateOptions], AsyncIterator[StreamChunk]]
) -> AsyncIterator[StreamChunk]:
    async for chunk in nxt(options):
        yield chunk


async def one_call(
    rt: llmrt.LlmRuntime,
    kind: str,
    wave: AbortController,
    host: AbortController,
    seen: list[int],
    client: GatewayClient,
) -> None:
    """One call of ``kind``; ``seen[0]`` counts terminal finishes, ``seen[1]`` early exits.

    The aborted kinds listen to the wave's controller; every other call to
    ``host``, which lives as long as the soak and never fires (as a host's
    own shutdown signal would).
    """
    signal = wave.signal if kind in ("abort", "http-abort") else host.signal
    if kind.startswith("gateway"):
        await gateway_call(client, kind, wave, seen)
        return
    if kind == "retry":
        async with rt.stream_with_retry(request("ok"), signal=signal) as retry_call:
            async for _ in retry_call:
                pass
        seen[0] += 1
        return
    if kind == "prepared":
        prepared = await rt.prepare_call(LlmCallConfig(provider="ok", model="soak"))
        config = prepared.config
        context = prepared.stream(request("ok", max_tokens=config.max_tokens), signal=signal)
    else:
        provider, model = TARGETS[kind]
        context = rt.stream(request(provider, model=model), signal=signal)
    async with context as call:
        await consume(call, kind == "leave", seen)


async def gateway_call(
    client: GatewayClient, kind: str, wave: AbortController, seen: list[int]
) -> None:
    """A call through the websocket gateway: an answer, an abort, or an early exit."""
    provider = "ok" if kind == "gateway" else "stall"
    async with client.stream(request(provider)) as call:
        if kind == "gateway-abort":
            await wave.signal.wait()
            call.abort("soak")
        await consume(call, kind == "gateway-leave", seen)


async def consume(call: AsyncIterator[Any], leave: bool, seen: list[int]) -> None:
    """Read ``call`` to its finish (``seen[0]``), or leave after one chunk (``seen[1]``)."""
    async for chunk in call:
        if leave:
            seen[1] += 1
            return
        if type(chunk) is Finish:
            seen[0] += 1


async def runtime_waves(waves: int, per_wave: int) -> list[dict[str, Any]]:
    recorder = Recorder(waves)
    async with (
        open_upstream(route) as upstream,
        llmrt.open_runtime() as rt,
        trio.open_nursery() as outer,
    ):
        rt.use(passthrough)
        await rt.register_adapter(["demo"], DemoAdapter())
        scripted = {
            "ok": ScriptedAdapter(ANSWER),
            "raise": ScriptedAdapter(FAILING),
            "stall": ScriptedAdapter(STALLING),
        }
        for name, adapter in scripted.items():
            await rt.register_adapter([name], adapter)
        timeout = ScriptedAdapter(STALLING)
        await rt.register_adapter(["stall-timeout"], timeout, stream_idle_timeout=IDLE_TIMEOUT)
        scripted["stall-timeout"] = timeout
        http = OpenAIChatAdapter(
            preset="openai-compatible",
            base_url=upstream.base_url,
            api_key_env="SOAK_KEY",
            environ={"SOAK_KEY": "sk-soak-0123456789"},
        )
        await rt.register_adapter(["http"], http)

        server = await outer.start(partial(serve_gateway, rt, limits=GATEWAY_LIMITS))

        host = AbortController()
        for wave in range(waves):
            ctl = AbortController()
            seen = [0, 0]
            async with AsyncExitStack() as stack:
                clients = [
                    await stack.enter_async_context(open_gateway_client(server.url))
                    for _ in range(GATEWAY_CLIENTS)
                ]
                async with trio.open_nursery() as nursery:
                    for n in range(per_wave):
                        kind = KINDS[n % len(KINDS)]
                        client = clients[n % GATEWAY_CLIENTS]
                        nursery.start_soon(one_call, rt, kind, ctl, host, seen, client)
                    await trio.testing.wait_all_tasks_blocked()
                    ctl.abort("soak")
            if seen[0] + seen[1] != per_wave:
                raise SystemExit(f"wave {wave}: {seen} of {per_wave} calls ended")
            # The test tools record all traffic by design; the runtime keeps nothing.
            for adapter in scripted.values():
                adapter.requests.clear()
                adapter.closed_at.clear()
            upstream.requests.clear()
            upstream.connections[:] = [c for c in upstream.connections if not c.closed.is_set()]
            for connection in upstream.connections:
                connection.requests.clear()
            recorder.record(
                (wave + 1) * per_wave,
                tasks=len(rt._core.nursery.child_tasks),
                in_flight=rt.statistics().calls_in_flight,
                upstream_connections=len(upstream.connections),
            )
        outer.cancel_scope.cancel()
    return recorder.samples()


async def floor_waves(waves: int, per_wave: int) -> list[dict[str, Any]]:
    """The same waves with bare trio: two tasks and a memory channel per call."""

    async def producer(send: trio.MemorySendChannel[int], kind: int) -> None:
        async with send:
            await send.send(1)
            if kind % 2:
                await trio.lowlevel.checkpoint()
            else:
                await trio.sleep_forever()

    async def consumer(recv: trio.MemoryReceiveChannel[int]) -> None:
        async with recv:
            async for _ in recv:
                pass

    recorder = Recorder(waves)
    for wave in range(waves):
        async with trio.open_nursery() as nursery:
            async with trio.open_nursery() as producers:
                for n in range(per_wave):
                    send, recv = trio.open_memory_channel[int](16)
                    producers.start_soon(producer, send, n)
                    nursery.start_soon(consumer, recv)
                await trio.testing.wait_all_tasks_blocked()
                producers.cancel_scope.cancel()
        recorder.record((wave + 1) * per_wave)
    return recorder.samples()


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, which returns the C heap's free pages to the OS."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim  # type: ignore[no-any-return]
    except (OSError, AttributeError):
        return None


MALLOC_TRIM = _malloc_trim()


FIELDS = (
    "calls",
    "rss_kib",
    "rss_trimmed_kib",
    "gc_objects",
    "allocated_blocks",
    "tasks",
    "in_flight",
    "upstream_connections",
)


class Recorder:
    """Per-wave measurements kept in one array made up front.

    Recording a wave creates no lasting Python object, so the allocated-block
    count of the next wave sees only what the calls left behind.
    """

    def __init__(self, waves: int) -> None:
        self._values = array.array("q", bytes(8 * waves * len(FIELDS)))
        self._waves = 0

    def record(
        self, calls: int, *, tasks: int = 0, in_flight: int = 0, upstream_connections: int = 0
    ) -> None:
        gc.collect()
        rss = rss_kib()
        trimmed = -1
        if MALLOC_TRIM is not None:
            MALLOC_TRIM(0)
            trimmed = rss_kib()
        objects = len(gc.get_objects())
        # Every live allocation of Python's allocator, strings and bytes included
        # (the collector does not track those).
        blocks = sys.getallocatedblocks()
        row = (calls, rss, trimmed, objects, blocks, tasks, in_flight, upstream_connections)
        base = self._waves * len(FIELDS)
        for offset, value in enumerate(row):
            self._values[base + offset] = value
        self._waves += 1

    def samples(self) -> list[dict[str, Any]]:
        n = len(FIELDS)
        return [
            dict(zip(FIELDS, self._values[i * n : (i + 1) * n], strict=True))
            for i in range(self._waves)
        ]


def growth(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Growth per 10,000 calls after the warm-up (the first fifth of the waves).

    The counts swing by a bounded amount from wave to wave (the watchdog
    compacts its heap every few hundred finished calls; the test upstream's
    handlers of aborted streams end a wave late), on top of what stays. So
    the figure compares the lowest value of the second fifth of the waves
    with the lowest of the last fifth: what every wave keeps.
    """
    n = len(samples)
    early, late = samples[n // 5 : 2 * n // 5], samples[-(n // 5) :]
    calls = late[0]["calls"] - early[0]["calls"]

    def per_10k(key: str) -> float | None:
        if early[0][key] < 0:
            return None
        return (min(s[key] for s in late) - min(s[key] for s in early)) * 10_000 / calls

    return {
        "calls_between_windows": calls,
        "rss_kib_per_10k_calls": per_10k("rss_kib"),
        "rss_trimmed_kib_per_10k_calls": per_10k("rss_trimmed_kib"),
        "gc_objects_per_10k_calls": per_10k("gc_objects"),
        "allocated_blocks_per_10k_calls": per_10k("allocated_blocks"),
        "rss_kib_first": samples[n // 5]["rss_kib"],
        "rss_kib_last": samples[-1]["rss_kib"],
        "gc_objects_first": samples[n // 5]["gc_objects"],
        "gc_objects_last": samples[-1]["gc_objects"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20 waves of 500 calls")
    args = parser.parse_args(argv)
    sizes = sized(QUICK if args.quick else FULL)
    started = time.perf_counter()
    floor = trio.run(floor_waves, sizes["waves"], sizes["calls_per_wave"])
    runtime = trio.run(runtime_waves, sizes["waves"], sizes["calls_per_wave"])
    report: dict[str, Any] = {
        "benchmark": "soak",
        "command": "python bench/bench_soak.py" + (" --quick" if args.quick else ""),
        "sizes": sizes,
        "kinds": KINDS,
        "environment": environment(),
        "runtime": {"growth": growth(runtime), "waves": runtime},
        "floor": {"growth": growth(floor), "waves": floor},
    }
    rg, fg = report["runtime"]["growth"], report["floor"]["growth"]
    leftover = max(s["tasks"] for s in runtime[-3:]), max(s["in_flight"] for s in runtime)
    report["runtime"]["max_tasks_after_a_wave"] = leftover[0]
    report["meets_target"] = (
        rg["gc_objects_per_10k_calls"] < TARGET_OBJECTS_PER_10K
        and rg["allocated_blocks_per_10k_calls"] < TARGET_BLOCKS_PER_10K
    )
    report["elapsed_s"] = time.perf_counter() - started

    total = sizes["waves"] * sizes["calls_per_wave"]
    print(f"{total:,} calls in {sizes['waves']} waves of {sizes['calls_per_wave']:,}")
    rows = [
        ["RSS after warm-up, MiB", rg["rss_kib_first"] / 1024, fg["rss_kib_first"] / 1024],
        ["RSS after the last wave, MiB", rg["rss_kib_last"] / 1024, fg["rss_kib_last"] / 1024],
        ["RSS growth, KiB per 10,000 calls", rg["rss_kib_per_10k_calls"],
         fg["rss_kib_per_10k_calls"]],
        ["same after malloc_trim(0) each wave", rg["rss_trimmed_kib_per_10k_calls"],
         fg["rss_trimmed_kib_per_10k_calls"]],
        ["tracked objects after warm-up", rg["gc_objects_first"], fg["gc_objects_first"]],
        ["tracked objects after the last wave", rg["gc_objects_last"], fg["gc_objects_last"]],
        ["tracked objects growth per 10,000 calls", rg["gc_objects_per_10k_calls"],
         fg["gc_objects_per_10k_calls"]],
        ["allocated blocks growth per 10,000 calls", rg["allocated_blocks_per_10k_calls"],
         fg["allocated_blocks_per_10k_calls"]],
        ["runtime tasks after a wave (registry, watchdog)", leftover[0], None],
    ]  # fmt: skip
    print(table(["what", "runtime", "floor"], rows))
    verdict = "ok" if report["meets_target"] else "MISS"
    if args.quick:  # the object counts swing over a few waves; too few waves to judge
        verdict = "not judged in a --quick run"
    print(
        f"target per 10,000 calls: tracked objects grow by < {TARGET_OBJECTS_PER_10K:g}, allocated"
        f" blocks by < {TARGET_BLOCKS_PER_10K:g}: {verdict}"
    )
    path = write_json("soak-quick.json" if args.quick else "soak.json", report)
    print(f"\nwrote {path.relative_to(path.parents[2])} in {report['elapsed_s']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
