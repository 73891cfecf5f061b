"""llmrt under asyncio (`llmrt.aio`) beside llmrt under trio and the openai SDK under asyncio.

One run, one local upstream per workload (`bench_http.UpstreamProcess`: its
own process, so a client's CPU is the client's), and each contender in a
process of its own for each workload:

* ``trio`` -- `llmrt.open_runtime` in ``trio.run`` (the native figure);
* ``aio-guest`` -- `llmrt.aio.open_runtime` in ``asyncio.run``, trio as a
  guest of the loop (the default);
* ``aio-thread`` -- the same with ``trio_host="thread"`` (the alternative the
  default was chosen against, docs/asyncio.md);
* ``openai`` -- the openai SDK's ``AsyncOpenAI`` in ``asyncio.run``, its own
  pool limits, ``max_retries=0``.

Workloads:

* ``per_chunk`` -- ``streams`` concurrent streams of ``chunks`` text deltas
  sent back to back; the client's CPU time (user + system, every thread of
  the process) over the deltas received, in us per chunk, after a warm-up
  stream;
The contenders take turns ``passes`` times per workload (per chunk: the
median of the passes; cancel: the passes' samples pooled), so a shared
machine's drifting load falls on all of them alike.

* ``cancel`` -- ``rounds`` x ``streams`` streams paced at 10 ms per event,
  started ``stagger`` s apart; each consumer cancels itself (trio: its cancel
  scope; asyncio: ``task.cancel()`` on its own task, as a timeout or a
  disconnect does) after its k-th delta (k = 3..7) and notes the monotonic
  clock; the figure is the upstream's record of that stream's connection
  closing minus that moment, p50 / p99 in ms;
* ``scale`` -- 1,000 and 5,000 concurrent streams of ``scale_chunks`` deltas
  paced at ``scale_delay``, started at once: the wall time until every one has
  ended (and how many failed); streams not done by ``scale_deadline`` are
  cancelled and counted failed (the openai SDK's pool of 1,000 connections
  queues the rest).

Targets (issue 27): per chunk ``aio-guest`` <= 1.5x ``trio``, cancel p99 <=
2x ``trio``, 5,000 streams' wall <= 1.3x ``trio``, and every llmrt figure
below ``openai``'s. Misses are printed, not hidden.

    python bench/bench_asyncio.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import environment, median, percentiles, sized, table, write_json

CONTENDERS = ("trio", "aio-guest", "aio-thread", "openai")
MODEL = "gpt-4.1-mini"
API_KEY = "sk-bench-asyncio-0123456789"
WARMUP = "bench-warmup"

FULL = {
    "chunk_streams": 4,
    "chunks": 5_000,
    "cancel_streams": 20,
    "cancel_rounds": 24,
    "passes": 3,
    "stagger": 0.001,
    "scale": [1_000, 5_000],
    "scale_chunks": 20,
    "scale_delay": 0.05,
    "scale_deadline": 90.0,
}
QUICK = {
    "chunk_streams": 2,
    "chunks": 1_000,
    "cancel_streams": 10,
    "cancel_rounds": 3,
    "passes": 1,
    "stagger": 0.001,
    "scale": [100, 500],
    "scale_chunks": 10,
    "scale_delay": 0.05,
    "scale_deadline": 30.0,
}


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# ==== one contender's client: open, stream ========================================================


def _llmrt_options(marker: str) -> Any:
    from llmrt import GenerateOptions, user_message

    return GenerateOptions(provider="bench", model=MODEL, messages=(user_message(marker),))


def _adapter(base_url: str) -> Any:
    from llmrt.adapters.openai_chat import OpenAIChatAdapter

    return OpenAIChatAdapter(
        base_url=base_url + "/v1", api_key_env="BENCH_KEY", environ={"BENCH_KEY": API_KEY}
    )


async def _llmrt_consume(rt: Any, marker: str, leave_after: int | None, leave: Any) -> int:
    """Stream one call; after ``leave_after`` deltas call ``leave()`` (which cancels us)."""
    from llmrt import TextDelta

    count = 0
    async with rt.stream(_llmrt_options(marker)) as call:
        async for chunk in call:
            if type(chunk) is TextDelta:
                count += 1
                if count == leave_after:
                    await leave()
    return count


async def _openai_consume(client: Any, marker: str, leave_after: int | None, leave: Any) -> int:
    stream = await client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": marker}],
        stream=True,
        stream_options={"include_usage": True},
    )
    count = 0
    async with stream:
        async for chunk in stream:
            for choice in chunk.choices:
                if choice.delta.content:
                    count += 1
                    if count == leave_after:
                        await leave()
    return count


# ==== the worker: one contender, one workload =====================================================


async def _asyncio_leave() -> None:
    """Cancel the current asyncio task, as a timeout or a disconnect does, and let it land."""
    LEFT[asyncio.current_task()] = time.monotonic()  # type: ignore[index]
    asyncio.current_task().cancel()  # type: ignore[union-attr]
    await asyncio.sleep(0)


LEFT: dict[Any, float] = {}


async def _asyncio_worker(contender: str, spec: dict[str, Any]) -> dict[str, Any]:
    base_url = spec["base_url"]
    if contender == "openai":
        import httpx
        from openai import AsyncOpenAI

        client: Any = AsyncOpenAI(base_url=base_url + "/v1", api_key=API_KEY, max_retries=0)
        consume: Callable[..., Awaitable[int]] = _openai_consume

        async def close() -> None:
            await client.close()

        del httpx
    else:
        import llmrt.aio

        host = "guest" if contender == "aio-guest" else "thread"
        opened = llmrt.aio.open_runtime(trio_host=host)  # type: ignore[arg-type]
        client = await opened.__aenter__()
        await client.register_adapter(["bench"], _adapter(base_url))
        consume = _llmrt_consume

        async def close() -> None:
            await opened.__aexit__(None, None, None)

    try:
        await consume(client, WARMUP, None, None)
        workload = spec["workload"]
        if workload == "per_chunk":
            cpu0, t0 = _cpu(), time.perf_counter()
            counts = await asyncio.gather(
                *(consume(client, f"s{i}", None, None) for i in range(spec["streams"]))
            )
            cpu, wall = _cpu() - cpu0, time.perf_counter() - t0
            return {"chunks": sum(counts), "cpu_s": cpu, "wall_s": wall}
        if workload == "cancel":
            left: dict[str, float] = {}
            for r in range(spec["rounds"]):
                tasks = {}
                for i in range(spec["streams"]):
                    marker = f"bench-stream-{contender}-{spec['pass']}-{r}-{i}"
                    task = asyncio.create_task(consume(client, marker, 3 + i % 5, _asyncio_leave))
                    tasks[marker] = task
                    await asyncio.sleep(spec["stagger"])
                await asyncio.gather(*tasks.values(), return_exceptions=True)
                for marker, task in tasks.items():
                    left[marker] = LEFT.pop(task)
            return {"left": left}
        if workload == "scale":
            t0 = time.perf_counter()
            tasks = [
                asyncio.create_task(consume(client, f"x{i}", None, None)) for i in range(spec["n"])
            ]
            done, pending = await asyncio.wait(tasks, timeout=spec["deadline"])
            wall = time.perf_counter() - t0
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            failed = [t.exception() for t in done if t.exception() is not None]
            return {
                "wall_s": wall,
                "failed": len(failed) + len(pending),
                "unfinished": len(pending),
                "error": repr(failed[0])[:200] if failed else None,
            }
        raise SystemExit(f"unknown workload {workload!r}")
    finally:
        await close()


async def _trio_worker(spec: dict[str, Any]) -> dict[str, Any]:
    import trio

    import llmrt

    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["bench"], _adapter(spec["base_url"]))
        await _llmrt_consume(rt, WARMUP, None, None)
        workload = spec["workload"]
        if workload == "per_chunk":
            counts: list[int] = []
            cpu0, t0 = _cpu(), time.perf_counter()
            async with trio.open_nursery() as nursery:
                for i in range(spec["streams"]):

                    async def one(i: int = i) -> None:
                        counts.append(await _llmrt_consume(rt, f"s{i}", None, None))

                    nursery.start_soon(one)
            cpu, wall = _cpu() - cpu0, time.perf_counter() - t0
            return {"chunks": sum(counts), "cpu_s": cpu, "wall_s": wall}
        if workload == "cancel":
            left: dict[str, float] = {}
            for r in range(spec["rounds"]):
                async with trio.open_nursery() as nursery:
                    for i in range(spec["streams"]):
                        marker = f"bench-stream-trio-{spec['pass']}-{r}-{i}"

                        async def one(marker: str = marker, k: int = 3 + i % 5) -> None:
                            with trio.CancelScope() as scope:

                                async def leave() -> None:
                                    left[marker] = time.monotonic()
                                    scope.cancel()
                                    await trio.lowlevel.checkpoint()

                                await _llmrt_consume(rt, marker, k, leave)

                        nursery.start_soon(one)
                        await trio.sleep(spec["stagger"])
            return {"left": left}
        if workload == "scale":
            failed: list[BaseException] = []
            finished = [0]
            t0 = time.perf_counter()
            with trio.move_on_after(spec["deadline"]):
                async with trio.open_nursery() as nursery:
                    for i in range(spec["n"]):

                        async def one(i: int = i) -> None:
                            try:
                                await _llmrt_consume(rt, f"x{i}", None, None)
                            except Exception as exc:
                                failed.append(exc)
                            finished[0] += 1

                        nursery.start_soon(one)
            wall = time.perf_counter() - t0
            unfinished = spec["n"] - finished[0]
            return {
                "wall_s": wall,
                "failed": len(failed) + unfinished,
                "unfinished": unfinished,
                "error": repr(failed[0])[:200] if failed else None,
            }
        raise SystemExit(f"unknown workload {workload!r}")


def _worker(contender: str, spec: dict[str, Any]) -> None:
    from bench_http import raise_nofile

    raise_nofile()
    if contender == "trio":
        import trio

        result = trio.run(_trio_worker, spec)
    else:
        result = asyncio.run(_asyncio_worker(contender, spec))
    print(json.dumps(result), flush=True)


def _run_worker(contender: str, spec: dict[str, Any]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, "--worker", contender, json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{contender} {spec['workload']} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# ==== the runner ==================================================================================


def _cancel_figures(up: Any, left: dict[str, float]) -> dict[str, Any]:
    streams = up.stats(detail="1")["streams"]
    samples = []
    for marker, at in left.items():
        closed = streams.get(marker, {}).get("closed_at")
        if closed is not None:
            samples.append((closed - at) * 1000)
    return {"samples": len(samples), "lost": len(left) - len(samples), **percentiles(samples)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker(args.worker[0], json.loads(args.worker[1]))
        return
    from bench_http import UpstreamProcess, raise_nofile

    raise_nofile()
    sizes = sized(QUICK if args.quick else FULL)
    report: dict[str, Any] = {"environment": environment(), "sizes": sizes, "contenders": {}}
    figures: dict[str, dict[str, Any]] = {c: {} for c in CONTENDERS}

    # The contenders take turns, ``passes`` times, so the drift of a shared
    # machine's load falls on all of them alike.
    passes = sizes["passes"]
    with UpstreamProcess(sizes["chunks"], 0.0, fast=True) as up:
        runs: dict[str, list[float]] = {c: [] for c in CONTENDERS}
        for _ in range(passes):
            for contender in CONTENDERS:
                spec = {"base_url": up.base_url, "workload": "per_chunk"}
                got = _run_worker(contender, {**spec, "streams": sizes["chunk_streams"]})
                runs[contender].append(got["cpu_s"] / max(1, got["chunks"]) * 1e6)
                print(f"per_chunk {contender}: {runs[contender][-1]:.2f} us", flush=True)
        for contender in CONTENDERS:
            figures[contender]["per_chunk_us"] = median(runs[contender])
            figures[contender]["per_chunk_runs_us"] = runs[contender]

    with UpstreamProcess(200, 0.01) as up:
        left: dict[str, dict[str, float]] = {c: {} for c in CONTENDERS}
        for p in range(passes):
            for contender in CONTENDERS:
                spec = {
                    "base_url": up.base_url,
                    "workload": "cancel",
                    "pass": p,
                    "streams": sizes["cancel_streams"],
                    "rounds": max(1, sizes["cancel_rounds"] // passes),
                    "stagger": sizes["stagger"],
                }
                left[contender].update(_run_worker(contender, spec)["left"])
                print(f"cancel {contender}: pass {p + 1} of {passes}", flush=True)
        for contender in CONTENDERS:
            figures[contender]["cancel_ms"] = cancel = _cancel_figures(up, left[contender])
            p50, p99 = cancel["p50"], cancel["p99"]
            print(f"cancel {contender}: p50 {p50:.3f} p99 {p99:.3f}", flush=True)

    with UpstreamProcess(sizes["scale_chunks"], sizes["scale_delay"], fast=True) as up:
        for n in sizes["scale"]:
            for contender in CONTENDERS:
                spec = {
                    "base_url": up.base_url,
                    "workload": "scale",
                    "n": n,
                    "deadline": sizes["scale_deadline"],
                }
                got = _run_worker(contender, spec)
                figures[contender][f"scale_{n}"] = got
                print(f"scale {n} {contender}: {got['wall_s']:.2f} s, {got['failed']} failed")

    report["contenders"] = figures
    report["ratios"] = ratios = _ratios(figures, sizes)
    # The runner's README lists every target not met (bench/_readme.py).
    report["targets"] = targets = _targets(figures, ratios, sizes)
    misses = [
        f"{name}: {verdict}" for name, verdict in targets.items() if verdict.startswith("MISSED")
    ]
    rows = []
    for contender in CONTENDERS:
        f = figures[contender]
        rows.append(
            [
                contender,
                f"{f['per_chunk_us']:.2f}",
                f"{f['cancel_ms']['p50']:.3f}",
                f"{f['cancel_ms']['p99']:.3f}",
                *(
                    f"{f[f'scale_{n}']['wall_s']:.2f}"
                    + (
                        f" ({f[f'scale_{n}']['failed']} failed)"
                        if f[f"scale_{n}"]["failed"]
                        else ""
                    )
                    for n in sizes["scale"]
                ),
            ]
        )
    heads = ["contender", "us/chunk", "cancel p50 ms", "cancel p99 ms"]
    heads += [f"{n:,} streams s" for n in sizes["scale"]]
    print(table(heads, rows))
    print(json.dumps(ratios, indent=1))
    print("misses:", misses or "none")
    write_json("asyncio-quick.json" if args.quick else "asyncio.json", report)


def _scale_cell(run: dict[str, Any]) -> str:
    failed = f" ({run['failed']} failed)" if run["failed"] else ""
    return f"{run['wall_s']:.2f}{failed}"


def _ratios(figures: dict[str, dict[str, Any]], sizes: dict[str, Any]) -> dict[str, float]:
    trio = figures["trio"]
    big = sizes["scale"][-1]
    out = {}
    for contender in ("aio-guest", "aio-thread", "openai"):
        f = figures[contender]
        out[f"{contender}/trio per_chunk"] = f["per_chunk_us"] / trio["per_chunk_us"]
        out[f"{contender}/trio cancel_p99"] = f["cancel_ms"]["p99"] / trio["cancel_ms"]["p99"]
        out[f"{contender}/trio scale_{big}"] = (
            f[f"scale_{big}"]["wall_s"] / trio[f"scale_{big}"]["wall_s"]
        )
    return out


def _targets(
    figures: dict[str, dict[str, Any]], ratios: dict[str, float], sizes: dict[str, Any]
) -> dict[str, str]:
    """Each target of issue 27, ``MET (...)`` or ``MISSED (...)``."""
    big = sizes["scale"][-1]
    out = {}

    def judge(name: str, ok: bool, detail: str) -> None:
        out[name] = f"{'MET' if ok else 'MISSED'} ({detail})"

    for name, bound in (
        ("aio-guest/trio per_chunk", 1.5),
        ("aio-guest/trio cancel_p99", 2.0),
        (f"aio-guest/trio scale_{big}", 1.3),
    ):
        judge(f"{name}<={bound}", ratios[name] <= bound, f"{ratios[name]:.2f}")
    guest, openai = figures["aio-guest"], figures["openai"]
    pairs = [
        ("per_chunk_us", guest["per_chunk_us"], openai["per_chunk_us"]),
        ("cancel_p50_ms", guest["cancel_ms"]["p50"], openai["cancel_ms"]["p50"]),
        ("cancel_p99_ms", guest["cancel_ms"]["p99"], openai["cancel_ms"]["p99"]),
    ]
    for n in sizes["scale"]:
        pairs.append(
            (f"scale_{n}_s", guest[f"scale_{n}"]["wall_s"], openai[f"scale_{n}"]["wall_s"])
        )
    for name, ours, theirs in pairs:
        judge(f"aio-guest {name} < openai", ours < theirs, f"{ours:.3f} vs {theirs:.3f}")
    return out


if __name__ == "__main__":
    main()
