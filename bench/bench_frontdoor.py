"""The provider APIs' front door: ``llmrt serve``'s ``/v1/chat/completions`` beside LiteLLM proxy.

Four targets stream the same OpenAI chat completion from the same local
upstreams, in one run, interleaved (each round rotates their order, so the
machine's drift falls on all alike):

* ``direct`` -- the client straight to the upstream (the baseline);
* ``floor`` -- `_relay`, a raw trio byte relay in a process of its own (no
  parsing, upstream connections opened ahead): what one more process in the
  path costs before a gateway does any work, the floor for "added" figures;
* ``llmrt`` -- ``llmrt serve`` (one process) with an ``openai_chat`` route
  per upstream, the client speaking Chat Completions to it;
* ``litellm`` -- ``litellm --config`` (LiteLLM proxy, one worker) with one
  model per upstream, when the ``litellm[proxy]`` extra is installed
  (otherwise the report says so and compares llmrt with direct only).

The client is the same raw trio HTTP/1.1 client for all of them (one
connection per stream, ``Connection: close``), so client costs cancel out.
Two upstreams serve them: a fast one (`_upstream`, pre-framed events,
``chunks`` events ``delay`` apart) in a process of its own, for the latency
and throughput figures, and `llmrt.testing`'s (three events, then it holds
the response open) in this process, for the disconnect figure, because it
reads its sockets while it holds a response and so notes a client's close
at once. The fast upstream has its own process because in a deployment the
client and the provider never share one: sharing the client's event loop
would spare ``direct`` the cross-process wake-ups (about 0.1-0.2 ms each on
this machine) that every request through a gateway pays, and charge them
all to the gateway as "added" time.

Measured:

* ``ttft_sequential`` -- one stream at a time: connect to the first text
  event, ms; p50 / p99 per target and *added* (target minus direct);
* ``concurrent`` -- ``concurrency`` clients streaming back to back for
  ``phase_seconds`` per target per round: completed streams per second, the
  first-event latency at that load (added over direct), and the target
  process's CPU (user + system, children included) per completed stream;
* ``disconnect`` -- the client closes its socket right after the first
  text event of a stream the upstream holds open: how long until the
  upstream saw its connection close, ms; added over direct.

The one-at-a-time samples (``ttft_sequential``, ``disconnect``) are
``SETTLE`` seconds apart, so that no target's sample overlaps the work the
previous target does after its request.

    python bench/bench_frontdoor.py [--quick]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import attrs
import trio
from _common import environment, percentiles, sized, table, write_json

from llmrt.testing import SSEScript, Upstream, open_upstream, openai_events

FULL: dict[str, Any] = {
    "sequential": 300,
    "concurrency": 100,
    "phase_seconds": 4.0,
    "rounds": 3,
    "disconnects": 200,
    "chunks": 20,
    "delay": 0.005,
}
QUICK: dict[str, Any] = {
    "sequential": 30,
    "concurrency": 20,
    "phase_seconds": 1.0,
    "rounds": 1,
    "disconnects": 20,
    "chunks": 20,
    "delay": 0.005,
}
TARGETS_P99_MS = {"ttft_sequential_added": 1.0, "disconnect_added": 1.0}
KEY = "sk-bench-frontdoor"
CONTENT = re.compile(rb'"content": ?"tok')
DONE = b"[DONE]"
STARTUP = 120.0
#: Seconds between one-at-a-time samples: what a target does after a request
#: (LiteLLM's logging callbacks, say) ends before the next target's sample, on
#: a machine with two cores for four processes.
SETTLE = 0.02
CLK_TCK = os.sysconf("SC_CLK_TCK")


# ---- the processes -------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU of ``pid`` and its descendants (from /proc), in seconds."""
    children: dict[int, list[int]] = {}
    stats: dict[int, tuple[int, int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = text.rpartition(")")[2].split()
        ppid, utime, stime = int(fields[1]), int(fields[11]), int(fields[12])
        children.setdefault(ppid, []).append(int(entry))
        stats[int(entry)] = (utime, stime)
    total = 0
    todo = [pid]
    while todo:
        current = todo.pop()
        utime, stime = stats.get(current, (0, 0))
        total += utime + stime
        todo.extend(children.get(current, ()))
    return total / CLK_TCK


async def wait_http(port: int, path: str, within: float) -> None:
    """Until ``GET path`` on ``port`` answers 200."""
    with trio.fail_after(within):
        while True:
            try:
                stream = await trio.open_tcp_stream("127.0.0.1", port)
                async with stream:
                    head = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
                    await stream.send_all(head.encode())
                    data = b""
                    while chunk := await stream.receive_some(65536):
                        data += chunk
                if data.startswith(b"HTTP/1.1 200"):
                    return
            except OSError:
                pass
            await trio.sleep(0.2)


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@attrs.define
class Helper:
    """A helper process of this bench: it printed its port, and serves until its stdin closes."""

    proc: subprocess.Popen[bytes]
    port: int


def start_helper(script: str, *args: object) -> Helper:
    """``python bench/SCRIPT ARGS...``, once it has printed the port it listens on."""
    command = [sys.executable, str(Path(__file__).with_name(script)), *map(str, args)]
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    return Helper(proc, int(proc.stdout.readline()))


def start_llmrt(directory: Path, fast: int, slow: int) -> tuple[subprocess.Popen[bytes], int]:
    config = directory / "llmrt.toml"
    route = """
[[provider]]
route = "{name}"
adapter = "openai_chat"
preset = "openai-compatible"
base_url = "http://127.0.0.1:{port}/v1"
api_key_env = "BENCH_FRONTDOOR_KEY"
models = [ {{ id = "gpt-4.1-mini" }} ]
retry = {{ max_retries = 0 }}
"""
    config.write_text(route.format(name="fast", port=fast) + route.format(name="slow", port=slow))
    port = free_port()
    env = {**os.environ, "BENCH_FRONTDOOR_KEY": KEY, "PYTHONUNBUFFERED": "1"}
    env.pop("LLMRT_GATEWAY_TOKEN", None)
    command = [sys.executable, "-m", "llmrt.actors.app.cli", "serve", "--port", str(port)]
    command += ["--config", str(config), "--max-connections-per-peer", "4096"]
    log = (directory / "llmrt.log").open("wb")
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env), port


def litellm_command() -> str | None:
    """The ``litellm`` command beside this interpreter (a venv's), else on PATH."""
    beside = Path(sys.executable).parent / "litellm"
    return str(beside) if beside.exists() else shutil.which("litellm")


def litellm_missing() -> str | None:
    if importlib.util.find_spec("litellm") is None or litellm_command() is None:
        return 'litellm: skipped, not installed (pip install "litellm[proxy]")'
    return None


def start_litellm(directory: Path, fast: int, slow: int) -> tuple[subprocess.Popen[bytes], int]:
    config = directory / "litellm.yaml"
    entry = """  - model_name: {name}
    litellm_params:
      model: openai/gpt-4.1-mini
      api_base: http://127.0.0.1:{port}/v1
      api_key: {key}
"""
    config.write_text(
        "model_list:\n"
        + entry.format(name="fast", port=fast, key=KEY)
        + entry.format(name="slow", port=slow, key=KEY)
        # The proxy refuses to start without a master key; clients send it as their bearer.
        + f"general_settings:\n  master_key: {KEY}\n"
    )
    port = free_port()
    command = [
        litellm_command() or "litellm",
        "--config",
        str(config),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--num_workers",
        "1",
    ]
    env = {**os.environ, "LITELLM_LOG": "ERROR", "PYTHONUNBUFFERED": "1"}
    log = (directory / "litellm.log").open("wb")
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env), port


# ---- the client ----------------------------------------------------------------------------------


class Target:
    def __init__(self, name: str, port: int, model: str, pid: int | None) -> None:
        self.name = name
        self.port = port
        self.model = model
        self.pid = pid

    def request(self, route: str, marker: str) -> bytes:
        model = self.model.format(route=route)
        body = json.dumps(
            {
                "model": model,
                "stream": True,
                "messages": [{"role": "user", "content": marker}],
            }
        ).encode()
        head = (
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            f"Authorization: Bearer {KEY}\r\nConnection: close\r\n\r\n"
        )
        return head.encode() + body


async def one_stream(
    target: Target, route: str, marker: str, *, leave: bool = False
) -> tuple[float | None, float, int]:
    """(first text event - start, the time it ended or left, text events seen)."""
    start = trio.current_time()
    stream = await trio.open_tcp_stream("127.0.0.1", target.port)
    first: float | None = None
    seen = 0
    tail = b""
    async with stream:
        await stream.send_all(target.request(route, marker))
        while True:
            data = await stream.receive_some(65536)
            if not data:
                break
            window = tail + data
            if first is None and CONTENT.search(window):
                first = trio.current_time() - start
                if leave:
                    left = trio.current_time()
                    break
            seen += len(CONTENT.findall(window)) - len(CONTENT.findall(tail))
            if DONE in window:
                break
            tail = window[-32:]
    ended = trio.current_time()
    return first, (left if leave and first is not None else ended), seen


# ---- the measurements ----------------------------------------------------------------------------


def rotated(items: list[Target], n: int) -> list[Target]:
    k = n % len(items)
    return items[k:] + items[:k]


async def sequential(targets: list[Target], n: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {t.name: [] for t in targets}
    for i in range(n):
        for target in rotated(targets, i):
            first, _, _ = await one_stream(target, "fast", f"seq-{i}")
            if first is not None:
                out[target.name].append(first * 1000)
            await trio.sleep(SETTLE)
    return out


async def concurrent(target: Target, clients: int, seconds: float, chunks: int) -> dict[str, Any]:
    ttft: list[float] = []
    done = [0]
    failed = [0]
    stop_at = trio.current_time() + seconds

    async def client(c: int) -> None:
        i = 0
        while trio.current_time() < stop_at:
            i += 1
            try:
                first, _, seen = await one_stream(target, "fast", f"con-{c}-{i}")
            except OSError:
                failed[0] += 1
                continue
            if first is None or seen != chunks:
                failed[0] += 1
                continue
            ttft.append(first * 1000)
            done[0] += 1

    cpu_before = cpu_seconds(target.pid) if target.pid is not None else 0.0
    began = trio.current_time()
    async with trio.open_nursery() as nursery:
        for c in range(clients):
            nursery.start_soon(client, c)
    elapsed = trio.current_time() - began
    cpu = (cpu_seconds(target.pid) - cpu_before) if target.pid is not None else None
    return {
        "completed": done[0],
        "failed": failed[0],
        "seconds": elapsed,
        "ttft_ms": ttft,
        "cpu_seconds": cpu,
    }


async def disconnects(targets: list[Target], slow: Upstream, n: int) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {t.name: {"ms": [], "never": 0} for t in targets}
    for i in range(n):
        for target in rotated(targets, i):
            marker = f"leave-{target.name}-{i}"
            before = len(slow.requests)
            first, left, _ = await one_stream(target, "slow", marker, leave=True)
            assert first is not None, f"{target.name}: no text before the stall"
            record = next(r for r in slow.requests[before:] if marker.encode() in r.body)
            with trio.move_on_after(5) as scope:
                closed = await slow.wait_connection_closed(record.connection)
            if scope.cancelled_caught or closed.closed_at is None:
                out[target.name]["never"] += 1
            else:
                out[target.name]["ms"].append((closed.closed_at - left) * 1000)
            await trio.sleep(SETTLE)
    return out


def added(samples: dict[str, list[float]], name: str, over: str = "direct") -> dict[str, float]:
    mine, base = percentiles(samples[name], (50, 99)), percentiles(samples[over], (50, 99))
    return {"p50": mine["p50"] - base["p50"], "p99": mine["p99"] - base["p99"]}


async def run(sizes: dict[str, Any]) -> dict[str, Any]:
    notes: list[str] = []
    stall = SSEScript(events=openai_events(["tok", "tok", "tok", "end"]), stall_after=3)
    procs: list[subprocess.Popen[bytes]] = []
    directory = Path(tempfile.mkdtemp(prefix="bench-frontdoor-"))
    report: dict[str, Any] = {"sizes": sizes, "environment": environment()}
    try:
        async with trio.open_nursery() as nursery, open_upstream(stall) as slow:
            # The upstream in a process of its own: client and upstream then cross a
            # process boundary, as in a deployment, for ``direct`` as for the gateways.
            fast = start_helper("_upstream.py", sizes["chunks"], sizes["delay"])
            procs.append(fast.proc)
            proc, port = start_llmrt(directory, fast.port, slow.port)
            procs.append(proc)
            targets = [
                Target("direct", fast.port, "gpt-4.1-mini", None),
                Target("llmrt", port, "{route}/gpt-4.1-mini", proc.pid),
            ]
            await wait_http(port, "/readyz", STARTUP)
            relay = start_helper("_relay.py", fast.port)  # the floor: one process hop
            procs.append(relay.proc)
            targets.append(Target("floor", relay.port, "gpt-4.1-mini", relay.proc.pid))
            missing = litellm_missing()
            if missing is None:
                lproc, lport = start_litellm(directory, fast.port, slow.port)
                procs.append(lproc)
                try:
                    await wait_http(lport, "/health/liveliness", STARTUP)
                    targets.append(Target("litellm", lport, "{route}", lproc.pid))
                except trio.TooSlowError:
                    notes.append("litellm: skipped, its proxy did not start within 120 s")
            else:
                notes.append(missing)
            # The slow route's direct target is the stalling upstream itself.
            # (The floor relays to the fast upstream only: it has no disconnect figure.)
            slow_targets = [
                Target(t.name, slow.port if t.name == "direct" else t.port, t.model, t.pid)
                for t in targets
                if t.name != "floor"
            ]
            for target in targets:  # warm: imports, pools, first-call paths
                for i in range(5):
                    await one_stream(target, "fast", f"warm-{i}")
            seq = await sequential(targets, sizes["sequential"])
            report["ttft_sequential_ms"] = {
                name: percentiles(values, (50, 99)) for name, values in seq.items()
            }
            report["ttft_sequential_added_ms"] = {
                t.name: added(seq, t.name) for t in targets if t.name != "direct"
            }
            # What a gateway adds past the floor's one process hop: its own work.
            report["ttft_sequential_over_floor_ms"] = {
                t.name: added(seq, t.name, "floor")
                for t in targets
                if t.name not in ("direct", "floor")
            }
            phases: dict[str, list[dict[str, Any]]] = {t.name: [] for t in targets}
            for r in range(sizes["rounds"]):
                for target in rotated(targets, r):
                    phases[target.name].append(
                        await concurrent(
                            target, sizes["concurrency"], sizes["phase_seconds"], sizes["chunks"]
                        )
                    )
            con_ttft = {n: [v for p in ps for v in p["ttft_ms"]] for n, ps in phases.items()}
            report["concurrent"] = {}
            for name, ps in phases.items():
                completed = sum(p["completed"] for p in ps)
                seconds = sum(p["seconds"] for p in ps)
                cpu = [p["cpu_seconds"] for p in ps if p["cpu_seconds"] is not None]
                entry: dict[str, Any] = {
                    "streams_per_second": completed / seconds if seconds else 0.0,
                    "completed": completed,
                    "failed": sum(p["failed"] for p in ps),
                    "ttft_ms": percentiles(con_ttft[name], (50, 99)) if con_ttft[name] else None,
                }
                if cpu and completed:
                    entry["cpu_ms_per_stream"] = sum(cpu) / completed * 1000
                if name != "direct" and con_ttft[name] and con_ttft["direct"]:
                    entry["ttft_added_ms"] = added(con_ttft, name)
                report["concurrent"][name] = entry
            gone = await disconnects(slow_targets, slow, sizes["disconnects"])
            report["disconnect_ms"] = {
                name: {
                    **(percentiles(v["ms"], (50, 99)) if v["ms"] else {}),
                    "never_closed": v["never"],
                }
                for name, v in gone.items()
            }
            ms = {name: v["ms"] for name, v in gone.items()}
            report["disconnect_added_ms"] = {
                t.name: added(ms, t.name) for t in targets if t.name != "direct" and ms.get(t.name)
            }
            nursery.cancel_scope.cancel()
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(directory, ignore_errors=True)
    if "litellm" in report.get("concurrent", {}):
        mine = report["concurrent"]["llmrt"]
        theirs = report["concurrent"]["litellm"]
        if theirs["streams_per_second"]:
            report["streams_per_second_vs_litellm"] = (
                mine["streams_per_second"] / theirs["streams_per_second"]
            )
    report["notes"] = notes
    llmrt_added = report["ttft_sequential_added_ms"]["llmrt"]
    report["targets"] = {
        "ttft_sequential_added_p99<=1ms": llmrt_added["p99"] <= 1.0,
        "disconnect_added_p99<=1ms": report["disconnect_added_ms"]
        .get("llmrt", {})
        .get("p99", float("inf"))
        <= 1.0,
    }
    if "streams_per_second_vs_litellm" in report:
        report["targets"][">=20x_litellm_streams_per_second"] = (
            report["streams_per_second_vs_litellm"] >= 20
        )
    return report


def show(report: dict[str, Any]) -> None:
    rows = []
    for name, p in report["ttft_sequential_ms"].items():
        extra = report["ttft_sequential_added_ms"].get(name, {})
        con = report["concurrent"][name]
        gone = report["disconnect_ms"].get(name, {})
        gone_added = report["disconnect_added_ms"].get(name, {})
        rows.append(
            [
                name,
                f"{p['p50']:.2f} / {p['p99']:.2f}",
                f"{extra.get('p50', 0):+.2f} / {extra.get('p99', 0):+.2f}" if extra else "-",
                f"{con['streams_per_second']:.0f}",
                f"{con.get('cpu_ms_per_stream', 0):.2f}" if "cpu_ms_per_stream" in con else "-",
                (
                    f"{con['ttft_added_ms']['p50']:+.1f} / {con['ttft_added_ms']['p99']:+.1f}"
                    if "ttft_added_ms" in con
                    else "-"
                ),
                f"{gone.get('p50', 0):.2f} / {gone.get('p99', 0):.2f}" if gone else "-",
                (f"{gone_added['p50']:+.2f} / {gone_added['p99']:+.2f}" if gone_added else "-"),
            ]
        )
    print(
        table(
            [
                "target",
                "TTFT seq p50/p99 ms",
                "added",
                "streams/s @N",
                "CPU ms/stream",
                "TTFT added @N",
                "close seen p50/p99 ms",
                "added",
            ],
            rows,
        )
    )
    for name, over in report["ttft_sequential_over_floor_ms"].items():
        print(f"{name}: TTFT over the floor p50 / p99 {over['p50']:+.2f} / {over['p99']:+.2f} ms")
    for note in report["notes"]:
        print(note)
    print("targets:", report["targets"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    sizes = sized(QUICK if args.quick else FULL)
    report = trio.run(run, sizes)
    show(report)
    path = write_json("frontdoor-quick.json" if args.quick else "frontdoor.json", report)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
