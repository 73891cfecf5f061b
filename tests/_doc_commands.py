"""Running a page's commands and programs as a reader would: the examples test's processes.

`Env` is where an example runs: a working directory and the environment of
a reader's shell (no provider key, no ``llmrt.toml`` named by the
environment), with ``llmrt`` and ``pip`` shims first on ``PATH``. `run_steps`
runs a ``console`` or ``sh`` block (see `steps`): each command through
``bash``, which must succeed (unless its shown output is an ``llmrt:``
error), and print every line shown under it, each line a pattern where
``...`` and timings (``18.3 ms``) match anything. A command ending in ``&``
is a server left running until the block ends: on a free port, its address
(``listening on ws://...``) replacing ``127.0.0.1:8765`` in later commands.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import attrs
import pytest
from _doc_examples import PLACEHOLDER, Example
from _warm_llmrt import shim as warm_shim

REPO = Path(__file__).resolve().parent.parent
#: Every command and program, in real seconds (an example is a few at most).
TIMEOUT = 60.0


def clean_env(path: Path) -> dict[str, str]:
    """The environment of a reader's shell: no provider key, no configuration, no token."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.endswith("_API_KEY") and k not in ("LLMRT_CONFIG", "LLMRT_GATEWAY_TOKEN")
    }
    env["PATH"] = f"{path}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONUNBUFFERED"] = "1"
    return env


_PIP = r"""
import importlib.metadata, re, sys, tomllib

args = [a for a in sys.argv[1:] if not a.startswith("-")]
if args[:1] != ["install"] or not all(re.fullmatch(r"llmrt(\[[\w,]+\])?", a) for a in args[1:]):
    sys.exit(f"the examples test runs only `pip install llmrt[EXTRA]`, not {sys.argv[1:]}")
with open(PYPROJECT, "rb") as file:
    project = tomllib.load(file)["project"]
for arg in args[1:]:
    extras = re.findall(r"\w+", arg.partition("[")[2])
    unknown = set(extras) - set(project["optional-dependencies"])
    if unknown:
        sys.exit(f"llmrt has no extra {sorted(unknown)}")
    optional = project["optional-dependencies"]
    wanted = project["dependencies"] + [r for e in extras for r in optional[e]]
    for requirement in wanted:
        name = re.match(r"[\w.-]+", requirement).group(0)
        importlib.metadata.version(name)  # raises if it is missing
        print(f"Requirement already satisfied: {requirement}")
"""


def shims(directory: Path, python: str) -> Path:
    """``llmrt`` running ``python``'s llmrt, and the checking ``pip``, in ``directory``.

    With this environment's python, ``llmrt`` is forked from the warm
    interpreter (`_warm_llmrt`); another's (an example package's venv) runs
    its own ``python -m llmrt.actors.app.cli``.
    """
    directory.mkdir(parents=True, exist_ok=True)
    llmrt = directory / "llmrt"
    if python == sys.executable:
        warm_shim(directory)
    else:
        llmrt.write_text(f'#!/bin/sh\nexec {shlex.quote(python)} -m llmrt.actors.app.cli "$@"\n')
    pip = directory / "pip"
    # pip as the examples run it: what a block installs must be installed already.
    pyproject = str(REPO / "pyproject.toml")
    pip.write_text(f"#!{sys.executable}\nPYPROJECT = {pyproject!r}\n{_PIP}")
    for shim in (llmrt, pip):
        shim.chmod(0o755)
    return directory


@attrs.frozen
class Env:
    """Where and how an example runs."""

    cwd: Path
    env: dict[str, str]
    python: str = sys.executable
    address: str | None = None  # a running gateway's, for ``needs: gateway``


def run(argv: list[str], where: Env) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=where.cwd, env=where.env, capture_output=True, text=True, timeout=TIMEOUT
    )


def passed(result: subprocess.CompletedProcess[str]) -> str:
    """The output of a process that must have succeeded; its whole output if not."""
    if result.returncode != 0:
        pytest.fail(
            f"{shlex.join(map(str, result.args))}: exit status {result.returncode}\n"
            f"--- stdout\n{result.stdout}--- stderr\n{result.stderr}",
            pytrace=False,
        )
    return result.stdout + result.stderr


LISTENING = re.compile(r"listening on ws://(127\.0\.0\.1:\d+)/")


@attrs.define
class Background:
    """A command left running (``cmd &``), its output read as it comes."""

    proc: subprocess.Popen[str]
    lines: queue.Queue[str | None] = attrs.field(factory=queue.Queue)
    seen: list[str] = attrs.field(factory=list)

    @classmethod
    def start(cls, command: str, where: Env) -> Background:
        # Its own process group: the signals reach the server, not only its shell.
        proc = subprocess.Popen(
            ["bash", "-c", command],
            cwd=where.cwd,
            env=where.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        started = cls(proc)
        threading.Thread(target=started._read, daemon=True).start()
        return started

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def wait_for(self, done: Callable[[list[str]], bool], timeout: float = 20.0) -> list[str]:
        """Read lines until ``done(lines so far)``, for ``timeout`` at most; fails with them."""
        deadline = time.monotonic() + timeout
        while not done(self.seen):
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"timed out; printed so far: {self.seen}") from None
            if line is None:
                raise AssertionError(f"exited ({self.proc.wait()}); printed: {self.seen}")
            self.seen.append(line)
        return self.seen

    def address(self) -> str:
        """The address a gateway prints it listens on (``listening on ws://ADDRESS/``)."""
        seen = self.wait_for(lambda lines: any(LISTENING.search(x) for x in lines))
        found = next(m for m in map(LISTENING.search, seen) if m)
        return found.group(1)

    def stop(self) -> None:
        """Ctrl-C, as a reader stops it; killed if it is still there 15 s later."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGINT)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@attrs.frozen
class Step:
    command: str
    output: tuple[str, ...] = ()


def steps(example: Example) -> list[Step]:
    """``console``: ``$ `` commands, each with the lines under it; ``sh``: every line a command."""
    found: list[Step] = []
    pending = ""
    for raw in example.code.splitlines():
        line = pending + raw
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1]
            continue
        if example.lang == "console":
            if line.startswith("$ "):
                found.append(Step(line[2:].strip()))
            elif line.strip() and found:
                last = found[-1]
                found[-1] = Step(last.command, (*last.output, line.rstrip()))
        elif line.strip() and not line.lstrip().startswith("#"):
            found.append(Step(line.strip()))
    return found


_TIMING = r"\d+(?:\.\d+)? (?:ms|s)\b"


def _shown(line: str) -> re.Pattern[str]:
    """A documented output line as a pattern: ``...`` and timings match anything."""
    parts = re.split(rf"(\.\.\.|{_TIMING})", line)
    body = "".join(
        ".*" if p == "..." else _TIMING if re.fullmatch(_TIMING, p) else re.escape(p) for p in parts
    )
    return re.compile(body)


def check_output(command: str, shown: tuple[str, ...], printed: list[str]) -> None:
    printed = [p.rstrip() for p in printed]
    for line in shown:
        if line.strip() == "...":
            continue
        pattern = _shown(line)
        assert any(pattern.fullmatch(p) for p in printed), (
            f"`{command}` did not print {line!r}; it printed:\n" + "\n".join(printed)
        )


def _shows_an_error(shown: tuple[str, ...]) -> bool:
    return any(line.startswith("llmrt: ") and "warning" not in line for line in shown)


def run_steps(example: Example, where: Env) -> None:
    address = where.address
    background: list[Background] = []
    try:
        for step in steps(example):
            command, shown = step.command, step.output
            if address is not None:
                command = command.replace(PLACEHOLDER, address)
                shown = tuple(line.replace(PLACEHOLDER, address) for line in shown)
            if command.endswith("&"):
                # A server: on a free port, its address then used by the later steps.
                command = re.sub(r"--port[ =]8765\b", "--port 0", command[:-1].strip())
                if command.startswith("llmrt serve") and "--port" not in command:
                    command += " --port 0"  # never the default port, another run's maybe
                served = Background.start(command, where)
                background.append(served)
                address = served.address()
                shown = tuple(line.replace(PLACEHOLDER, address) for line in shown)
                wanted = [_shown(line) for line in shown if line.strip() != "..."]
                served.wait_for(
                    lambda lines, wanted=wanted: all(
                        any(p.fullmatch(x.rstrip()) for x in lines) for p in wanted
                    )
                )
                continue
            result = run(["bash", "-c", command], where)
            if not _shows_an_error(shown):
                passed(result)
            check_output(command, shown, (result.stdout + result.stderr).splitlines())
    finally:
        for served in background:
            served.stop()
