"""The worst event-loop stall while an adapter reads a gzip bomb, next to a well-behaved stream.

A local upstream (``llmrt.testing``) streams, with ``Content-Encoding: gzip``:

- ``blank-lines``: a few events, then ``SIZE_MB`` of inflated blank lines, then ``[DONE]``;
- ``one-line``: a few events, then one ``data:`` line of ``SIZE_MB`` inflated bytes;
- ``well-behaved``: 5,000 ordinary chunk events, compressed;
- ``plain``: the same events uncompressed.

Each runs as one call through `OpenAIChatAdapter` on `TrioTransport` in a
runtime, while a heartbeat task sleeps 1 ms in a loop and records how late
it wakes. Prints, per case, the worst and the 99th-percentile lateness, the
call's finish, its wall time and the RSS growth, and writes them to
``bench/results/gzip_bomb.json``. Run: ``python bench/bench_gzip_bomb.py
[SIZE_MB]`` (default 100; a few seconds on the current code).
"""

from __future__ import annotations

import sys
import time
import zlib
from typing import Any

import trio
from _common import environment, percentiles, rss_kib, table, write_json

import llmrt
from llmrt import Finish, FinishError
from llmrt.adapters._transport import TrioTransport
from llmrt.adapters.openai_chat import OpenAIChatAdapter
from llmrt.testing import SSEScript, open_upstream, openai_events

PIECE = 16 * 1024


def gzip_stream(parts: list[tuple[bytes, int]]) -> list[bytes]:
    """gzip of the concatenation of ``block * times`` for each part, as 16 KiB pieces."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    out = bytearray()
    for block, times in parts:
        for _ in range(times):
            out += compressor.compress(block)
    out += compressor.flush()
    return [bytes(out[i : i + PIECE]) for i in range(0, len(out), PIECE)]


def cases(size_mb: int) -> dict[str, SSEScript]:
    prefix = b"".join(openai_events(["a"])[:2])
    done = b"".join(openai_events(["b"])[1:])
    mb = 1 << 20
    normal = openai_events([f"token {i} " for i in range(5000)])
    gz = {"content-encoding": "gzip"}
    return {
        "blank-lines": SSEScript(
            events=gzip_stream([(prefix, 1), (b"\n" * mb, size_mb), (done, 1)]), headers=gz
        ),
        "one-line": SSEScript(
            events=gzip_stream([(prefix + b"data: ", 1), (b"a" * mb, size_mb), (b"\n\n", 1)]),
            headers=gz,
        ),
        "well-behaved": SSEScript(events=gzip_stream([(b"".join(normal), 1)]), headers=gz),
        "plain": SSEScript(events=normal),
    }


async def run_case(script: SSEScript) -> dict[str, Any]:
    lates: list[float] = []
    rss0 = rss_kib()
    async with open_upstream(script) as upstream:
        adapter = OpenAIChatAdapter(
            base_url=upstream.base_url,
            api_key_env="K",
            environ={"K": "sk-bench"},
            transport=TrioTransport(),
            retry_policy=llmrt.NormalRetryPolicy(max_retries=0),
        )
        async with llmrt.open_runtime() as rt:
            await rt.register_adapter(["p"], adapter)
            options = llmrt.GenerateOptions(
                provider="p", model="m", messages=(llmrt.user_message("hi"),)
            )
            async with trio.open_nursery() as nursery:

                async def heartbeat() -> None:
                    while True:
                        t0 = time.perf_counter()
                        await trio.sleep(0.001)
                        lates.append(time.perf_counter() - t0 - 0.001)

                nursery.start_soon(heartbeat)
                await trio.sleep(0.01)
                started = time.perf_counter()
                async with rt.stream(options) as call:
                    chunks = [chunk async for chunk in call]
                wall = time.perf_counter() - started
                nursery.cancel_scope.cancel()
    finish = chunks[-1]
    assert isinstance(finish, Finish)
    reason = finish.reason
    outcome = (
        f"{reason.failure.code}: {reason.failure.message[:60]}"
        if isinstance(reason, FinishError)
        else type(reason).__name__
    )
    p = percentiles([x * 1000 for x in lates], (99,))
    return {
        "worst_stall_ms": round(max(lates) * 1000, 2),
        "p99_stall_ms": round(p["p99"], 2),
        "wall_s": round(wall, 3),
        "rss_growth_kib": rss_kib() - rss0,
        "finish": outcome,
    }


async def main(size_mb: int) -> None:
    report: dict[str, Any] = {"environment": environment(), "size_mb": size_mb, "cases": {}}
    for name, script in cases(size_mb).items():
        report["cases"][name] = await run_case(script)
    keys = ["worst_stall_ms", "p99_stall_ms", "wall_s", "rss_growth_kib", "finish"]
    rows = [[name, *(r[k] for k in keys)] for name, r in report["cases"].items()]
    print(table(["case", "worst ms", "p99 ms", "wall s", "RSS +KiB", "finish"], rows))
    print("wrote", write_json("gzip_bomb.json", report))


if __name__ == "__main__":
    trio.run(main, int(sys.argv[1]) if len(sys.argv) > 1 else 100)
