"""``llmrt call``: one call, in-process or through a gateway, streamed as it comes.

Where its output goes is `_call_output`'s concern; what it reads besides its
flags (stdin, tool schemas) is `_call_input`'s. Here: building the request,
running it, and Ctrl-C at any moment (connecting, before the first chunk,
streaming), bounded by `ABORT_BOUND` and `EXIT_BOUND`.

Exit status: 0 for a call that finished (``stop``, ``tool-calls``,
``max-tokens``), 1 for an ``error`` finish, 130 for an interrupted call.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any, BinaryIO, TextIO

import attrs
import trio

import llmrt
from llmrt import (
    AttemptChunk,
    Finish,
    FinishAborted,
    GenerateOptions,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
)

from ..._abort import AbortController
from .. import config as configuration
from .._setup import configured_runtime, default_model, gateway_client, route_of, table_of
from ._call_input import model_warning, read_prompt, read_tools
from ._call_output import RED, HumanOutput, JsonOutput, Style, report_finish, usage_parts
from ._command import Streams
from ._options import connect_timeout_option, token_env_option, via_option

__all__ = ["ABORT_BOUND", "EXIT_BOUND", "add_arguments", "call_command", "run"]

#: After Ctrl-C, how long the call may take to deliver its aborted finish before it is stopped.
ABORT_BOUND = 0.5
#: After Ctrl-C, when the process exits even if stopping the call has not finished.
EXIT_BOUND = 0.9

Output = HumanOutput | JsonOutput


@attrs.define(eq=False)
class _Interrupt:
    """What Ctrl-C acts on: the call's abort signal, and the scope around the whole run.

    ``phase`` says what the call is doing, for the report of what was aborted.
    """

    controller: AbortController = attrs.field(factory=AbortController)
    run: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    phase: str = "starting"
    #: ``time.perf_counter()`` of the first Ctrl-C, and the phase it interrupted.
    at: float | None = None
    interrupted: str | None = None
    #: True once the run was stopped because the abort took longer than `ABORT_BOUND`.
    forced: bool = False


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("prompt", help="the user message; - reads it from stdin")
    parser.add_argument("--provider", "-p", default=None, help="provider route (default: demo)")
    parser.add_argument(
        "--model",
        "-m",
        default=None,
        help="model id (default: the route's first; one the route does not list is sent "
        "with a warning)",
    )
    parser.add_argument("--system", default=None, metavar="TEXT", help="system prompt")
    parser.add_argument(
        "--tool",
        action="append",
        default=[],
        metavar="NAME=SCHEMA_JSON",
        help="offer a tool: its name and the JSON Schema of its arguments "
        "(NAME alone: no arguments); repeatable",
    )
    parser.add_argument(
        "--tools",
        default=None,
        metavar="FILE",
        help='offer the tools of a JSON file: [{"name", "description", "parameters"}, ...]',
    )
    parser.add_argument("--max-tokens", type=int, default=None, help="output cap")
    parser.add_argument("--temperature", type=float, default=None)
    parser.add_argument("--effort", default=None, help="reasoning effort, e.g. low/medium/high")
    parser.add_argument("--retry", action="store_true", help="retry with the route's retry policy")
    via_option(parser, "call through a gateway (ws://host:port/)")
    token_env_option(parser)
    connect_timeout_option(parser)
    parser.add_argument(
        "--json",
        action="store_true",
        help="every event as one JSON object per line on stdout (the protocol's chunks)",
    )
    parser.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        default="auto",
        help="style stderr: auto (a terminal, unless $NO_COLOR is set), always, never",
    )
    parser.add_argument(
        "--no-color", dest="color", action="store_const", const="never", help="--color=never"
    )


def run(args: argparse.Namespace, config: configuration.Config, streams: Streams) -> int:
    """``llmrt call`` (see `call_command`); the prompt ``-`` reads the process's stdin
    unless ``streams`` gives one."""
    stdin = streams.stdin or sys.stdin.buffer
    return call_command(args, config, streams.out, streams.err, streams.environ, stdin)


def call_command(
    args: argparse.Namespace,
    config: configuration.Config,
    out: TextIO,
    err: TextIO,
    environ: dict[str, str],
    stdin: BinaryIO,
) -> int:
    """Run ``llmrt call``; returns the exit status. Raises `ValueError` for bad input,
    read before anything is sent."""
    if args.via is None:
        provider = route_of(config, args.provider or "demo")
    else:
        provider = args.provider or "demo"
    model = args.model or default_model(config, provider)
    options = GenerateOptions(
        provider=provider,
        model=model,
        messages=(llmrt.user_message(read_prompt(args.prompt, stdin)),),
        system=args.system,
        tools=read_tools(args.tool, args.tools),
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        reasoning_effort=args.effort,
    )
    output: Output
    if args.json:
        output = JsonOutput(out, err)
    else:
        style = Style.choose(args.color, err, environ)
        # Retried into a pipe: only the answer of the attempt that finished goes out.
        hold = bool(args.retry) and not _isatty(out)
        output = HumanOutput(out, err, style, hold_text=hold)
    if args.via is None and args.model is not None:
        warning = model_warning(provider, model, table_of(config, provider))
        if warning is not None:
            err.write(f"llmrt: warning: {warning}\n")
            err.flush()
    return trio.run(_call, args, config, options, output, environ)


def _isatty(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty is not None and isatty())


async def _run_events(
    args: argparse.Namespace,
    config: configuration.Config,
    options: GenerateOptions,
    environ: dict[str, str],
    handle: Callable[[Any], None],
    interrupt: _Interrupt,
) -> None:
    """Run a call, in-process or through a gateway; ``handle(event)`` sees each event.

    The call is aborted through ``interrupt.controller`` at any moment, even
    before it has started.
    """
    signal_ = interrupt.controller.signal
    if args.via:
        interrupt.phase = f"connecting to {args.via}"
        if signal_.aborted:
            return  # interrupted before connecting
        async with gateway_client(args, environ) as client:
            if signal_.aborted:
                return  # interrupted while connecting: no call was sent
            interrupt.phase = "waiting for the first chunk"
            async with client.stream(options) as remote, trio.open_nursery() as nursery:

                async def forward_abort() -> None:
                    await signal_.wait()
                    remote.abort(signal_.reason)

                nursery.start_soon(forward_abort)
                async for chunk in remote:
                    handle(chunk)
                nursery.cancel_scope.cancel()
        return
    async with configured_runtime(config) as rt:
        interrupt.phase = "waiting for the first chunk"
        if args.retry:
            async with rt.stream_with_retry(options, signal=signal_) as retrying:
                async for event in retrying:
                    handle(event)
        else:
            async with rt.stream(options, signal=signal_) as call:
                async for chunk in call:
                    handle(chunk)


async def _watch_interrupts(
    interrupt: _Interrupt, output: Output, what: str, *, task_status: trio.TaskStatus[None]
) -> None:
    """Ctrl-C aborts the call (bounded by `ABORT_BOUND`); a second one exits at once."""
    with trio.open_signal_receiver(signal.SIGINT) as signals:
        task_status.started()
        async with trio.open_nursery() as nursery:
            async for _ in signals:
                if interrupt.at is not None:
                    output.note("interrupted again: exiting now", RED)
                    _exit_now(output)
                interrupt.at = time.perf_counter()
                interrupt.interrupted = interrupt.phase
                output.note(f"^C: aborting {what} ({interrupt.phase})", RED)
                if interrupt.phase.startswith("connecting"):
                    interrupt.run.cancel()  # no call exists yet: stop connecting
                interrupt.controller.abort()
                nursery.start_soon(_bound_abort, interrupt, output)


def _exit_now(output: Output) -> None:
    # What was written is flushed; what would still run (cleanup stuck in an
    # adapter) is not waited for.
    output.close()
    output.out.flush()
    output.err.flush()
    os._exit(130)


async def _bound_abort(interrupt: _Interrupt, output: Output) -> None:
    """Stop a call whose abort takes too long; exit outright if even stopping it hangs."""
    await trio.sleep(ABORT_BOUND)
    interrupt.forced = True
    interrupt.run.cancel()
    # Cleanup that outlives this (an adapter stuck closing) is not waited for.
    await trio.sleep(EXIT_BOUND - ABORT_BOUND)
    output.note(f"aborted: cleanup did not end within {EXIT_BOUND:g} s; exiting now", RED)
    _exit_now(output)


async def _call(
    args: argparse.Namespace,
    config: configuration.Config,
    options: GenerateOptions,
    output: Output,
    environ: dict[str, str],
) -> int:
    started = time.perf_counter()
    first: float | None = None
    ended = started
    finish: Finish | None = None
    interrupt = _Interrupt()

    def handle(event: Any) -> None:
        nonlocal first, ended, finish
        chunk = event.chunk if isinstance(event, AttemptChunk) else event
        if first is None and isinstance(chunk, TextDelta | ReasoningDelta | ToolCallDelta):
            first = time.perf_counter()
            interrupt.phase = "streaming"
        if isinstance(chunk, Finish):
            finish = chunk
            ended = time.perf_counter()
        output.event(event)

    what = f"the call to {options.provider}/{options.model}"
    async with trio.open_nursery() as nursery:
        await nursery.start(_watch_interrupts, interrupt, output, what)
        with interrupt.run:
            await _run_events(args, config, options, environ, handle, interrupt)
        nursery.cancel_scope.cancel()
    stopped = time.perf_counter()
    output.close()
    assembler = output.assembler if isinstance(output, HumanOutput) else None
    summary = usage_parts(assembler.usage, assembler.cost) if assembler is not None else []
    if first is not None:
        summary.append(f"first token {1000 * (first - started):.1f} ms")
    summary.append(f"total {1000 * (stopped - started):.1f} ms")
    output.result(" | ".join(summary))
    if finish is None:
        if interrupt.at is not None:
            # Interrupted before the call could end with a finish (connecting, or past the bound).
            why = (
                f"no finish within {ABORT_BOUND:g} s, stopped"
                if interrupt.forced
                else "stopped before the call was sent"
            )
            output.note(
                f"aborted {what} while {interrupt.interrupted}: {why} "
                f"(abort took {1000 * (stopped - interrupt.at):.1f} ms)",
                RED,
            )
            return 130
        output.note("the call ended without a finish", RED)
        return 1
    latency = ""
    if isinstance(finish.reason, FinishAborted) and interrupt.at is not None:
        latency = f" (abort -> finish {1e6 * (ended - interrupt.at):.0f} us)"
    return report_finish(output, finish, latency)
