"""Abandonment and abort, measured in one process: how soon the provider socket closes.

``bench_http.py`` measures abandonment across two processes, so its figure
includes the upstream process's own scheduling. Here the local upstream
(`llmrt.testing`) runs in the same trio run as the clients: the time from a
consumer deciding to leave to the upstream observing the client's EOF is the
client's closing path plus one loopback hop, with no second process in it.

What is measured, per stream: ``closed_at`` of the upstream's record of the
stream's connection (`trio.current_time()` when the server saw the client
leave) minus the client's clock reading at the moment it left, in ms. Each
consumer leaves right after its k-th text delta, k = 3..7 (``3 + n % 5``).
Three cases:

* ``leave`` -- llmrt (`OpenAIChatAdapter` in `llmrt.open_runtime`): ``break``
  out of ``async for chunk in call``, leaving the ``async with rt.stream(...)``;
* ``abort`` -- llmrt: ``call.abort()`` inside the ``async with``;
* ``floor`` -- the raw-trio floor client of ``_floor.py`` (one trio socket per
  stream, chunked coding and SSE parsed by hand), unchanged: leaving is
  returning from inside its ``async with sock``. It notes ``time.monotonic()``
  when it leaves, converted here to trio's clock (on Linux trio's clock is
  CLOCK_MONOTONIC plus a constant offset, measured once per run).

Every request carries its stream number at the end of its user message, so
the upstream's request records map each stream to its connection. One round
runs the three cases one after another on the same upstream, each with
``streams`` concurrent streams started ``stagger`` seconds apart, and waits
for every connection to close; the case order rotates from round to round,
so machine noise and order effects fall on all three alike. The stagger
spreads the streams' events over the upstream's 10 ms pace: started all at
once, every stream wakes on the same tick and a close waits behind the
whole batch, which measures the run queue, not the closing path. Sizes: 10
streams 1 ms apart x 100 rounds = 1,000 cancels per case (``--quick``:
10 x 3); ``python -m bench`` can change them through ``LLMRT_BENCH_SIZES``
(keys ``streams``, ``rounds``, ``stagger``).

Reported per case: p50 / p90 / p99 / max ms and how many closes took at most
1 ms; for ``leave`` and ``abort`` the p99 over the floor's p99, and a target
of p99 <= ``TARGET_P99_MS``. The profile of what remains: for llmrt, the
stop until its own ``close()`` of the socket (the rest is the upstream's
wake-up), and, from a tenth as many extra rounds under a trio instrument,
the duration of each stopped call task's unwinding step and of its
bookkeeping step after it (see `LastSteps`) beside the unwinding step of a
floor call task (`floor_task`: a bare trio task with its own cancel scope
and socket, stopped the same way), as a ratio of medians, with a target of
an unwinding step p50 <= ``TARGET_STEP_US``.

    python bench/bench_abandon.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import _floor
import msgspec
import trio
from _common import environment, median, percentiles, sized, table, write_json

import llmrt
from llmrt.adapters.openai_chat import OpenAIChatAdapter
from llmrt.testing import SSEScript, Upstream, open_upstream, openai_events

#: A close counted in ``within_1ms``.
TARGET_MS = 1.0
#: The target for llmrt's p99 cancel -> close, per llmrt case.
TARGET_P99_MS = 0.35
#: The target for a stopped call task's unwinding step p50, in µs (see `LastSteps`).
TARGET_STEP_US = 25.0

CASES = ("leave", "abort", "floor")
FULL: dict[str, Any] = {"streams": 10, "rounds": 100, "stagger": 0.001}
QUICK: dict[str, Any] = {"streams": 10, "rounds": 3, "stagger": 0.001}
API_KEY = "sk-bench-0000"


def leave_after(n: int) -> int:
    """Text deltas stream ``n`` reads before it leaves: 3..7."""
    return 3 + n % 5


def prompt(n: int) -> str:
    # The prompt ends with " n", so the upstream's request record finds the
    # connection stream n used (see `closes`).
    return f"go {n}"


def trio_offset() -> float:
    """``trio.current_time() - time.monotonic()``: constant within a process on Linux."""
    before = time.monotonic()
    now = trio.current_time()
    after = time.monotonic()
    return now - (before + after) / 2


#: trio time of every client socket close (`_Connection.close`), in order: see `watch_closes`.
CLOSED_AT: list[float] = []


def watch_closes() -> None:
    """Note when llmrt's transport closes a socket, to split the latency in two.

    The stop -> upstream figure is llmrt's part (the stop until its own
    ``close()`` of the socket) plus the upstream's (until its task runs and
    reads the EOF). Leaving or aborting runs the adapter's closer before any
    checkpoint, so the first close noted after a stream left is its own.
    """
    from llmrt.adapters import _transport

    original = _transport._Connection.close

    def close(self: Any) -> None:
        if not self.closed:
            CLOSED_AT.append(trio.current_time())
        original(self)

    _transport._Connection.close = close  # type: ignore[method-assign]


class LastSteps(trio.abc.Instrument):
    """The duration of each stopped call task's unwinding step, in µs.

    Used only in the extra profile rounds, so the measured rounds run without
    an instrument. The upstream task wakes to the client's close in the
    scheduler batch after the stop, the batch in which the call task's
    unwinding step runs too; trio runs a batch in one order or the reverse
    at random, so about half of the closes wait for this step before the
    upstream sees them. Kept per task name: llmrt's call tasks
    (``llmrt.call``) and the floor's (`floor_task`, ``floor.call``).

    A stopped llmrt call task unwinds (and delivers its finish, if any) in
    one step, then counts itself out (statistics, the watchdog, the stopper)
    in a step of its own, its last: for it ``us`` is its next-to-last step
    and ``bookkeeping_us`` its last. A floor task is timed by its last step
    (the stop's ``Cancelled``, its scope, the task's exit), as before the
    split; its unwinding takes more than one step too, since closing its
    socket stream is a checkpoint.
    """

    def __init__(self) -> None:
        self._started: dict[trio.lowlevel.Task, float] = {}
        # Each task's step before the one under way, in µs.
        self._previous: dict[trio.lowlevel.Task, float] = {}
        self.us: dict[str, list[float]] = {CALL_TASK: [], FLOOR_TASK: []}
        self.bookkeeping_us: list[float] = []

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task.name in self.us:
            self._started[task] = time.perf_counter()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        started = self._started.pop(task, None)
        if started is not None and task.name == CALL_TASK:
            self._previous[task] = (time.perf_counter() - started) * 1e6

    def task_exited(self, task: trio.lowlevel.Task) -> None:
        # trio reports the exit inside the task's last step, before after_task_step:
        # the step now under way is the last one.
        started = self._started.get(task)
        previous = self._previous.pop(task, None)
        if started is None:
            return
        last = (time.perf_counter() - started) * 1e6
        if task.name == FLOOR_TASK:
            self.us[FLOOR_TASK].append(last)
        elif previous is not None:
            self.us[CALL_TASK].append(previous)
            self.bookkeeping_us.append(last)


CALL_TASK = "llmrt.call"
FLOOR_TASK = "floor.call"


async def floor_task(
    session: _floor.Session,
    body: bytes,
    deltas: int,
    seen: trio.Event,
    handle: list[Any],
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """The least a call task does: its own cancel scope and socket, read until stopped.

    The floor for a call task's unwinding step: its consumer stops it as llmrt's
    stop does (closes the socket under the waiting read, cancels the scope),
    and the task unwinds and exits. It counts text deltas by their bytes and
    sets ``seen`` after ``deltas`` of them; ``handle`` gets (scope, stream).
    """
    with trio.CancelScope() as scope:
        sock = await trio.open_tcp_stream(session.host, session.port)
        handle += (scope, sock)
        task_status.started()
        try:
            async with sock:
                await sock.send_all(session.head + b"Content-Length: %d\r\n\r\n" % len(body) + body)
                count = 0
                while data := await sock.receive_some(_floor.READ):
                    count += data.count(b'"content":')
                    if count > deltas:  # the role event's empty content counts too
                        seen.set()
        except trio.ClosedResourceError:
            pass


async def run_floor_tasks(session: _floor.Session, streams: int, stagger: float) -> None:
    """One round of `floor_task` streams, each stopped by its consumer after its deltas."""
    async with trio.open_nursery() as tasks:

        async def one(n: int) -> None:
            body = msgspec.json.encode(
                {"model": "m", "messages": [{"role": "user", "content": prompt(n)}], "stream": True}
            )
            seen = trio.Event()
            handle: list[Any] = []
            await tasks.start(
                floor_task, session, body, leave_after(n), seen, handle, name=FLOOR_TASK
            )
            await seen.wait()
            scope, sock = handle
            sock.socket.close()
            scope.cancel()

        async with trio.open_nursery() as consumers:
            for n in range(streams):
                consumers.start_soon(one, n)
                await trio.sleep(stagger)


async def run_llmrt(
    rt: Any,
    streams: int,
    stagger: float,
    how: str,
    own_close: list[float],
    finished: list[float] | None = None,
) -> dict[int, float]:
    """One round of llmrt streams; returns trio's clock when each stream left.

    Appends to ``own_close`` each stream's microseconds from leaving to its own
    socket close, and (``abort``) to ``finished`` those from ``abort()`` to the
    consumer's aborted finish.
    """
    left: dict[int, float] = {}

    async def one(n: int) -> None:
        request = llmrt.GenerateOptions(
            provider="p", model="m", messages=(llmrt.user_message(prompt(n)),)
        )
        k = leave_after(n)
        mark = -1
        async with rt.stream(request) as call:
            seen = 0
            async for chunk in call:
                if not isinstance(chunk, llmrt.TextDelta):
                    if finished is not None and n in left and isinstance(chunk, llmrt.Finish):
                        finished.append((trio.current_time() - left[n]) * 1e6)
                    continue
                seen += 1
                if seen == k and n not in left:
                    left[n] = trio.current_time()
                    mark = len(CLOSED_AT)
                    if how == "abort":
                        call.abort()
                    else:
                        break  # leaving the async with: the abandonment case
        if 0 <= mark < len(CLOSED_AT):
            own_close.append((CLOSED_AT[mark] - left[n]) * 1e6)

    async with trio.open_nursery() as nursery:
        for n in range(streams):
            nursery.start_soon(one, n)
            await trio.sleep(stagger)
    return left


async def run_floor(
    session: _floor.Session, streams: int, stagger: float, offset: float
) -> dict[int, float]:
    """One round of floor streams; returns trio's clock when each stream left."""
    left: dict[int, float] = {}
    received = [0]

    async def one(n: int) -> None:
        body = msgspec.json.encode(
            {
                "model": "m",
                "messages": [{"role": "user", "content": prompt(n)}],
                "stream": True,
                "stream_options": {"include_usage": True},
            }
        )
        _, at = await _floor.stream(session, body, leave_after(n), received)
        if at is None:
            raise RuntimeError(f"floor stream {n} ended before its {leave_after(n)}th delta")
        left[n] = at + offset

    async with trio.open_nursery() as nursery:
        for n in range(streams):
            nursery.start_soon(one, n)
            await trio.sleep(stagger)
    return left


def closes(
    upstream: Upstream, first_request: int, left: dict[int, float], odd: dict[str, int]
) -> list[float]:
    """Milliseconds from each stream leaving to the upstream seeing its connection close."""
    out: list[float] = []
    records = upstream.requests[first_request:]
    if len(records) != len(left):
        odd["request_count_mismatch"] += abs(len(records) - len(left))
    for record in records:
        n = int(record.json["messages"][-1]["content"].rsplit(" ", 1)[-1])
        connection = upstream.connections[record.connection]
        assert connection.closed_at is not None  # wait_all_closed saw it close
        if connection.closed_by != "client" or n not in left:
            odd["not_closed_by_client"] += 1  # a server close or a stream that never left
            continue
        out.append((connection.closed_at - left[n]) * 1000)
    return out


async def measure(
    streams: int, rounds: int, stagger: float
) -> tuple[dict[str, list[float]], dict[str, Any]]:
    """All three cases, interleaved round by round, against one upstream in one trio run."""
    script = SSEScript(events=openai_events([f"t{i} " for i in range(1000)]), delay=0.01)
    samples: dict[str, list[float]] = {case: [] for case in CASES}
    odd: dict[str, dict[str, int]] = {
        case: {"not_closed_by_client": 0, "request_count_mismatch": 0} for case in CASES
    }
    offset = trio_offset()
    own_close: dict[str, list[float]] = {"leave": [], "abort": []}
    abort_to_finish: list[float] = []
    watch_closes()
    async with (
        open_upstream(script) as upstream,
        llmrt.open_runtime() as rt,
        _floor.open_session(upstream.base_url, API_KEY) as session,
    ):
        adapter = OpenAIChatAdapter(
            base_url=upstream.base_url, api_key_env="K", environ={"K": API_KEY}
        )
        await rt.register_adapter(["p"], adapter)
        for round_ in range(rounds):
            shift = round_ % len(CASES)
            for case in CASES[shift:] + CASES[:shift]:
                first_request = len(upstream.requests)
                if case == "floor":
                    left = await run_floor(session, streams, stagger, offset)
                else:
                    left = await run_llmrt(
                        rt,
                        streams,
                        stagger,
                        case,
                        own_close[case],
                        abort_to_finish if case == "abort" else None,
                    )
                with trio.fail_after(10):
                    await upstream.wait_all_closed()
                samples[case] += closes(upstream, first_request, left, odd[case])
        # The profile: a tenth as many rounds again under `LastSteps`, llmrt's
        # two cases and the floor's call tasks interleaved.
        steps = LastSteps()
        trio.lowlevel.add_instrument(steps)
        for _ in range(max(1, rounds // 10)):
            for case in ("leave", "abort", "floor"):
                if case == "floor":
                    await run_floor_tasks(session, streams, stagger)
                else:
                    await run_llmrt(rt, streams, stagger, case, [])
                with trio.fail_after(10):
                    await upstream.wait_all_closed()
        trio.lowlevel.remove_instrument(steps)
        drift_ms = (trio_offset() - offset) * 1000
    return samples, {
        "offset_drift_ms": drift_ms,
        "anomalies": odd,
        "own_close_us": own_close,
        "abort_to_finish_us": abort_to_finish,
        "call_unwinding_step_us": steps.us[CALL_TASK],
        "call_bookkeeping_step_us": steps.bookkeeping_us,
        "floor_unwinding_step_us": steps.us[FLOOR_TASK],
    }


def verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("MET" if ok else "MISSED")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    sizes = sized(QUICK if args.quick else FULL)
    streams, rounds = int(sizes["streams"]), int(sizes["rounds"])
    command = "python bench/bench_abandon.py" + (" --quick" if args.quick else "")
    if os.environ.get("LLMRT_BENCH_SIZES"):
        command = f"LLMRT_BENCH_SIZES='{json.dumps(sizes, separators=(',', ':'))}' {command}"
    started = time.perf_counter()
    samples, checks = trio.run(measure, streams, rounds, float(sizes["stagger"]))
    seconds = time.perf_counter() - started

    results: dict[str, dict[str, Any]] = {}
    for case in CASES:
        ms = samples[case]
        stats = percentiles(ms)
        results[case] = {
            "samples": len(ms),
            "p50_ms": median(ms),
            **{k + "_ms": v for k, v in stats.items()},
            "within_1ms": sum(1 for v in ms if v <= TARGET_MS),
            **checks["anomalies"][case],
        }
    floor_p99 = results["floor"]["p99_ms"]
    targets: dict[str, str] = {}
    for case in ("leave", "abort"):
        results[case]["p99_over_floor"] = results[case]["p99_ms"] / floor_p99
        own = checks["own_close_us"][case]
        if own:
            results[case]["stop_to_own_close_us"] = {
                "samples": len(own),
                "p50": median(own),
                **percentiles(own),
            }
        targets[f"{case}_p99<={TARGET_P99_MS}ms"] = verdict(
            results[case]["p99_ms"] <= TARGET_P99_MS
        )

    finished = checks["abort_to_finish_us"]
    if finished:
        results["abort"]["abort_to_finish_us"] = {
            "samples": len(finished),
            "p50": median(finished),
            **percentiles(finished),
        }

    def summary(us: list[float]) -> dict[str, float] | None:
        return {"samples": len(us), "p50": median(us), **percentiles(us)} if us else None

    report: dict[str, Any] = {
        "benchmark": "abandon",
        "command": command,
        "environment": environment(),
        "sizes": sizes,
        "streams": streams,
        "rounds": rounds,
        "cancels_per_case": streams * rounds,
        "statistic": "median / nearest-rank percentiles",
        "target_p99_ms": TARGET_P99_MS,
        "clock_offset_drift_ms": checks["offset_drift_ms"],
        "seconds": seconds,
        "results": results,
        "call_unwinding_step_us": summary(checks["call_unwinding_step_us"]),
        "call_bookkeeping_step_us": summary(checks["call_bookkeeping_step_us"]),
        "floor_unwinding_step_us": summary(checks["floor_unwinding_step_us"]),
        "targets": targets,
    }

    rows = []
    for case in CASES:
        r = results[case]
        ratio = r.get("p99_over_floor")
        rows.append(
            [
                case,
                r["samples"],
                f"{r['p50_ms']:.3f}",
                f"{r['p99_ms']:.3f}",
                f"{r['max_ms']:.3f}",
                "" if ratio is None else f"{ratio:.2f}x",
                f"{r['within_1ms']}/{r['samples']}",
            ]
        )
    headers = ["case", "cancels", "p50 ms", "p99 ms", "max ms", "p99 / floor", "<= 1 ms"]
    print(table(headers, rows))
    for case in ("leave", "abort"):
        own = results[case].get("stop_to_own_close_us")
        if own:
            print(
                f"{case}: leaving -> llmrt's own close() of the socket: p50 {own['p50']:.1f} µs, "
                f"p99 {own['p99']:.1f} µs ({own['samples']} closes); the rest is the upstream's"
            )
    finished_us = results["abort"].get("abort_to_finish_us")
    if finished_us:
        print(
            f"abort: abort() -> the consumer's aborted finish: p50 {finished_us['p50']:.1f} µs, "
            f"p99 {finished_us['p99']:.1f} µs ({finished_us['samples']} finishes)"
        )
    step = report["call_unwinding_step_us"]
    bookkeeping = report["call_bookkeeping_step_us"]
    floor_step = report["floor_unwinding_step_us"]
    if step:
        print(
            f"profile: a stopped call task's unwinding step, which shares the upstream's "
            f"wake-up batch: p50 {step['p50']:.1f} µs, p99 {step['p99']:.1f} µs "
            f"({step['samples']} calls, extra rounds under a trio instrument)"
        )
    if bookkeeping:
        print(
            f"profile: its bookkeeping step after it (statistics, watchdog, stopper; "
            f"the task's last): p50 {bookkeeping['p50']:.1f} µs, p99 {bookkeeping['p99']:.1f} µs"
        )
    if step and floor_step:
        report["unwinding_step_p50_over_floor"] = step["p50"] / floor_step["p50"]
        targets[f"unwinding_step_p50<={TARGET_STEP_US:g}us"] = verdict(
            step["p50"] <= TARGET_STEP_US
        )
        print(
            f"profile: the floor's call task (a bare trio task, its scope and socket, stopped "
            f"the same way), its last step: p50 {floor_step['p50']:.1f} µs, "
            f"p99 {floor_step['p99']:.1f} µs; llmrt's p50 is "
            f"{report['unwinding_step_p50_over_floor']:.2f}x the floor's"
        )
    for name, value in targets.items():
        print(f"target {name}: {value}")
    for case in CASES:
        odd = {k: v for k, v in checks["anomalies"][case].items() if v}
        if odd:
            print(f"warning: {case}: {odd}")
    print(f"{seconds:.1f} s, clock offset drift {checks['offset_drift_ms']:.4f} ms")
    path = write_json("abandon" + ("-quick" if args.quick else "") + ".json", report)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
