"""``llmrt routes [--via URL]``: each routing group's deployments and their state.

With ``--via`` it asks a gateway for its statistics (the ``stats`` frame,
summed over its workers); without, it loads the configuration into an
in-process runtime (which checks it) and shows the groups as they start.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, TextIO

import msgspec
import trio

from ..._statistics import DeploymentStatistics, RoutingStatistics, RuntimeStatistics
from ._command import Streams
from ._options import connect_timeout_option, token_env_option, via_option

if TYPE_CHECKING:
    from ..config import Config

__all__ = ["add_arguments", "format_routes", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    via_option(parser, "ask a gateway (ws://host:port/)")
    token_env_option(parser)
    parser.add_argument("--json", action="store_true", help="the routing statistics as JSON")
    connect_timeout_option(parser)


def _limit(used: int, limit: int | None) -> str:
    return f"{used}/{limit}" if limit is not None else str(used)


def _deployment(d: DeploymentStatistics) -> str:
    state = f"cooling {d.cooling_for:.1f} s" if d.cooling else "ready"
    latency = f"{1000 * d.latency:.1f} ms" if d.latency is not None else "-"
    failovers = ", ".join(f"{code} {n}" for code, n in sorted(d.failovers.items())) or "none"
    in_flight = _limit(d.in_flight, d.max_in_flight)
    where = " (shared)" if d.shared else ""
    return (
        f"  {d.id}  tier {d.tier}  weight {d.weight:g}  {state}  in flight {in_flight}  "
        f"rpm {_limit(d.rpm_used, d.rpm)}  tpm {_limit(d.tpm_used, d.tpm)}{where}  "
        f"first chunk {latency}  served {d.served}/{d.attempts}  failovers: {failovers}"
    )


def format_routes(value: RuntimeStatistics) -> list[str]:
    """The routing part of a statistics snapshot as lines of text."""
    routing = value.routing
    if routing is None or not routing.groups:
        return ["no routing groups"]
    lines = []
    for group in routing.groups:
        lines.append(
            f"group {group.name}: {group.strategy}, calls {group.calls}, "
            f"waiting {group.waiting}, rate-limited {group.rate_limited}, "
            f"context fallbacks {group.context_fallbacks}"
        )
        lines.extend(_deployment(d) for d in group.deployments)
    shared = routing.shared_state
    if shared is not None:
        lines.append(
            f"redis: {shared.shared} of {shared.processes} processes shared, "
            f"errors {shared.errors}, degradations {shared.degradations}, "
            f"round trips {shared.round_trips}"
        )
    return lines


def run(args: argparse.Namespace, config: Config, streams: Streams) -> int:
    """The routing groups of a gateway (``--via``) or of ``config`` in a runtime."""
    return trio.run(_routes, args, config, streams.out, streams.environ)


async def _routes(
    args: argparse.Namespace, config: Config, out: TextIO, environ: dict[str, str]
) -> int:
    from .._setup import configured_runtime, gateway_client

    if args.via:
        async with gateway_client(args, environ) as client:
            value: RuntimeStatistics = await client.stats()
    else:
        async with configured_runtime(config, environ=environ) as rt:
            value = rt.statistics()
    if args.json:
        routing = value.routing or RoutingStatistics()
        out.write(msgspec.json.format(msgspec.json.encode(routing), indent=2).decode() + "\n")
    else:
        for line in format_routes(value):
            out.write(line + "\n")
    return 0
