"""`load_config`: which file, reading it, the environment and the installed adapters: the
I/O of loading ``llmrt.toml``; what the text means is `_validate`'s (pure).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ..plugins import Plugins, installed
from ._types import CONFIG_ENV_VAR, DEFAULT_CONFIG_FILE, Config, ConfigError
from ._validate import validate_config

__all__ = ["load_config"]


def load_config(
    path: str | os.PathLike[str] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    plugins: Plugins | None = None,
) -> Config:
    """Read, validate and complete the configuration.

    The file is ``path``; else ``$LLMRT_CONFIG``; else ``./llmrt.toml`` if it
    exists (no file at all is fine). Then routes are added for the well-known
    key variables set in ``environ`` (default ``os.environ``) that the file
    does not use, and the built-in ``demo`` route unless the file declares one.
    ``plugins`` are the adapters (default: the installed ones).

    Raises `ConfigError` for a missing or unreadable file named explicitly and
    for every problem in the file. Not a checkpoint (synchronous).
    """
    env = os.environ if environ is None else environ
    plugins = installed() if plugins is None else plugins
    explicit = path is not None or bool(env.get(CONFIG_ENV_VAR))
    file = os.fspath(path) if path is not None else env.get(CONFIG_ENV_VAR) or DEFAULT_CONFIG_FILE
    text = _read(file, explicit=explicit)
    return validate_config(
        text, file=file if text is not None else None, environ=env, plugins=plugins
    )


def _read(file: str, *, explicit: bool) -> str | None:
    try:
        with open(file, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        if not explicit:
            return None
        raise ConfigError(file, None, "no such config file") from None
    except OSError as exc:
        raise ConfigError(file, None, f"cannot read the config file: {exc.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(file, line, "the file is not UTF-8 text (TOML must be)") from None
