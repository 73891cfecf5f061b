"""Abandonment and abort, measured in one process: how soon the provider socket closes.

``bench_http.py`` measures abandonment across two processes, so its figure
includes the upstream process's own scheduling. Here the local upstream
(`llmrt.testing`) runs in the same trio run as the client: the time from
the consumer leaving its ``async with`` (or calling ``abort()``) to the
upstream observing the client's EOF is llmrt's closing path plus one
loopback hop. Both sides read trio's clock.

    python bench/bench_abandon.py [--quick]
"""

from __future__ import annotations

import argparse
import sys

import trio
from _common import environment, median, percentiles, table, write_json

import llmrt
from llmrt.adapters.openai_chat import OpenAIChatAdapter
from llmrt.testing import SSEScript, open_upstream, openai_events

TARGET_MS = 1.0


async def measure(streams: int, rounds: int, how: str) -> list[float]:
    """Milliseconds from leave/abort to the upstream seeing the connection close."""
    script = SSEScript(events=openai_events([f"t{i} " for i in range(1000)]), delay=0.01)
    latencies: list[float] = []
    async with open_upstream(script) as upstream, llmrt.open_runtime() as rt:
        adapter = OpenAIChatAdapter(
            base_url=upstream.base_url, api_key_env="K", environ={"K": "sk-bench-0000"}
        )
        await rt.register_adapter(["p"], adapter)
        for _ in range(rounds):
            left: dict[int, float] = {}
            first_request = len(upstream.requests)

            async def one(n: int, left: dict[int, float] = left) -> None:
                # The prompt carries n, so the upstream's request record finds the
                # connection this stream used.
                request = llmrt.GenerateOptions(
                    provider="p", model="m", messages=(llmrt.user_message(f"go {n}"),)
                )
                async with rt.stream(request) as call:
                    seen = 0
                    async for _ in call:
                        seen += 1
                        if seen == 3 + n % 5 and n not in left:
                            left[n] = trio.current_time()
                            if how == "abort":
                                call.abort()
                            else:
                                break  # leaving the async with: the abandonment case

            async with trio.open_nursery() as nursery:
                for n in range(streams):
                    nursery.start_soon(one, n)
            with trio.fail_after(10):
                await upstream.wait_all_closed()
            for record in upstream.requests[first_request:]:
                n = int(record.json["messages"][-1]["content"].rsplit(" ", 1)[-1])
                closed_at = upstream.connections[record.connection].closed_at
                assert closed_at is not None
                latencies.append((closed_at - left[n]) * 1000)
    return latencies


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    streams, rounds = (20, 1) if args.quick else (20, 5)
    report: dict[str, object] = {
        "benchmark": "abandon",
        "command": "python bench/bench_abandon.py" + (" --quick" if args.quick else ""),
        "environment": environment(),
        "streams": streams,
        "rounds": rounds,
        "results": {},
    }
    rows = []
    for how in ("leave", "abort"):
        ms = trio.run(measure, streams, rounds, how)
        stats = percentiles(ms)
        within = sum(1 for v in ms if v <= TARGET_MS)
        report["results"][how] = {  # type: ignore[index]
            "samples": len(ms),
            "p50_ms": median(ms),
            **{k + "_ms": v for k, v in stats.items()},
            "within_1ms": within,
        }
        rows.append(
            [
                how,
                len(ms),
                f"{median(ms):.3f}",
                f"{stats['p99']:.3f}",
                f"{stats['max']:.3f}",
                f"{within}/{len(ms)}",
            ]
        )
    print(table(["case", "streams", "p50 ms", "p99 ms", "max ms", "<= 1 ms"], rows))
    path = write_json("abandon" + ("-quick" if args.quick else "") + ".json", report)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
