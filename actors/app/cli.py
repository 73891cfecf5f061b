"""The ``llmrt`` command line: ``serve``, ``call``, ``providers``, ``models``, ``stats``.

Providers come from ``llmrt.toml`` (or ``--config``) and from the usual
API-key environment variables, always plus the embedded ``demo`` provider
(see ``docs/configuration.md``). Secrets never travel on the command line:
the gateway token is read from an environment variable (``--token-env``).

A command imports what it uses when it runs: ``llmrt --help`` and ``llmrt
call`` start without the gateway, the client or the statistics snapshot
(``python bench/bench_startup.py`` measures it).
"""

from __future__ import annotations

import argparse
import errno
import functools
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, BinaryIO, TextIO, TypedDict

import trio

import llmrt
from llmrt import ErrorCode, GenerateOptions, LlmError, Middleware
from llmrt._helpers import sole_exception
from llmrt.adapter import ModelDiscoveryRequest

if TYPE_CHECKING:
    from llmrt.adapters.plugin import ModelSpec

    # The stats frame's value is the runtime's statistics (one shape).
    from .._statistics import HistogramSnapshot as HistogramValue
    from .._statistics import RuntimeStatistics as StatisticsValue
    from ..gateway import GatewayServer, Limits
    from . import config as configuration
    from ._schema import GatewayTable

__all__ = ["main"]

DEFAULT_PORT = 8765
DEFAULT_TOKEN_ENV = "LLMRT_GATEWAY_TOKEN"
DEFAULT_CONNECT_TIMEOUT = 10.0


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
        "--metrics-auth",
        choices=("open", "token"),
        default=None,
        help="who may read /metrics: anyone who reaches the port (open, the default) or "
        "holders of the gateway token as a bearer header (token). Wins over "
        "[gateway].metrics_auth of llmrt.toml.",
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

    call = add(
        "call",
        "Stream one call: the answer's text on stdout; reasoning, tool calls, usage and "
        "the finish on stderr (or every chunk as JSON lines on stdout with --json).",
    )
    call.add_argument("prompt", help="the user message; - reads it from stdin")
    call.add_argument("--provider", "-p", default=None, help="provider route (default: demo)")
    call.add_argument(
        "--model",
        "-m",
        default=None,
        help="model id (default: the route's first; one the route does not list is sent "
        "with a warning)",
    )
    call.add_argument("--system", default=None, metavar="TEXT", help="system prompt")
    call.add_argument(
        "--tool",
        action="append",
        default=[],
        metavar="NAME=SCHEMA_JSON",
        help="offer a tool: its name and the JSON Schema of its arguments "
        "(NAME alone: no arguments); repeatable",
    )
    call.add_argument(
        "--tools",
        default=None,
        metavar="FILE",
        help='offer the tools of a JSON file: [{"name", "description", "parameters"}, ...]',
    )
    call.add_argument("--max-tokens", type=int, default=None, help="output cap")
    call.add_argument("--temperature", type=float, default=None)
    call.add_argument("--effort", default=None, help="reasoning effort, e.g. low/medium/high")
    call.add_argument("--retry", action="store_true", help="retry with the route's retry policy")
    call.add_argument(
        "--via", metavar="URL", default=None, help="call through a gateway (ws://host:port/)"
    )
    call.add_argument("--token-env", default=DEFAULT_TOKEN_ENV, metavar="NAME")
    _connect_timeout_option(call)
    call.add_argument(
        "--json",
        action="store_true",
        help="every event as one JSON object per line on stdout (the protocol's chunks)",
    )
    call.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        default="auto",
        help="style stderr: auto (a terminal, unless $NO_COLOR is set), always, never",
    )
    call.add_argument(
        "--no-color", dest="color", action="store_const", const="never", help="--color=never"
    )

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


def _playground_url(url: str) -> str:
    """The page the gateway's port serves at ``/``: its websocket URL over HTTP."""
    scheme, sep, rest = url.partition("://")
    return ("https" if scheme == "wss" else "http") + sep + rest


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
    out.write(f"playground: {_playground_url(url)} (open it in a browser)\n")
    out.write(f"workers: {workers}\n")
    out.write(f"auth: {'on (bearer token from $' + token_env + ')' if token else 'off'}\n")
    if tracing:
        out.write("tracing: OpenTelemetry (GenAI conventions; call frames may carry traceparent)\n")
    from .config import describe

    out.write("providers:\n")
    for line in describe(config):
        out.write(f"  {line}\n")
    out.flush()


class ServeOptions(TypedDict):
    """The `serve_gateway` keyword arguments that ``llmrt serve`` derives from its
    command line, configuration and environment."""

    token: str | None
    allow_origin: tuple[str, ...]
    limits: Limits
    metrics_auth: str


def serve_options(
    args: argparse.Namespace, config: configuration.Config, environ: dict[str, str]
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
        limits=_gateway_limits(args, config.gateway),
        metrics_auth=metrics_auth,
    )


async def _serve_workers(
    args: argparse.Namespace,
    config: configuration.Config,
    out: TextIO,
    environ: dict[str, str],
    *,
    task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED,
) -> int:
    from ..gateway._server import _is_loopback
    from .workers import supervise

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
    from ._collector import collector_line, tune_for_serving
    from ._setup import configured_runtime

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
    # The receiver is open before anything announces readiness (the banner,
    # ``task_status.started``): once a client can know the gateway serves, a
    # SIGINT is a shutdown, never trio's KeyboardInterrupt. Opened first, it also
    # keeps a signal that arrives during start-up until the loop below reads it.
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with configured_runtime(config) as rt, trio.open_nursery() as nursery:
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
            async for _ in signals:
                break
            out.write("shutting down\n")
            out.flush()
            await _stop_unless_interrupted(server, signals, args, out)
            nursery.cancel_scope.cancel()
    return 0


async def _stop_unless_interrupted(
    server: GatewayServer, signals: AsyncIterator[int], args: argparse.Namespace, out: TextIO
) -> None:
    """Drain and stop ``server``; a second signal meanwhile exits at once.

    The gateway gives in-flight calls their grace period even when its task is
    cancelled (the connections are shielded for it), so the one way to stop now
    is to leave now, as a second Ctrl-C of ``llmrt call`` does: the clients see
    their connections close. Reading the signals while stopping also means
    none is left pending in the receiver, which trio would deliver again as a
    KeyboardInterrupt when it closes.
    """
    async with trio.open_nursery() as nursery:

        async def again() -> None:
            async for _ in signals:
                out.write("interrupted again: exiting now, in-flight calls are cut off\n")
                out.flush()
                os._exit(130)

        nursery.start_soon(again)
        await stop_gateway(server, drain_delay=args.drain_delay, grace=args.shutdown_grace)
        nursery.cancel_scope.cancel()


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
    from ._setup import gateway_client

    if args.via:
        async with gateway_client(args, environ) as client:
            providers = await client.list_providers()
        for provider in providers:
            out.write(f"{provider.id}\t{provider.name}\n")
        return 0
    from .config import describe

    for line in describe(config):
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
    from ._setup import configured_runtime, gateway_client, route_of, table_of

    if args.via:
        async with gateway_client(args, environ) as client:
            directory = await client.list_configurable_providers()
            live = {p.id for p in await client.list_providers()}
            return await _show_models(
                args.provider, directory, live, client.discover_models, client.list_models, out, ()
            )
    route = route_of(config, args.provider)
    async with configured_runtime(config, environ=environ) as rt:
        live = {p.id for p in rt.list_providers()}
        return await _show_models(
            route,
            rt.list_configurable_providers(),
            live,
            rt.discover_models,
            rt.list_models,
            out,
            table_of(config, route),
        )


async def _show_models(
    route: str,
    directory: Sequence[llmrt.adapter.ConfigurableProvider],
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


# ---- stats -------------------------------------------------------------------------------


def _counts(counts: Mapping[str, int]) -> str:
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
    from ._setup import configured_runtime, gateway_client

    if args.via:
        async with gateway_client(args, environ) as client:
            value = await client.stats()
    else:
        if args.calls < 0:
            raise ValueError("--calls must be >= 0")
        async with configured_runtime(config) as rt:
            options = GenerateOptions(
                provider="demo", model="demo-1", messages=(llmrt.user_message("hello"),)
            )
            for _ in range(args.calls):
                async with rt.stream(options) as call:
                    async for _chunk in call:
                        pass
            value = rt.statistics()
    if args.json:
        import msgspec

        out.write(msgspec.json.format(msgspec.json.encode(value), indent=2).decode() + "\n")
    else:
        for line in format_stats(value):
            out.write(line + "\n")
    return 0


# ---- entry point -------------------------------------------------------------------------


def _route_of(config: configuration.Config, name: str) -> str:
    """`_setup.route_of` (named here too: tests and plugins have used this name)."""
    from ._setup import route_of

    return route_of(config, name)


def _default_model(config: configuration.Config, provider: str) -> str:
    """`_setup.default_model` (named here too, like `_route_of`)."""
    from ._setup import default_model

    return default_model(config, provider)


def _sole_cause(group: BaseExceptionGroup[Any]) -> BaseException | None:
    """The one exception nested groups hold (nurseries in nurseries), or None."""
    inner = sole_exception(group)
    while isinstance(inner, BaseExceptionGroup):
        inner = sole_exception(inner)
    return inner


def _bind_problem(exc: OSError, args: argparse.Namespace) -> str | None:
    """What a failed listen means for ``llmrt serve`` and how to fix it, or None."""
    if args.command != "serve" or exc.filename is not None:
        return None  # a file's error, not the listener's
    where = f"port {args.port} on {args.host}"
    if exc.errno == errno.EADDRINUSE:
        return (
            f"{where} is already in use (another llmrt serve?): stop what holds it, or "
            "pick another port with --port N (--port 0 takes any free port)"
        )
    if exc.errno == errno.EACCES:
        return (
            f"not allowed to listen on {where} (ports below 1024 need privileges): "
            "pick another port with --port N"
        )
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"{args.host} is not an address of this machine: pick another with --host"
    return None


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
    parser = _parser()
    args = parse_args(argv, parser)
    out = out or sys.stdout
    err = err or sys.stderr
    env = dict(os.environ if environ is None else environ)
    if args.command is None:
        parser.print_help(out)
        return 0
    # Imported once a command runs: `llmrt --help` needs none of it.
    from . import config as configuration
    from .plugins import PLUGIN_ERROR

    try:
        config = configuration.load_config(args.config, environ=env)
        # An unusable adapter plugin costs its own kind only: say so, serve the rest.
        for problem in config.plugins.problems.values():
            print(f"llmrt: warning [{PLUGIN_ERROR}]: {problem}", file=err)
        try:
            if args.command == "call":
                from ._call_command import call_command

                return call_command(args, config, out, err, env, stdin or sys.stdin.buffer)
            if args.command == "serve":
                return trio.run(
                    functools.partial(_serve, serving_process=True), args, config, out, env
                )
            if args.command == "providers":
                return trio.run(_providers, args, config, out, env)
            if args.command == "stats":
                return trio.run(_stats, args, config, out, env)
            return trio.run(_models, args, config, out, env)
        except BaseExceptionGroup as group:
            if group.subgroup(KeyboardInterrupt) is not None:
                # Ctrl-C that trio delivered inside a nursery (before a signal
                # receiver was open, or after it closed): an interrupt, not a crash.
                raise KeyboardInterrupt from None
            # Nurseries wrap what went wrong; report the one cause plainly.
            inner = _sole_cause(group)
            if isinstance(inner, Exception):
                raise inner from None
            raise
    except configuration.ConfigError as exc:
        print(f"llmrt: {exc}", file=err)
        return 2
    except LlmError as exc:
        print(f"llmrt: {exc}", file=err)
        return 1
    except BrokenPipeError:
        # The reader of stdout left (``llmrt call ... | head -1``): stop quietly, as
        # a Unix tool does, with the status a shell reports for SIGPIPE.
        _silence(out)
        return 128 + signal.SIGPIPE
    except OSError as exc:
        print(f"llmrt: {_bind_problem(exc, args) or exc}", file=err)
        return 2
    except ValueError as exc:
        print(f"llmrt: {exc}", file=err)
        return 2
    except KeyboardInterrupt:
        # Ctrl-C before the call's own handler was installed (or after it ended).
        print("llmrt: interrupted", file=err)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
