"""Memory over time: waves of mixed calls through one runtime. Does anything grow?

Run: ``python bench/bench_soak.py [--quick]`` (full: 100 waves of 2,000 calls,
about a minute; ``--quick``: 20 waves of 500). Prints a table and writes
``bench/results/soak.json`` (``soak-quick.json`` with ``--quick``).

Every wave starts its calls at once, one of each kind in turn: a demo
answer, a scripted answer, an adapter that raises mid-stream, a stall ended
by a shared `AbortController`, a stall ended by the idle watchdog (50 ms), a
consumer that leaves after the first chunk, a prepared call, a call
through `stream_with_retry`, and three calls over HTTP (`OpenAIChatAdapter`
against the `llmrt.testing` upstream in the same trio run, on loopback): an
answer, a stalled stream aborted by the shared signal, a 500. Every call
passes one pass-through middleware.
After each wave: a full collection, then RSS, the number of objects the
collector tracks, the runtime's tasks and calls in flight, and the open
upstream connections. The scripted adapters and the local upstream record
all traffic by design (they are test tools), so their records are cleared
after each wave.

Floor (same run, same process, before the runtime starts): the same number
of bare trio task pairs per wave, each pair a producer and a consumer over
a memory channel, the producer ending one way or another.

The figures are growth per 10,000 calls from the second fifth of the waves
(after warm-up) to the last fifth, medians of each. Targets: tracked
objects grow by less than one per 10,000 calls (one object kept per call
would be 10,000), and RSS by no more than the floor's plus 64 KiB.
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import trio
import trio.testing
from _common import environment, median, rss_kib, table, write_json

import llmrt
from llmrt import (
    AbortController,
    Finish,
    GenerateOptions,
    LlmCallConfig,
    StreamChunk,
    user_message,
)
from llmrt.adapters.demo import DemoAdapter
from llmrt.adapters.openai_chat import OpenAIChatAdapter
from llmrt.adapters.scripted import Delay, Raise, ScriptedAdapter, Stall, text_script
from llmrt.testing import ErrorScript, RecordedRequest, SSEScript, open_upstream, openai_events

FULL = {"waves": 100, "calls_per_wave": 2_000}
QUICK = {"waves": 20, "calls_per_wave": 500}
IDLE_TIMEOUT = 0.05
#: One object kept per call would be 10,000 per 10,000 calls.
TARGET_OBJECTS_PER_10K = 1.0
TARGET_RSS_SLACK = 64.0
KINDS = (
    "demo", "ok", "raise", "abort", "timeout", "leave", "prepared", "retry",
    "http", "http-abort", "http-error",
)  # fmt: skip

ANSWER = text_script(["Hello", ", ", "world"])
FAILING = [*ANSWER[:2], Delay(0.001), Raise(RuntimeError("adapter bug"))]
STALLING = [*ANSWER[:2], Stall()]

#: The local upstream's answer for each model the HTTP calls ask for.
HTTP_SCRIPTS = {
    "answer": SSEScript(events=openai_events(["Hello", ", ", "world"])),
    "stall": SSEScript(events=openai_events(["Hello", ", ", "world"]), stall_after=2),
    "error": ErrorScript(status=500, body={"error": {"message": "overloaded"}}),
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


async def one_call(rt: llmrt.LlmRuntime, kind: str, ctl: AbortController, seen: list[int]) -> None:
    """One call of ``kind``; ``seen[0]`` counts terminal finishes, ``seen[1]`` early exits."""
    if kind == "retry":
        async with rt.stream_with_retry(request("ok")) as retry_call:
            async for _ in retry_call:
                pass
        seen[0] += 1
        return
    if kind == "prepared":
        prepared = await rt.prepare_call(LlmCallConfig(provider="ok", model="soak"))
        config = prepared.config
        context = prepared.stream(request("ok", max_tokens=config.max_tokens))
    elif kind == "demo":
        context = rt.stream(request("demo"))
    elif kind == "abort":
        context = rt.stream(request("stall"), signal=ctl.signal)
    elif kind == "http":
        context = rt.stream(request("http", model="answer"))
    elif kind == "http-abort":
        context = rt.stream(request("http", model="stall"), signal=ctl.signal)
    elif kind == "http-error":
        context = rt.stream(request("http", model="error"))
    else:
        provider = {"ok": "ok", "raise": "raise", "timeout": "stall-timeout", "leave": "stall"}
        context = rt.stream(request(provider[kind]))
    async with context as call:
        async for chunk in call:
            if kind == "leave":
                seen[1] += 1
                return
            if type(chunk) is Finish:
                seen[0] += 1


async def runtime_waves(waves: int, per_wave: int) -> list[dict[str, Any]]:
    samples: list[dict[str, Any]] = []
    async with open_upstream(route) as upstream, llmrt.open_runtime() as rt:
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

        for wave in range(waves):
            ctl = AbortController()
            seen = [0, 0]
            async with trio.open_nursery() as nursery:
                for n in range(per_wave):
                    nursery.start_soon(one_call, rt, KINDS[n % len(KINDS)], ctl, seen)
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
            stats = rt.statistics()
            samples.append(
                sample(
                    wave,
                    per_wave,
                    tasks=len(rt._core.nursery.child_tasks),
                    in_flight=stats.calls_in_flight,
                    upstream_connections=len(upstream.connections),
                )
            )
    return samples


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

    samples: list[dict[str, Any]] = []
    for wave in range(waves):
        async with trio.open_nursery() as nursery:
            async with trio.open_nursery() as producers:
                for n in range(per_wave):
                    send, recv = trio.open_memory_channel[int](16)
                    producers.start_soon(producer, send, n)
                    nursery.start_soon(consumer, recv)
                await trio.testing.wait_all_tasks_blocked()
                producers.cancel_scope.cancel()
        samples.append(sample(wave, per_wave, tasks=0, in_flight=0))
    return samples


def sample(wave: int, per_wave: int, **extra: int) -> dict[str, Any]:
    gc.collect()
    return {
        "wave": wave,
        "calls": (wave + 1) * per_wave,
        "rss_kib": rss_kib(),
        "gc_objects": len(gc.get_objects()),
        **extra,
    }


def growth(samples: list[dict[str, Any]]) -> dict[str, float]:
    """Per 10,000 calls, from the second fifth of the waves to the last fifth.

    Medians of each window, so that bounded churn (the watchdog compacts its
    heap now and then) is not read as growth; a single object kept per call
    would still show as 10,000 per 10,000 calls.
    """
    n = len(samples)
    early, late = samples[n // 5 : 2 * n // 5], samples[-(n // 5) :]
    calls = median([s["calls"] for s in late]) - median([s["calls"] for s in early])
    rss = median([s["rss_kib"] for s in late]) - median([s["rss_kib"] for s in early])
    objects = median([s["gc_objects"] for s in late]) - median([s["gc_objects"] for s in early])
    return {
        "calls_between_windows": calls,
        "rss_kib_per_10k_calls": rss * 10_000 / calls,
        "gc_objects_per_10k_calls": objects * 10_000 / calls,
        "rss_kib_early": median([s["rss_kib"] for s in early]),
        "rss_kib_late": median([s["rss_kib"] for s in late]),
        "gc_objects_early": median([s["gc_objects"] for s in early]),
        "gc_objects_late": median([s["gc_objects"] for s in late]),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20 waves of 500 calls")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
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
        and rg["rss_kib_per_10k_calls"] <= max(fg["rss_kib_per_10k_calls"], 0) + TARGET_RSS_SLACK
    )
    report["elapsed_s"] = time.perf_counter() - started

    total = sizes["waves"] * sizes["calls_per_wave"]
    print(f"{total:,} calls in {sizes['waves']} waves of {sizes['calls_per_wave']:,}")
    rows = [
        ["RSS, second fifth of the waves, MiB", rg["rss_kib_early"] / 1024,
         fg["rss_kib_early"] / 1024],
        ["RSS, last fifth, MiB", rg["rss_kib_late"] / 1024, fg["rss_kib_late"] / 1024],
        ["RSS growth, KiB per 10,000 calls", rg["rss_kib_per_10k_calls"],
         fg["rss_kib_per_10k_calls"]],
        ["tracked objects, second fifth", rg["gc_objects_early"], fg["gc_objects_early"]],
        ["tracked objects, last fifth", rg["gc_objects_late"], fg["gc_objects_late"]],
        ["tracked objects growth per 10,000 calls", rg["gc_objects_per_10k_calls"],
         fg["gc_objects_per_10k_calls"]],
        ["runtime tasks after a wave (registry, watchdog)", leftover[0], None],
    ]  # fmt: skip
    print(table(["what", "runtime", "floor"], rows))
    print(
        f"target: tracked objects grow by < {TARGET_OBJECTS_PER_10K:g} per 10,000 calls, RSS by"
        f" no more than the floor's + {TARGET_RSS_SLACK:g} KiB: "
        + ("ok" if report["meets_target"] else "MISS")
    )
    path = write_json("soak-quick.json" if args.quick else "soak.json", report)
    print(f"\nwrote {path.relative_to(path.parents[2])} in {report['elapsed_s']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
