"""Flags several ``llmrt`` commands share: the gateway of ``--via``, the token variable,
the connect timeout.

``--token-env`` takes the NAME of the variable holding the gateway token, and
that name is shown back (the serve banner's ``bearer token from $NAME``, the
hints of a refused token). A token pasted there instead is refused before
anything runs, like ``api_key_env`` in ``llmrt.toml``, and never echoed:
`llmrt.adapter.looks_like_secret` decides what looks like a token, and a value that is
not a variable name at all is refused without being shown either.
"""

from __future__ import annotations

import argparse
import re

from llmrt.adapter import looks_like_secret

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_TOKEN_ENV",
    "connect_timeout_option",
    "seconds",
    "token_env_name",
    "token_env_option",
    "via_option",
]

DEFAULT_TOKEN_ENV = "LLMRT_GATEWAY_TOKEN"
DEFAULT_CONNECT_TIMEOUT = 10.0
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def seconds(text: str) -> float:
    """A positive, finite number of seconds (an argparse ``type``)."""
    value = float(text)
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"a positive, finite number of seconds, not {text!r}")
    return value


def token_env_name(text: str) -> str:
    """The NAME ``--token-env`` gives (an argparse ``type``). Raises
    `argparse.ArgumentTypeError` for a token-like value or a non-name, never quoting it."""
    if looks_like_secret(text):
        raise argparse.ArgumentTypeError(
            "this looks like a token, not the NAME of an environment variable (the value is "
            "not shown); put the token in a variable and name that variable here, e.g. "
            "--token-env MY_GATEWAY_TOKEN (UPPER_SNAKE_CASE words are never taken for a token)"
        )
    if not _ENV_NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(
            "must be the NAME of an environment variable (letters, digits, '_'), not the "
            "token itself (the value is not shown)"
        )
    return text


def via_option(parser: argparse.ArgumentParser, help: str) -> None:
    parser.add_argument("--via", metavar="URL", default=None, help=help)


def token_env_option(parser: argparse.ArgumentParser, help: str | None = None) -> None:
    parser.add_argument(
        "--token-env", type=token_env_name, default=DEFAULT_TOKEN_ENV, metavar="NAME", help=help
    )


def connect_timeout_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--connect-timeout",
        type=seconds,
        default=DEFAULT_CONNECT_TIMEOUT,
        metavar="SECONDS",
        help=f"bound on connecting to the gateway of --via (default {DEFAULT_CONNECT_TIMEOUT:g})",
    )
