"""One worker process of ``llmrt serve --workers N``: a gateway on the shared port.

The supervisor (`llmrt.actors.app.workers.supervise`) starts each worker as
``python -m llmrt.actors.app.worker SPEC``. A worker parses the supervisor's
own ``serve`` command line again, so every option reaches every worker
through the same `llmrt.actors.app.cli._serving.serve_options` as in one process, and
serves until SIGTERM or until its supervisor goes away (its stdin closes).
Living here, beside the CLI it reuses, keeps the supervisor free of any
import of the CLI (no import cycle).
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

import msgspec
import trio

from ..gateway import serve_gateway
from ..gateway._metrics import Figures
from . import config as configuration
from ._collector import tune_for_serving
from ._setup import configured_runtime
from .cli import parse_args
from .cli._serving import call_log_settings, serve_middleware, serve_options, stop_gateway
from .workers import READY_LINE, SharedFigures, WorkerSpec

__all__ = ["run_worker", "worker_main"]


async def _watch_signals(stop: trio.Event, *, task_status: trio.TaskStatus[None]) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        task_status.started()
        async for _ in signals:
            stop.set()  # a second signal changes nothing: the drain is bounded


async def _watch_stdin(stop: trio.Event) -> None:
    # The supervisor holds the other end of stdin: end of file means it is gone.
    async with trio.lowlevel.FdStream(os.dup(0)) as stream:
        while await stream.receive_some(1024):
            pass
    stop.set()


async def _publish_every(
    shared: SharedFigures, read: Callable[[], Figures], seconds: float
) -> None:
    while True:
        await trio.to_thread.run_sync(shared.publish, read())
        await trio.sleep(seconds)


async def run_worker(spec: WorkerSpec, environ: dict[str, str]) -> int:
    """One worker: a gateway on the shared port until SIGTERM (or its supervisor leaves)."""

    args = parse_args(spec.argv)
    config = configuration.load_config(args.config, environ=environ)
    shared = SharedFigures(Path(spec.figures_dir), spec.slot)
    stop = trio.Event()
    call_log = call_log_settings(args, config, worker=spec.slot)
    async with (
        configured_runtime(config, call_log=call_log) as rt,
        trio.open_nursery() as nursery,
    ):
        for middleware in serve_middleware(args):
            rt.use(middleware)
        await nursery.start(_watch_signals, stop)
        serve = partial(
            serve_gateway,
            rt,
            args.host,
            spec.port,
            reuse_port=True,
            metrics_render=shared.render,
            **serve_options(args, config, environ),
        )
        server = await nursery.start(serve)
        publisher = trio.CancelScope()

        async def publish() -> None:
            with publisher:
                await _publish_every(shared, server.figures, spec.snapshot_seconds)

        nursery.start_soon(publish)
        nursery.start_soon(_watch_stdin, stop)
        if args.gc_tuning:
            tune_for_serving()  # a worker process exists to serve: see _collector
        os.write(1, READY_LINE)
        await stop.wait()
        await stop_gateway(server, drain_delay=args.drain_delay, grace=args.shutdown_grace)
        publisher.cancel()
        # The last figures, for the supervisor to fold into the retired sum.
        await trio.to_thread.run_sync(shared.publish, server.figures())
        nursery.cancel_scope.cancel()
    return 0


def worker_main(argv: Sequence[str]) -> int:
    """Entry point of ``python -m llmrt.actors.app.worker SPEC``."""
    if len(argv) != 1:
        print(
            "usage: python -m llmrt.actors.app.worker SPEC (llmrt serve runs it)",
            file=sys.stderr,
        )
        return 2
    spec = msgspec.json.decode(argv[0], type=WorkerSpec)
    return trio.run(run_worker, spec, dict(os.environ))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(worker_main(sys.argv[1:]))
