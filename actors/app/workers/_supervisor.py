"""``llmrt serve --workers N``: N gateway processes on one port, supervised.

Process tree::

    llmrt serve --workers N        the supervisor: holds the port, prints, restarts
     ├─ python -m llmrt.actors.app.worker SPEC   worker 0: a whole gateway
     ├─ ...                                      (runtime + serve_gateway)
     └─ worker N-1

Each worker binds its own listening socket to the port with ``SO_REUSEPORT``
and the kernel spreads new connections over them; a connection stays with the
worker that accepted it (gateways keep no state between connections). The
supervisor binds the same address first without listening: it keeps the
port while workers come and go, and resolves ``--port 0``.

Lifecycle:

* a worker that dies (crash, ``SIGKILL``, OOM) is logged and restarted after
  a back-off (0.1 s, doubling to 5 s; reset once a worker has lived 10 s).
  Its websockets die with it: the kernel closes them, so its clients see the
  connection end at once (the Python client ends their calls with a
  ``network`` error) and reconnect to the port, where a live worker answers.
  A worker that dies before its first ready signal during start-up fails the
  whole command instead (bad configuration does not restart forever).
* ``SIGTERM``/``SIGINT`` to the supervisor is forwarded as ``SIGTERM`` to every
  worker, each of which drains like a single ``llmrt serve``: ``/readyz``
  answers 503 for ``--drain-delay`` seconds while everything keeps serving,
  then the listener closes, in-flight calls get ``--shutdown-grace`` seconds,
  the rest end with an ``aborted`` finish and every websocket closes with
  1001. The supervisor exits once every worker has (bounded; stragglers are
  killed).
* A worker whose supervisor disappears sees its stdin close and drains too.
* ``SIGHUP`` to the supervisor is a reload round: every live worker is told
  (a line on its stdin, ``_reload``) to read the configuration file again,
  and the supervisor prints each worker's outcome. A ``reload`` frame that
  reaches one worker makes that worker ask the supervisor for the same
  round, and it answers the frame with every worker's outcome. Rounds take
  turns; a worker that does not answer within `RELOAD_SECONDS` (or dies
  meanwhile, or is restarting) is reported as such. A worker that starts
  later reads the file as it is then.

Metrics over workers (``/metrics`` on any worker answers for all): each worker
writes its statistics snapshot (`RuntimeStatistics`, the ``stats`` frame's
value) to a private directory of the supervisor every second; a scrape sums
the fresh figures of the scraped worker with the other workers' latest files.
When a worker dies the supervisor folds its last snapshot into
``retired.json`` with the gauges zeroed, so counters never go backwards over
a restart. Why not prometheus-client's multiprocess mode: it keeps every
metric in a memory-mapped file written on each increment (a cost on the call
path that llmrt's metrics avoid by reading the runtime's own statistics at
scrape time), and it exports only the metrics it stored, not custom
collectors like the gateway's. Staleness is at most the snapshot period
(``SNAPSHOT_SECONDS``), far below a scrape interval. The directory is
``_figures``; the sum, without I/O, ``_sum``.
"""

from __future__ import annotations

import contextlib
import itertools
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

import attrs
import msgspec
import trio

from llmrt import ErrorCode, LlmFailure

from ...gateway._protocol import ReloadReport, WorkerReload
from ._figures import SNAPSHOT_SECONDS, retire
from ._reload import (
    RELOAD_SECONDS,
    ReloadAll,
    ReloadAnswer,
    ReloadDone,
    ReloadOrder,
    ToWorker,
    encode_line,
    lines,
)

__all__ = ["WorkerSpec", "supervise", "READY_LINE"]

#: Restart back-off: first delay, cap, and the uptime after which it resets.
BACKOFF_FIRST, BACKOFF_MAX, BACKOFF_RESET = 0.1, 5.0, 10.0
#: How long a worker may take from spawn to its ready line.
STARTUP_SECONDS = 30.0
#: Slack on top of drain delay + grace + close timeout before stragglers are killed.
STOP_SLACK = 5.0
#: What a worker writes on stdout once it serves.
READY_LINE = b"ready\n"


class WorkerSpec(msgspec.Struct, frozen=True, kw_only=True):
    """What a worker process is told on its command line (no secrets: the token
    stays in the environment the worker inherits).

    ``argv`` is the supervisor's own ``llmrt serve ...`` command line: the
    worker parses it again, so that every ``serve`` option reaches every
    worker through `llmrt.actors.app.cli._serving.serve_options`, as in a single process.
    Paths in it are relative to the working directory, which workers share.
    """

    slot: int
    #: The port the supervisor holds (``--port 0`` resolved).
    port: int
    figures_dir: str
    argv: tuple[str, ...]
    snapshot_seconds: float = SNAPSHOT_SECONDS


# ---- the supervisor ----------------------------------------------------------------------


def _describe(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"


async def _await_ready(proc: trio.Process) -> bool:
    """Whether the worker says it serves within `STARTUP_SECONDS` (False: it died or hung)."""
    assert proc.stdout is not None
    data = b""
    with trio.move_on_after(STARTUP_SECONDS):
        while not data.endswith(b"\n") and len(data) < len(READY_LINE):
            chunk = await proc.stdout.receive_some(len(READY_LINE) - len(data))
            if not chunk:
                return False
            data += chunk
        return data == READY_LINE
    return False


def _failed(slot: int, code: str, message: str) -> WorkerReload:
    return WorkerReload(ok=False, worker=slot, error=LlmFailure(message=message, code=code))


@attrs.define(eq=False)
class _Round:
    """One reload round: the workers it waits for and what those that answered said."""

    waiting: set[int]
    results: dict[int, WorkerReload] = attrs.field(factory=dict)
    done: trio.Event = attrs.field(factory=trio.Event)

    def answer(self, slot: int, result: WorkerReload) -> None:
        if slot in self.waiting:
            self.waiting.discard(slot)
            self.results[slot] = result
            if not self.waiting:
                self.done.set()


@attrs.define(eq=False)
class _Supervisor:
    spec: Callable[[int], WorkerSpec]
    out: TextIO
    figures_dir: Path
    workers: int
    procs: dict[int, trio.Process] = attrs.field(factory=dict)
    #: Set by a signal or by a worker that cannot start: every slot stops.
    stop: trio.Event = attrs.field(factory=trio.Event)
    stopping: bool = False
    failure: str | None = None
    ready: int = 0
    all_ready: trio.Event = attrs.field(factory=trio.Event)
    running: int = 0
    slots_done: trio.Event = attrs.field(factory=trio.Event)
    restarts: int = 0
    #: Folding a dead worker into ``retired.json`` reads, merges and rewrites it:
    #: workers that die together must take turns, or one fold is lost.
    retiring: trio.Lock = attrs.field(factory=trio.Lock)
    #: Workers that said they serve, and are alive: the ones a reload round asks.
    live: dict[int, trio.Process] = attrs.field(factory=dict)
    #: One writer at a time on each worker's stdin.
    stdin_locks: dict[int, trio.Lock] = attrs.field(factory=dict)
    rounds: dict[int, _Round] = attrs.field(factory=dict)
    tickets: itertools.count[int] = attrs.field(factory=lambda: itertools.count(1))
    reloading: trio.Lock = attrs.field(factory=trio.Lock)

    def say(self, line: str) -> None:
        self.out.write(line + "\n")
        self.out.flush()

    async def run_slot(self, slot: int) -> None:
        self.running += 1
        try:
            await self._run_slot(slot)
        finally:
            self.running -= 1
            if not self.running:
                self.slots_done.set()

    async def _run_slot(self, slot: int) -> None:
        delay = BACKOFF_FIRST
        starting = True
        while not self.stopping:
            command = [
                sys.executable,
                "-m",
                "llmrt.actors.app.worker",
                msgspec.json.encode(self.spec(slot)).decode(),
            ]
            # A session of its own: a terminal's Ctrl-C reaches the supervisor
            # alone, which stops the workers in order.
            proc = await trio.lowlevel.open_process(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True
            )
            self.procs[slot] = proc
            born = trio.current_time()
            try:
                ready = await _await_ready(proc)
                if ready:
                    self.say(f"worker {slot} ready: pid {proc.pid}")
                    if starting:
                        self.ready += 1
                        if self.ready == self.workers:
                            self.all_ready.set()
                    async with trio.open_nursery() as talk:
                        self.live[slot] = proc
                        talk.start_soon(self._listen, slot, proc, talk)
                        returncode = await proc.wait()
                        talk.cancel_scope.cancel()
                else:
                    proc.kill()
                    returncode = await proc.wait()
            finally:
                self.live.pop(slot, None)
                for pending in self.rounds.values():
                    pending.answer(
                        slot,
                        _failed(slot, ErrorCode.ABORTED, "the worker exited during the reload"),
                    )
                with trio.CancelScope(shield=True):
                    if proc.returncode is None:
                        proc.kill()
                    await proc.wait()
                    for pipe in (proc.stdin, proc.stdout):
                        if pipe is not None:
                            await pipe.aclose()
                    del self.procs[slot]
                    async with self.retiring:
                        await trio.to_thread.run_sync(retire, self.figures_dir, slot, proc.pid)
            how = _describe(returncode)
            if self.stopping:
                self.say(f"worker {slot} (pid {proc.pid}) stopped: {how}")
                return
            if starting and not ready:
                self.failure = f"worker {slot} did not start ({how}); see its errors above"
                self.stop.set()
                return
            starting = False
            if trio.current_time() - born >= BACKOFF_RESET:
                delay = BACKOFF_FIRST
            self.restarts += 1
            self.say(f"worker {slot} (pid {proc.pid}) died: {how}; restarting in {delay:.1f} s")
            with trio.move_on_after(delay):
                await self.stop.wait()
            delay = min(2 * delay, BACKOFF_MAX)

    async def _listen(self, slot: int, proc: trio.Process, talk: trio.Nursery) -> None:
        """Read what worker ``slot`` says after its ready line (reload outcomes and asks)."""
        assert proc.stdout is not None
        async for line in lines(proc.stdout, to_worker=False):
            if isinstance(line, ReloadDone):
                pending = self.rounds.get(line.ticket)
                if pending is not None:
                    result = line.result
                    if result.worker != slot:
                        result = msgspec.structs.replace(result, worker=slot)
                    pending.answer(slot, result)
            elif isinstance(line, ReloadAll):
                talk.start_soon(self._answer, slot, line.ticket)

    async def _answer(self, slot: int, ticket: int) -> None:
        report = await self.reload_all()
        await self._tell(slot, ReloadAnswer(ticket=ticket, report=report))

    async def _tell(self, slot: int, line: ToWorker) -> bool:
        """Write ``line`` to worker ``slot``'s stdin; False when it is gone."""
        proc = self.live.get(slot)
        if proc is None or proc.stdin is None:
            return False
        lock = self.stdin_locks.setdefault(slot, trio.Lock())
        async with lock:
            try:
                await proc.stdin.send_all(encode_line(line))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return False
        return True

    async def reload_all(self) -> ReloadReport:
        """A reload round over every worker (see the module docstring); one at a time."""
        async with self.reloading:
            ticket = next(self.tickets)
            pending = _Round(waiting=set(self.live))
            self.rounds[ticket] = pending
            try:
                for slot in range(self.workers):
                    if slot not in pending.waiting:
                        pending.results[slot] = _failed(
                            slot,
                            ErrorCode.OVERLOADED,
                            "the worker is restarting: it reads the file as it starts",
                        )
                for slot in sorted(pending.waiting):
                    if not await self._tell(slot, ReloadOrder(ticket=ticket)):
                        pending.answer(slot, _failed(slot, ErrorCode.ABORTED, "the worker exited"))
                if pending.waiting:
                    with trio.move_on_after(RELOAD_SECONDS):
                        await pending.done.wait()
                for slot in sorted(pending.waiting):
                    pending.results[slot] = _failed(
                        slot,
                        ErrorCode.TIMEOUT,
                        f"the worker did not answer within {RELOAD_SECONDS:g} s",
                    )
            finally:
                del self.rounds[ticket]
            results = tuple(pending.results[slot] for slot in sorted(pending.results))
            return ReloadReport(ok=all(result.ok for result in results), workers=results)

    async def on_sighup(self) -> None:
        from .._reload import describe_reload

        report = await self.reload_all()
        for result in report.workers:
            self.say(describe_reload(result))

    def signal_all(self, signum: int) -> None:
        for proc in list(self.procs.values()):
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signum)


async def supervise(
    *,
    workers: int,
    host: str,
    port: int,
    argv: Sequence[str],
    drain_delay: float,
    shutdown_grace: float | None,
    out: TextIO,
    banner: Callable[[str], None],
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> int:
    """Run ``workers`` gateway processes on ``host``:``port`` until SIGTERM/SIGINT.

    ``argv``: the ``llmrt serve`` command line, which each worker parses again.

    ``banner(url)`` prints what ``llmrt serve`` prints, once every worker serves.
    Calls ``task_status.started(port)`` once every worker is ready. Returns the
    exit status: 0 after a clean stop, 1 when a worker could not start.
    """
    from ...gateway import Limits
    from ...gateway._listen import bind_reuseport

    if workers < 1:
        raise ValueError(f"--workers must be at least 1, got {workers}")
    limits = Limits()
    grace = limits.shutdown_grace if shutdown_grace is None else shutdown_grace
    stop_bound = drain_delay + grace + limits.close_timeout + STOP_SLACK
    held = bind_reuseport(host, port, listen=False)
    figures_dir = Path(tempfile.mkdtemp(prefix="llmrt-figures-"))
    try:
        port = int(held[0].getsockname()[1])

        def spec(slot: int) -> WorkerSpec:
            return WorkerSpec(slot=slot, port=port, figures_dir=str(figures_dir), argv=tuple(argv))

        sup = _Supervisor(spec=spec, out=out, figures_dir=figures_dir, workers=workers)
        url_host = f"[{host}]" if ":" in host else host
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:

            async def on_signal() -> None:
                async for signum in signals:
                    if signum != signal.SIGHUP:
                        sup.stop.set()
                    elif not sup.stopping:
                        nursery.start_soon(sup.on_sighup)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(on_signal)
                for slot in range(workers):
                    nursery.start_soon(sup.run_slot, slot)
                async with trio.open_nursery() as first:

                    async def ready() -> None:
                        await sup.all_ready.wait()
                        first.cancel_scope.cancel()

                    async def stopped() -> None:
                        await sup.stop.wait()
                        first.cancel_scope.cancel()

                    first.start_soon(ready)
                    first.start_soon(stopped)
                if sup.all_ready.is_set() and not sup.stop.is_set():
                    # Printed once the port serves: a client that reads the
                    # address and connects is not refused.
                    banner(f"ws://{url_host}:{port}/")
                    sup.say(f"workers ready: {workers}")
                    task_status.started(port)
                await sup.stop.wait()
                sup.stopping = True
                if sup.failure is None:
                    sup.say(f"shutting down: draining {len(sup.procs)} workers")
                sup.signal_all(signal.SIGTERM)
                with trio.move_on_after(stop_bound):
                    await sup.slots_done.wait()
                sup.signal_all(signal.SIGKILL)
                await sup.slots_done.wait()
                nursery.cancel_scope.cancel()
        if sup.failure is not None:
            print(f"llmrt: {sup.failure}", file=sys.stderr)
            return 1
        sup.say("stopped")
        return 0
    finally:
        for sock in held:
            sock.close()
        shutil.rmtree(figures_dir, ignore_errors=True)
