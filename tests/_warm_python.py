"""Python programs run in processes forked from one warm interpreter: the examples' runner.

A program started as ``python FILE`` pays the interpreter's start and its
imports every time: about 0.3 s of CPU for ``import llmrt``, 2.7 s for the
openai and anthropic SDKs, in each of the pages' programs. `WarmPython`
pays them once: its server (``python -c`` running `_SERVER`) imports the
top-level packages of `PRELOAD` a program asks for, then forks one child
per program, which runs the file as ``__main__`` the way ``python FILE``
does (``sys.argv``, ``sys.path[0]`` the file's folder, its own working
directory, environment and standard streams, exit status from
`SystemExit` or an uncaught exception's traceback, ``atexit`` handlers).

What a child finds already imported is only what a package of `PRELOAD`
imports itself: a program still has to import every name it uses (its
module namespace is new), so a forgotten ``import`` fails as it would in a
fresh interpreter. The server imports nothing a program names outside
`PRELOAD`, so one program's imports never reach the next.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

__all__ = ["PRELOAD", "WarmPython"]

#: The packages the server imports before forking, when a program imports them.
PRELOAD = frozenset({"anthropic", "asyncio", "httpx", "llmrt", "msgspec", "openai", "trio"})

_SERVER = r"""
import atexit, importlib, json, os, runpy, sys, threading, traceback

requests = os.fdopen(os.dup(0), "rb")
replies = os.fdopen(os.dup(1), "w", buffering=1)
devnull = os.open(os.devnull, os.O_RDWR)
os.dup2(devnull, 0)
os.dup2(devnull, 1)


def child(job):
    requests.close()
    replies.close()
    os.environ.clear()
    os.environ.update(job["env"])
    os.chdir(job["cwd"])
    stdout = os.open(job["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    stderr = os.open(job["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(devnull, 0)
    os.dup2(stdout, 1)
    os.dup2(stderr, 2)
    sys.argv = [job["path"]]
    sys.path[0] = os.path.dirname(os.path.abspath(job["path"]))
    code = 0
    try:
        runpy.run_path(job["path"], run_name="__main__")
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException as exc:
        # The program's frames only, as ``python FILE`` prints them.
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != job["path"]:
            tb = tb.tb_next
        traceback.print_exception(type(exc), exc, tb or exc.__traceback__)
        code = 1
    try:
        threading._shutdown()  # non-daemon threads end first, as at interpreter exit
        atexit._run_exitfuncs()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


for line in requests:
    job = json.loads(line)
    for name in job["preload"]:
        importlib.import_module(name)
    # A fork with other threads running could inherit a lock held forever.
    assert threading.active_count() == 1, threading.enumerate()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        child(job)
    replies.write(json.dumps({"pid": pid}) + "\n")
    _, status = os.waitpid(pid, 0)
    replies.write(json.dumps({"status": os.waitstatus_to_exitcode(status)}) + "\n")
"""


class WarmPython:
    """One server process; `run` a program in a child of it, one program at a time."""

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _SERVER],
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self._replies: queue.Queue[dict[str, int] | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            self._replies.put(json.loads(line))
        self._replies.put(None)

    def _reply(self, timeout: float) -> dict[str, int]:
        try:
            reply = self._replies.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError from None
        if reply is None:
            raise RuntimeError(f"the warm interpreter exited ({self._proc.wait()})")
        return reply

    def run(
        self, path: Path, *, cwd: Path, env: dict[str, str], imports: set[str], timeout: float
    ) -> subprocess.CompletedProcess[str]:
        """``python PATH`` in ``cwd`` with ``env``: its exit status and output, as `subprocess.run`.

        ``imports`` are the program's top-level imports (those in `PRELOAD`
        are imported before the fork). Raises `subprocess.TimeoutExpired`
        after killing a program still running ``timeout`` seconds later.
        """
        out, err = path.with_suffix(".stdout"), path.with_suffix(".stderr")
        job = {
            "path": str(path.resolve()),
            "cwd": str(cwd),
            "env": env,
            "stdout": str(out),
            "stderr": str(err),
            "preload": sorted(imports & PRELOAD),
        }
        assert self._proc.stdin is not None
        self._proc.stdin.write(json.dumps(job) + "\n")
        self._proc.stdin.flush()
        # The preloads are imported before the fork: the SDKs take seconds.
        pid = self._reply(timeout)["pid"]
        try:
            status = self._reply(timeout)["status"]
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            self._reply(timeout)
            raise subprocess.TimeoutExpired(["python", str(path)], timeout) from None
        read = lambda p: p.read_text(encoding="utf-8", errors="replace")  # noqa: E731
        return subprocess.CompletedProcess(["python", str(path)], status, read(out), read(err))

    def close(self) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.close()
        try:
            self._proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
