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
from typing import TYPE_CHECKING, Any, TextIO, TypedDict

import attrs
import msgspec
import trio

import llmrt
from llmrt import (
    AttemptChunk,
    BlockAssembler,
    BlockEnd,
    ErrorCode,
    Finish,
    FinishAborted,
    FinishError,
    GenerateOptions,
    LlmError,
    Middleware,
    ModelDiscoveryRequest,
    ReasoningDelta,
    RetryScheduled,
    StreamChunk,
    TextDelta,
    ToolCallBlock,
    ToolCallDelta,
)
from llmrt._helpers import sole_exception
from llmrt.adapters.plugin import ModelSpec

from .._abort import AbortController
from . import config as configuration
from . import routes as routes_command
from ._collector import collector_line, tune_for_serving
from .plugins import PLUGIN_ERROR

if TYPE_CHECKING:
    from ..gateway import GatewayServer, Limits
    from ..gateway._snapshot import HistogramValue, StatisticsValue
    from ._schema import GatewayTable

__all__ = ["main"]

DEFAULT_PORT = 8765
DEFAULT_TOKEN_ENV = "LLMRT_GATEWAY_TOKEN"
DEFAULT_CONNECT_TIMEOUT = 10.0
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
    serve.add_argument(
        "--no-gc-tuning",
        dest="gc_tuning",
        action="store_false",
        help="keep Python's garbage collector settings (by default a serving process freezes "
        "what start-up allocated and raises the first threshold: docs/operations.md)",
    )
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
    serve.add_argument(
        "--workers",
        type=int,
        default=0,
        metavar="N",
        help="run N gateway processes sharing the port (SO_REUSEPORT), supervised: "
        "a worker that dies is restarted (default: this process serves alone)",
    )
    serve.add_argument(
        "--drain-delay",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="on SIGTERM, answer /readyz with 503 for this long while serving on, "
        "before closing the listener (default 0)",
    )
    serve.add_argument(
        "--shutdown-grace",
        type=float,
        default=None,
        metavar="SECONDS",
        help="on SIGTERM, how long in-flight calls may run before they are aborted (default 5)",
    )
    serve.add_argument(
        "--otel",
        action="store_true",
        help="trace every call with OpenTelemetry (needs llmrt[otel]; spans and metrics go "
        "to the globally configured providers, e.g. under opentelemetry-instrument)",
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
    _connect_timeout_option(call)
    call.add_argument("--no-color", action="store_true", help="plain output")

    providers = add("providers", "List the configured provider routes.")
    providers.add_argument("--via", metavar="URL", default=None, help="ask a gateway instead")
    providers.add_argument("--token-env", default=DEFAULT_TOKEN_ENV, metavar="NAME")
    _connect_timeout_option(providers)

    models = add(
        "models",
        "List a provider's models, discovered from its endpoint where it has a settings "
        "namespace (the preset's table when the endpoint is unreachable).",
    )
    models.add_argument("provider", help="provider route")
    models.add_argument("--via", metavar="URL", default=None, help="ask a gateway instead")
    models.add_argument("--token-env", default=DEFAULT_TOKEN_ENV, metavar="NAME")
    _connect_timeout_option(models)

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
    _connect_timeout_option(stats)

    routes_command.configure(add("routes", routes_command.HELP), DEFAULT_TOKEN_ENV)
    _connect_timeout_option(commands.choices["routes"])
    return parser


def _seconds(text: str) -> float:
    value = float(text)
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"a positive, finite number of seconds, not {text!r}")
    return value


def _connect_timeout_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--connect-timeout",
        type=_seconds,
        default=DEFAULT_CONNECT_TIMEOUT,
        metavar="SECONDS",
        help=f"bound on connecting to the gateway of --via (default {DEFAULT_CONNECT_TIMEOUT:g})",
    )


def parse_args(
    argv: Sequence[str] | None, parser: argparse.ArgumentParser | None = None
) -> argparse.Namespace:
    """The parsed command line; ``args.argv`` keeps it as given (workers re-read it)."""
    given = list(argv) if argv is not None else sys.argv[1:]
    args = (parser or _parser()).parse_args(given)
    args.argv = given
    return args


# ---- runtime set-up ----------------------------------------------------------------------


@asynccontextmanager
async def _configured_runtime(
    config: configuration.Config, *, environ: dict[str, str] | None = None
) -> AsyncIterator[llmrt.LlmRuntime]:
    """A runtime serving ``config``; keys are read from ``environ`` (default ``os.environ``)."""
    async with llmrt.open_runtime() as rt:
        await configuration.register_config(rt, config, environ=environ)
        await configuration.register_settings(rt, config, environ=environ)
        yield rt


def _route_of(config: configuration.Config, name: str) -> str:
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


def _default_model(config: configuration.Config, provider: str) -> str:
    spec = config.route(provider)
    if spec is None:
        return "default"
    model = spec.config.default_model() if spec.config is not None else None
    if model is None:
        raise SystemExit(f"llmrt: --model is required for provider {provider!r}")
    return model


@asynccontextmanager
async def _gateway(args: argparse.Namespace, environ: dict[str, str]) -> AsyncIterator[Any]:
    """The client of ``--via``, its token from ``--token-env``; refusals say how to fix them."""
    from .client import open_gateway_client

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


#: After Ctrl-C, how long the call may take to deliver its aborted finish before it is stopped.
ABORT_BOUND = 0.5
#: After Ctrl-C, when the process exits even if stopping the call has not finished.
EXIT_BOUND = 0.9


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
        async with _gateway(args, environ) as client:
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
    async with _configured_runtime(config) as rt:
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
    interrupt: _Interrupt, out: TextIO, what: str, *, task_status: trio.TaskStatus[None]
) -> None:
    """Ctrl-C aborts the call (bounded by `ABORT_BOUND`); a second one exits at once."""
    with trio.open_signal_receiver(signal.SIGINT) as signals:
        task_status.started()
        async with trio.open_nursery() as nursery:
            async for _ in signals:
                if interrupt.at is not None:
                    out.write("\ninterrupted again: exiting now\n")
                    out.flush()
                    os._exit(130)
                interrupt.at = time.perf_counter()
                interrupt.interrupted = interrupt.phase
                out.write(f"\n^C: aborting {what} ({interrupt.phase})\n")
                out.flush()
                if interrupt.phase.startswith("connecting"):
                    interrupt.run.cancel()  # no call exists yet: stop connecting
                interrupt.controller.abort()
                nursery.start_soon(_bound_abort, interrupt, out)


async def _bound_abort(interrupt: _Interrupt, out: TextIO) -> None:
    """Stop a call whose abort takes too long; exit outright if even stopping it hangs."""
    await trio.sleep(ABORT_BOUND)
    interrupt.forced = True
    interrupt.run.cancel()
    # Cleanup that outlives this (an adapter stuck closing) is not waited for.
    await trio.sleep(EXIT_BOUND - ABORT_BOUND)
    out.write(f"\naborted: cleanup did not end within {EXIT_BOUND:g} s; exiting now\n")
    out.flush()
    os._exit(130)


async def _call(
    args: argparse.Namespace, config: configuration.Config, out: TextIO, environ: dict[str, str]
) -> int:
    provider = _route_of(config, args.provider or "demo") if args.via is None else args.provider
    provider = provider or "demo"
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
    finish: Finish | None = None
    interrupt = _Interrupt()

    def handle(event: Any) -> None:
        nonlocal first, ended, finish
        if isinstance(event, RetryScheduled):
            printer.retry(event)
            return
        chunk = event.chunk if isinstance(event, AttemptChunk) else event
        if first is None and isinstance(chunk, TextDelta | ReasoningDelta | ToolCallDelta):
            first = time.perf_counter()
            interrupt.phase = "streaming"
        if isinstance(chunk, Finish):
            finish = chunk
            ended = time.perf_counter()
        else:
            printer.chunk(chunk)

    what = f"the call to {options.provider}/{options.model}"
    async with trio.open_nursery() as nursery:
        await nursery.start(_watch_interrupts, interrupt, out, what)
        with interrupt.run:
            await _run_events(args, config, options, environ, handle, interrupt)
        nursery.cancel_scope.cancel()
    stopped = time.perf_counter()
    total = stopped - started
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
        if interrupt.at is not None:
            # Interrupted before the call could end with a finish (connecting, or past the bound).
            why = (
                f"no finish within {ABORT_BOUND:g} s, stopped"
                if interrupt.forced
                else "stopped before the call was sent"
            )
            out.write(
                style(
                    _RED,
                    f"aborted {what} while {interrupt.interrupted}: {why} "
                    f"(abort took {1000 * (stopped - interrupt.at):.1f} ms)\n",
                )
            )
            return 130
        out.write(style(_RED, "the call ended without a finish\n"))
        return 1
    reason = finish.reason
    if isinstance(reason, FinishAborted):
        latency = ""
        if interrupt.at is not None:
            latency = f" (abort -> finish {1e6 * (ended - interrupt.at):.0f} us)"
        out.write(style(_RED, f"aborted: {reason.failure.message}{latency}\n"))
        return 130
    if isinstance(reason, FinishError):
        out.write(style(_RED, f"error {reason.failure.code}: {reason.failure.message}\n"))
        return 1
    out.write(style(_DIM, f"finish: {reason.__struct_config__.tag}\n"))
    return 0


# ---- serve -------------------------------------------------------------------------------


async def stop_gateway(server: GatewayServer, *, drain_delay: float, grace: float | None) -> None:
    """What SIGTERM does to a gateway: ``/readyz`` answers 503 for ``drain_delay``
    seconds while everything serves on (a load balancer stops sending new
    clients), then the listener closes, in-flight calls get ``grace`` seconds,
    the rest end ``aborted`` and every websocket closes with 1001."""
    server.drain()
    if drain_delay > 0:
        await trio.sleep(drain_delay)
    await server.aclose(grace=grace)


def _check_stop_options(args: argparse.Namespace) -> None:
    if not 0 <= args.drain_delay < float("inf"):
        raise ValueError(f"--drain-delay must be >= 0, got {args.drain_delay}")
    if args.shutdown_grace is not None and not 0 <= args.shutdown_grace < float("inf"):
        raise ValueError(f"--shutdown-grace must be >= 0, got {args.shutdown_grace}")
    if args.workers < 0:
        raise ValueError(f"--workers must be >= 1, got {args.workers}")


def _print_serving(
    out: TextIO,
    config: configuration.Config,
    url: str,
    workers: str,
    token: str | None,
    token_env: str,
    tracing: bool = False,
) -> None:
    out.write(f"llmrt {llmrt.__version__} gateway listening on {url}\n")
    out.write(f"workers: {workers}\n")
    out.write(f"auth: {'on (bearer token from $' + token_env + ')' if token else 'off'}\n")
    if tracing:
        out.write("tracing: OpenTelemetry (GenAI conventions; call frames may carry traceparent)\n")
    out.write("providers:\n")
    for line in configuration.describe(config):
        out.write(f"  {line}\n")
    out.flush()


class ServeOptions(TypedDict):
    """The `serve_gateway` keyword arguments that ``llmrt serve`` derives from its
    command line, configuration and environment."""

    token: str | None
    allow_origin: tuple[str, ...]
    limits: Limits


def serve_options(
    args: argparse.Namespace, config: configuration.Config, environ: dict[str, str]
) -> ServeOptions:
    """What `serve_gateway` is given besides the address: the one place for it, so
    that the single process and every worker (which re-reads the same command
    line) serve alike."""
    return ServeOptions(
        token=environ.get(args.token_env) or None,
        allow_origin=(*config.gateway.allow_origin, *args.allow_origin),
        limits=_gateway_limits(args, config.gateway),
    )


async def _serve_workers(
    args: argparse.Namespace,
    config: configuration.Config,
    out: TextIO,
    environ: dict[str, str],
    *,
    task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED,
) -> int:
    from .._workers import supervise
    from ..gateway._server import _is_loopback

    token = serve_options(args, config, environ)["token"]
    if token is None and not _is_loopback(args.host):
        # What serve_gateway would refuse in every worker: refuse it once, here.
        raise ValueError(
            f"refusing to serve on the non-loopback host {args.host!r} without a token: "
            f"set ${args.token_env} (clients then authenticate with a bearer token)"
        )
    n = args.workers
    return await supervise(
        workers=n,
        host=args.host,
        port=args.port,
        argv=args.argv,
        drain_delay=args.drain_delay,
        shutdown_grace=args.shutdown_grace,
        out=out,
        banner=lambda url: _print_serving(
            out,
            config,
            url,
            f"{n} (processes sharing the port)",
            token,
            args.token_env,
            bool(getattr(args, "otel", False)),
        ),
        task_status=task_status,
    )


def _otel_middleware() -> Middleware:
    """The OpenTelemetry middleware of ``serve --otel``; a clear error without the extra."""
    try:
        from ..otel import otel_middleware
    except ImportError:
        raise ValueError('--otel needs the OpenTelemetry API: pip install "llmrt[otel]"') from None
    return otel_middleware()


def serve_middleware(args: argparse.Namespace) -> list[Middleware]:
    """The middleware ``llmrt serve`` puts on its runtime (one process or each worker):
    the OpenTelemetry one with ``--otel``. Raises `ValueError` without the extra."""
    return [_otel_middleware()] if getattr(args, "otel", False) else []


async def _serve(
    args: argparse.Namespace,
    config: configuration.Config,
    out: TextIO,
    environ: dict[str, str],
    *,
    serving_process: bool = False,
    task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED,
) -> int:
    """``llmrt serve``. ``serving_process``: this process exists to serve (the command line),
    so the collector is set up for it (`tune_for_serving`); never in an embedding process.
    """
    from ..gateway import serve_gateway
    from ..gateway._server import _is_loopback

    token = environ.get(args.token_env) or None
    if token is None and not _is_loopback(args.host):
        raise ValueError(
            f"refusing to serve on the non-loopback host {args.host!r} without a token: "
            f"set ${args.token_env} (or name another variable with --token-env); "
            "clients then present it as a bearer token"
        )
    _check_stop_options(args)
    tracing = serve_middleware(args)
    if args.workers:
        return await _serve_workers(args, config, out, environ, task_status=task_status)
    options = serve_options(args, config, environ)
    async with _configured_runtime(config) as rt, trio.open_nursery() as nursery:
        for middleware in tracing:
            rt.use(middleware)
        serve = functools.partial(serve_gateway, rt, args.host, args.port, **options)
        server = await nursery.start(serve)
        token = options["token"]
        _print_serving(
            out, config, server.url, "1 (this process)", token, args.token_env, bool(tracing)
        )
        task_status.started(server)
        if args.gc_tuning and serving_process:
            tune_for_serving()
            out.write(f"{collector_line()}\n")
            out.flush()
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for _ in signals:
                out.write("shutting down\n")
                out.flush()
                await stop_gateway(server, drain_delay=args.drain_delay, grace=args.shutdown_grace)
                break
        nursery.cancel_scope.cancel()
    return 0


def _gateway_limits(args: argparse.Namespace, table: GatewayTable) -> Limits:
    """The gateway's limits: defaults, then ``[gateway]`` of the config, then flags.

    Raises `ValueError` for a value the limits refuse.
    """
    from ..gateway import Limits

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


# ---- providers / models ------------------------------------------------------------------


async def _providers(
    args: argparse.Namespace, config: configuration.Config, out: TextIO, environ: dict[str, str]
) -> int:
    if args.via:
        async with _gateway(args, environ) as client:
            providers = await client.list_providers()
        for provider in providers:
            out.write(f"{provider.id}\t{provider.name}\n")
        return 0
    for line in configuration.describe(config):
        out.write(line + "\n")
    return 0


#: Statuses that say "this endpoint has no model list": the table answers instead.
_NO_LIST = frozenset({404, 405, 501})


async def _models(
    args: argparse.Namespace, config: configuration.Config, out: TextIO, environ: dict[str, str]
) -> int:
    """``id<TAB>name<TAB>source`` per model.

    The source is ``discovered:<namespace>`` (the endpoint's own list, asked
    through the runtime's discovery), ``table`` (the preset's and the file's
    models, when the endpoint is unreachable or has no list; said on stderr
    too) or ``adapter`` (a route outside any namespace: its adapter's list).
    """
    if args.via:
        async with _gateway(args, environ) as client:
            directory = await client.list_configurable_providers()
            live = {p.id for p in await client.list_providers()}
            return await _show_models(
                args.provider, directory, live, client.discover_models, client.list_models, out, ()
            )
    route = _route_of(config, args.provider)
    async with _configured_runtime(config, environ=environ) as rt:
        live = {p.id for p in rt.list_providers()}
        return await _show_models(
            route,
            rt.list_configurable_providers(),
            live,
            rt.discover_models,
            rt.list_models,
            out,
            _table_of(config, route),
        )


async def _show_models(
    route: str,
    directory: Sequence[llmrt.ConfigurableProvider],
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


def _table_of(config: configuration.Config, route: str) -> tuple[ModelSpec, ...]:
    """The models a route knows without its endpoint: the preset's, then the file's."""
    spec = config.route(route)
    if spec is None or spec.config is None:
        return ()
    return spec.config.known_models()


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
        async with _gateway(args, environ) as client:
            value = await client.stats()
    else:
        from ..gateway._snapshot import statistics_value

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
    args = parse_args(argv, parser)
    out = out or sys.stdout
    env = dict(os.environ if environ is None else environ)
    if args.command is None:
        parser.print_help(out)
        return 0
    try:
        config = configuration.load_config(args.config, environ=env)
        # An unusable adapter plugin costs its own kind only: say so, serve the rest.
        for problem in config.plugins.problems.values():
            print(f"llmrt: warning [{PLUGIN_ERROR}]: {problem}", file=sys.stderr)
        try:
            if args.command == "call":
                return trio.run(_call, args, config, out, env)
            if args.command == "serve":
                return trio.run(
                    functools.partial(_serve, serving_process=True), args, config, out, env
                )
            if args.command == "providers":
                return trio.run(_providers, args, config, out, env)
            if args.command == "stats":
                return trio.run(_stats, args, config, out, env)
            if args.command == "routes":
                run = functools.partial(
                    routes_command.run,
                    connect=lambda: _gateway(args, env),
                    runtime=_configured_runtime,
                )
                return trio.run(run, args, config, out)
            return trio.run(_models, args, config, out, env)
        except BaseExceptionGroup as group:
            # Nurseries wrap what went wrong; report the one cause plainly.
            inner = sole_exception(group)
            if isinstance(inner, Exception):
                raise inner from None
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
    except KeyboardInterrupt:
        # Ctrl-C before the call's own handler was installed (or after it ended).
        print("llmrt: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
