"""``llmrt serve --workers N``: real processes on one port, a killed worker, a drain.

Each test runs the command as a subprocess and talks to it like any client
would: websockets through the Python client, ``/metrics`` and ``/readyz``
over plain HTTP. Which worker serves a connection is the kernel's choice
(``SO_REUSEPORT``), so the tests read it from the per-worker metrics.
"""

from __future__ import annotations

import io
import os
import signal
from pathlib import Path

import attrs
import msgspec
import pytest
import trio
from _serving import (
    Served,
    http_get,
    metric,
    poll,
    samples,
    serving,
    slow_demo_config,
    slow_options,
)
from _settle import wait_until

import llmrt
from llmrt import ErrorCode, Finish, FinishAborted, FinishError, FinishStop
from llmrt.actors.app.cli import main
from llmrt.actors.gateway.client import open_gateway_client


@attrs.define
class Client:
    """One websocket with one call, as seen from the client side."""

    started: trio.Event = attrs.field(factory=trio.Event)
    done: trio.Event = attrs.field(factory=trio.Event)
    finish: Finish | None = None
    close_code: int | None = None


async def stream_one(
    url: str, options: llmrt.GenerateOptions, client: Client, *, await_close: bool = False
) -> None:
    try:
        async with open_gateway_client(url) as gateway:
            async with gateway.stream(options) as call:
                async for chunk in call:
                    client.started.set()
                    if isinstance(chunk, Finish):
                        client.finish = chunk
            if await_close:
                # The close frame follows the last finish: the client records its code.
                await wait_until(lambda: gateway.close_code is not None, 15, settle=False)
            client.close_code = gateway.close_code
    finally:
        client.done.set()


async def scrape(port: int) -> str:
    status, body = await http_get(port, "/metrics")
    assert status == 200
    return body


async def ready_pids(served: Served, count: int) -> dict[int, int]:
    await served.expect(rf"^workers ready: {count}$")
    pids: dict[int, int] = {}
    for slot in range(count):
        found = await served.expect(rf"^worker {slot} ready: pid (\d+)$")
        pids[slot] = int(found.group(1))
    return pids


async def test_workers_share_the_port_and_a_killed_worker_is_replaced(tmp_path: Path) -> None:
    config = slow_demo_config(tmp_path, tokens_per_second=4)
    async with serving("--workers", "3", "--config", str(config)) as served:
        assert (await served.expect(r"^workers: (\d+)")).group(1) == "3"
        port = await served.port()
        pids = await ready_pids(served, 3)
        assert len(set(pids.values())) == 3
        url = f"ws://127.0.0.1:{port}/"
        clients = [Client() for _ in range(12)]
        async with trio.open_nursery() as nursery:
            for client in clients:
                nursery.start_soon(stream_one, url, slow_options(words=20), client)
            with trio.fail_after(30):
                for client in clients:
                    await client.started.wait()

            # Every worker's snapshot shows its share of the 12 websockets and calls.
            # A scrape reports the worker serving it from its live figures and the
            # others from their published snapshots (one a second). The victim's
            # calls survive it only as far as its snapshot had them, so several
            # scrapes in a row must agree: each lands on any of the three workers,
            # and eight all served by the victim itself happen once in 6,561.
            seen: dict[str, dict[str, float]] = {}
            streak = [0]

            async def all_counted() -> bool:
                text = await scrape(port)
                seen["connections"] = samples(text, "llmrt_gateway_worker_connections")
                seen["calls"] = samples(text, "llmrt_gateway_worker_calls_started_total")
                counted = sum(seen["connections"].values()) == 12 == sum(seen["calls"].values())
                streak[0] = streak[0] + 1 if counted else 0
                return streak[0] >= 8

            await poll(all_counted, within=15)
            per_worker = seen["connections"]
            assert sorted(per_worker) == ["0", "1", "2"]
            # Connections landed on more than one worker.
            assert sum(1 for n in per_worker.values() if n > 0) >= 2

            victim = max(per_worker, key=lambda slot: per_worker[slot])
            lost = int(per_worker[victim])
            dead_pid = pids[int(victim)]
            os.kill(dead_pid, signal.SIGKILL)
            await served.expect(
                rf"^worker {victim} \(pid {dead_pid}\) died: killed by SIGKILL; restarting in"
            )

            # Exactly the victim's clients end, at once and cleanly: a finish with
            # the network code, no exception, no hang. The others stream on.
            async def victims_ended() -> bool:
                return sum(c.done.is_set() for c in clients) >= lost

            await poll(victims_ended, within=10)
            ended = [c for c in clients if c.done.is_set()]
            assert len(ended) == lost
            for client in ended:
                assert client.finish is not None
                reason = client.finish.reason
                assert isinstance(reason, FinishError)
                assert reason.failure.code == ErrorCode.NETWORK
            assert all(c.finish is None for c in clients if not c.done.is_set())

            # A new process takes the slot, and the port serves new clients.
            found = await served.expect(
                rf"^worker {victim} ready: pid (\d+)$",
                where=lambda m: int(m.group(1)) != dead_pid,
            )
            assert int(found.group(1)) not in pids.values()
            for _ in range(6):
                fresh = Client()
                await stream_one(
                    url, msgspec.structs.replace(slow_options(), provider="demo"), fresh
                )
                assert fresh.finish is not None
                assert isinstance(fresh.finish.reason, FinishStop)

            # The sum over workers keeps the dead worker's counts.
            last: dict[str, float | None] = {}

            async def summed() -> bool:
                text = await scrape(port)
                last.update(
                    slow=metric(text, "llmrt_calls_started_total", provider="slow"),
                    demo=metric(text, "llmrt_calls_started_total", provider="demo"),
                    workers=metric(text, "llmrt_gateway_workers"),
                )
                return last == {"slow": 12, "demo": 6, "workers": 3}

            try:
                await poll(summed, within=15)
            except trio.TooSlowError:
                # Say what the sum showed last: a flake here must be diagnosable from CI.
                message = f"the summed /metrics never matched; last seen {last}"
                raise AssertionError(message) from None
            nursery.cancel_scope.cancel()


async def test_sigterm_drains_every_worker(tmp_path: Path) -> None:
    config = slow_demo_config(tmp_path, tokens_per_second=4)
    args = ("--workers", "3", "--config", str(config), "--drain-delay", "1.5")
    async with serving(*args, "--shutdown-grace", "0.5") as served:
        port = await served.port()
        await ready_pids(served, 3)
        url = f"ws://127.0.0.1:{port}/"
        clients = [Client() for _ in range(9)]
        async with trio.open_nursery() as nursery:
            for client in clients:
                nursery.start_soon(
                    lambda c=client: stream_one(url, slow_options(words=20), c, await_close=True)
                )
            with trio.fail_after(30):
                for client in clients:
                    await client.started.wait()
            assert (await http_get(port, "/readyz"))[0] == 200

            served.proc.send_signal(signal.SIGTERM)
            await served.expect(r"^shutting down: draining 3 workers$")

            async def not_ready() -> bool:
                return (await http_get(port, "/readyz"))[0] == 503

            # Every worker answers 503 during the drain delay, calls still streaming.
            await poll(not_ready, within=10)
            assert not any(c.done.is_set() for c in clients)

            with trio.fail_after(20):
                for client in clients:
                    await client.done.wait()
        for client in clients:
            assert client.finish is not None
            assert isinstance(client.finish.reason, FinishAborted)
            assert client.close_code == 1001
        assert await served.exit_code(20) == 0
        for slot in range(3):
            await served.expect(rf"^worker {slot} \(pid \d+\) stopped: exit status 0$")
        await served.expect(r"^stopped$")


def _gone(pid: int) -> bool:
    """Whether ``pid`` has exited (a zombie not yet reaped by its new parent counts)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


async def test_workers_leave_when_their_supervisor_is_killed(tmp_path: Path) -> None:
    config = slow_demo_config(tmp_path, tokens_per_second=4)
    async with serving("--workers", "2", "--config", str(config)) as served:
        pids = await ready_pids(served, 2)
        served.proc.kill()  # no forwarding, no clean-up: only the closed stdin pipe tells
        assert await served.exit_code(10) == -signal.SIGKILL

        async def orphans_gone() -> bool:
            return all(_gone(pid) for pid in pids.values())

        await poll(orphans_gone, within=20)


def test_bad_worker_options_are_refused_before_any_process_starts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # In process: main returns before binding or spawning anything.
    for argv, message in (
        (["--workers", "-1"], "--workers must be >= 1"),
        (["--drain-delay", "-1"], "--drain-delay must be >= 0"),
        (["--shutdown-grace", "inf"], "--shutdown-grace must be >= 0"),
        (["--workers", "2", "--host", "0.0.0.0"], "without a token"),
    ):
        out = io.StringIO()
        assert main(["serve", "--port", "0", *argv], out=out, environ={}) == 2
        assert message in capsys.readouterr().err
        assert out.getvalue() == ""
