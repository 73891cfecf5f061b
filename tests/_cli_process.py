"""The ``llmrt`` command line as a real process, driven from a trio test.

The test's own servers (a local upstream, a gateway, a silent listener) run
in the test's trio loop while the CLI runs in a child process, so signals
and sockets are real. Every wait is bounded by the caller's ``fail_after``.

The child is forked from a warm interpreter (`_warm_llmrt`), which spares
each command the interpreter's start and llmrt's imports; ``warm=False``
starts ``python -m llmrt.actors.app.cli`` itself, for a test whose race
includes the moments a signal takes to be passed on.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys

import attrs
import trio
from _warm_llmrt import command

#: The command line of a cold ``llmrt``, as a user's shell starts it.
COLD = [sys.executable, "-m", "llmrt.actors.app.cli"]


def cli_argv(*, warm: bool = True) -> list[str]:
    """The argv prefix that runs ``llmrt``: warm (forked, the default) or cold."""
    return command() if warm else COLD


@attrs.define(eq=False)
class CliProcess:
    proc: trio.Process
    out: bytearray = attrs.field(factory=bytearray)
    err: bytearray = attrs.field(factory=bytearray)

    @property
    def text(self) -> str:
        return self.out.decode("utf-8", "replace")

    @property
    def err_text(self) -> str:
        return self.err.decode("utf-8", "replace")

    async def read_until(self, needle: str) -> str:
        """Read stdout until it holds ``needle``; raises AssertionError if it ends first."""
        assert self.proc.stdout is not None
        await self._read_until(self.proc.stdout, self.out, needle)
        return self.text

    async def read_err_until(self, needle: str) -> str:
        """Read stderr until it holds ``needle``; raises AssertionError if it ends first."""
        assert self.proc.stderr is not None
        await self._read_until(self.proc.stderr, self.err, needle)
        return self.err_text

    async def _read_until(
        self, stream: trio.abc.ReceiveStream, into: bytearray, needle: str
    ) -> None:
        while needle.encode() not in into:
            data = await stream.receive_some(65536)
            if not data:
                raise AssertionError(
                    f"the stream ended before {needle!r}: {into.decode('utf-8', 'replace')!r}"
                )
            into += data

    def interrupt(self) -> None:
        self.proc.send_signal(signal.SIGINT)

    async def finish(self) -> tuple[int, str, str]:
        """Read both pipes to their end and wait for the exit: (status, stdout, stderr)."""
        assert self.proc.stdout is not None and self.proc.stderr is not None

        async def drain(stream: trio.abc.ReceiveStream, into: bytearray) -> None:
            while data := await stream.receive_some(65536):
                into += data

        async with trio.open_nursery() as nursery:
            nursery.start_soon(drain, self.proc.stdout, self.out)
            nursery.start_soon(drain, self.proc.stderr, self.err)
        status = await self.proc.wait()
        return status, self.text, self.err.decode("utf-8", "replace")


async def spawn_cli(
    *argv: str,
    env: dict[str, str] | None = None,
    stdin: bytes | None = None,
    warm: bool = True,
    cwd: str | os.PathLike[str] | None = None,
) -> CliProcess:
    """Start ``llmrt ARGV...`` with the test's environment minus any real API key.

    ``stdin``: bytes the child reads on its stdin, which is then closed (None:
    the test's own stdin is inherited). ``warm``: see the module's docstring.
    ``cwd``: its working directory (None: the test's).
    """
    environ = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    environ.pop("LLMRT_GATEWAY_TOKEN", None)
    environ.pop("NO_COLOR", None)
    environ.update(env or {})
    environ["PYTHONUNBUFFERED"] = "1"
    proc = await trio.lowlevel.open_process(
        [*cli_argv(warm=warm), *argv],
        stdin=subprocess.PIPE if stdin is not None else None,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=environ,
        cwd=cwd,
    )
    if stdin is not None:
        assert proc.stdin is not None
        async with proc.stdin:
            # A child that stops reading (a bounded read) closes the pipe on exit.
            with contextlib.suppress(trio.BrokenResourceError):
                await proc.stdin.send_all(stdin)
    return CliProcess(proc)


async def kill(cli: CliProcess) -> None:
    """Make sure the child is gone (a failed assertion must not leave it running)."""
    if cli.proc.returncode is None:
        cli.proc.kill()
        with trio.CancelScope(shield=True):
            await cli.proc.wait()
