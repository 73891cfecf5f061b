"""The ``llmrt`` command line: ``serve``, ``call``, ``providers``, ``models``, ``stats``,
``routes``, ``reload``.

Providers come from ``llmrt.toml`` (or ``--config``) and from the usual
API-key environment variables, always plus the embedded ``demo`` provider
(see ``docs/configuration.md``). Secrets never travel on the command line:
the gateway token is read from an environment variable (``--token-env``).

Each subcommand is a module of this package, listed once in `COMMANDS`.
The parser is built for the command the line names only: ``llmrt --help``
lists the commands from `COMMANDS` and imports none of them, and a command
imports what it uses when it runs (``llmrt call`` starts without the
gateway, the client or the statistics snapshot; ``tests/test_cli_startup.py``
checks it, ``python bench/bench_startup.py`` measures it).

Adding a subcommand ``llmrt NAME``:

1. Write ``actors/app/cli/NAME.py`` with the two functions of `CommandModule`::

       def add_arguments(parser: argparse.ArgumentParser) -> None: ...
       def run(args: argparse.Namespace, config: Config, streams: Streams) -> int: ...

   ``add_arguments`` adds its flags (``--config`` is every command's; the
   ``--via``/``--token-env``/``--connect-timeout`` trio of a gateway client is
   in `_options`). ``run`` gets the loaded configuration (plugin warnings are
   already printed) and `Streams` (``out``, ``err``, ``environ``, ``stdin``),
   and returns the exit status; it runs its own ``trio.run``. Import what
   only ``run`` needs inside it, so that ``llmrt NAME --help`` stays light.
2. Add its line to `COMMANDS`: the name, the one-line help that ``llmrt
   --help`` lists, and the module's name.
3. Errors: raise `CommandError` (printed as ``llmrt: MESSAGE``, exit status 2
   or its ``status``), ``ValueError`` (status 2) or `llmrt.LlmError`
   (status 1); ``main`` prints them, never a traceback, and unwraps a
   nursery's group around a single one. Ctrl-C is status 130.
4. Document it in ``docs/cli.md``; test it through `main` and, where
   signals, pipes or exit statuses matter, as a process (``tests/_cli_process.py``).
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
from collections.abc import Sequence
from typing import BinaryIO, TextIO, cast

import llmrt
from llmrt import LlmError

from ._command import Command, CommandError, CommandModule, Streams, sole_cause

__all__ = [
    "COMMANDS",
    "Command",
    "CommandError",
    "Streams",
    "build_parser",
    "console",
    "main",
    "parse_args",
]

#: Every subcommand, in the order ``llmrt --help`` lists them.
COMMANDS: tuple[Command, ...] = (
    Command("serve", "Serve the configured providers over the websocket gateway.", "serve"),
    Command(
        "call",
        "Stream one call: the answer's text on stdout; reasoning, tool calls, usage and "
        "the finish on stderr (or every chunk as JSON lines on stdout with --json).",
        "call",
    ),
    Command("providers", "List the configured provider routes.", "providers"),
    Command(
        "models",
        "List a provider's models, discovered from its endpoint where it has a settings "
        "namespace (the preset's table when the endpoint is unreachable).",
        "models",
    ),
    Command(
        "stats",
        "Print a statistics snapshot: a gateway's (--via), or an in-process runtime's "
        "after a few demo calls.",
        "stats",
    ),
    Command(
        "routes",
        "Show the routing groups: each deployment's tier, in flight, cooldown, failovers by "
        "code, latency and rpm/tpm used (a gateway's with --via).",
        "routes",
    ),
    Command(
        "log",
        "Print logged calls as llmrt call prints them: one by id (show), or the last ones "
        "and new ones as they come (tail [-f]); see llmrt serve --call-log.",
        "log",
    ),
    Command(
        "reload",
        "Make a running llmrt serve (--via) read its configuration file again, in every "
        "worker, and print each one's outcome.",
        "reload",
        config=False,
    ),
)


def _module(name: str) -> CommandModule:
    """The module of the command called ``name`` (imported now, not before)."""
    entry = next(entry for entry in COMMANDS if entry.name == name)
    return cast(CommandModule, importlib.import_module(f".{entry.module}", __name__))


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``llmrt`` parser: every command listed, the arguments of ``command`` alone."""
    parser = argparse.ArgumentParser(
        prog="llmrt",
        description="Stream LLM calls through llmrt's trio runtime. "
        "With no configuration it uses the embedded, offline `demo` provider.",
    )
    parser.add_argument("--version", action="version", version=f"llmrt {llmrt.__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for entry in COMMANDS:
        sub = commands.add_parser(entry.name, help=entry.help, description=entry.help)
        if entry.name != command:
            continue  # listed by `llmrt --help`; its flags are never read
        sub.add_argument(
            "--config",
            metavar="PATH",
            help="config file (default: $LLMRT_CONFIG, else ./llmrt.toml if present)",
        )
        _module(entry.name).add_arguments(sub)
    return parser


def _named_command(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names: its first word that is not an option, if a command."""
    names = {entry.name for entry in COMMANDS}
    for word in argv:
        if not word.startswith("-"):
            return word if word in names else None
    return None


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The parsed command line; ``args.argv`` keeps it as given (workers re-read it).

    Exits (`SystemExit`, status 2, usage on stderr) for a line argparse refuses.
    """
    given = list(argv) if argv is not None else sys.argv[1:]
    args = build_parser(_named_command(given)).parse_args(given)
    args.argv = given
    return args


def _silence(out: TextIO) -> None:
    """Point ``out``'s descriptor at /dev/null: flushing at exit must not fail again."""
    try:
        fd = out.fileno()
    except (OSError, ValueError):
        return  # not a file (a test's StringIO): nothing is flushed at exit
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def main(
    argv: Sequence[str] | None = None,
    *,
    out: TextIO | None = None,
    err: TextIO | None = None,
    environ: dict[str, str] | None = None,
    stdin: BinaryIO | None = None,
) -> int:
    """Run the command line; returns the exit status.

    ``out``/``err`` default to ``sys.stdout``/``sys.stderr``, ``stdin`` (read by
    ``llmrt call -``) to ``sys.stdin.buffer``, ``environ`` to ``os.environ``.
    """
    args = parse_args(argv)
    out = out or sys.stdout
    err = err or sys.stderr
    env = dict(os.environ if environ is None else environ)
    if args.command is None:
        build_parser().print_help(out)
        return 0
    # Imported once a command runs: `llmrt --help` needs none of it.
    from .. import config as configuration
    from ..plugins import PLUGIN_ERROR

    command = _module(args.command)
    entry = next(entry for entry in COMMANDS if entry.name == args.command)
    try:
        if not entry.config:
            config = configuration.Config(routes=())
        else:
            config = configuration.load_config(args.config, environ=env)
        # An unusable adapter plugin costs its own kind only: say so, serve the rest.
        for problem in config.plugins.problems.values():
            print(f"llmrt: warning [{PLUGIN_ERROR}]: {problem}", file=err)
        try:
            return command.run(args, config, Streams(out, err, env, stdin))
        except BaseExceptionGroup as group:
            if group.subgroup(KeyboardInterrupt) is not None:
                # Ctrl-C that trio delivered inside a nursery (before a signal
                # receiver was open, or after it closed): an interrupt, not a crash.
                raise KeyboardInterrupt from None
            # Nurseries wrap what went wrong; report the one cause plainly.
            inner = sole_cause(group)
            if isinstance(inner, Exception):
                raise inner from None
            raise
    except configuration.ConfigError as exc:
        print(f"llmrt: {exc}", file=err)
        return 2
    except CommandError as exc:
        print(f"llmrt: {exc}", file=err)
        return exc.status
    except LlmError as exc:
        print(f"llmrt: {exc}", file=err)
        return 1
    except BrokenPipeError:
        # The reader of stdout left (``llmrt call ... | head -1``): stop quietly, as
        # a Unix tool does, with the status a shell reports for SIGPIPE.
        _silence(out)
        return 128 + signal.SIGPIPE
    except OSError as exc:
        print(f"llmrt: {exc}", file=err)
        return 2
    except ValueError as exc:
        print(f"llmrt: {exc}", file=err)
        return 2
    except KeyboardInterrupt:
        # Ctrl-C before the call's own handler was installed (or after it ended).
        print("llmrt: interrupted", file=err)
        return 130


def console() -> int:
    """The ``llmrt`` command of this process (the console script, ``python -m``): `main`.

    The process exits next: what the command allocated is frozen out of the
    collector's sight first (`llmrt.actors.app._collector.freeze_for_exit`).
    """
    try:
        return main()
    finally:
        from .._collector import freeze_for_exit

        freeze_for_exit()
