"""``llmrt models ROUTE``: a route's models, discovered from its endpoint where it has a
settings namespace, else its preset's table or its adapter's list."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TextIO

import trio

import llmrt
from llmrt import ErrorCode, LlmError
from llmrt.adapter import ModelDiscoveryRequest

from ._command import Streams
from ._options import connect_timeout_option, token_env_option, via_option

if TYPE_CHECKING:
    from llmrt.adapters.plugin import ModelSpec

    from ..config import Config

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("provider", help="provider route")
    via_option(parser, "ask a gateway instead")
    token_env_option(parser)
    connect_timeout_option(parser)


def run(args: argparse.Namespace, config: Config, streams: Streams) -> int:
    return trio.run(_models, args, config, streams.out, streams.environ)


#: Statuses that say "this endpoint has no model list": the table answers instead.
_NO_LIST = frozenset({404, 405, 501})


async def _models(
    args: argparse.Namespace, config: Config, out: TextIO, environ: dict[str, str]
) -> int:
    """``id<TAB>name<TAB>source`` per model.

    The source is ``discovered:<namespace>`` (the endpoint's own list, asked
    through the runtime's discovery), ``table`` (the preset's and the file's
    models, when the endpoint is unreachable or has no list; said on stderr
    too) or ``adapter`` (a route outside any namespace: its adapter's list).
    """
    from .._setup import configured_runtime, gateway_client, route_of, table_of

    if args.via:
        async with gateway_client(args, environ) as client:
            directory = await client.list_configurable_providers()
            live = {p.id for p in await client.list_providers()}
            return await _show_models(
                args.provider, directory, live, client.discover_models, client.list_models, out, ()
            )
    route = route_of(config, args.provider)
    async with configured_runtime(config, environ=environ) as rt:
        live = {p.id for p in rt.list_providers()}
        return await _show_models(
            route,
            rt.list_configurable_providers(),
            live,
            rt.discover_models,
            rt.list_models,
            out,
            table_of(config, route),
        )


async def _show_models(
    route: str,
    directory: Sequence[llmrt.adapter.ConfigurableProvider],
    live: set[str],
    discover: Callable[[str, ModelDiscoveryRequest], Any],
    list_models: Callable[[str], Any],
    out: TextIO,
    table: Sequence[ModelSpec],
) -> int:
    entry = next((e for e in directory if e.provider == route), None)
    if entry is None or route not in live:
        for model in await list_models(route):
            out.write(f"{model.id}\t{model.name}\tadapter\n")
        return 0
    try:
        found = await discover(entry.settings_ns, ModelDiscoveryRequest(provider=route))
    except LlmError as exc:
        failure = exc.failure
        unreachable = exc.code in (ErrorCode.NETWORK, ErrorCode.TIMEOUT)
        if not table or not (unreachable or failure.status in _NO_LIST):
            raise
        why = "is unreachable" if unreachable else f"has no model list (HTTP {failure.status})"
        print(
            f"llmrt: the endpoint of {route!r} {why}: {failure.message}; "
            "showing the preset's table instead",
            file=sys.stderr,
        )
        for spec in table:
            out.write(f"{spec.id}\t{spec.name or spec.id}\ttable\n")
        return 0
    for model in found:
        out.write(f"{model.id}\t{model.name or model.id}\tdiscovered:{entry.settings_ns}\n")
    return 0
