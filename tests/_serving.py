"""Helpers for tests that run ``llmrt serve`` as real processes (workers, nginx).

`serving` starts ``python -m llmrt.actors.app.cli serve ...`` and reads its
output lines as they come; `http_get` speaks plain HTTP/1.1 to a port;
`metric` reads one sample of a Prometheus text page; `slow_demo_config`
writes a config whose ``slow`` route is the demo model at a chosen pace.
Every wait is bounded.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import trio
from _cli_process import cli_argv
from prometheus_client.parser import text_string_to_metric_families

import llmrt

#: How long a process may take to print what a test waits for (cold imports
#: on a busy machine take seconds).
STARTUP = 30.0


def slow_demo_config(directory: Path, tokens_per_second: float) -> Path:
    """A config file with a ``slow`` route: the demo model at ``tokens_per_second``."""
    path = directory / "llmrt.toml"
    path.write_text(
        f'[[provider]]\nroute = "slow"\nadapter = "demo"\ntokens_per_second = {tokens_per_second}\n'
    )
    return path


def slow_options(words: int = 1) -> llmrt.GenerateOptions:
    """A request to the ``slow`` route; the demo quotes the prompt, so more words last longer."""
    prompt = " ".join(["hello"] * words)
    return llmrt.GenerateOptions(
        provider="slow", model="demo-1", messages=(llmrt.user_message(prompt),)
    )


@attrs.define(eq=False)
class Served:
    """A running ``llmrt serve`` process and the lines it has printed so far."""

    proc: trio.Process
    lines: list[str] = attrs.field(factory=list)
    _changed: trio.Event = attrs.field(factory=trio.Event)
    _ended: bool = False

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        pending = b""
        while chunk := await self.proc.stdout.receive_some(65536):
            pending += chunk
            *complete, pending = pending.split(b"\n")
            self.lines.extend(line.decode() for line in complete)
            self._changed.set()
            self._changed = trio.Event()
        self._ended = True
        self._changed.set()

    async def expect(
        self,
        pattern: str,
        *,
        within: float = STARTUP,
        where: Callable[[re.Match[str]], bool] = lambda _: True,
    ) -> re.Match[str]:
        """The first printed line matching ``pattern`` (and ``where``); waits for it."""
        regex = re.compile(pattern)
        with trio.fail_after(within):
            while True:
                for line in self.lines:
                    found = regex.search(line)
                    if found is not None and where(found):
                        return found
                if self._ended:
                    raise AssertionError(f"no line matches {pattern!r}: {self.lines}")
                await self._changed.wait()

    async def port(self) -> int:
        return int((await self.expect(r"listening on ws://127\.0\.0\.1:(\d+)/")).group(1))

    async def exit_code(self, within: float) -> int:
        with trio.fail_after(within):
            return await self.proc.wait()


@asynccontextmanager
async def serving(*args: str, env: dict[str, str] | None = None) -> AsyncIterator[Served]:
    """Run ``llmrt serve ARGS`` for the block; SIGTERM (then SIGKILL) when the block ends."""
    command = [*cli_argv(), "serve", "--port", "0", *args]
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    proc = await trio.lowlevel.open_process(command, stdout=subprocess.PIPE, env=full_env)
    served = Served(proc)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(served._read)
        try:
            yield served
        finally:
            with trio.CancelScope(shield=True):
                if proc.returncode is None:
                    proc.send_signal(signal.SIGTERM)
                    with trio.move_on_after(20):
                        await proc.wait()
                    if proc.returncode is None:
                        proc.kill()
                        await proc.wait()
                with trio.move_on_after(5):
                    await proc.wait()
            nursery.cancel_scope.cancel()


async def http_get(port: int, path: str, *, within: float = 10.0) -> tuple[int, str]:
    """``GET path`` on 127.0.0.1:``port``: the status and the body (the server closes)."""
    with trio.fail_after(within):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            request = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
            await stream.send_all(request.encode())
            data = bytearray()
            while chunk := await stream.receive_some(65536):
                data += chunk
    head, _, body = bytes(data).partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, body.decode()


def metric(text: str, name: str, **labels: str) -> float | None:
    """The value of sample ``name`` with ``labels`` in a Prometheus text page (None: absent)."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return None


def samples(text: str, name: str) -> dict[str, float]:
    """Every sample of ``name`` by its ``worker`` label (per-worker families)."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                out[sample.labels.get("worker", "")] = float(sample.value)
    return out


async def poll(check: Callable[[], Awaitable[bool]], *, within: float, every: float = 0.05) -> None:
    """Wait until ``await check()`` is true, at most ``within`` seconds.

    For state another process holds (it can only be asked, not awaited).
    """
    with trio.fail_after(within):
        while True:
            if await check():
                return
            await trio.sleep(every)
