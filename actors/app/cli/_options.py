"""Flags several ``llmrt`` commands share: the gateway of ``--via``, the token variable,
the connect timeout."""

from __future__ import annotations

import argparse

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_TOKEN_ENV",
    "connect_timeout_option",
    "seconds",
    "token_env_option",
    "via_option",
]

DEFAULT_TOKEN_ENV = "LLMRT_GATEWAY_TOKEN"
DEFAULT_CONNECT_TIMEOUT = 10.0


def seconds(text: str) -> float:
    """A positive, finite number of seconds (an argparse ``type``)."""
    value = float(text)
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"a positive, finite number of seconds, not {text!r}")
    return value


def via_option(parser: argparse.ArgumentParser, help: str) -> None:
    parser.add_argument("--via", metavar="URL", default=None, help=help)


def token_env_option(parser: argparse.ArgumentParser, help: str | None = None) -> None:
    parser.add_argument("--token-env", default=DEFAULT_TOKEN_ENV, metavar="NAME", help=help)


def connect_timeout_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--connect-timeout",
        type=seconds,
        default=DEFAULT_CONNECT_TIMEOUT,
        metavar="SECONDS",
        help=f"bound on connecting to the gateway of --via (default {DEFAULT_CONNECT_TIMEOUT:g})",
    )
