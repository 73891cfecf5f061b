"""What every ``llmrt`` command sets up: a runtime serving the configuration, or the
gateway client of ``--via``, and which route and model a name on the command line means.

Apart from the ``cli`` package so that each command's own module (``cli.call``, ...)
and the gateway worker (``worker``) share it without importing the command line back.
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import llmrt
from llmrt import ErrorCode, LlmError
from llmrt.adapters.plugin import ModelSpec

from ..call_log._settings import CallLogSettings
from . import config as configuration

__all__ = ["configured_runtime", "default_model", "gateway_client", "route_of", "table_of"]


@asynccontextmanager
async def configured_runtime(
    config: configuration.Config,
    *,
    environ: dict[str, str] | None = None,
    call_log: CallLogSettings | None = None,
) -> AsyncIterator[llmrt.LlmRuntime]:
    """A runtime serving ``config``; keys are read from ``environ`` (default ``os.environ``).

    ``call_log``: where its calls are recorded (`call_log_settings`); None: not recorded.
    """
    async with llmrt.open_runtime(call_log=call_log) as rt:
        await configuration.register_config(rt, config, environ=environ)
        await configuration.register_settings(rt, config, environ=environ)
        yield rt


def route_of(config: configuration.Config, name: str) -> str:
    """The route `name` means: a route of that name, else the route of the preset so named.

    So ``-p deepseek-official`` (the preset) reaches the ``deepseek`` route.
    """
    if config.route(name) is not None:
        return name
    routes = []
    for kind, plugin in config.plugins.adapters.items():
        preset = plugin.presets.get(name)
        routes += [
            spec.route
            for spec in config.routes
            if preset is not None
            and spec.adapter == kind
            and spec.preset is not None
            and plugin.presets.get(spec.preset) == preset
        ]
    return routes[0] if len(routes) == 1 else name


def default_model(config: configuration.Config, provider: str) -> str:
    spec = config.route(provider)
    if spec is None:
        return "default"
    model = spec.config.default_model() if spec.config is not None else None
    if model is None:
        raise SystemExit(f"llmrt: --model is required for provider {provider!r}")
    return model


def table_of(config: configuration.Config, route: str) -> tuple[ModelSpec, ...]:
    """The models a route knows without its endpoint: the preset's, then the file's."""
    spec = config.route(route)
    if spec is None or spec.config is None:
        return ()
    return spec.config.known_models()


@asynccontextmanager
async def gateway_client(args: argparse.Namespace, environ: dict[str, str]) -> AsyncIterator[Any]:
    """The client of ``--via``, its token from ``--token-env``; refusals say how to fix them."""
    from ..gateway.client import open_gateway_client

    token = environ.get(args.token_env) or None
    connected = False
    try:
        async with open_gateway_client(
            args.via, token=token, connect_timeout=args.connect_timeout
        ) as client:
            connected = True
            yield client
    except LlmError as exc:
        if connected or exc.code != ErrorCode.AUTH:
            raise
        # The client's words fit Python callers; a CLI user sets a variable.
        hint = (
            f"set ${args.token_env} (or name another variable with --token-env)"
            if token is None
            else f"check the token in ${args.token_env}"
        )
        message = f"{exc.failure.message}: {hint}"
        raise LlmError(exc.code, message, status=exc.failure.status) from None
