"""Event-loop stalls under a hostile upstream: the worst heartbeat lateness per misbehaviour.

A heartbeat task in the client's trio run sleeps 1 ms again and again and
notes how late it wakes; the worst lateness (p100) while a call meets one
misbehaviour of `llmrt.testing.hostile` is how long llmrt held the loop at
once, i.e. how long every other call in the process was frozen. The same
figure on a well-behaved stream in the same run is the floor to compare
with. Target: no stall above 20 ms.

Each misbehaviour is served by its own child process (the local upstream in
this process, or a thread of it, would compete for the loop or the GIL and
be measured too). Calls go through `OpenAIChatAdapter` over `TrioTransport`
in one runtime, directly (no gateway), with a 3 s idle watchdog so that an
endless misbehaviour a client fails to bound shows up as a TIMEOUT rather
than a hang. Peak RSS growth per case is read from ``VmHWM`` after resetting
it (``/proc/self/clear_refs``), so each case's figure is its own.

    python bench/bench_hostile.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import trio
from _common import environment, rss_kib, table, write_json

import llmrt
from llmrt import Finish, FinishError, FinishStop
from llmrt.adapters.openai_chat import OpenAIChatAdapter

TARGET_MS = 20.0
HEARTBEAT_S = 0.001
IDLE_TIMEOUT = 3.0
CASE_BOUND = 20.0
KEY = "Zq7benchHostileKey0c4e8a"

#: (label, misbehaviour or "well-behaved", options, prompt bytes)
CASES: list[tuple[str, str, dict[str, Any], int]] = [
    ("well-behaved", "well-behaved", {}, 2),
    ("endless-head", "endless-head", {}, 2),
    ("giant-chunk-size", "giant-chunk-size", {}, 2),
    ("1xx-flood", "1xx-flood", {}, 2),
    ("gzip-bomb", "gzip-bomb", {}, 2),
    *[
        (f"echo-secrets {p}", "echo-secrets", {"phrasing": p}, 2)
        for p in ("authorization", "x-api-key", "token", "json", "html-title")
    ],
    ("trickle", "trickle", {}, 2),
    ("reset-mid-body", "reset-mid-body", {}, 2),
    ("deep-nesting", "deep-nesting", {}, 2),
    ("stale-keep-alive", "stale-keep-alive", {}, 2),
    # A body larger than loopback socket buffers, so the 413 meets a blocked write.
    ("early-413", "early-413", {}, 8 << 20),
    ("garbage-status", "garbage-status", {}, 2),
    ("broken-chunked", "broken-chunked", {}, 2),
    ("blank-line-flood", "blank-line-flood", {}, 2),
    ("comment-flood", "comment-flood", {}, 2),
    ("giant-deltas", "giant-deltas", {}, 2),
]


# ---- the child: one upstream ------------------------------------------------------------------


async def _serve_child(name: str, options: dict[str, Any]) -> None:
    from llmrt.testing import SSEScript, hostile, open_upstream, openai_events

    script = (
        SSEScript(openai_events([f"tok{i} " for i in range(2000)]))
        if name == "well-behaved"
        else hostile(name, **options)
    )
    async with open_upstream(script) as upstream:
        print(upstream.port, flush=True)
        # Serve until the parent closes our stdin.
        await trio.to_thread.run_sync(sys.stdin.read)


@contextmanager
def upstream_process(name: str, options: dict[str, Any]) -> Iterator[int]:
    proc = subprocess.Popen(
        [sys.executable, __file__, "--child", name, json.dumps(options)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        yield int(proc.stdout.readline())
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ---- the parent: calls and a heartbeat ---------------------------------------------------------


def _reset_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _peak_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError("no VmHWM line in /proc/self/status")


async def heartbeat(worst: list[float], task_status: trio.TaskStatus[None]) -> None:
    task_status.started()
    while True:
        before = time.perf_counter()
        await trio.sleep(HEARTBEAT_S)
        late = time.perf_counter() - before - HEARTBEAT_S
        if late > worst[0]:
            worst[0] = late


def _describe(chunks: list[Any]) -> str:
    finishes = [c for c in chunks if isinstance(c, Finish)]
    if len(finishes) != 1:
        return f"{len(finishes)} finishes"
    reason = finishes[0].reason
    if isinstance(reason, FinishStop):
        return "stop"
    if isinstance(reason, FinishError):
        return str(reason.failure.code)
    return type(reason).__name__


async def run_case(
    rt: llmrt.LlmRuntime, label: str, name: str, options: dict[str, Any], prompt: int
) -> dict[str, Any]:
    with upstream_process(name, options) as port:
        provider = label.replace(" ", "-")
        adapter = OpenAIChatAdapter(
            base_url=f"http://127.0.0.1:{port}", api_key_env="K", environ={"K": KEY}
        )
        await rt.register_adapter([provider], adapter)
        request = llmrt.GenerateOptions(
            provider=provider, model="m", messages=(llmrt.user_message("x" * prompt),)
        )
        calls = 2 if name == "stale-keep-alive" else 1  # the second meets the stale connection
        outcomes = []
        worst = [0.0]
        measured = _reset_peak()
        rss_before = rss_kib()
        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            await nursery.start(heartbeat, worst)
            with trio.move_on_after(CASE_BOUND) as scope:
                for _ in range(calls):
                    async with rt.stream(request) as call:
                        chunks = [chunk async for chunk in call]
                    outcomes.append(_describe(chunks))
            nursery.cancel_scope.cancel()
        seconds = time.perf_counter() - start
        peak_growth = (_peak_kib() - rss_before) if measured else None
        if scope.cancelled_caught:
            outcomes.append("no finish")
        return {
            "misbehaviour": name,
            "options": options,
            "outcome": "/".join(outcomes),
            "worst_stall_ms": worst[0] * 1000,
            "seconds": seconds,
            "peak_rss_growth_kib": peak_growth,
        }


async def measure(cases: list[tuple[str, str, dict[str, Any], int]]) -> dict[str, Any]:
    results: dict[str, Any] = {}
    async with llmrt.open_runtime(stream_idle_timeout=IDLE_TIMEOUT) as rt:
        for label, name, options, prompt in cases:
            results[label] = await run_case(rt, label, name, options, prompt)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few cases only")
    parser.add_argument("--child", nargs=2, metavar=("NAME", "OPTIONS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        trio.run(_serve_child, args.child[0], json.loads(args.child[1]))
        return 0
    cases = CASES[:5] if args.quick else CASES
    report: dict[str, Any] = {
        "benchmark": "hostile",
        "command": "python bench/bench_hostile.py" + (" --quick" if args.quick else ""),
        "environment": environment(),
        "target_ms": TARGET_MS,
        "heartbeat_ms": HEARTBEAT_S * 1000,
        "idle_timeout_s": IDLE_TIMEOUT,
    }
    results = trio.run(measure, cases)
    report["results"] = results
    floor = results["well-behaved"]["worst_stall_ms"]
    rows = []
    for label, r in results.items():
        growth = r["peak_rss_growth_kib"]
        rows.append(
            [
                label,
                r["outcome"],
                f"{r['worst_stall_ms']:.1f}",
                f"{floor:.1f}",
                "yes" if r["worst_stall_ms"] <= TARGET_MS else "NO",
                f"{r['seconds']:.2f}",
                "" if growth is None else f"{growth / 1024:.1f}",
            ]
        )
    print(
        table(
            [
                "case",
                "finish",
                "worst stall ms",
                "well-behaved ms",
                "<= 20 ms",
                "s",
                "peak RSS +MiB",
            ],
            rows,
        )
    )
    report["all_within_target"] = all(r["worst_stall_ms"] <= TARGET_MS for r in results.values())
    path = write_json("hostile" + ("-quick" if args.quick else "") + ".json", report)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
