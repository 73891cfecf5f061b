"""What ``llmrt serve`` derives from its command line, configuration and environment, the
same in one process and in every worker of ``--workers N`` (`llmrt.actors.app.worker`
parses the supervisor's command line again and serves through these): the
`serve_gateway` options, the gateway's limits, the middleware, and how a
SIGTERM stops a gateway.
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any, TypedDict

import msgspec
import trio

from llmrt import Middleware

from ...call_log._settings import CallLogSettings

if TYPE_CHECKING:
    from ...gateway import GatewayServer, Limits
    from ..config import Config
    from ..config._schema import GatewayTable

__all__ = [
    "ServeOptions",
    "call_log_settings",
    "gateway_limits",
    "serve_middleware",
    "serve_options",
    "stop_gateway",
]


async def stop_gateway(server: GatewayServer, *, drain_delay: float, grace: float | None) -> None:
    """What SIGTERM does to a gateway: ``/readyz`` answers 503 for ``drain_delay``
    seconds while everything serves on (a load balancer stops sending new
    clients), then the listener closes, in-flight calls get ``grace`` seconds,
    the rest end ``aborted`` and every websocket closes with 1001."""
    server.drain()
    if drain_delay > 0:
        await trio.sleep(drain_delay)
    await server.aclose(grace=grace)


class ServeOptions(TypedDict):
    """The `serve_gateway` keyword arguments that ``llmrt serve`` derives from its
    command line, configuration and environment."""

    token: str | None
    allow_origin: tuple[str, ...]
    limits: Limits
    metrics_auth: str


def serve_options(
    args: argparse.Namespace, config: Config, environ: dict[str, str]
) -> ServeOptions:
    """What `serve_gateway` is given besides the address: the one place for it, so
    that the single process and every worker (which re-reads the same command
    line) serve alike. Raises `ValueError` for options that do not fit together."""
    token = environ.get(args.token_env) or None
    metrics_auth = args.metrics_auth or config.gateway.metrics_auth or "open"
    if metrics_auth == "token" and token is None:
        raise ValueError(f'metrics_auth = "token" needs a gateway token: set ${args.token_env}')
    return ServeOptions(
        token=token,
        allow_origin=(*config.gateway.allow_origin, *args.allow_origin),
        limits=gateway_limits(args, config.gateway),
        metrics_auth=metrics_auth,
    )


def call_log_settings(
    args: argparse.Namespace, config: Config, *, worker: int | None = None
) -> CallLogSettings | None:
    """The call log ``llmrt serve`` keeps: ``--call-log DIR``, else ``[call_log]``; None: off.

    A relative ``directory`` in the file is the file's folder's; ``--call-log``'s is
    the working directory's. Each worker of ``--workers`` writes a folder of its own
    (``worker-N``) in it, so no two processes append to one file.
    """
    settings = config.call_log
    given = getattr(args, "call_log", None)
    if given is not None:
        settings = msgspec.structs.replace(settings or CallLogSettings(), directory=given)
    elif settings is not None and settings.directory and config.file is not None:
        folder = os.path.join(os.path.dirname(config.file), settings.directory)
        settings = msgspec.structs.replace(settings, directory=folder)
    if settings is None or not settings.directory:
        return None
    if worker is not None:
        folder = os.path.join(settings.directory, f"worker-{worker}")
        settings = msgspec.structs.replace(settings, directory=folder)
    return settings


def gateway_limits(args: argparse.Namespace, table: GatewayTable) -> Limits:
    """The gateway's limits: defaults, then ``[gateway]`` of the config, then flags.

    Raises `ValueError` for a value the limits refuse.
    """
    from ...gateway import Limits

    settings: dict[str, Any] = {}
    for name in (
        "idle_timeout",
        "max_connections_per_peer",
        "max_pending_bytes",
        "max_frame_bytes",
        # Set in the file only (no flags):
        "max_pre_head_connections",
        "max_pre_head_bytes",
        "metadata_per_second",
        "metadata_burst",
        "metadata_per_peer_per_second",
        "metadata_per_peer_burst",
        "model_list_ttl",
    ):
        value = getattr(args, name, None)
        if value is None:
            value = getattr(table, name)
        if value is not None:
            settings[name] = value
    for name in ("discover_any_url", "discover_allow_private"):
        if getattr(table, name) is not None:
            settings[name] = getattr(table, name)
    return Limits(**settings)


def _otel_middleware() -> Middleware:
    """The OpenTelemetry middleware of ``serve --otel``; a clear error without the extra."""
    try:
        from ...otel import otel_middleware
    except ImportError:
        raise ValueError('--otel needs the OpenTelemetry API: pip install "llmrt[otel]"') from None
    return otel_middleware()


def serve_middleware(args: argparse.Namespace) -> list[Middleware]:
    """The middleware ``llmrt serve`` puts on its runtime (one process or each worker):
    the OpenTelemetry one with ``--otel``. Raises `ValueError` without the extra."""
    return [_otel_middleware()] if getattr(args, "otel", False) else []
