"""The ``llmrt`` command line: ``serve``, ``call``, ``providers``, ``models``, ``stats``.

Providers come from ``llmrt.toml`` (or ``--config``) and from the usual
API-key environment variables, always plus the embedded ``demo`` provider
(see ``docs/configuration.md``). Secrets never travel on the command line:
the gateway token is read from an environment variable (``--token-env``).
"""

from __future__ import annotations

import argparse
import functools
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, TextIO

import msgspec
import trio

import llmrt
from llmrt import (
    AttemptChunk,
    BlockAssembler,
    BlockEnd,
    Finish,
    FinishAborted,
    FinishError,
    GenerateOptions,
    LlmError,
    ReasoningDelta,
    RetryScheduled,
    StreamChunk,
    TextDelta,
    ToolCallBlock,
    ToolCallDelta,
)

from . import config as configuration

if TYPE_CHECKING:
    from ._config_schema import GatewayTable
    from .gateway import Limits
    from .gateway._snapshot import HistogramValue, StatisticsValue

__all__ = ["main"]

DEFAULT_PORT = 8765
DEFAULT_TOKEN_ENV = "LLMRT_GATEWAY_TOKEN"
_DIM, _BOLD, _RESET, _CYAN, _RED = "\x1b[2m", "\x1b[1m", "\x1b[0m", "\x1b[36m", "\x1b[31m"


class _Style:
    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def __call__(self, code: str, text: str) -> str:
        return f"{code}{text}{_RESET}" if self.enabled else text


# ---- argument parsing --------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="llmrt",
        description="Stream LLM calls through llmrt's trio runtime. "
        "With no configuration it uses the embedded, offline `demo` provider.",
    )
    parser.add_argument("--version", action="version", version=f"llmrt {llmrt.__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    def add(name: str, help: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help, description=help)
        sub.add_argument(
            "--config",
            metavar="PATH",
            help="config file (default: $LLMRT_CONFIG, else ./llmrt.toml if present)",
        )
        return sub

    serve = add("serve", "Serve the configured providers over the websocket gateway.")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT, help="port (0: any free port)")
    serve.add_argument(
        "--token-env",
        default=DEFAULT_TOKEN_ENV,
        metavar="NAME",
        help=f"environment variable holding the bearer token (default {DEFAULT_TOKEN_ENV}); "
        "when it is set, clients must present the token. Required beyond loopback.",
    )
    serve.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="a browser origin (scheme://host[:port]) whose pages may use the gateway, "
        "besides the gateway's own; repeatable; '*' (any page) only with a token. "
        "Adds to [gateway].allow_origin of llmrt.toml.",
    )
    serve.add_argument(
        "--idle-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="close connections with no call in flight for this long (default 300)",
    )
    serve.add_argument(
        "--max-connections-per-peer",
        type=int,
        default=None,
        metavar="N",
        help="open connections per client address (default 64)",
    )
    serve.add_argument(
        "--max-pending-bytes",
        type=int,
        default=None,
        metavar="BYTES",
        help="encoded chunks one connection may queue for a slow client (default 4 MiB)",
    )
    serve.add_argument(
        "--max-frame-bytes",
        type=int,
        default=None,
        metavar="BYTES",
        help="the largest websocket frame, either way (default 1 MiB, at least 4096)",
    )

    call = add("call", "Stream one call to the terminal.")
    call.add_argument("prompt", help="the user message")
    call.add_argument("--provider", "-p", default=None, help="provider route (default: demo)")
    call.add_argument("--model", "-m", default=None, help="model id (default: the route's first)")
    call.add_argument("--system", default=None, help="system prompt")
    call.add_argument("--max-tokens", type=int, default=None, help="output cap")
    call.add_argument("--temperature", type=float, default=None)
    call.add_argument("--effort", default=None, help="reasoning effort, e.g. low/medium/high")
    call.add_argument("--retry", action="store_true", help="retry with the route's retry policy")
    call.add_argument(
        "--via", metavar="URL", default=None, help="call through a gateway (ws://host:port/)"
    )
    call.add_argument("--token-env", default=DEFAULT_TOKEN_ENV, metavar="NAME")
    call.add_argument("--no-color", action="store_true", help="plain output")

    providers = add("providers", "List the configured provider routes.")
    providers.add_argument("--via", metavar="URL", default=None, help="ask a gateway instead")
    providers.add_argument("--token-env", default=DEFAULT_TOKEN_ENV, metavar="NAME")

    models = add("models", "List a provider's models.")
    models.add_argument("provider", help="provider route")
    models.add_argument("--via", metavar="URL", default=None, help="ask a gateway instead")
    models.add_argument("--token-env", default=DEFAULT_TOKEN_ENV, metavar="NAME")

    stats = add(
        "stats",
        "Print a statistics snapshot: a gateway's (--via), or an in-process runtime's "
        "after a few demo calls.",
    )
    stats.add_argument("--via", metavar="URL", default=None, help="ask a gateway (ws://host:port/)")
    stats.add_argument("--token-env", default=DEFAULT_TOKEN_ENV, metavar="NAME")
    stats.add_argument(
        "--calls", type=int, default=1, help="demo calls to run first (in-process only; default 1)"
    )
    stats.add_argument("--json", action="store_true", help="the raw snapshot as JSON")
    return parser


# ---- runtime set-up ----------------------------------------------------------------------


@asynccontextmanager
async def _configured_runtime(
    config: configuration.Config,
) -> AsyncIterator[llmrt.LlmRuntime]:
    async with llmrt.open_runtime() as rt:
        await configuration.register_config(rt, config)
        yield rt


def _default_model(config: configuration.Config, provider: str) -> str:
    spec = config.route(provider)
    if spec is None:
        return "default"
    if spec.adapter == "demo":
        return "demo-1"
    if spec.models:
        return spec.models[0].id
    if spec.preset == "deepseek-official":
        return "deepseek-chat"
    if spec.preset == "openai":
        return "gpt-4.1-mini"
    if spec.adapter == "anthropic":
        return "claude-sonnet-4-5"
    raise SystemExit(f"llmrt: --model is required for provider {provider!r}")


# ---- call ----------------------------------------------------------------------------------


class _Printer:
    """Streams chunks to a terminal: reasoning dimmed, tool calls shown, then a summary."""

    def __init__(self, out: TextIO, style: _Style) -> None:
        self.out = out
        self.style = style
        self.kind: str | None = None
        self.assembler = BlockAssembler()

    def chunk(self, chunk: StreamChunk) -> None:
        self.assembler.push(chunk)
        if isinstance(chunk, ReasoningDelta):
            self._switch("reasoning")
            self.out.write(self.style(_DIM, chunk.text))
        elif isinstance(chunk, TextDelta):
            self._switch("text")
            self.out.write(chunk.text)
        elif isinstance(chunk, BlockEnd) and isinstance(chunk.block, ToolCallBlock):
            self._switch("tool")
            block = chunk.block
            self.out.write(self.style(_CYAN, f"-> tool call {block.name}({block.arguments})"))
        self.out.flush()

    def _switch(self, kind: str) -> None:
        if self.kind is not None and self.kind != kind:
            self.out.write("\n")
        if kind == "reasoning" and self.kind != "reasoning":
            self.out.write(self.style(_DIM, "thinking: "))
        self.kind = kind

    def retry(self, event: RetryScheduled) -> None:
        self.out.write(
            self.style(
                _RED,
                f"\n[attempt {event.attempt} failed: {event.failure.code}: "
                f"{event.failure.message}; retrying in {event.delay_ms / 1000:.1f} s]\n",
            )
        )
        self.kind = None
        self.assembler = BlockAssembler()


async def _run_events(
    args: argparse.Namespace,
    config: configuration.Config,
    options: GenerateOptions,
    environ: dict[str, str],
    handle: Callable[[Any, Callable[[], None]], None],
) -> None:
    """Run a call, in-process or through a gateway; ``handle(event, abort)`` sees each event."""
    if args.via:
        from .client import open_gateway_client

        token = environ.get(args.token_env) or None
        async with (
            open_gateway_client(args.via, token=token) as client,
            client.stream(options) as call,
        ):
            async for chunk in call:
                handle(chunk, call.abort)
        return
    async with _configured_runtime(config) as rt:
        if args.retry:
            async with rt.stream_with_retry(options) as retrying:
                async for event in retrying:
                    handle(event, retrying.abort)
        else:
            async with rt.stream(options) as call:
                async for chunk in call:
                    handle(chunk, call.abort)


async def _call(
    args: argparse.Namespace, config: configuration.Config, out: TextIO, environ: dict[str, str]
) -> int:
    provider = args.provider or "demo"
    options = GenerateOptions(
        provider=provider,
        model=args.model or _default_model(config, provider),
        messages=(llmrt.user_message(args.prompt),),
        system=args.system,
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        reasoning_effort=args.effort,
    )
    style = _Style(not args.no_color and out.isatty())
    printer = _Printer(out, style)
    started = time.perf_counter()
    first: float | None = None
    ended = started
    aborted_at: float | None = None
    finish: Finish | None = None
    abort: Callable[[], None] | None = None

    def handle(event: Any, abort_call: Callable[[], None]) -> None:
        nonlocal first, ended, finish, abort
        abort = abort_call
        if isinstance(event, RetryScheduled):
            printer.retry(event)
            return
        chunk = event.chunk if isinstance(event, AttemptChunk) else event
        if first is None and isinstance(chunk, TextDelta | ReasoningDelta | ToolCallDelta):
            first = time.perf_counter()
        if isinstance(chunk, Finish):
            finish = chunk
            ended = time.perf_counter()
        else:
            printer.chunk(chunk)

    async def on_interrupt(*, task_status: trio.TaskStatus[None]) -> None:
        # Ctrl-C aborts the call (and is timed) instead of tearing the run down.
        nonlocal aborted_at
        with trio.open_signal_receiver(signal.SIGINT) as signals:
            task_status.started()
            async for _ in signals:
                if abort is not None and aborted_at is None:
                    aborted_at = time.perf_counter()
                    abort()

    async with trio.open_nursery() as nursery:
        await nursery.start(on_interrupt)
        await _run_events(args, config, options, environ, handle)
        nursery.cancel_scope.cancel()
    total = time.perf_counter() - started
    out.write("\n")
    usage = printer.assembler.usage
    summary = []
    if usage is not None:
        summary.append(f"usage: input {usage.input_tokens}, output {usage.output_tokens}")
        if usage.cache_read_tokens:
            summary.append(f"cache read {usage.cache_read_tokens}")
        if usage.reasoning_tokens:
            summary.append(f"reasoning {usage.reasoning_tokens}")
    if first is not None:
        summary.append(f"first token {1000 * (first - started):.1f} ms")
    summary.append(f"total {1000 * total:.1f} ms")
    out.write(style(_DIM, " | ".join(summary)) + "\n")
    if finish is None:
        out.write(style(_RED, "the call ended without a finish\n"))
        return 1
    reason = finish.reason
    if isinstance(reason, FinishAborted):
        latency = ""
        if aborted_at is not None:
            latency = f" (abort -> finish {1e6 * (ended - aborted_at):.0f} us)"
        out.write(style(_RED, f"aborted: {reason.failure.message}{latency}\n"))
        return 130
    if isinstance(reason, FinishError):
        out.write(style(_RED, f"error {reason.failure.code}: {reason.failure.message}\n"))
        return 1
    out.write(style(_DIM, f"finish: {reason.__struct_config__.tag}\n"))
    return 0


# ---- serve -------------------------------------------------------------------------------


async def _serve(
    args: argparse.Namespace,
    config: configuration.Config,
    out: TextIO,
    environ: dict[str, str],
    *,
    task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED,
) -> int:
    from .gateway import serve_gateway

    token = environ.get(args.token_env) or None
    limits = _gateway_limits(args, config.gateway)
    async with _configured_runtime(config) as rt, trio.open_nursery() as nursery:
        allow_origin = (*config.gateway.allow_origin, *args.allow_origin)
        serve = functools.partial(
            serve_gateway,
            rt,
            args.host,
            args.port,
            token=token,
            allow_origin=allow_origin,
            limits=limits,
        )
        server = await nursery.start(serve)
        out.write(f"llmrt {llmrt.__version__} gateway listening on {server.url}\n")
        out.write(f"auth: {'on (bearer token from $' + args.token_env + ')' if token else 'off'}\n")
        out.write("providers:\n")
        for line in configuration.describe(config):
            out.write(f"  {line}\n")
        out.flush()
        task_status.started(server)
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for _ in signals:
                out.write("shutting down\n")
                out.flush()
                await server.aclose()
                break
        nursery.cancel_scope.cancel()
    return 0


def _gateway_limits(args: argparse.Namespace, table: GatewayTable) -> Limits:
    """The gateway's limits: defaults, then ``[gateway]`` of the config, then flags.

    Raises `ValueError` for a value the limits refuse.
    """
    from .gateway import Limits

    settings: dict[str, Any] = {}
    for name in (
        "idle_timeout",
        "max_connections_per_peer",
        "max_pending_bytes",
        "max_frame_bytes",
    ):
        value = getattr(args, name)
        if value is None:
            value = getattr(table, name)
        if value is not None:
            settings[name] = value
    return Limits(**settings)


# ---- providers / models ------------------------------------------------------------------


async def _providers(
    args: argparse.Namespace, config: configuration.Config, out: TextIO, environ: dict[str, str]
) -> int:
    if args.via:
        from .client import open_gateway_client

        token = environ.get(args.token_env) or None
        async with open_gateway_client(args.via, token=token) as client:
            providers = await client.list_providers()
        for provider in providers:
            out.write(f"{provider.id}\t{provider.name}\n")
        return 0
    for line in configuration.describe(config):
        out.write(line + "\n")
    return 0


async def _models(
    args: argparse.Namespace, config: configuration.Config, out: TextIO, environ: dict[str, str]
) -> int:
    if args.via:
        from .client import open_gateway_client

        token = environ.get(args.token_env) or None
        async with open_gateway_client(args.via, token=token) as client:
            models = await client.list_models(args.provider)
    else:
        async with _configured_runtime(config) as rt:
            models = await rt.list_models(args.provider)
    for model in models:
        out.write(f"{model.id}\t{model.name}\n")
    return 0


# ---- stats -------------------------------------------------------------------------------


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{name or '-'} {n}" for name, n in sorted(counts.items())) or "none"


def _mean_ms(histogram: HistogramValue) -> str:
    count = histogram.count
    mean = f"mean {1000 * histogram.sum / count:.1f} ms" if count else "no data"
    return f"n={count} {mean}"


def format_stats(value: StatisticsValue) -> list[str]:
    """A statistics snapshot as lines of text (``llmrt stats``)."""
    lines = [
        f"calls: started {value.calls_started}, in flight {value.calls_in_flight}, "
        f"chunks forwarded {value.chunks_forwarded} (dropped {value.chunks_dropped})",
        f"finished: {_counts(value.calls_finished)}",
        f"failures: {_counts(value.failures_by_code)}",
        f"retries: {_counts(value.retries_by_code)}; idle timeouts {value.watchdog_firings}; "
        f"middleware errors {value.middleware_errors}; registrations {value.registrations}",
    ]
    for p in value.providers:
        finished = ", ".join(
            f"{f.reason}{'/' + f.code if f.code else ''} {f.count}" for f in p.calls_finished
        )
        lines.append(
            f"provider {p.provider}: started {p.calls_started}, in flight {p.calls_in_flight}, "
            f"chunks {p.chunks_forwarded}; {finished or 'none finished'}"
        )
    for first, whole in zip(value.time_to_first_chunk, value.call_duration, strict=True):
        lines.append(
            f"  {first.provider}/{first.model}: first chunk {_mean_ms(first.histogram)}; "
            f"duration {_mean_ms(whole.histogram)}"
        )
    if value.abort_to_finish is not None and value.abort_to_finish.count:
        abort = value.abort_to_finish
        lines.append(
            f"abort -> finish: n={abort.count} mean {1e6 * abort.sum / abort.count:.0f} us"
        )
    for pool in value.connection_pools:
        lines.append(f"upstream {pool.provider}: connections open {pool.open}, idle {pool.idle}")
    gw = value.gateway
    if gw is not None:
        lines.append(
            f"gateway: {'ready' if gw.ready else 'not ready'}, connections {gw.connections} "
            f"(accepted {gw.accepted}), live requests {gw.live_requests}, "
            f"refused: {_counts(gw.refused)}"
        )
        lines.append(
            f"  frames in {gw.frames_received} out {gw.frames_sent}; "
            f"bytes in {gw.bytes_received} out {gw.bytes_sent}; "
            f"http: {_counts(gw.http_requests)}"
        )
    return lines


async def _stats(
    args: argparse.Namespace, config: configuration.Config, out: TextIO, environ: dict[str, str]
) -> int:
    if args.via:
        from .client import open_gateway_client

        token = environ.get(args.token_env) or None
        async with open_gateway_client(args.via, token=token) as client:
            value = await client.stats()
    else:
        from .gateway._snapshot import statistics_value

        if args.calls < 0:
            raise ValueError("--calls must be >= 0")
        async with _configured_runtime(config) as rt:
            options = GenerateOptions(
                provider="demo", model="demo-1", messages=(llmrt.user_message("hello"),)
            )
            for _ in range(args.calls):
                async with rt.stream(options) as call:
                    async for _chunk in call:
                        pass
            value = statistics_value(rt.statistics())
    if args.json:
        out.write(msgspec.json.format(msgspec.json.encode(value), indent=2).decode() + "\n")
    else:
        for line in format_stats(value):
            out.write(line + "\n")
    return 0


# ---- entry point -------------------------------------------------------------------------


def main(
    argv: Sequence[str] | None = None,
    *,
    out: TextIO | None = None,
    environ: dict[str, str] | None = None,
) -> int:
    """Run the command line; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    out = out or sys.stdout
    env = dict(os.environ if environ is None else environ)
    if args.command is None:
        parser.print_help(out)
        return 0
    try:
        config = configuration.load_config(args.config, environ=env)
        try:
            if args.command == "call":
                return trio.run(_call, args, config, out, env)
            if args.command == "serve":
                return trio.run(_serve, args, config, out, env)
            if args.command == "providers":
                return trio.run(_providers, args, config, out, env)
            if args.command == "stats":
                return trio.run(_stats, args, config, out, env)
            return trio.run(_models, args, config, out, env)
        except BaseExceptionGroup as group:
            # Nurseries wrap what went wrong; report the one cause plainly.
            if len(group.exceptions) == 1 and isinstance(group.exceptions[0], Exception):
                raise group.exceptions[0] from None
            raise
    except configuration.ConfigError as exc:
        print(f"llmrt: {exc}", file=sys.stderr)
        return 2
    except LlmError as exc:
        print(f"llmrt: {exc}", file=sys.stderr)
        return 1
    except (ValueError, OSError) as exc:
        print(f"llmrt: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
