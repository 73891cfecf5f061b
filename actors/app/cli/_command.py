"""What a subcommand of ``llmrt`` is given and may raise (see the package docstring).

A command's module defines ``add_arguments(parser)`` and ``run(args, config,
streams) -> int``; its entry in `llmrt.actors.app.cli.COMMANDS` names it.
Light on purpose: ``llmrt --help`` imports this and no command.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, BinaryIO, NamedTuple, Protocol, TextIO

import attrs

from llmrt._helpers import sole_exception

if TYPE_CHECKING:
    import argparse

    from ..config import Config

__all__ = ["Command", "CommandError", "CommandModule", "Streams", "sole_cause"]


class Command(NamedTuple):
    """One subcommand: its name, its one-line help, and its module under the package."""

    name: str
    help: str
    #: The module (relative to ``llmrt.actors.app.cli``) with ``add_arguments`` and ``run``.
    module: str
    #: Whether the command reads the configuration (False: it is given an empty one,
    #: and a broken local file does not stop it, e.g. ``llmrt reload`` of a remote gateway).
    config: bool = True


@attrs.frozen
class Streams:
    """What a command reads and writes besides its flags and the configuration."""

    out: TextIO
    err: TextIO
    environ: dict[str, str]
    #: ``None``: the process's own (``sys.stdin.buffer``), read only by a command that needs it.
    stdin: BinaryIO | None = None


class CommandError(Exception):
    """A command's refusal: ``main`` prints ``llmrt: MESSAGE`` and exits with ``status``."""

    def __init__(self, message: str, *, status: int = 2) -> None:
        super().__init__(message)
        self.status = status


def sole_cause(exc: BaseException) -> BaseException | None:
    """The one exception nested groups hold (nurseries in nurseries), ``exc`` itself when it
    is not a group, or None when a group holds several."""
    inner: BaseException | None = exc
    while isinstance(inner, BaseExceptionGroup):
        inner = sole_exception(inner)
    return inner


class CommandModule(Protocol):
    """What a command's module defines."""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Add the command's flags and positionals (``--config`` is every command's)."""

    def run(self, args: argparse.Namespace, config: Config, streams: Streams) -> int:
        """Run the command; returns the exit status. May raise `CommandError`,
        `ValueError` (printed, status 2), `llmrt.LlmError` (printed, status 1)."""
