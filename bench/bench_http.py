"""End to end over HTTP: llmrt's OpenAI adapter against bare httpx, the openai SDK and LiteLLM.

Run: ``python bench/bench_http.py [--quick] [--only SECTION]`` (full: under
10 minutes on 2 cores; ``--quick``: under 2). Prints one table per section
and writes ``bench/results/http.json`` (``http-quick.json`` with ``--quick``,
``http-<section>.json`` with ``--only``).

Every contender (see ``_peers.py``) streams from the same local upstream
(`llmrt.testing.serve_upstream`), which runs in its own process; each
contender's workload runs in a fresh worker process too, so the client's CPU
(``time.process_time()``) and peak RSS (``ru_maxrss``) are its own. Sections:

1. ``per-chunk``: client CPU µs per chunk of one 20,000-chunk stream
   (median of 5 runs after one warm-up run), plus a cProfile of one llmrt run
   and one bare-httpx run (top entries by tottime, and tottime per package).
   Two framings: ``coalesced`` (no delay: the upstream packs events into
   64 KiB writes, so each read and each HTTP chunk carries hundreds of
   events) and ``per-event`` (a 1 µs delay: one write and one HTTP chunk per
   event, as providers send tokens, so the client pays its per-read and
   chunked-decoding costs once per event). Per event, llmrt and the raw-trio
   floor take turns, one run per worker process, so machine drift falls on
   both; their ratio has issue 15's target (<= 1.15x).
2. ``concurrency``: 1,000 concurrent streams of 100 chunks, 10 ms apart:
   wall time, client CPU, peak RSS, and the upstream's own CPU for the same
   run (on 2 cores both sides are saturated at this rate: 100,000 events/s
   asked for), the peak number of connections open at once, and how long it
   took until every stream had its connection (both from the upstream's
   records).
3. ``scaling``: client CPU per chunk at 1,000 and at 5,000 concurrent
   streams, at the same aggregate chunk rate (5,000 chunks/s: 200 ms and
   1 s between a stream's chunks), so the client is not saturated, each read
   still carries about one event, and only the number of open streams
   changes. CPU per chunk is the worker's whole CPU (connect, request,
   stream, close) over the chunks received. If llmrt misses its target, one
   more llmrt run at 3,000 streams under cProfile shows where the time goes. The peak number of
   connections open at once is taken from the upstream's records.
4. ``decoders``: client CPU µs per chunk of each provider decoder in process
   (SSE parser + wire decoder, the adapters' ``feed``), on one
   20,000-chunk body per provider cut into coalesced 64 KiB reads: the
   OpenAI-compatible decoder, Gemini and the Responses API, median of 7
   runs each, interleaved, with each new decoder's ratio to the OpenAI one.
5. ``abandon``: 20 slow streams (1,000 chunks, 10 ms apart); each consumer
   leaves after 3-7 chunks the way users of its library do. Latency is from
   the consumer leaving (``time.monotonic()`` in the worker) until the
   upstream saw the connection close (its `ConnectionRecord.closed_at`, a
   `trio.current_time()` converted to ``time.monotonic()``: on Linux both are
   CLOCK_MONOTONIC, which is system-wide, so the two processes share it).
6. ``scale``: 5,000 and 10,000 concurrent streams of 100 chunks 10 ms apart,
   llmrt beside the raw-trio floor (and ``llmrt-served``: llmrt with the
   collector set up as ``llmrt serve`` sets it up), 3 runs each, interleaved,
   with Python's default collector settings. The upstream here is
   ``_upstream.py`` (pre-framed events written from one pacing task), which
   spends about 15 µs per event against the client's 15-20, so the client's
   speed sets the wall time; ``llmrt.testing``'s server would cost as much
   as the client it serves. Reported per client: wall (and its ratio to the
   floor's median), CPU per chunk, peak RSS and its growth per stream,
   GC-tracked objects per in-flight stream (``gc.get_objects()`` once half
   the chunks arrived, over the streams then in flight), net tracked
   allocations per chunk (young collections x the first threshold, over
   the chunks: what drives the collector), collections and time collecting.
   ``python -m bench`` runs this section as its own suite, ``scale``.

``--only SECTION`` runs one section (JSON ``http-SECTION.json``); ``--skip
SECTION`` (repeatable) leaves sections out of a full run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import gc
import importlib.metadata
import json
import os
import pstats
import re
import resource
import subprocess
import sys
import sysconfig
import time
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio
from _common import GcMeter, environment, median, rss_kib, sized, table, write_json
from _peers import MARKER_PREFIX, PEERS, RECEIVED, Peer

SECTIONS = ("per-chunk", "concurrency", "scaling", "decoders", "abandon", "scale")

#: Targets from the issue.
TARGET_US_PER_CHUNK = 12.0
TARGET_SDK_RATIO = 5.0
#: Issue 15: llmrt's CPU per chunk over the raw-trio floor's, one event per read.
TARGET_PER_EVENT_OVER_FLOOR = 1.15
TARGET_CONCURRENCY_RATIO = 1.3
TARGET_SCALING_RATIO = 1.3
TARGET_CLOSE_MS = 1.0
#: A new decoder's CPU per chunk over the OpenAI-compatible decoder's (issue 11).
TARGET_DECODER_RATIO = 1.5
#: Issue 15: wall at 5,000 and 10,000 streams over the raw-trio floor's, and RSS per stream.
TARGET_SCALE_WALL = 1.2
TARGET_RSS_KIB = 24.0

FULL: dict[str, Any] = {
    "bulk_chunks": 20_000,
    "bulk_runs": 5,
    "fan_streams": 1_000,
    "fan_chunks": 100,
    "fan_delay": 0.01,
    "fan_runs": 1,
    "fan_deadline": 240.0,
    "scale": ((1_000, 0.2), (5_000, 1.0)),
    "scale_deadline": 150.0,
    "scale_profile": (3_000, 0.6),
    "profile_deadline": 45.0,
    "decoder_chunks": 20_000,
    "decoder_runs": 7,
    "abandon_streams": 20,
    "abandon_rounds": 3,
    "abandon_window": 2.0,
    "scale_streams": (5_000, 10_000),
    "scale_runs": 3,
}
QUICK: dict[str, Any] = {
    "bulk_chunks": 5_000,
    "bulk_runs": 3,
    "fan_streams": 200,
    "fan_chunks": 100,
    "fan_delay": 0.01,
    "fan_runs": 1,
    "fan_deadline": 60.0,
    "scale": ((200, 0.05), (1_000, 0.25)),
    "scale_deadline": 60.0,
    "scale_profile": None,
    "profile_deadline": 30.0,
    "decoder_chunks": 5_000,
    "decoder_runs": 5,
    "abandon_streams": 20,
    "abandon_rounds": 1,
    "abandon_window": 1.5,
    "scale_streams": (1_000, 2_000),
    "scale_runs": 1,
}
ABANDON_CHUNKS = 1_000
ABANDON_DELAY = 0.01
WORKER_TIMEOUT = 600.0
WARMUP = "bench-warmup"
_MARKER = re.compile(rb"bench-stream-[\w-]+")


def raise_nofile() -> int:
    """Raise this process's open-file soft limit to its hard limit; return the new limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = 1 << 20
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


# ==== the upstream process ========================================================================


def _peak_overlap(spans: list[tuple[float, float]]) -> int:
    points = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    peak = live = 0
    for _, step in points:
        live += step
        peak = max(peak, live)
    return peak


def _stats(upstream: Any, query: str) -> dict[str, Any]:
    args = dict(part.split("=", 1) for part in query.split("&") if "=" in part)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    now = trio.current_time()
    offset = now - time.monotonic()  # trio's clock is CLOCK_MONOTONIC plus an offset
    connections = upstream.connections
    since = int(args.get("since", "0"))
    out: dict[str, Any] = {
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "connections": len(connections),
        "requests": len(upstream.requests),
        # Minus this very request's connection.
        "open": sum(1 for c in connections if not c.closed.is_set()) - 1,
    }
    if "since" in args:
        spans = [(c.opened_at, c.closed_at or now) for c in connections[since:]]
        out["peak_open"] = _peak_overlap(spans)
        # How long it took until every stream of the run had its connection.
        opened = [a for a, _ in spans[:-1]]
        out["open_spread_s"] = max(opened) - min(opened) if opened else 0.0
    if args.get("spans") == "1":
        out["spans"] = [
            (
                c.opened_at - offset,
                None if c.closed_at is None else c.closed_at - offset,
                c.closed_by,
            )
            for c in connections[since:]
        ]
    if args.get("detail") == "1":
        streams = {}
        for request in upstream.requests:
            found = _MARKER.search(request.body)
            if found is None:
                continue
            record = connections[request.connection]
            closed = None if record.closed_at is None else record.closed_at - offset
            streams[found.group().decode()] = {"closed_at": closed, "by": record.closed_by}
        out["streams"] = streams
    return out


async def _serve(spec: dict[str, Any]) -> None:
    from llmrt.testing import ErrorScript, SSEScript, openai_events, serve_upstream

    fragments = [f" w{i % 97}" for i in range(spec["chunks"])]
    script = SSEScript(events=openai_events(fragments), delay=spec["delay"])
    warm = SSEScript(events=openai_events([" warm"] * 10))
    box: list[Any] = []

    def router(request: Any) -> Any:
        if request.path == "/__stats":
            return ErrorScript(200, body=_stats(box[0], request.query))
        if request.method == "POST" and request.path.endswith("/chat/completions"):
            return warm if WARMUP.encode() in request.body else script
        return None

    async with trio.open_nursery() as nursery:
        if spec.get("fast"):
            import _upstream

            events = openai_events(fragments)
            warm_events = openai_events([" warm"] * 10)
            upstream = await nursery.start(
                _upstream.serve, events, warm_events, spec["delay"], WARMUP.encode(), _stats
            )
        else:
            upstream = await nursery.start(serve_upstream, router)
        box.append(upstream)
        print(upstream.port, flush=True)
        # Serve until the parent closes our stdin (or goes away).
        stdin = trio.lowlevel.FdStream(os.dup(0))
        while await stdin.receive_some(1024):
            pass
        nursery.cancel_scope.cancel()


class UpstreamProcess:
    """The local upstream in a child process: ``with UpstreamProcess(chunks, delay) as up``."""

    def __init__(self, chunks: int, delay: float, *, fast: bool = False) -> None:
        self.spec = {"chunks": chunks, "delay": delay, "fast": fast}
        self.proc: subprocess.Popen[str] | None = None
        self.base_url = ""
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def __enter__(self) -> UpstreamProcess:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--serve", json.dumps(self.spec)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.strip().isdigit():
            self.proc.kill()
            raise RuntimeError(f"the upstream process did not start (said {line!r})")
        self.base_url = f"http://127.0.0.1:{int(line)}"
        return self

    def stats(self, **query: Any) -> dict[str, Any]:
        qs = "&".join(f"{k}={v}" for k, v in query.items())
        with self._opener.open(f"{self.base_url}/__stats?{qs}", timeout=60) as reply:
            return json.loads(reply.read())  # type: ignore[no-any-return]

    def __exit__(self, *exc: object) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# ==== the worker process: one contender, one workload =============================================

Tasks = list[Callable[[], Awaitable[None]]]
#: ``gather(tasks, deadline, on_deadline)``: run the tasks concurrently; at the
#: deadline (seconds, None: none) call ``on_deadline()``, then cancel them.
Gather = Callable[[Tasks, "float | None", Callable[[], None]], Awaitable[None]]


def _no_deadline() -> None:
    pass


async def _gather_trio(
    fns: Tasks, deadline: float | None = None, on_deadline: Callable[[], None] = _no_deadline
) -> None:
    async with trio.open_nursery() as outer:
        if deadline is not None:

            async def watch() -> None:
                await trio.sleep(deadline)
                on_deadline()
                outer.cancel_scope.cancel()

            outer.start_soon(watch)
        async with trio.open_nursery() as inner:
            for fn in fns:
                inner.start_soon(fn)
        outer.cancel_scope.cancel()


async def _gather_asyncio(
    fns: Tasks, deadline: float | None = None, on_deadline: Callable[[], None] = _no_deadline
) -> None:
    task = asyncio.ensure_future(asyncio.gather(*(fn() for fn in fns)))
    done, _ = await asyncio.wait({task}, timeout=deadline)
    if not done:
        on_deadline()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    else:
        task.result()


def _bucket(filename: str, funcname: str, roots: dict[str, str]) -> str:
    if filename == "~":
        return "C builtins (sockets, msgspec, bytes ops...)"
    for root, name in roots.items():
        if filename.startswith(root):
            return name
    for name in ("httpcore", "httpx", "h11", "trio", "anyio", "openai", "pydantic", "litellm"):
        if f"/{name}/" in filename or f"/{name}2/" in filename:
            return name
    if filename.startswith(sysconfig.get_paths()["stdlib"]):
        return "stdlib (asyncio, contextlib, ...)"
    return "other"


def _profile_summary(profile: cProfile.Profile, top: int = 15) -> dict[str, Any]:
    import llmrt
    import llmrt.actors
    import llmrt.adapters

    roots = {
        str(Path(m.__file__ or "").parent): name
        for m, name in (
            (llmrt.adapters, "llmrt.adapters"),
            (llmrt.actors, "llmrt.actors"),
            (llmrt, "llmrt"),
        )
    }
    roots[str(Path(__file__).parent)] = "bench harness"
    stats = pstats.Stats(profile)
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in raw.values()) or 1.0
    by_package: dict[str, float] = {}
    for (filename, _line, funcname), (_cc, _nc, tt, _ct, _callers) in raw.items():
        key = _bucket(filename, funcname, roots)
        by_package[key] = by_package.get(key, 0.0) + tt
    rows = sorted(raw.items(), key=lambda kv: kv[1][2], reverse=True)[:top]
    return {
        "total_s": total,
        "by_package_pct": {
            k: round(100 * v / total, 1)
            for k, v in sorted(by_package.items(), key=lambda kv: -kv[1])
        },
        "top": [
            {
                "function": f"{Path(fn).name}:{line}({func})" if fn != "~" else func,
                "ncalls": nc,
                "tottime_ms": round(tt * 1e3, 1),
                "cumtime_ms": round(ct * 1e3, 1),
                "pct": round(100 * tt / total, 1),
            }
            for (fn, line, func), (_cc, nc, tt, ct, _callers) in rows
        ],
    }


async def _bulk(peer: Peer, job: dict[str, Any], gather: Gather, sleep: Any) -> dict[str, Any]:
    expected = job["chunks"]
    runs = []
    profile = None
    async with peer.open(job["base_url"]) as session:
        count, _ = await peer.stream(session, MARKER_PREFIX + "bulk-warm", None)
        if count != expected:
            raise RuntimeError(f"warm-up run saw {count} text chunks, expected {expected}")
        for i in range(job["runs"]):
            gc.collect()
            c0, w0 = time.process_time(), time.perf_counter()
            count, _ = await peer.stream(session, f"{MARKER_PREFIX}bulk-{i}", None)
            cpu, wall = time.process_time() - c0, time.perf_counter() - w0
            if count != expected:
                raise RuntimeError(f"run {i} saw {count} text chunks, expected {expected}")
            runs.append({"cpu_us_per_chunk": cpu / count * 1e6, "wall_s": wall})
        if job.get("profile"):
            gc.collect()
            prof = cProfile.Profile()
            prof.enable()
            await peer.stream(session, MARKER_PREFIX + "bulk-profile", None)
            prof.disable()
            profile = _profile_summary(prof)
    return {"runs": runs, "profile": profile}


async def _fanout(peer: Peer, job: dict[str, Any], gather: Gather, sleep: Any) -> dict[str, Any]:
    n = job["streams"]
    counts: list[int] = []
    errors: list[str] = []
    async with peer.open(job["base_url"]) as session:
        await peer.stream(session, WARMUP, None)  # imports, first-call caches
        gc.collect()
        rss_before = rss_kib()

        def task(i: int) -> Callable[[], Awaitable[None]]:
            async def one() -> None:
                try:
                    count, _ = await peer.stream(session, f"{MARKER_PREFIX}fan-{i}", None)
                    counts.append(count)
                except Exception as exc:
                    errors.append(repr(exc))

            return one

        snapshot: dict[str, float] = {}

        def stop() -> None:
            snapshot.update(
                cpu=time.process_time() - c0, wall=time.perf_counter() - w0, chunks=RECEIVED[0] - r0
            )
            if prof is not None:
                prof.disable()

        tasks = [task(i) for i in range(n)]
        mid: dict[str, Any] = {}
        objects_before = len(gc.get_objects()) if job.get("gc_sample") else 0
        if job.get("gc_sample"):

            async def sample() -> None:
                # Once half the chunks have arrived (every stream is in flight at
                # 10 ms pacing): tracked objects and RSS now, per open stream.
                half = n * job["chunks"] // 2
                while RECEIVED[0] - r0 < half:
                    await sleep(0.02)
                mid.update(
                    objects=len(gc.get_objects()),
                    rss_kib=rss_kib(),
                    in_flight=n - len(counts) - len(errors),
                )

            tasks.append(sample)
        prof = cProfile.Profile() if job.get("profile") else None
        if prof is not None:
            prof.enable()
        r0 = RECEIVED[0]
        gc_count0 = gc.get_count()[0]
        with GcMeter() as meter:
            c0, w0 = time.process_time(), time.perf_counter()
            await gather(tasks, job.get("deadline"), stop)
            if not snapshot:
                stop()
    chunks = int(snapshot["chunks"])
    cpu, wall = snapshot["cpu"], snapshot["wall"]
    gc_figures = meter.summary()
    young = gc_figures["collections_by_generation"][0]
    threshold = gc.get_threshold()[0]
    # Each young collection follows `threshold` net allocations of tracked objects.
    net_tracked = young * threshold + gc.get_count()[0] - gc_count0
    gc_figures["net_tracked_allocations_per_chunk"] = net_tracked / chunks if chunks else None
    if mid:
        live = mid["in_flight"] or 1
        gc_figures["tracked_objects_per_stream"] = (mid["objects"] - objects_before) / live
        gc_figures["mid_run"] = {**mid, "objects_before": objects_before}
    return {
        "streams": n,
        #: False when the run was stopped at its deadline (figures are as of then).
        "finished": len(counts) + len(errors) == n,
        "streams_done": len(counts),
        "chunks": chunks,
        "expected_chunks": n * job["chunks"],
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "wall_s": wall,
        "cpu_s": cpu,
        "cpu_us_per_chunk": cpu / chunks * 1e6 if chunks else None,
        "rss_before_kib": rss_before,
        "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "profile": _profile_summary(prof) if prof is not None else None,
        "gc": gc_figures,
        "gc_threshold": list(gc.get_threshold()),
    }


async def _abandon(peer: Peer, job: dict[str, Any], gather: Gather, sleep: Any) -> dict[str, Any]:
    left: dict[str, float | None] = {}
    rounds = []
    async with peer.open(job["base_url"]) as session:
        await peer.stream(session, WARMUP, None)
        for r in range(job["rounds"]):

            def task(i: int, r: int = r) -> Callable[[], Awaitable[None]]:
                async def one() -> None:
                    marker = f"{MARKER_PREFIX}abandon-{r}-{i}"
                    _, t = await peer.stream(session, marker, 3 + i % 5)
                    left[marker] = t

                return one

            await gather([task(i) for i in range(job["streams"])], None, _no_deadline)
            # Stay alive (and idle) for a while, so that whatever the library
            # closes late is still seen closing by this process.
            await sleep(job["window"])
            rounds.append(time.monotonic())
    return {"left": left, "window_ends": rounds}


WORKLOADS = {"bulk": _bulk, "fanout": _fanout, "abandon": _abandon}


def worker_main(job: dict[str, Any]) -> None:
    raise_nofile()
    peer = PEERS[job["peer"]]
    workload = WORKLOADS[job["kind"]]
    if peer.flavor == "trio":
        result = trio.run(workload, peer, job, _gather_trio, trio.sleep)
    else:
        result = asyncio.run(workload(peer, job, _gather_asyncio, asyncio.sleep))
    print("RESULT " + json.dumps(result), flush=True)


def run_worker(peer: str, kind: str, base_url: str, **job: Any) -> dict[str, Any]:
    """Run one workload in a fresh process; its result, or ``{"error": ...}``."""
    spec = {"peer": peer, "kind": kind, "base_url": base_url, **job}
    try:
        done = subprocess.run(
            [sys.executable, __file__, "--worker", json.dumps(spec)],
            capture_output=True,
            text=True,
            timeout=WORKER_TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {WORKER_TIMEOUT:g} s"}
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[7:])  # type: ignore[no-any-return]
    tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
    print(f"  ! {peer} {kind} failed: {tail}", flush=True)
    return {"error": tail}


# ==== sections ====================================================================================


def available(names: list[str], notes: list[str]) -> list[str]:
    out = []
    for name in names:
        note = PEERS[name].missing()
        if note is None:
            out.append(name)
        else:
            print(f"  note: {note}", flush=True)
            if note not in notes:
                notes.append(note)
    return out


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("MET" if ok else "MISSED")


#: Section 1's two framings of the same stream: (name, upstream delay, peers).
#: ``coalesced``: no delay, so the upstream packs events into 64 KiB writes
#: (one HTTP chunk each); ``per-event``: a 1 µs delay, so every event is its
#: own write and its own HTTP chunk, as a provider sends tokens (the upstream's
#: own pace, about 30-60 µs per event here, sets the rate, not the delay).
BULK_MODES = (
    ("coalesced", 0.0, ("llmrt", "floor", "httpx", "httpx-lines", "openai", "litellm")),
    ("per-event", 1e-6, ("llmrt", "floor", "httpx", "httpx-lines", "openai")),
)


def _print_profile(title: str, prof: dict[str, Any]) -> None:
    print(f"\n  {title} ({prof['total_s']:.3f} s profiled), tottime by package:")
    print("    " + ", ".join(f"{k} {v}%" for k, v in prof["by_package_pct"].items()))
    rows = [[t["function"], t["ncalls"], t["tottime_ms"], t["pct"]] for t in prof["top"]]
    lines = table(["function (top 15 by tottime)", "ncalls", "tottime ms", "%"], rows)
    print("\n".join("    " + line for line in lines.splitlines()))


def section_per_chunk(cfg: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    n = cfg["bulk_chunks"]
    out: dict[str, Any] = {"chunks": n}
    for mode, delay, names in BULK_MODES:
        print(
            f"\n== 1. per-chunk ({mode}): one {n:,}-chunk stream; client CPU µs/chunk, "
            f"median of {cfg['bulk_runs']} ==",
            flush=True,
        )
        peers = available(list(names), notes)
        results: dict[str, Any] = {}
        with UpstreamProcess(n, delay) as up:
            # One event per read: llmrt and the floor take turns, one run per
            # worker, so a drift of the machine's speed falls on both alike (the
            # ratio has a target). Coalesced runs last 0.1 s, where a worker's
            # first run is the noisiest: five runs per worker, as before.
            paired = [name for name in ("llmrt", "floor") if name in peers]
            if mode == "per-event" and len(paired) == 2:
                results.update(_alternate_bulk(paired, up.base_url, n, cfg["bulk_runs"]))
            for name in peers:
                if name in results:
                    res = results[name]
                else:
                    runs = cfg["bulk_runs"] if name != "litellm" else 2
                    profile = name in ("llmrt", "httpx")
                    res = run_worker(
                        name, "bulk", up.base_url, chunks=n, runs=runs, profile=profile
                    )
                if "error" not in res:
                    us = [r["cpu_us_per_chunk"] for r in res["runs"]]
                    res["median_us_per_chunk"] = median(us)
                    res["median_wall_s"] = median([r["wall_s"] for r in res["runs"]])
                    print(f"  {name}: {median(us):.2f} µs/chunk (runs {min(us):.2f}-{max(us):.2f})")
                results[name] = res
        base = results.get("llmrt", {}).get("median_us_per_chunk")
        rows = []
        for name, res in results.items():
            us = res.get("median_us_per_chunk")
            runs_us = [r["cpu_us_per_chunk"] for r in res.get("runs", [])]
            spread = f"{min(runs_us):.1f}-{max(runs_us):.1f}" if runs_us else res.get("error")
            rows.append([name, us, spread, res.get("median_wall_s"), ratio(us, base)])
        print(table(["client", "CPU µs/chunk", "runs range", "wall s", "x llmrt"], rows))
        sdk = results.get("openai", {}).get("median_us_per_chunk")
        floor = results.get("floor", {}).get("median_us_per_chunk")
        over_floor = ratio(base, floor)
        if over_floor is not None:
            how = " (alternating runs)" if mode == "per-event" else ""
            print(f"  llmrt / floor{how}: {over_floor:.2f}x")
        targets = {
            "llmrt_us_per_chunk<=12": verdict(
                None if base is None else base <= TARGET_US_PER_CHUNK
            ),
            "openai_over_llmrt>=5": verdict(
                None if base is None or sdk is None else sdk / base >= TARGET_SDK_RATIO
            ),
        }
        if mode == "per-event":
            targets[f"llmrt_over_floor<={TARGET_PER_EVENT_OVER_FLOOR}"] = verdict(
                None if over_floor is None else over_floor <= TARGET_PER_EVENT_OVER_FLOOR
            )
        print("  targets: " + ", ".join(f"{k} {v}" for k, v in targets.items()))
        for name in ("llmrt", "httpx"):
            prof = results.get(name, {}).get("profile")
            if prof:
                _print_profile(f"cProfile of one {name} run ({mode})", prof)
        out[mode] = {
            "upstream_delay_s": delay,
            "results": results,
            "llmrt_over_floor": over_floor,
            "targets": targets,
        }
    return out


def _alternate_bulk(names: list[str], base_url: str, n: int, runs: int) -> dict[str, Any]:
    """``runs`` bulk runs of each of ``names``, one per worker, taking turns.

    The order flips every round; the first client's last worker also takes
    the cProfile run. A client whose worker fails keeps that failure.
    """
    out: dict[str, Any] = {name: {"runs": [], "profile": None} for name in names}
    for i in range(runs):
        for name in names if i % 2 == 0 else names[::-1]:
            if "error" in out[name]:
                continue
            profile = name == names[0] and i == runs - 1
            res = run_worker(name, "bulk", base_url, chunks=n, runs=1, profile=profile)
            if "error" in res:
                out[name] = res
                continue
            out[name]["runs"] += res["runs"]
            if res.get("profile"):
                out[name]["profile"] = res["profile"]
    return out


def _fan_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    good = [r for r in runs if "error" not in r]
    if not good:
        return {"error": runs[0].get("error") if runs else "no runs", "runs": runs}
    return {
        "wall_s": median([r["wall_s"] for r in good]),
        "cpu_s": median([r["cpu_s"] for r in good]),
        "cpu_us_per_chunk": median([r["cpu_us_per_chunk"] or 0.0 for r in good]),
        "peak_rss_mib": median([r["peak_rss_kib"] for r in good]) / 1024,
        "rss_before_mib": median([r["rss_before_kib"] for r in good]) / 1024,
        "upstream_cpu_s": median([r["upstream_cpu_s"] for r in good]),
        "peak_open": max(r["peak_open"] for r in good),
        "errors": sum(r["errors"] for r in good),
        "finished": all(r["finished"] for r in good),
        "chunks_ok": all(r["chunks"] == r["expected_chunks"] for r in good),
        "runs": runs,
    }


def _fan_run(
    up: UpstreamProcess, peer: str, streams: int, chunks: int, **kw: Any
) -> dict[str, Any]:
    before = up.stats(since=0)
    res = run_worker(peer, "fanout", up.base_url, streams=streams, chunks=chunks, **kw)
    after = up.stats(since=before["connections"])
    res["upstream_cpu_s"] = after["cpu_s"] - before["cpu_s"]
    res["peak_open"] = after.get("peak_open")
    res["open_spread_s"] = after.get("open_spread_s")
    if "error" not in res:
        print(
            f"  {peer} x{streams}: wall {res['wall_s']:.2f} s, CPU {res['cpu_s']:.2f} s "
            f"({res['cpu_us_per_chunk']:.1f} µs/chunk), peak RSS {res['peak_rss_kib'] / 1024:.0f} "
            f"MiB, upstream CPU {res['upstream_cpu_s']:.2f} s, peak open {res['peak_open']} "
            f"(all open within {res['open_spread_s']:.2f} s), "
            f"errors {res['errors']}"
            + ("" if res["finished"] else f"; STOPPED at its {kw.get('deadline')} s deadline"),
            flush=True,
        )
    return res


def section_concurrency(cfg: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    n, chunks, delay = cfg["fan_streams"], cfg["fan_chunks"], cfg["fan_delay"]
    print(
        f"\n== 2. concurrency: {n:,} streams x {chunks} chunks, {delay * 1e3:g} ms apart ==",
        flush=True,
    )
    peers = available(["llmrt", "floor", "httpx", "httpx-drain", "openai"], notes)
    results: dict[str, Any] = {}
    with UpstreamProcess(chunks, delay) as up:
        for name in peers:
            runs = [
                _fan_run(up, name, n, chunks, deadline=cfg["fan_deadline"])
                for _ in range(cfg["fan_runs"])
            ]
            results[name] = _fan_summary(runs)
    base = results.get("llmrt", {})
    rows = []
    for name, res in results.items():
        rows.append(
            [
                name,
                res.get("wall_s"),
                ratio(res.get("wall_s"), base.get("wall_s")),
                res.get("cpu_s"),
                res.get("cpu_us_per_chunk"),
                res.get("peak_rss_mib"),
                ratio(res.get("peak_rss_mib"), base.get("peak_rss_mib")),
                res.get("upstream_cpu_s"),
                res.get("peak_open"),
                res.get("errors"),
                "yes" if res.get("finished") else "NO (deadline)",
            ]
        )
    print(
        table(
            [
                "client",
                "wall s",
                "x llmrt",
                "client CPU s",
                "µs/chunk",
                "peak RSS MiB",
                "x llmrt",
                "upstream CPU s",
                "peak open",
                "errors",
                "finished",
            ],
            rows,
        )
    )
    bare = results.get("httpx", {})
    wall_ratio = ratio(base.get("wall_s"), bare.get("wall_s"))
    rss_ratio = ratio(base.get("peak_rss_mib"), bare.get("peak_rss_mib"))
    targets = {
        "llmrt_wall<=1.3x_httpx": verdict(
            None if wall_ratio is None else wall_ratio <= TARGET_CONCURRENCY_RATIO
        ),
        "llmrt_peak_rss<=1.3x_httpx": verdict(
            None if rss_ratio is None else rss_ratio <= TARGET_CONCURRENCY_RATIO
        ),
    }
    print(
        f"  llmrt/httpx: wall {wall_ratio or 0:.2f}x, peak RSS {rss_ratio or 0:.2f}x; targets: "
        + ", ".join(f"{k} {v}" for k, v in targets.items())
    )
    return {
        "streams": n,
        "chunks": chunks,
        "delay_s": delay,
        "results": results,
        "targets": targets,
    }


def section_scaling(cfg: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    chunks = cfg["fan_chunks"]
    sizes = cfg["scale"]
    print(
        "\n== 3. scaling: client CPU µs/chunk at "
        + " vs ".join(f"{n:,} streams ({d * 1e3:g} ms apart)" for n, d in sizes)
        + f", {chunks} chunks each ==",
        flush=True,
    )
    peers = available(["llmrt", "floor", "httpx", "openai", "litellm"], notes)
    results: dict[str, dict[str, Any]] = {name: {} for name in peers}
    for n, delay in sizes:
        with UpstreamProcess(chunks, delay) as up:
            for name in peers:
                run = _fan_run(up, name, n, chunks, deadline=cfg["scale_deadline"])
                results[name][str(n)] = _fan_summary([run])
    small, large = (str(n) for n, _ in sizes)
    rows = []
    growth: dict[str, float | None] = {}
    for name in peers:
        a = results[name][small].get("cpu_us_per_chunk")
        b = results[name][large].get("cpu_us_per_chunk")
        growth[name] = ratio(b, a)
        rows.append(
            [
                name,
                a,
                b,
                growth[name],
                results[name][small].get("peak_open"),
                results[name][large].get("peak_open"),
                results[name][large].get("wall_s"),
                results[name][large].get("peak_rss_mib"),
                "yes" if results[name][large].get("finished") else "NO (deadline)",
            ]
        )
    print(
        table(
            [
                "client",
                f"µs/chunk @{small}",
                f"µs/chunk @{large}",
                "growth",
                f"peak open @{small}",
                f"peak open @{large}",
                f"wall s @{large}",
                f"peak RSS MiB @{large}",
                f"finished @{large}",
            ],
            rows,
        )
    )
    g = growth.get("llmrt")
    finished = all(results.get("llmrt", {}).get(k, {}).get("finished") for k in (small, large))
    targets = {
        # A run stopped at its deadline has only its early phase measured: no verdict.
        "llmrt_growth<=1.3x": verdict(None if g is None else g <= TARGET_SCALING_RATIO)
        if finished
        else "INCONCLUSIVE (llmrt did not finish within the deadline)"
    }
    print("  targets: " + ", ".join(f"{k} {v}" for k, v in targets.items()))
    out: dict[str, Any] = {
        "chunks": chunks,
        "sizes": [{"streams": n, "delay_s": d} for n, d in sizes],
        "results": results,
        "growth": growth,
        "targets": targets,
    }
    if cfg["scale_profile"] and targets["llmrt_growth<=1.3x"] != "MET":
        n, delay = cfg["scale_profile"]
        print(f"\n  profiling llmrt at {n:,} streams ({delay * 1e3:g} ms apart)")
        profiles = {}
        with UpstreamProcess(chunks, delay) as up:
            for name in ["llmrt"]:
                res = _fan_run(up, name, n, chunks, profile=True, deadline=cfg["profile_deadline"])
                prof = res.get("profile")
                profiles[name] = prof
                if prof:
                    _print_profile(f"{name} at {n:,} streams under cProfile", prof)
        out["profiles"] = {"streams": n, "delay_s": delay, "by_peer": profiles}
    return out


def _scale_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out = _fan_summary(runs)
    good = [r for r in runs if "error" not in r]
    if not good:
        return out
    n = good[0]["streams"]
    out["rss_kib_per_stream"] = median(
        [(r["peak_rss_kib"] - r["rss_before_kib"]) / n for r in good]
    )
    per_stream = [r["gc"].get("tracked_objects_per_stream") for r in good]
    out["tracked_objects_per_stream"] = (
        median([x for x in per_stream if x is not None]) if any(per_stream) else None
    )
    out["net_tracked_allocations_per_chunk"] = median(
        [r["gc"]["net_tracked_allocations_per_chunk"] or 0.0 for r in good]
    )
    out["young_collections"] = median([r["gc"]["collections_by_generation"][0] for r in good])
    out["full_collections"] = median([r["gc"]["collections_by_generation"][2] for r in good])
    out["gc_ms"] = median([r["gc"]["ms"] for r in good])
    return out


def section_scale(cfg: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    chunks, delay, runs = cfg["fan_chunks"], cfg["fan_delay"], cfg["scale_runs"]
    sizes = cfg["scale_streams"]
    print(
        f"\n== 6. scale: {' and '.join(f'{n:,}' for n in sizes)} streams x {chunks} chunks, "
        f"{delay * 1e3:g} ms apart, llmrt beside the raw-trio floor, {runs} interleaved "
        "run(s) each, Python's default GC settings ==",
        flush=True,
    )
    # ``llmrt-served``: llmrt with the collector set up as ``llmrt serve`` sets it up for
    # its own process: what that buys, beside the library on Python's defaults.
    peers = available(["llmrt", "floor", "llmrt-served"], notes)
    results: dict[str, dict[str, Any]] = {name: {} for name in peers}
    rows = []
    for n in sizes:
        raw: dict[str, list[dict[str, Any]]] = {name: [] for name in peers}
        with UpstreamProcess(chunks, delay, fast=True) as up:
            for _ in range(runs):
                for name in peers:
                    raw[name].append(
                        _fan_run(
                            up, name, n, chunks, deadline=cfg["scale_deadline"], gc_sample=True
                        )
                    )
        for name in peers:
            results[name][str(n)] = _scale_summary(raw[name])
        floor = results.get("floor", {}).get(str(n), {})
        for name in peers:
            res = results[name][str(n)]
            rows.append(
                [
                    f"{name} x{n:,}",
                    res.get("wall_s"),
                    ratio(res.get("wall_s"), floor.get("wall_s")),
                    res.get("cpu_us_per_chunk"),
                    res.get("peak_rss_mib"),
                    res.get("rss_kib_per_stream"),
                    res.get("tracked_objects_per_stream"),
                    res.get("net_tracked_allocations_per_chunk"),
                    res.get("young_collections"),
                    res.get("full_collections"),
                    res.get("gc_ms"),
                    res.get("errors"),
                ]
            )
    print(
        table(
            [
                "client",
                "wall s",
                "x floor",
                "CPU µs/chunk",
                "peak RSS MiB",
                "RSS KiB/stream",
                "tracked objs/stream",
                "net tracked allocs/chunk",
                "gen0 GCs",
                "gen2 GCs",
                "GC ms",
                "errors",
            ],
            rows,
        )
    )
    targets: dict[str, str] = {}
    for n in sizes:
        mine = results.get("llmrt", {}).get(str(n), {})
        floor = results.get("floor", {}).get(str(n), {})
        finished = mine.get("finished") and floor.get("finished")
        wall = ratio(mine.get("wall_s"), floor.get("wall_s"))
        rss = mine.get("rss_kib_per_stream")
        if not finished:
            targets[f"wall@{n}<={TARGET_SCALE_WALL}x_floor"] = "INCONCLUSIVE (a run did not finish)"
        else:
            targets[f"wall@{n}<={TARGET_SCALE_WALL}x_floor"] = verdict(
                None if wall is None else wall <= TARGET_SCALE_WALL
            )
        targets[f"rss@{n}<={TARGET_RSS_KIB}KiB/stream"] = verdict(
            None if rss is None else rss <= TARGET_RSS_KIB
        )
    print("  targets: " + ", ".join(f"{k} {v}" for k, v in targets.items()))
    return {
        "chunks": chunks,
        "delay_s": delay,
        "streams": list(sizes),
        "runs": runs,
        "gc_threshold": list(gc.get_threshold()),
        "results": results,
        "targets": targets,
    }


def section_abandon(cfg: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    n, rounds, window = cfg["abandon_streams"], cfg["abandon_rounds"], cfg["abandon_window"]
    print(
        f"\n== 5. abandon: {n} streams ({ABANDON_CHUNKS} chunks, {ABANDON_DELAY * 1e3:g} ms apart)"
        f" left after 3-7 chunks, {rounds} round(s); consumer leaves -> upstream sees close ==",
        flush=True,
    )
    peers = available(["llmrt", "floor", "httpx", "openai", "litellm"], notes)
    results: dict[str, Any] = {}
    with UpstreamProcess(ABANDON_CHUNKS, ABANDON_DELAY) as up:
        for name in peers:
            res = run_worker(name, "abandon", up.base_url, streams=n, rounds=rounds, window=window)
            if "error" in res:
                results[name] = res
                continue
            streams = up.stats(detail=1)["streams"]
            latencies: list[float] = []
            late = 0
            for marker, t_left in res["left"].items():
                r = int(marker.split("-")[3])
                closed = streams.get(marker, {}).get("closed_at")
                if t_left is None:
                    continue
                if closed is None or closed > res["window_ends"][r]:
                    late += 1  # still open when the consumer's process stopped waiting
                    continue
                latencies.append((closed - t_left) * 1e3)
            latencies.sort()
            results[name] = {
                "streams": len(res["left"]),
                "closed_in_window": len(latencies),
                "not_closed_in_window": late,
                "window_s": window,
                "p50_ms": median(latencies) if latencies else None,
                "max_ms": latencies[-1] if latencies else None,
                "within_1ms": sum(1 for x in latencies if x <= TARGET_CLOSE_MS),
                "over_1s": sum(1 for x in latencies if x > 1000) + late,
                "latencies_ms": [round(x, 3) for x in latencies],
            }
    rows = [
        [
            name,
            r.get("streams"),
            r.get("p50_ms"),
            r.get("max_ms"),
            r.get("within_1ms"),
            r.get("over_1s"),
            r.get("not_closed_in_window"),
        ]
        for name, r in results.items()
    ]
    print(
        table(
            [
                "client",
                "streams",
                "close p50 ms",
                "close max ms",
                "<=1 ms",
                ">1 s",
                f"open after {window:g} s",
            ],
            rows,
        )
    )
    mine = results.get("llmrt", {})
    ok = None
    if "streams" in mine:
        ok = mine["within_1ms"] == mine["streams"]
    targets = {"llmrt_every_close<=1ms": verdict(ok)}
    print("  targets: " + ", ".join(f"{k} {v}" for k, v in targets.items()))
    return {
        "streams": n,
        "rounds": rounds,
        "chunks": ABANDON_CHUNKS,
        "delay_s": ABANDON_DELAY,
        "method": "worker time.monotonic() at leaving vs upstream ConnectionRecord.closed_at "
        "converted to time.monotonic() (CLOCK_MONOTONIC, shared by both processes)",
        "results": results,
        "targets": targets,
    }


def _decoder_bodies(n: int) -> dict[str, tuple[Callable[[], Any], bytes]]:
    """One ``n``-text-chunk body per provider decoder, shaped like the provider's events.

    Each event carries what the provider repeats on every chunk (Gemini:
    ``usageMetadata``, ``modelVersion``, ``responseId``; Responses: the
    ``event:`` line, ``item_id``, indices, ``sequence_number``, ``logprobs``).
    """
    from llmrt.adapters.gemini import _GeminiEvents
    from llmrt.adapters.openai_chat import PRESETS, _OpenAIEvents
    from llmrt.adapters.openai_responses import _ResponsesEvents
    from llmrt.testing import openai_events

    words = [f" w{i % 97}" for i in range(n)]
    openai = b"".join(openai_events(words))
    gemini = []
    for i, word in enumerate(words):
        chunk: dict[str, Any] = {
            "candidates": [{"content": {"parts": [{"text": word}], "role": "model"}, "index": 0}],
            "usageMetadata": {
                "promptTokenCount": 12,
                "candidatesTokenCount": i + 1,
                "totalTokenCount": 13 + i,
            },
            "modelVersion": "gemini-2.5-flash",
            "responseId": "bench-gemini-response-0001",
        }
        if i == n - 1:
            chunk["candidates"][0]["finishReason"] = "STOP"
        gemini.append(b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\r\n\r\n")
    responses = []
    for i, word in enumerate(words):
        event = {
            "type": "response.output_text.delta",
            "sequence_number": i + 4,
            "item_id": "msg_bench0123456789abcdef0123456789abcdef",
            "output_index": 0,
            "content_index": 0,
            "delta": word,
            "logprobs": [],
        }
        data = json.dumps(event, separators=(",", ":"))
        responses.append(f"event: response.output_text.delta\ndata: {data}\n\n".encode())
    done = {"type": "response.completed", "sequence_number": n + 4, "response": {"id": "r"}}
    responses.append(f"event: response.completed\ndata: {json.dumps(done)}\n\n".encode())
    return {
        "openai": (lambda: _OpenAIEvents(PRESETS["openai"].dialect), openai),
        "gemini": (_GeminiEvents, b"".join(gemini)),
        "responses": (_ResponsesEvents, b"".join(responses)),
    }


def _decode_once(make: Callable[[], Any], reads: list[bytes]) -> tuple[float, int]:
    """CPU seconds to feed ``reads`` through a fresh feed, and the text deltas it produced."""
    from llmrt import TextDelta

    gc.collect()
    c0 = time.process_time()
    feed = make()
    count = 0
    for read in reads:
        for chunk in feed.feed(read):
            if type(chunk) is TextDelta:
                count += 1
    if not feed.finished:
        for chunk in feed.end():
            if type(chunk) is TextDelta:
                count += 1
    return time.process_time() - c0, count


def section_decoders(cfg: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    n, runs = cfg["decoder_chunks"], cfg["decoder_runs"]
    print(
        f"\n== 4. decoders: in process, one {n:,}-chunk body per provider in coalesced "
        f"64 KiB reads; CPU µs/chunk, median of {runs} ==",
        flush=True,
    )
    bodies = _decoder_bodies(n)
    samples: dict[str, list[float]] = {name: [] for name in bodies}
    reads = {
        name: [body[i : i + 65536] for i in range(0, len(body), 65536)]
        for name, (_, body) in bodies.items()
    }
    for _ in range(runs + 1):  # the first round warms up and is dropped
        for name, (make, _) in bodies.items():
            cpu, count = _decode_once(make, reads[name])
            if count != n:
                raise RuntimeError(f"{name} decoder produced {count} text chunks, expected {n}")
            samples[name].append(cpu / n * 1e6)
    base = median(samples["openai"][1:])
    results: dict[str, Any] = {}
    rows = []
    for name, (_, body) in bodies.items():
        us = samples[name][1:]
        med = median(us)
        results[name] = {
            "median_us_per_chunk": med,
            "runs_us": us,
            "bytes_per_chunk": len(body) / n,
            "ratio_to_openai": med / base,
        }
        rows.append([name, med, f"{min(us):.2f}-{max(us):.2f}", len(body) / n, med / base])
    print(table(["decoder", "CPU µs/chunk", "runs range", "bytes/chunk", "x openai"], rows))
    targets = {
        f"{name}_over_openai<={TARGET_DECODER_RATIO}": verdict(
            results[name]["ratio_to_openai"] <= TARGET_DECODER_RATIO
        )
        for name in ("gemini", "responses")
    }
    print("  targets: " + ", ".join(f"{k} {v}" for k, v in targets.items()))
    return {"chunks": n, "runs": runs, "results": results, "targets": targets}


def versions() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for dist in ("trio", "httpx", "httpcore", "h11", "msgspec", "openai", "httpx2", "litellm"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = None
    return out


RUNNERS = {
    "per-chunk": section_per_chunk,
    "concurrency": section_concurrency,
    "scaling": section_scaling,
    "decoders": section_decoders,
    "abandon": section_abandon,
    "scale": section_scale,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer chunks and streams")
    parser.add_argument("--only", choices=SECTIONS, help="run one section")
    parser.add_argument(
        "--skip", choices=SECTIONS, action="append", default=[], help="leave a section out"
    )
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        raise_nofile()
        trio.run(_serve, json.loads(args.serve))
        return
    if args.worker:
        worker_main(json.loads(args.worker))
        return

    nofile = raise_nofile()
    cfg = sized(QUICK if args.quick else FULL)
    env = {**environment(), **versions(), "rlimit_nofile": nofile}
    print(
        "bench_http: python {python}, trio {trio}, httpx {httpx}, httpcore {httpcore}, "
        "openai {openai}, litellm {litellm}; {nproc} CPUs; RLIMIT_NOFILE {rlimit_nofile}".format(
            **env
        )
    )
    notes: list[str] = []
    report: dict[str, Any] = {"environment": env, "quick": args.quick, "config": cfg}
    started = time.perf_counter()
    for name in [args.only] if args.only else SECTIONS:
        if name not in args.skip:
            report[name] = RUNNERS[name](cfg, notes)
    report["notes"] = notes
    report["elapsed_s"] = time.perf_counter() - started
    if args.only:
        out = f"http-{args.only}{'-quick' if args.quick else ''}.json"
    else:
        out = "http-quick.json" if args.quick else "http.json"
    path = write_json(out, report)
    print(f"\nwrote {path} in {report['elapsed_s']:.0f} s")


if __name__ == "__main__":
    main()
