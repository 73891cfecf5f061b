"""The registry of suites ``python -m bench`` knows: script, arguments, JSON, checks.

Every suite runs as its own process (``python bench/bench_<x>.py ...``): the
benchmarks measure their own process's CPU, RSS and collector, so they must not
share one with the runner or with each other.

Two sets of arguments per suite. ``full`` is the script's full run (the figures
in bench/README.md). ``quick`` is a smoke run: smaller than a script's own
``--quick`` wherever the script takes sizes (``LLMRT_BENCH_SIZES``), because
its job is to prove in CI that every workload still runs to the end, not to
measure; its figures are not judged.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

#: A check returns the ways a finished run's JSON shows a broken workload
#: (errors, wrong chunk counts): never a speed verdict.
Check = Callable[[dict[str, Any]], list[str]]


@dataclass(frozen=True)
class Suite:
    name: str
    script: str
    what: str
    full_args: tuple[str, ...]
    quick_args: tuple[str, ...]
    full_json: str
    quick_json: str
    #: Sizes for the smoke run, passed as ``LLMRT_BENCH_SIZES`` (None: the script takes none).
    quick_sizes: dict[str, Any] | None = None
    aliases: tuple[str, ...] = ()
    check: Check | None = field(default=None, compare=False)

    def json_name(self, quick: bool) -> str:
        return self.quick_json if quick else self.full_json

    def argv(self, quick: bool, results: Path) -> list[str]:
        args = list(self.quick_args if quick else self.full_args)
        # bench_vocab.py takes its output path; the others honour LLMRT_BENCH_RESULTS.
        return [str(HERE / self.script), *(a.format(results=results) for a in args)]

    def env(self, quick: bool, results: Path) -> dict[str, str]:
        env = {"LLMRT_BENCH_RESULTS": str(results)}
        if quick and self.quick_sizes is not None:
            env["LLMRT_BENCH_SIZES"] = json.dumps(self.quick_sizes)
        return env


def _walk(node: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(node, dict):
        yield path, node
        for key, value in node.items():
            yield from _walk(value, f"{path}.{key}" if path else str(key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _walk(value, f"{path}[{i}]")


#: Peers whose failures are figures about them (the openai SDK's pool gives up at 5,000
#: streams), reported in their rows, not workloads of ours that broke.
PEER_NAMES = frozenset({"httpx", "httpx-lines", "httpx-drain", "openai", "litellm"})


def check_asyncio(report: dict[str, Any]) -> list[str]:
    """`bench_asyncio.py`: an llmrt contender with failed streams or cancels never seen closing."""
    broken = []
    for name, figures in report.get("contenders", {}).items():
        if name == "openai":
            continue
        for key, value in figures.items():
            if key.startswith("scale_") and value.get("failed"):
                broken.append(f"asyncio: {name} {key}: {value['failed']} streams failed")
        if figures.get("cancel_ms", {}).get("lost"):
            broken.append(f"asyncio: {name}: {figures['cancel_ms']['lost']} cancels never closed")
    return broken


def check_streams(report: dict[str, Any]) -> list[str]:
    """HTTP runs of llmrt or the floor: a failed stream, or a finished run with the wrong count."""
    broken = []
    for path, node in _walk(report):
        if "[" in path:
            continue  # per-run copies of the summaries checked here
        if PEER_NAMES & set(path.split(".")):
            continue
        if node.get("errors"):
            broken.append(f"{path}: {node['errors']} streams failed ({node.get('first_error')})")
        elif node.get("finished") is True and node.get("chunks_ok") is False:
            broken.append(f"{path}: wrong number of chunks")
    return broken


SUITES: tuple[Suite, ...] = (
    Suite(
        "vocab",
        "bench_vocab.py",
        "codec round trip and BlockAssembler.push, µs per chunk",
        (),
        ("--iterations", "20000", "--repeats", "3", "--output", "{results}/vocab-quick.json"),
        "vocab.json",
        "vocab-quick.json",
        aliases=("vocabulary",),
    ),
    Suite(
        "prices",
        "bench_prices.py",
        "price lookup per call (price table, genai-prices), a call with and without a price",
        (),
        (
            "--iterations",
            "2000",
            "--calls",
            "200",
            "--repeats",
            "3",
            "--output",
            "{results}/prices-quick.json",
        ),
        "prices.json",
        "prices-quick.json",
        aliases=("pricing",),
    ),
    Suite(
        "sse",
        "bench_sse.py",
        "SSEParser vs httpx aiter_lines on identical reads",
        (),
        (),
        "sse.json",
        "sse.json",
    ),
    Suite(
        "runtime",
        "bench_runtime.py",
        "call path per chunk, abort latency, 10,000 concurrent calls, abort-all vs bare trio",
        (),
        ("--quick",),
        "runtime.json",
        "runtime-quick.json",
        quick_sizes={"chunks": 5_000, "runs": 2, "aborts": 100, "calls": 500},
    ),
    Suite(
        "http",
        "bench_http.py",
        "the HTTP path end to end beside the raw-trio floor, httpx, the openai SDK, LiteLLM",
        ("--skip", "scale"),
        ("--quick", "--skip", "scale"),
        "http.json",
        "http-quick.json",
        quick_sizes={
            "bulk_chunks": 2_000,
            "bulk_runs": 1,
            "fan_streams": 50,
            "fan_delay": 0.001,
            "fan_deadline": 30.0,
            "scale": [[20, 0.001], [100, 0.002]],
            "scale_deadline": 30.0,
            "abandon_streams": 10,
            "abandon_window": 1.0,
        },
        check=check_streams,
    ),
    Suite(
        "scale",
        "bench_http.py",
        "5,000 and 10,000 HTTP streams beside the raw-trio floor: wall, RSS, collector",
        ("--only", "scale"),
        ("--quick", "--only", "scale"),
        "http-scale.json",
        "http-scale-quick.json",
        quick_sizes={
            "scale_streams": [200],
            "scale_runs": 1,
            "fan_delay": 0.001,
            "scale_deadline": 30.0,
        },
        check=check_streams,
    ),
    Suite(
        "abandon",
        "bench_abandon.py",
        "leave / abort -> upstream saw the close, in one trio run",
        (),
        ("--quick",),
        "abandon.json",
        "abandon-quick.json",
    ),
    Suite(
        "asyncio",
        "bench_asyncio.py",
        "llmrt.aio beside llmrt under trio and the openai SDK: per chunk, cancel, 5,000 streams",
        (),
        ("--quick",),
        "asyncio.json",
        "asyncio-quick.json",
        quick_sizes={
            "chunk_streams": 1,
            "chunks": 500,
            "cancel_streams": 5,
            "cancel_rounds": 2,
            "scale": [50, 100],
        },
        aliases=("aio",),
        check=check_asyncio,
    ),
    Suite(
        "gateway",
        "bench_gateway.py",
        "chunks through the websocket gateway, multiplexing, latency, abort frames",
        (),
        ("--quick",),
        "gateway.json",
        "gateway-quick.json",
    ),
    Suite(
        "soak",
        "bench_soak.py",
        "memory over many mixed calls in waves",
        (),
        ("--quick",),
        "soak.json",
        "soak-quick.json",
        quick_sizes={"waves": 10, "calls_per_wave": 100},
    ),
    Suite(
        "scaleout",
        "bench_scaleout.py",
        "what /metrics costs per chunk beside the bare call path",
        (),
        ("--quick",),
        "scaleout.json",
        "scaleout-quick.json",
        quick_sizes={
            "long_chunks": 5_000,
            "short_calls": 100,
            "short_chunks": 50,
            "runs": 2,
            "load_seconds": 0.5,
            "connections": 4,
        },
    ),
    Suite(
        "routing",
        "bench_routing.py",
        "routing decision per call (local, Redis), failover 429 -> next first byte beside LiteLLM",
        (),
        ("--quick",),
        "routing.json",
        "routing-quick.json",
        quick_sizes={
            "decisions": 5_000,
            "repeats": 2,
            "calls": 100,
            "redis_calls": 100,
            "failovers": 10,
        },
    ),
    Suite(
        "hostile",
        "bench_hostile.py",
        "event-loop stall and RSS while a call meets each hostile upstream",
        (),
        ("--quick",),
        "hostile.json",
        "hostile-quick.json",
    ),
    Suite(
        "startup",
        "bench_startup.py",
        "import and wall time of `llmrt --help` and `llmrt call` beside `python -c pass`",
        (),
        ("--quick",),
        "startup.json",
        "startup-quick.json",
    ),
    Suite(
        "gzip_bomb",
        "bench_gzip_bomb.py",
        "event-loop stall while an adapter reads gzip bombs",
        ("100",),
        ("5",),
        "gzip_bomb.json",
        "gzip_bomb.json",
        aliases=("gzip",),
    ),
    Suite(
        "call_log",
        "bench_call_log.py",
        "what the call log costs per chunk and per call at 1,000 streams, beside it off",
        (),
        ("--quick",),
        "call-log.json",
        "call-log-quick.json",
        quick_sizes={"streams": 200, "chunks": 50, "runs": 1},
        aliases=("calllog",),
        check=lambda report: list(report.get("broken", [])),
    ),
)

BY_NAME: dict[str, Suite] = {s.name: s for s in SUITES} | {
    alias: s for s in SUITES for alias in s.aliases
}


def select(names: list[str]) -> list[Suite]:
    """The suites named (any order, aliases allowed) in registry order; all when none."""
    if not names:
        return list(SUITES)
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        known = ", ".join(sorted(BY_NAME))
        raise ValueError(f"unknown suite {', '.join(unknown)} (known: {known})")
    chosen = {BY_NAME[n].name for n in names}
    return [s for s in SUITES if s.name in chosen]
