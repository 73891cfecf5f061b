"""``llmrt stats``: a statistics snapshot, a gateway's (``--via``) or an in-process
runtime's after a few demo calls, as text (`format_stats`) or JSON."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import TYPE_CHECKING, TextIO

import trio

import llmrt
from llmrt import GenerateOptions

from ._command import Streams
from ._options import connect_timeout_option, token_env_option, via_option

if TYPE_CHECKING:
    from ..._statistics import HistogramSnapshot, RuntimeStatistics
    from ..config import Config

__all__ = ["add_arguments", "format_stats", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    via_option(parser, "ask a gateway (ws://host:port/)")
    token_env_option(parser)
    parser.add_argument(
        "--calls", type=int, default=1, help="demo calls to run first (in-process only; default 1)"
    )
    parser.add_argument("--json", action="store_true", help="the raw snapshot as JSON")
    connect_timeout_option(parser)


def run(args: argparse.Namespace, config: Config, streams: Streams) -> int:
    return trio.run(_stats, args, config, streams.out, streams.environ)


def _counts(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{name or '-'} {n}" for name, n in sorted(counts.items())) or "none"


def _mean_ms(histogram: HistogramSnapshot) -> str:
    count = histogram.count
    mean = f"mean {1000 * histogram.sum / count:.1f} ms" if count else "no data"
    return f"n={count} {mean}"


def format_stats(value: RuntimeStatistics) -> list[str]:
    """A statistics snapshot as lines of text (``llmrt stats``)."""
    lines = [
        f"calls: started {value.calls_started}, in flight {value.calls_in_flight}, "
        f"chunks forwarded {value.chunks_forwarded} (dropped {value.chunks_dropped})",
        f"finished: {_counts(value.calls_finished)}",
        f"failures: {_counts(value.failures_by_code)}",
        f"retries: {_counts(value.retries_by_code)}; idle timeouts {value.watchdog_firings}; "
        f"middleware errors {value.middleware_errors}; registrations {value.registrations}",
    ]
    for p in value.providers:
        finished = ", ".join(
            f"{f.reason}{'/' + f.code if f.code else ''} {f.count}" for f in p.calls_finished
        )
        lines.append(
            f"provider {p.provider}: started {p.calls_started}, in flight {p.calls_in_flight}, "
            f"chunks {p.chunks_forwarded}; {finished or 'none finished'}"
        )
    for first, whole in zip(value.time_to_first_chunk, value.call_duration, strict=True):
        lines.append(
            f"  {first.provider}/{first.model}: first chunk {_mean_ms(first.histogram)}; "
            f"duration {_mean_ms(whole.histogram)}"
        )
    if value.abort_to_finish is not None and value.abort_to_finish.count:
        abort = value.abort_to_finish
        lines.append(
            f"abort -> finish: n={abort.count} mean {1e6 * abort.sum / abort.count:.0f} us"
        )
    if value.costs:
        priced = sum(entry.priced_calls for entry in value.costs)
        lines.append(
            f"cost: ${value.cost_usd:.6f} over {priced} priced calls; "
            f"{value.unpriced_calls} calls with no known price"
        )
    for pool in value.connection_pools:
        lines.append(f"upstream {pool.provider}: connections open {pool.open}, idle {pool.idle}")
    gw = value.gateway
    if gw is not None:
        lines.append(
            f"gateway: {'ready' if gw.ready else 'not ready'}, connections {gw.connections} "
            f"(accepted {gw.accepted}), live requests {gw.live_requests}, "
            f"refused: {_counts(gw.refused)}"
        )
        lines.append(
            f"  frames in {gw.frames_received} out {gw.frames_sent}; "
            f"bytes in {gw.bytes_received} out {gw.bytes_sent}; "
            f"http: {_counts(gw.http_requests)}"
        )
    return lines


async def _stats(
    args: argparse.Namespace, config: Config, out: TextIO, environ: dict[str, str]
) -> int:
    from .._setup import configured_runtime, gateway_client

    if args.via:
        async with gateway_client(args, environ) as client:
            value = await client.stats()
    else:
        if args.calls < 0:
            raise ValueError("--calls must be >= 0")
        async with configured_runtime(config) as rt:
            options = GenerateOptions(
                provider="demo", model="demo-1", messages=(llmrt.user_message("hello"),)
            )
            for _ in range(args.calls):
                async with rt.stream(options) as call:
                    async for _chunk in call:
                        pass
            value = rt.statistics()
    if args.json:
        import msgspec

        out.write(msgspec.json.format(msgspec.json.encode(value), indent=2).decode() + "\n")
    else:
        for line in format_stats(value):
            out.write(line + "\n")
    return 0
