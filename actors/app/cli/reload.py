"""``llmrt reload --via URL``: ask a running ``llmrt serve`` to read its configuration file
again, and print what every gateway process made of it.

The gateway must have a token (the ``reload`` frame is refused otherwise); the
local configuration is not read: the serving process reads its own file.
Exit status 0 when every process applied the file, 1 when one refused it.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, TextIO

import trio

from ._command import CommandError, Streams
from ._options import connect_timeout_option, token_env_option, via_option

if TYPE_CHECKING:
    from ..config import Config

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    via_option(parser, "the gateway to reload (ws://host:port/); required")
    token_env_option(parser)
    parser.add_argument("--json", action="store_true", help="the gateway's report as JSON")
    connect_timeout_option(parser)


def run(args: argparse.Namespace, config: Config, streams: Streams) -> int:
    if not args.via:
        raise CommandError(
            "llmrt reload needs --via URL (the gateway); or send the serving process SIGHUP"
        )
    return trio.run(_reload, args, streams.out, streams.environ)


async def _reload(args: argparse.Namespace, out: TextIO, environ: dict[str, str]) -> int:
    from .._reload import describe_reload
    from .._setup import gateway_client

    async with gateway_client(args, environ) as client:
        report = await client.reload()
    if args.json:
        import msgspec

        out.write(msgspec.json.format(msgspec.json.encode(report), indent=2).decode() + "\n")
    else:
        for result in report.workers:
            out.write(describe_reload(result) + "\n")
    return 0 if report.ok else 1
