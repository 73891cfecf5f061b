"""``llmrt providers``: the configured provider routes, or a gateway's (``--via``)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, TextIO

import trio

from ._command import Streams
from ._options import connect_timeout_option, token_env_option, via_option

if TYPE_CHECKING:
    from ..config import Config

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    via_option(parser, "ask a gateway instead")
    token_env_option(parser)
    connect_timeout_option(parser)


def run(args: argparse.Namespace, config: Config, streams: Streams) -> int:
    """``id<TAB>name`` per provider of a gateway; else one line per configured route."""
    return trio.run(_providers, args, config, streams.out, streams.environ)


async def _providers(
    args: argparse.Namespace, config: Config, out: TextIO, environ: dict[str, str]
) -> int:
    from .._setup import gateway_client

    if args.via:
        async with gateway_client(args, environ) as client:
            providers = await client.list_providers()
        for provider in providers:
            out.write(f"{provider.id}\t{provider.name}\n")
        return 0
    from ..config import describe

    for line in describe(config):
        out.write(line + "\n")
    return 0
