"""``llmrt serve``: the configured providers over the websocket gateway, in this process
or in ``--workers N`` supervised processes sharing the port.

What one process and every worker derive alike from the command line (the
gateway's options and limits, the middleware, how SIGTERM stops a gateway)
is `_serving`'s; here: the flags, the banner, the signals, and what a failed
listen means.
"""

from __future__ import annotations

import argparse
import errno
import functools
import os
import signal
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, TextIO

import trio

import llmrt

from ._command import CommandError, Streams, sole_cause
from ._options import DEFAULT_TOKEN_ENV, token_env_option
from ._serving import call_log_settings, serve_middleware, serve_options, stop_gateway

if TYPE_CHECKING:
    from ...gateway import GatewayServer, ReloadReport
    from ..config import Config

__all__ = ["DEFAULT_PORT", "add_arguments", "bind_problem", "run", "serve"]

DEFAULT_PORT = 8765


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument(
        "--no-gc-tuning",
        dest="gc_tuning",
        action="store_false",
        help="keep Python's garbage collector settings (by default a serving process freezes "
        "what start-up allocated and raises the first threshold: docs/operations.md)",
    )
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="port (0: any free port)")
    token_env_option(
        parser,
        help=f"environment variable holding the bearer token (default {DEFAULT_TOKEN_ENV}); "
        "when it is set, clients must present the token. Required beyond loopback.",
    )
    parser.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="a browser origin (scheme://host[:port]) whose pages may use the gateway, "
        "besides the gateway's own; repeatable; '*' (any page) only with a token. "
        "Adds to [gateway].allow_origin of llmrt.toml.",
    )
    parser.add_argument(
        "--metrics-auth",
        choices=("open", "token"),
        default=None,
        help="who may read /metrics: anyone who reaches the port (open, the default) or "
        "holders of the gateway token as a bearer header (token). Wins over "
        "[gateway].metrics_auth of llmrt.toml.",
    )
    parser.add_argument(
        "--idle-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="close connections with no call in flight for this long (default 300)",
    )
    parser.add_argument(
        "--max-connections-per-peer",
        type=int,
        default=None,
        metavar="N",
        help="open connections per client address (default 64)",
    )
    parser.add_argument(
        "--max-pending-bytes",
        type=int,
        default=None,
        metavar="BYTES",
        help="encoded chunks one connection may queue for a slow client (default 4 MiB)",
    )
    parser.add_argument(
        "--max-frame-bytes",
        type=int,
        default=None,
        metavar="BYTES",
        help="the largest websocket frame, either way (default 1 MiB, at least 4096)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=0,
        metavar="N",
        help="run N gateway processes sharing the port (SO_REUSEPORT), supervised: "
        "a worker that dies is restarted (default: this process serves alone)",
    )
    parser.add_argument(
        "--drain-delay",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="on SIGTERM, answer /readyz with 503 for this long while serving on, "
        "before closing the listener (default 0)",
    )
    parser.add_argument(
        "--shutdown-grace",
        type=float,
        default=None,
        metavar="SECONDS",
        help="on SIGTERM, how long in-flight calls may run before they are aborted (default 5)",
    )
    parser.add_argument(
        "--otel",
        action="store_true",
        help="trace every call with OpenTelemetry (needs llmrt[otel]; spans and metrics go "
        "to the globally configured providers, e.g. under opentelemetry-instrument)",
    )
    parser.add_argument(
        "--call-log",
        metavar="DIR",
        default=None,
        help="record every call in JSON Lines files in DIR (overrides [call_log]'s "
        "directory; read them with llmrt log show / tail)",
    )


def run(args: argparse.Namespace, config: Config, streams: Streams) -> int:
    """``llmrt serve`` until SIGINT or SIGTERM; a listen that fails says how to fix it."""
    try:
        return trio.run(
            functools.partial(serve, serving_process=True),
            args,
            config,
            streams.out,
            streams.environ,
        )
    except BaseException as exc:
        problem = bind_problem(sole_cause(exc), args)
        if problem is None:
            raise
        raise CommandError(problem) from None


def bind_problem(exc: BaseException | None, args: argparse.Namespace) -> str | None:
    """What a failed listen means for ``llmrt serve`` and how to fix it, or None."""
    if not isinstance(exc, OSError) or exc.filename is not None:
        return None  # not an OSError, or a file's error, not the listener's
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


def check_stop_options(args: argparse.Namespace) -> None:
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


def _print_reload(out: TextIO, report: ReloadReport) -> None:
    """A reload's outcome on the serving output: a line per process."""
    from .._reload import describe_reload

    for result in report.workers:
        out.write(describe_reload(result) + "\n")
    out.flush()


def _print_serving(
    out: TextIO,
    config: Config,
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
    from ..config import describe

    out.write("providers:\n")
    for line in describe(config):
        out.write(f"  {line}\n")
    out.flush()


async def _serve_workers(
    args: argparse.Namespace,
    config: Config,
    out: TextIO,
    environ: dict[str, str],
    *,
    task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED,
) -> int:
    from ...gateway._server import _is_loopback
    from ..workers import supervise

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


async def serve(
    args: argparse.Namespace,
    config: Config,
    out: TextIO,
    environ: dict[str, str],
    *,
    serving_process: bool = False,
    task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED,
) -> int:
    """``llmrt serve``. ``serving_process``: this process exists to serve (the command line),
    so the collector is set up for it (`tune_for_serving`); never in an embedding process.
    """
    from ...gateway import serve_gateway
    from ...gateway._server import _is_loopback
    from .._collector import collector_line, tune_for_serving
    from .._reload import served_config, single_report

    token = environ.get(args.token_env) or None
    if token is None and not _is_loopback(args.host):
        raise ValueError(
            f"refusing to serve on the non-loopback host {args.host!r} without a token: "
            f"set ${args.token_env} (or name another variable with --token-env); "
            "clients then present it as a bearer token"
        )
    check_stop_options(args)
    tracing = serve_middleware(args)
    if args.workers:
        return await _serve_workers(args, config, out, environ, task_status=task_status)
    options = serve_options(args, config, environ)
    # The receiver is open before anything announces readiness (the banner,
    # ``task_status.started``): once a client can know the gateway serves, a
    # SIGINT is a shutdown, never trio's KeyboardInterrupt. Opened first, it also
    # keeps a signal that arrives during start-up until the loop below reads it.
    #
    # SIGHUP reads the configuration file again (docs/configuration.md, "Reloading").
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
        call_log = call_log_settings(args, config)
        async with (
            served_config(config, path=args.config, environ=environ, call_log=call_log) as served,
            trio.open_nursery() as nursery,
        ):
            rt = served.runtime
            for middleware in tracing:
                rt.use(middleware)

            async def reload() -> ReloadReport:
                report = single_report(await served.reload())
                _print_reload(out, report)
                return report

            start = functools.partial(
                serve_gateway, rt, args.host, args.port, reload=reload, **options
            )
            server = await nursery.start(start)
            token = options["token"]
            _print_serving(
                out, config, server.url, "1 (this process)", token, args.token_env, bool(tracing)
            )
            task_status.started(server)
            if args.gc_tuning and serving_process:
                tune_for_serving()
                out.write(f"{collector_line()}\n")
                out.flush()
            async for signum in signals:
                if signum != signal.SIGHUP:
                    break
                nursery.start_soon(reload)
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
            async for signum in signals:
                if signum == signal.SIGHUP:
                    continue  # too late to reload: the gateway is stopping
                out.write("interrupted again: exiting now, in-flight calls are cut off\n")
                out.flush()
                os._exit(130)

        nursery.start_soon(again)
        await stop_gateway(server, drain_delay=args.drain_delay, grace=args.shutdown_grace)
        nursery.cancel_scope.cancel()
