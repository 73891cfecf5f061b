"""Routing: the decision's cost, Redis's round trip, and failover beside LiteLLM's Router.

Run: ``python bench/bench_routing.py [--quick]`` (or ``python -m bench routing``)

* ``decision``: one routing decision and its release with local state
  (`Router.acquire_local` + `release_local`), per group shape and strategy:
  three deployments with rpm/tpm limits, tiers, weights, latency averages.
  Target: at most 5 µs per call (median). Beside it, the whole routed-call
  layer: a call to a group minus the same call straight to its route.
* ``redis``: the same decision through Redis (one ``EVALSHA`` each way)
  against a local ``redis-server`` started here on a free port; p50/p99 of
  the acquire and of the release, and a ``PING`` through the same client as
  the floor. Skipped, saying why, when no ``redis-server`` is installed.
* ``failover``: a group of two deployments whose first answers 429; the time
  from that 429 to the second deployment's first byte, as the upstreams see
  it (their own process stamps each request with ``time.monotonic()``),
  p50/p99, then the same with LiteLLM's Router (``fallbacks``, no retries,
  no cooldowns) against the same upstreams in the same run.

JSON goes to ``bench/results/routing.json`` (``routing-quick.json``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import trio
from _common import environment, median, percentiles, sized, table, write_json

import llmrt
from llmrt.actors.routing import Deployment, Group, RoutingSettings
from llmrt.actors.routing._router import SUCCEEDED, GroupPlan, Router
from llmrt.adapters.openai_chat import OpenAIChatAdapter
from llmrt.adapters.scripted import ScriptedAdapter, text_script

HERE = Path(__file__).resolve().parent
TARGET_DECISION_US = 5.0
FULL = {"decisions": 200_000, "repeats": 5, "calls": 5_000, "redis_calls": 3_000, "failovers": 300}
QUICK = {"decisions": 20_000, "repeats": 3, "calls": 500, "redis_calls": 300, "failovers": 40}


def _deployments(**limits: Any) -> tuple[Deployment, ...]:
    return tuple(Deployment(route=f"r{i}", model="m", weight=1 + i, **limits) for i in range(3))


SHAPES: dict[str, Group] = {
    "ordered, 3 deployments": Group(name="g", deployments=_deployments()),
    "ordered, 2 tiers, rpm+tpm": Group(
        name="g",
        deployments=tuple(
            Deployment(route=f"r{i}", model="m", tier=1 + i // 2, rpm=10**9, tpm=10**12)
            for i in range(3)
        ),
    ),
    "weighted, 3, rpm+tpm": Group(
        name="g", strategy="weighted", deployments=_deployments(rpm=10**9, tpm=10**12)
    ),
    "fewest-in-flight, 3, max in flight": Group(
        name="g", strategy="fewest-in-flight", deployments=_deployments(max_in_flight=10**6)
    ),
    "lowest-latency, 3": Group(name="g", strategy="lowest-latency", deployments=_deployments()),
    "most-headroom, 3, rpm+tpm": Group(
        name="g", strategy="most-headroom", deployments=_deployments(rpm=10**9, tpm=10**12)
    ),
}


async def _plan(rt: llmrt.LlmRuntime, group: Group, settings: RoutingSettings) -> GroupPlan:
    await rt.register_groups([group], settings=settings)
    plan = rt._core.router.plans[group.name]
    for state in plan.states:
        state.latency = 0.01 * (1 + len(state.route))  # measured latencies, for lowest-latency
    return plan


async def _with_routes(rt: llmrt.LlmRuntime) -> None:
    for i in range(3):
        await rt.register_adapter([f"r{i}"], ScriptedAdapter(text_script(["x"])))


async def decisions(n: int, repeats: int) -> dict[str, Any]:
    """Local decision, and its release, per call: µs, the median of single timed calls.

    Single calls, because on a shared machine a loop's mean is mostly the time the
    process was not running; the timer's own cost (two reads) is measured and taken off.
    """
    out: dict[str, Any] = {}
    ns = time.perf_counter_ns
    for name, group in SHAPES.items():
        async with llmrt.open_runtime() as rt:
            await _with_routes(rt)
            plan = await _plan(rt, group, RoutingSettings(seed=1))
            router: Router = rt._core.router
            tokens = 100 if plan.charges_tokens else 0
            acquire = router.acquire_local
            release = router.release_local
            clock = trio.current_time
            decided: list[float] = []
            released: list[float] = []
            reads: list[float] = []
            means = []
            for _ in range(repeats):
                # Each decision is released before the next, as calls do.
                start = ns()
                for _ in range(n):
                    t0 = ns()
                    ticket = acquire(plan, (), tokens, clock())
                    t1 = ns()
                    release(plan, ticket, SUCCEEDED, None, tokens)  # type: ignore[arg-type]
                    t2 = ns()
                    decided.append(t1 - t0)
                    released.append(t2 - t1)
                means.append((ns() - start) / n / 1000)
                for _ in range(n):
                    t0 = ns()
                    reads.append(ns() - t0)
        timer = median(reads) / 1000
        decision = median(decided) / 1000 - timer
        out[name] = {
            "decision_us": decision,
            "decision_p99_us": percentiles(decided)["p99"] / 1000 - timer,
            "release_us": median(released) / 1000 - timer,
            "timer_read_us": timer,
            "loop_mean_us": median(means),
            "within_target": decision <= TARGET_DECISION_US,
        }
    return out


async def layer(calls: int, repeats: int) -> dict[str, Any]:
    """A one-chunk call to a group beside the same call to its route, µs per call (medians).

    Calls alternate between the two, so load on the machine falls on both alike.
    """
    request_group = llmrt.GenerateOptions(
        provider="g", model="m", messages=(llmrt.user_message("hi"),)
    )
    request_route = llmrt.GenerateOptions(
        provider="r0", model="m", messages=(llmrt.user_message("hi"),)
    )
    async with llmrt.open_runtime() as rt:
        await _with_routes(rt)
        await rt.register_groups([SHAPES["ordered, 3 deployments"]])

        async def one(options: llmrt.GenerateOptions) -> float:
            start = time.perf_counter_ns()
            async with rt.stream(options) as call:
                async for _ in call:
                    pass
            return (time.perf_counter_ns() - start) / 1000

        routed, plain = [], []
        for _ in range(calls * repeats):
            plain.append(await one(request_route))
            routed.append(await one(request_group))
    return {
        "plain_call_us": median(plain),
        "routed_call_us": median(routed),
        "layer_us": median(routed) - median(plain),
    }


# ---- Redis ------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start_redis() -> tuple[subprocess.Popen[bytes], str] | str:
    binary = shutil.which("redis-server") or (
        "/usr/bin/redis-server" if os.path.exists("/usr/bin/redis-server") else None
    )
    if binary is None:
        return "no redis-server installed (Debian: apt-get install redis-server)"
    port = _free_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                if sock.recv(16).startswith(b"+PONG"):
                    return proc, f"redis://127.0.0.1:{port}/0"
        except OSError:
            time.sleep(0.02)
    proc.kill()
    return "redis-server did not answer PING within 20 s"


async def through_redis(url: str, calls: int) -> dict[str, Any]:
    import coredis

    group = SHAPES["weighted, 3, rpm+tpm"]
    settings = RoutingSettings(redis=url, key_prefix="bench", seed=1)
    async with llmrt.open_runtime() as rt:
        await _with_routes(rt)
        plan = await _plan(rt, group, settings)
        router: Router = rt._core.router
        acquires, releases, local = [], [], []
        for i in range(calls + 50):
            start = time.perf_counter_ns()
            ticket = await router.acquire(plan, (), 100)
            middle = time.perf_counter_ns()
            await router.release(plan, ticket, SUCCEEDED, None, 100)  # type: ignore[arg-type]
            end = time.perf_counter_ns()
            if i >= 50:  # the first calls load the scripts and open the connection
                acquires.append((middle - start) / 1000)
                releases.append((end - middle) / 1000)
        for _ in range(calls):
            start = time.perf_counter_ns()
            ticket = router.acquire_local(plan, (), 100, trio.current_time())
            router.release_local(plan, ticket, SUCCEEDED, None, 100)  # type: ignore[arg-type]
            local.append((time.perf_counter_ns() - start) / 1000)
        stats = rt.statistics().routing
        assert stats is not None and stats.shared_state is not None
        trips = stats.shared_state.round_trips
        errors = stats.shared_state.errors
    pings = []
    async with coredis.Redis.from_url(url) as client:
        for i in range(calls + 50):
            start = time.perf_counter_ns()
            await client.ping()
            if i >= 50:
                pings.append((time.perf_counter_ns() - start) / 1000)
    acquire_p = percentiles(acquires)
    ping_p = percentiles(pings)
    return {
        "calls": calls,
        "acquire_us": {"p50": median(acquires), **acquire_p},
        "release_us": {"p50": median(releases), **percentiles(releases)},
        "local_decision_us": {"p50": median(local), **percentiles(local)},
        "ping_floor_us": {"p50": median(pings), **ping_p},
        "added_over_local_p50_us": median(acquires) - median(local),
        "acquire_over_ping_p50": median(acquires) / median(pings),
        "round_trips_per_call": trips / (calls + 50),
        "errors": errors,
    }


# ---- failover ----------------------------------------------------------------------------------


class _Upstreams:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "_routing_upstream.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        self.urls: dict[str, str] = json.loads(self.proc.stdout.readline())

    def stamps(self) -> dict[str, list[float]]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("stamps\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())  # type: ignore[no-any-return]

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def _failover_ms(stamps: dict[str, list[float]]) -> list[float]:
    a, b = stamps["a"], stamps["b"]
    if len(a) != len(b):
        raise RuntimeError(f"{len(a)} 429s but {len(b)} answers: a call did not fail over once")
    return [1000 * (tb - ta) for ta, tb in zip(a, b, strict=True)]


async def llmrt_failover(urls: dict[str, str], calls: int) -> list[float]:
    options = llmrt.GenerateOptions(
        provider="chat", model="m", messages=(llmrt.user_message("hi"),)
    )
    async with llmrt.open_runtime() as rt:
        for name in ("a", "b"):
            adapter = OpenAIChatAdapter(base_url=urls[name], api_key_env="K", environ={"K": "sk-b"})
            await rt.register_adapter([name], adapter)
        group = Group(
            name="chat",
            # Cooling would send later calls straight to "b": every call fails over here.
            cooldown_after=10**9,
            deployments=(
                Deployment(route="a", model="m"),
                Deployment(route="b", model="m", tier=2),
            ),
        )
        await rt.register_groups([group])
        for _ in range(calls):
            async with rt.stream(options) as call:
                async for chunk in call:
                    if isinstance(chunk, llmrt.Finish):
                        routing = chunk.routing
                        assert routing is not None and routing.route == "b", chunk
    return []


async def litellm_failover(urls: dict[str, str], calls: int) -> str | None:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_TELEMETRY", "False")
    try:
        import litellm
        from litellm import Router
    except ImportError as exc:
        return f"litellm is not installed ({exc}): pip install 'llmrt[bench]'"
    litellm.telemetry = False
    litellm.suppress_debug_info = True

    def deployment(name: str) -> dict[str, Any]:
        return {
            "model_name": f"chat-{name}",
            "litellm_params": {
                "model": "openai/m",
                "api_base": urls[name] + "/v1",
                "api_key": "sk-b",
                "max_retries": 0,  # the openai SDK would retry the 429 itself
            },
        }

    router = Router(
        model_list=[deployment("a"), deployment("b")],
        fallbacks=[{"chat-a": ["chat-b"]}],
        num_retries=0,
        disable_cooldowns=True,
    )
    for _ in range(calls):
        response = await router.acompletion(
            model="chat-a", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        async for _ in response:
            pass
    return None


def failover(calls: int) -> dict[str, Any]:
    upstreams = _Upstreams()
    try:
        trio.run(llmrt_failover, upstreams.urls, 5)  # warm: imports, connections
        upstreams.stamps()
        trio.run(llmrt_failover, upstreams.urls, calls)
        ours = _failover_ms(upstreams.stamps())
        result: dict[str, Any] = {
            "calls": calls,
            "llmrt_ms": {"p50": median(ours), **percentiles(ours)},
        }
        problem = asyncio.run(litellm_failover(upstreams.urls, 5))
        upstreams.stamps()
        if problem is None:
            asyncio.run(litellm_failover(upstreams.urls, calls))
            theirs = _failover_ms(upstreams.stamps())
            result["litellm_ms"] = {"p50": median(theirs), **percentiles(theirs)}
            result["litellm_over_llmrt_p50"] = median(theirs) / median(ours)
            result["litellm_over_llmrt_p99"] = (
                result["litellm_ms"]["p99"] / result["llmrt_ms"]["p99"]
            )
        else:
            result["litellm_skipped"] = problem
    finally:
        upstreams.close()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run)")
    args = parser.parse_args()
    sizes = sized(QUICK if args.quick else FULL)
    command = "python bench/bench_routing.py" + (" --quick" if args.quick else "")
    if os.environ.get("LLMRT_BENCH_SIZES"):
        command = f"LLMRT_BENCH_SIZES='{json.dumps(sizes, separators=(',', ':'))}' {command}"
    started = time.monotonic()
    report: dict[str, Any] = {
        "benchmark": "routing",
        "command": command,
        "environment": environment(),
        "sizes": sizes,
        "statistic": "median of repeats (decisions); nearest-rank percentiles (round trips)",
        "target_decision_us": TARGET_DECISION_US,
    }
    report["decision"] = trio.run(decisions, sizes["decisions"], sizes["repeats"])
    report["layer"] = trio.run(layer, sizes["calls"], sizes["repeats"])
    redis = _start_redis()
    if isinstance(redis, str):
        report["redis"] = {"skipped": redis}
    else:
        proc, url = redis
        try:
            report["redis"] = trio.run(through_redis, url, sizes["redis_calls"])
        finally:
            proc.kill()
            proc.wait()
    report["failover"] = failover(sizes["failovers"])
    report["seconds"] = time.monotonic() - started
    targets = {
        f"decision<={TARGET_DECISION_US:g}us ({name})": "MET" if r["within_target"] else "MISSED"
        for name, r in report["decision"].items()
    }
    redis_report = report["redis"]
    if "skipped" in redis_report:
        targets["one round trip each way (redis)"] = f"n/a: {redis_report['skipped']}"
    else:
        trips = redis_report["round_trips_per_call"]
        targets["one round trip each way (redis)"] = "MET" if trips == 2.0 else f"MISSED: {trips}"
    report["targets"] = targets

    rows = [
        [
            name,
            f"{r['decision_us']:.2f}",
            f"{r['decision_p99_us']:.2f}",
            f"{r['release_us']:.2f}",
            "yes" if r["within_target"] else "NO",
        ]
        for name, r in report["decision"].items()
    ]
    headers = ["local state", "decision p50 µs", "p99 µs", "release p50 µs", "p50 <= 5 µs"]
    print(table(headers, rows))
    layer_ = report["layer"]
    print(
        f"routed-call layer: {layer_['routed_call_us']:.1f} µs per one-chunk call to a group, "
        f"{layer_['plain_call_us']:.1f} µs to its route: +{layer_['layer_us']:.1f} µs"
    )
    r = report["redis"]
    if "skipped" in r:
        print(f"redis: skipped: {r['skipped']}")
    else:
        print(
            table(
                ["through redis", "p50 µs", "p99 µs"],
                [
                    ["acquire (1 EVALSHA)", r["acquire_us"]["p50"], r["acquire_us"]["p99"]],
                    ["release (1 EVALSHA)", r["release_us"]["p50"], r["release_us"]["p99"]],
                    ["PING (floor)", r["ping_floor_us"]["p50"], r["ping_floor_us"]["p99"]],
                    [
                        "local decision",
                        r["local_decision_us"]["p50"],
                        r["local_decision_us"]["p99"],
                    ],
                ],
            )
        )
        print(
            f"redis adds {r['added_over_local_p50_us']:.0f} µs at the median "
            f"({r['acquire_over_ping_p50']:.2f}x a PING); "
            f"{r['round_trips_per_call']:.2f} round trips per call, {r['errors']} errors"
        )
    f = report["failover"]
    rows = [["llmrt", f["llmrt_ms"]["p50"], f["llmrt_ms"]["p99"], f["llmrt_ms"]["max"]]]
    if "litellm_ms" in f:
        rows.append(
            [
                "litellm Router",
                f["litellm_ms"]["p50"],
                f["litellm_ms"]["p99"],
                f["litellm_ms"]["max"],
            ]
        )
    print(table(["429 -> next deployment's first byte", "p50 ms", "p99 ms", "max ms"], rows))
    if "litellm_ms" in f:
        print(
            f"litellm / llmrt: {f['litellm_over_llmrt_p50']:.2f}x at p50, "
            f"{f['litellm_over_llmrt_p99']:.2f}x at p99 ({f['calls']} failovers each)"
        )
    else:
        print(f"litellm: skipped: {f['litellm_skipped']}")
    path = write_json("routing" + ("-quick" if args.quick else "") + ".json", report)
    print(f"{report['seconds']:.1f} s; wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
