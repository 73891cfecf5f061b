"""One worker process of ``llmrt serve --workers N``: a gateway on the shared port.

The supervisor (`llmrt.actors.app.workers.supervise`) starts each worker as
``python -m llmrt.actors.app.worker SPEC``. A worker parses the supervisor's
own ``serve`` command line again, so every option reaches every worker
through the same `llmrt.actors.app.cli._serving.serve_options` as in one process, and
serves until SIGTERM or until its supervisor goes away (its stdin closes).
Reloads come as lines on stdin (a round the supervisor runs) and a ``reload``
frame is passed up as a line on stdout (``workers._reload``); a SIGHUP sent to
a worker itself reloads that worker alone.
Living here, beside the CLI it reuses, keeps the supervisor free of any
import of the CLI (no import cycle).
"""

from __future__ import annotations

import itertools
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

import attrs
import msgspec
import trio

from llmrt import ErrorCode, LlmFailure

from ..gateway import ReloadReport, WorkerReload, serve_gateway
from ..gateway._metrics import Figures
from . import config as configuration
from ._collector import freeze_for_exit, tune_for_serving
from ._reload import ServedConfig, describe_reload, served_config
from .cli import parse_args
from .cli._serving import call_log_settings, serve_middleware, serve_options, stop_gateway
from .workers import READY_LINE, SharedFigures, WorkerSpec
from .workers._reload import (
    RELOAD_SECONDS,
    ReloadAll,
    ReloadAnswer,
    ReloadDone,
    ReloadOrder,
    ToSupervisor,
    encode_line,
    lines,
)

log = logging.getLogger("llmrt.workers")

__all__ = ["run_worker", "worker_main"]


@attrs.define(eq=False)
class _Talk:
    """This worker's side of the reload lines (see ``workers._reload``)."""

    served: ServedConfig
    slot: int
    nursery: trio.Nursery
    _write_lock: trio.Lock = attrs.field(factory=trio.Lock)
    _tickets: itertools.count[int] = attrs.field(factory=lambda: itertools.count(1))
    _asks: dict[int, list[ReloadReport]] = attrs.field(factory=dict)
    _answered: dict[int, trio.Event] = attrs.field(factory=dict)

    async def _write(self, line: ToSupervisor) -> None:
        data = encode_line(line)
        async with self._write_lock:
            while data:
                written = await trio.to_thread.run_sync(os.write, 1, data)
                data = data[written:]

    async def _reload_order(self, ticket: int) -> None:
        result = await self.served.reload()
        await self._write(ReloadDone(ticket=ticket, result=result))

    async def reload_all(self) -> ReloadReport:
        """What this worker's gateway runs for a ``reload`` frame: the supervisor's round."""
        ticket = next(self._tickets)
        box: list[ReloadReport] = []
        self._asks[ticket] = box
        self._answered[ticket] = answered = trio.Event()
        try:
            await self._write(ReloadAll(ticket=ticket))
            with trio.move_on_after(RELOAD_SECONDS + 5):
                await answered.wait()
        finally:
            del self._asks[ticket], self._answered[ticket]
        if box:
            return box[0]
        failure = LlmFailure(message="the supervisor did not answer", code=ErrorCode.TIMEOUT)
        return ReloadReport(
            ok=False, workers=(WorkerReload(ok=False, worker=self.slot, error=failure),)
        )

    async def on_sighup(self) -> None:
        log.warning("%s", describe_reload(await self.served.reload()))

    async def watch_stdin(self, stop: trio.Event) -> None:
        # The supervisor holds the other end of stdin: end of file means it is gone.
        async with trio.lowlevel.FdStream(os.dup(0)) as stream:
            async for line in lines(stream, to_worker=True):
                if isinstance(line, ReloadOrder):
                    self.nursery.start_soon(self._reload_order, line.ticket)
                elif isinstance(line, ReloadAnswer) and line.ticket in self._asks:
                    self._asks[line.ticket].append(line.report)
                    self._answered[line.ticket].set()
        stop.set()


async def _watch_signals(
    stop: trio.Event, talk: _Talk, *, task_status: trio.TaskStatus[None]
) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        task_status.started()
        async for signum in signals:
            if signum == signal.SIGHUP:
                if not stop.is_set():
                    talk.nursery.start_soon(talk.on_sighup)  # this worker alone
                continue
            stop.set()  # a second signal changes nothing: the drain is bounded


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
        served_config(
            config, path=args.config, environ=environ, worker=spec.slot, call_log=call_log
        ) as served,
        trio.open_nursery() as nursery,
    ):
        rt = served.runtime
        for middleware in serve_middleware(args):
            rt.use(middleware)
        talk = _Talk(served, spec.slot, nursery)
        await nursery.start(_watch_signals, stop, talk)
        serve = partial(
            serve_gateway,
            rt,
            args.host,
            spec.port,
            reuse_port=True,
            metrics_render=shared.render,
            reload=talk.reload_all,
            **serve_options(args, config, environ),
        )
        server = await nursery.start(serve)
        publisher = trio.CancelScope()

        async def publish() -> None:
            with publisher:
                await _publish_every(shared, server.figures, spec.snapshot_seconds)

        nursery.start_soon(publish)
        nursery.start_soon(talk.watch_stdin, stop)
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
    try:
        status = worker_main(sys.argv[1:])
    finally:
        freeze_for_exit()  # the worker exits next (see _collector)
    sys.exit(status)
